#!/usr/bin/env bash
# Data parallelism over emulated networks: 2-4 "hosts" as network namespaces on
# this machine, joined through a bridge by veth cables shaped with tc's token
# bucket filter (tbf, both directions) at each link speed; lockstep starts one
# worker per host with -H through tests/support/netns_rsh.sh (standing in for
# ssh), over Gloo/TCP as across real machines. Reports samples/s, scaling
# efficiency against one worker alone, and rank 0's exposed communication
# ("comm wait") per step. Needs root (ip netns, tc).
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
RSH="$PWD/tests/support/netns_rsh.sh"
STEPS="${1:-20}"
LINKS="${LINKS:-10gbit 1gbit 100mbit}"
HOSTS="${HOSTS:-2}"
WORKLOADS="${WORKLOADS:-convnet mlp}"
EXTRA="${EXTRA:-}"
[ -x "$BIN" ] || { echo "emulated_links.sh: $BIN not found; build lockstep first (scripts/build.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "emulated_links.sh: needs root for ip netns and tc" >&2; exit 1; }

PREFIX="lsl$$"
SUBNET=$(( $$ % 200 + 20 ))
MAXHOSTS=0
for n in $HOSTS; do ((n > MAXHOSTS)) && MAXHOSTS=$n; done
OUT="$(mktemp -d)"

cleanup() {
  for ((i = 0; i < MAXHOSTS; i++)); do
    ip netns pids "$PREFIX-h$i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$PREFIX-h$i" 2>/dev/null || true
  done
  ip netns del "$PREFIX-sw" 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT

address() { echo "10.78.$SUBNET.$(($1 + 1))"; }

ip netns add "$PREFIX-sw"
ip -n "$PREFIX-sw" link add br0 type bridge
ip -n "$PREFIX-sw" link set br0 up
MAP=""
for ((i = 0; i < MAXHOSTS; i++)); do
  ns="$PREFIX-h$i"
  ip netns add "$ns"
  ip -n "$PREFIX-sw" link add "v$i" type veth peer name eth0 netns "$ns"
  ip -n "$PREFIX-sw" link set "v$i" master br0 up
  ip -n "$ns" addr add "$(address "$i")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  MAP+="${MAP:+,}$(address "$i")=$ns"
done
export LOCKSTEP_TEST_NETNS="$MAP"

# shape RATE: every cable, both directions (host -> switch on eth0, switch -> host on v<i>);
# a burst of 10 ms at the rate, a queue of 50 ms.
shape() {
  local rate="$1" bits bytes
  bits=$(echo "$rate" | awk '{ r = $1; m = 1; if (r ~ /gbit$/) m = 1e9; else if (r ~ /mbit$/) m = 1e6;
                               else if (r ~ /kbit$/) m = 1e3; sub(/[a-z]+$/, "", r); printf "%.0f", r * m }')
  bytes=$(( bits / 8 / 100 ))
  ((bytes < 65536)) && bytes=65536
  for ((i = 0; i < MAXHOSTS; i++)); do
    tc -n "$PREFIX-h$i" qdisc replace dev eth0 root tbf rate "$rate" burst "$bytes" latency 50ms
    tc -n "$PREFIX-sw" qdisc replace dev "v$i" root tbf rate "$rate" burst "$bytes" latency 50ms
  done
}

# shellcheck source=bench/workloads.sh
. bench/workloads.sh  # config_of

# train LOG N CONFIG: N hosts (0: one worker on this machine, no network), rank 0's log in LOG.
train() {
  local log="$1" n="$2" config="$3" hosts="" args
  # shellcheck disable=SC2206  # EXTRA is words
  args=(train "$PWD/$config" trainer.max_steps="$STEPS" trainer.validate=false checkpoint.dir=off
        checkpoint.resume=none generate.samples=0 monitor.dir=off $EXTRA)
  if ((n == 0)); then
    "$BIN" run -np 1 --threads 1 -- "$BIN" "${args[@]}" > "$log" 2>&1
    return
  fi
  for ((i = 0; i < n; i++)); do hosts+="${hosts:+,}$(address "$i"):1"; done
  (cd "$OUT" && "$BIN" run -H "$hosts" --rsh "$RSH" --threads 1 --comm-timeout 600 -- "$BIN" "${args[@]}") \
    > "$log" 2>&1
}

rate_of() { grep -o 'done: .*' "$1" | tail -1 | sed -n 's/.* \([0-9][0-9]*\) samples\/s.*/\1/p'; }
comm_of() { grep -o 'comm wait [0-9.]*' "$1" | tail -1 | awk '{print $3}'; }
step_of() { grep -o 'mean of [0-9]*): [0-9.]* ms' "$1" | tail -1 | awk '{print $4}'; }

if [ -n "${ALLREDUCE:-}" ]; then
  for link in $LINKS; do
    shape "$link"
    for n in $HOSTS; do
      hosts=""
      for ((i = 0; i < n; i++)); do hosts+="${hosts:+,}$(address "$i"):1"; done
      echo "== $link, $n hosts: lockstep bench allreduce $ALLREDUCE"
      # shellcheck disable=SC2086  # ALLREDUCE is words
      (cd "$OUT" && "$BIN" run -H "$hosts" --rsh "$RSH" --threads 1 --comm-timeout 600 -- "$BIN" bench allreduce \
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
    shape "$link"
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
