#!/usr/bin/env bash
# Data parallelism over emulated networks: 2-4 "hosts" as network namespaces on
# this machine, joined through a bridge by veth cables shaped with tc's token
# bucket filter (tbf, both directions) at each link speed; lockstep starts one
# worker per host with -H through tests/support/netns_rsh.sh (standing in for
# ssh), over Gloo/TCP as across real machines. Reports samples/s, scaling
# efficiency against one worker alone, and rank 0's exposed communication
# ("comm wait") per step. Needs root (ip netns, tc). The hosts are bench/harness.sh's
# (hosts_up, shape_links).
#
#   bench/emulated_links.sh [STEPS]     (default 20 optimizer steps per run)
#
# Environment: LINKS (default "10gbit 1gbit 100mbit", tc rate syntax), HOSTS
# (default "2"), WORKLOADS (default "convnet mlp"; also charlstm, alexnet),
# EXTRA (overrides added to every run, e.g. "ddp.compression=powersgd"),
# LOCKSTEP_BUILD_DIR (default build). ALLREDUCE="ARGS" times collectives
# instead of training: `lockstep bench allreduce ARGS` on each link and host
# count, rank 0's table (e.g. ALLREDUCE="--bytes 512K,2M --dtype bfloat16").
#
# All "hosts" share this machine's 2 cores: N workers get one thread each and
# compete for the cores as they would not on N machines, so efficiency at
# N > 2 mixes CPU sharing with the network; the link's effect is the change
# from one speed to the next at the same N.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${LOCKSTEP_BUILD_DIR:-build}"
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
BIN="$BUILD/lockstep"
STEPS="${1:-20}"
LINKS="${LINKS:-10gbit 1gbit 100mbit}"
HOSTS="${HOSTS:-2}"
WORKLOADS="${WORKLOADS:-convnet mlp}"
EXTRA="${EXTRA:-}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
MAXHOSTS=0
for n in $HOSTS; do ((n > MAXHOSTS)) && MAXHOSTS=$n; done
scratch_dir
hosts_up "$MAXHOSTS"

# train LOG N CONFIG: N hosts (0: one worker on this machine, no network), rank 0's log in LOG.
train() {
  local log="$1" n="$2" config="$3" args
  # shellcheck disable=SC2206  # EXTRA is words
  args=(train "$PWD/$config" trainer.max_steps="$STEPS" trainer.validate=false checkpoint.dir=off
        checkpoint.resume=none generate.samples=0 monitor.dir=off $EXTRA)
  if ((n == 0)); then
    "$BIN" run -np 1 --threads 1 -- "$BIN" "${args[@]}" > "$log" 2>&1
    return
  fi
  (cd "$OUT" && "$BIN" run -H "$(host_list "$n")" --rsh "$HOST_RSH" --threads 1 --comm-timeout 600 -- "$BIN" "${args[@]}") \
    > "$log" 2>&1
}

rate_of() { grep -o 'done: .*' "$1" | tail -1 | sed -n 's/.* \([0-9][0-9]*\) samples\/s.*/\1/p'; }
comm_of() { grep -o 'comm wait [0-9.]*' "$1" | tail -1 | awk '{print $3}'; }
step_of() { grep -o 'mean of [0-9]*): [0-9.]* ms' "$1" | tail -1 | awk '{print $4}'; }

if [ -n "${ALLREDUCE:-}" ]; then
  for link in $LINKS; do
    shape_links "$link"
    for n in $HOSTS; do
      echo "== $link, $n hosts: lockstep bench allreduce $ALLREDUCE"
      # shellcheck disable=SC2086  # ALLREDUCE is words
      (cd "$OUT" && "$BIN" run -H "$(host_list "$n")" --rsh "$HOST_RSH" --threads 1 --comm-timeout 600 -- "$BIN" bench allreduce \
        $ALLREDUCE) 2>&1 | sed -n 's/^\[0\] //p'
    done
  done
  exit 0
fi

printf '%-9s %-8s %5s %10s %10s %12s %12s\n' workload link hosts samples/s efficiency "step ms" "comm wait ms"
for workload in $WORKLOADS; do
  config="$(config_of "$workload")"
  train "$OUT/single.log" 0 "$config" || { echo "one worker failed:"; tail -5 "$OUT/single.log"; exit 1; }
  single="$(rate_of "$OUT/single.log")"
  printf '%-9s %-8s %5s %10s %10s %12s %12s\n' "$workload" none 1 "$single" 1.00 "$(step_of "$OUT/single.log")" 0
  for link in $LINKS; do
    shape_links "$link"
    for n in $HOSTS; do
      log="$OUT/$workload-$link-$n.log"
      if train "$log" "$n" "$config"; then
        rate="$(rate_of "$log")"
        eff="$(awk -v r="$rate" -v s="$single" -v n="$n" 'BEGIN { printf "%.2f", r / (n * s) }')"
        printf '%-9s %-8s %5s %10s %10s %12s %12s\n' "$workload" "$link" "$n" "$rate" "$eff" "$(step_of "$log")" \
          "$(comm_of "$log")"
      else
        printf '%-9s %-8s %5s FAILED:\n' "$workload" "$link" "$n"
        tail -5 "$log" | sed 's/^/    /'
      fi
    done
  done
done
