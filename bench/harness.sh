# shellcheck shell=bash
# bench/harness.sh — the one file the bench scripts source, after `cd` to the
# repository root (summarize, config_of and HOST_RSH name paths from there):
# what the comparisons share, so that a script says only what it compares.
# bench/README.md lists the scripts.
#
# Rounds. These machines are shared and drift over minutes, so the sides of a
# comparison run in interleaved rounds: every side once a round, in the order
# given on odd rounds and in the reverse order on even ones (A B, B A, A B ...),
# so that a drift hits every side alike and each round's runs, next to each
# other, met the same machine.
#   rounds FUNCTION [ARG...]                 FUNCTION ROUND ARG... for ROUND = 1..$ROUNDS
#   in_turn ROUND SIDE... -- FUNCTION [ARG...]
#                                            FUNCTION SIDE ROUND ARG... for every side, in
#                                            ROUND's order (given when odd, reversed when even)
#   interleave SIDE... -- FUNCTION [ARG...]  both: every round, every side in its turn
#
# Results. One line per run, "workload side round samples/s" ("fail" for a run
# that failed), in $OUT/results.txt, which bench/summarize_rounds.py reads.
#   record WORKLOAD SIDE ROUND RATE          appends one line
#   timed_run WORKLOAD SIDE ROUND NP ...     one timed `lockstep train` of a workload, recorded
#   summarize BASE [OPTION...]               per workload and side the median, min and max over
#                                            the rounds, and each side's ratio of medians to
#                                            BASE with a 90 % bootstrap interval
#   median_of, spread_of, json_number        small statistics of the scripts' own tables
#
# Set-up. Errors name the calling script.
#   config_of WORKLOAD                       the workload's config file
#   need_lockstep                            $BIN must be built
#   scratch_dir                              the scratch folder $OUT, removed at exit
#                                            (KEEP_LOGS=1: kept, "logs: $OUT" printed)
#   bench_start                              need_lockstep, scratch_dir, every $WORKLOADS known
#   op_profile_start                         PROFILE = the built bench/op_profile, scratch_dir
#   at_exit COMMAND                          runs COMMAND at exit (the last registered first)
#
# Emulated hosts (root). N "hosts" are network namespaces joined through a
# bridge by veth cables, shaped with tc's token bucket filter; `lockstep run -H
# "$(host_list N)" --rsh "$HOST_RSH"` starts a worker on each as ssh would.
#   hosts_up N                               makes hosts 0..N-1 (removed at exit)
#   shape_links RATE                         every cable, both directions, at RATE (tc syntax)
#   host_address I, host_list N              host I's address; "ADDR:1,..." of hosts 0..N-1
#
# Variables the scripts set: BIN (the lockstep binary), ROUNDS, WORKLOADS,
# STEPS (timed_run). Variables a user sets: ROUNDS, KEEP_LOGS,
# LOCKSTEP_BUILD_DIR (default build).
# The harness's own variables start with _h_: the functions it calls share
# bash's dynamic scope, and a caller's loop variable must not change its loops.

# --- rounds ---------------------------------------------------------------------------------

rounds() {
  local _h_function="$1" _h_round
  shift
  for ((_h_round = 1; _h_round <= ROUNDS; _h_round++)); do "$_h_function" "$_h_round" "$@"; done
}

in_turn() {
  local _h_round="$1" _h_sides=() _h_i
  shift
  while (($#)) && [ "$1" != -- ]; do
    _h_sides+=("$1")
    shift
  done
  (($# >= 2)) || { echo "$(basename "$0"): in_turn ROUND SIDE... -- FUNCTION [ARG...]" >&2; exit 2; }
  shift
  local _h_function="$1"
  shift
  if ((_h_round % 2)); then
    for ((_h_i = 0; _h_i < ${#_h_sides[@]}; _h_i++)); do "$_h_function" "${_h_sides[_h_i]}" "$_h_round" "$@"; done
  else
    for ((_h_i = ${#_h_sides[@]} - 1; _h_i >= 0; _h_i--)); do "$_h_function" "${_h_sides[_h_i]}" "$_h_round" "$@"; done
  fi
}

interleave() {
  local _h_round
  for ((_h_round = 1; _h_round <= ROUNDS; _h_round++)); do in_turn "$_h_round" "$@"; done
}

# --- results --------------------------------------------------------------------------------

record() {
  echo "$1 $2 $3 $4" >> "$OUT/results.txt"
}

# timed_run WORKLOAD SIDE ROUND NP [RUN-ARGS...] [-- KEY=VALUE...]: one
# `lockstep run -np NP --threads 1 RUN-ARGS -- lockstep train` of the workload's
# config for $STEPS steps (validation, checkpoints and monitoring off, the
# overrides last), recorded and echoed to stderr. Needs BIN, OUT and STEPS;
# variables set before the call (LOCKSTEP_CPU_CACHE_MB=0 timed_run ...) reach
# the workers.
timed_run() {
  local workload="$1" side="$2" round="$3" np="$4"
  shift 4
  local run_args=()
  while (($#)) && [ "$1" != -- ]; do
    run_args+=("$1")
    shift
  done
  (($#)) && shift
  local rate=fail
  if "$BIN" run -np "$np" --threads 1 "${run_args[@]}" -- "$BIN" train "$(config_of "$workload")" \
      trainer.max_steps="$STEPS" trainer.validate=false checkpoint.dir=off checkpoint.resume=none monitor.dir=off \
      generate.samples=0 "$@" --result-json "$OUT/run.json" > "$OUT/run.log" 2>&1; then
    rate="$(python3 -c "import json; print(json.load(open('$OUT/run.json'))['samples_per_second'])")"
  else
    tail -3 "$OUT/run.log" | sed "s/^/    $workload $side: /" >&2
  fi
  record "$workload" "$side" "$round" "$rate"
  echo "$workload $side $round $rate" >&2  # progress
}

summarize() {
  python3 bench/summarize_rounds.py "$OUT/results.txt" "$@"
}

# median_of: numbers on stdin -> their median (the mean of the middle two for an even count).
median_of() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# spread_of: numbers on stdin -> "median / min / max" (the lower middle one for an even count).
spread_of() {
  sort -g | awk '{ v[NR] = $1 } END { printf "%.4f / %.4f / %.4f", v[int((NR + 1) / 2)], v[1], v[NR] }'
}

# json_number FILE KEY -> the first number after "KEY": in a --result-json (rank 0's for per-rank keys).
json_number() {
  sed -n "s/.*\"$2\": *\([-0-9.eE+]*\).*/\1/p" "$1" | head -1
}

# --- set-up ---------------------------------------------------------------------------------

# The workloads the scripts accept by name, each a config in configs/ (bench/README.md lists
# them); an unknown name is an error naming the calling script.
config_of() {
  case "$1" in
    charlstm) echo configs/charlstm-bench.yaml ;;
    convnet) echo configs/fashion_convnet.yaml ;;
    mlp | mlp-powersgd) echo configs/mlp-bench.yaml ;;
    alexnet) echo configs/cifar_alexnet.yaml ;;
    *) echo "$(basename "$0"): unknown workload '$1' (expected charlstm, convnet, mlp or alexnet)" >&2; exit 2 ;;
  esac
}

_h_exit=()
_h_run_exit() {
  local _h_i
  for ((_h_i = ${#_h_exit[@]} - 1; _h_i >= 0; _h_i--)); do eval "${_h_exit[_h_i]}" || true; done
}
at_exit() {
  _h_exit+=("$1")
  trap _h_run_exit EXIT
}

need_lockstep() {
  [ -x "$BIN" ] || { echo "$(basename "$0"): $BIN not found; build lockstep first (scripts/build.sh)" >&2; exit 1; }
}

scratch_dir() {
  OUT="$(mktemp -d)"
  # shellcheck disable=SC2016  # $OUT expands at exit
  if [ "${KEEP_LOGS:-0}" = 1 ]; then echo "logs: $OUT"; else at_exit 'rm -rf "$OUT"'; fi
}

bench_start() {
  need_lockstep
  scratch_dir
  local workload
  for workload in ${WORKLOADS:-}; do config_of "$workload" > /dev/null; done  # an unknown name stops here
}

op_profile_start() {
  PROFILE="${LOCKSTEP_BUILD_DIR:-build}/bench/op_profile"
  [ -x "$PROFILE" ] || {
    echo "$(basename "$0"): $PROFILE not found; cmake -B build -DLOCKSTEP_BUILD_BENCHMARKS=ON && cmake --build build --target op_profile" >&2
    exit 1
  }
  scratch_dir
}

# --- emulated hosts -------------------------------------------------------------------------

# shellcheck disable=SC2034  # used by the scripts
HOST_RSH="$PWD/tests/support/netns_rsh.sh"  # stands in for ssh: runs a command in the host's namespace
_h_prefix="lsl$$"                             # namespaces lsl<pid>-sw and lsl<pid>-h<i>
_h_subnet=$(($$ % 200 + 20))                 # 10.78.<subnet>.0/24, apart from another script's
_h_hosts=0

host_address() { echo "10.78.$_h_subnet.$(($1 + 1))"; }

host_list() {
  local _h_i _h_list=""
  for ((_h_i = 0; _h_i < $1; _h_i++)); do _h_list+="${_h_list:+,}$(host_address "$_h_i"):1"; done
  echo "$_h_list"
}

hosts_up() {
  [ "$(id -u)" = 0 ] || { echo "$(basename "$0"): needs root for ip netns and tc" >&2; exit 1; }
  local _h_i _h_ns _h_map=""
  _h_hosts="$1"
  at_exit _h_hosts_down  # before the first namespace: a failure half-way removes what was made
  ip netns add "$_h_prefix-sw"
  ip -n "$_h_prefix-sw" link add br0 type bridge
  ip -n "$_h_prefix-sw" link set br0 up
  for ((_h_i = 0; _h_i < _h_hosts; _h_i++)); do
    _h_ns="$_h_prefix-h$_h_i"
    ip netns add "$_h_ns"
    ip -n "$_h_prefix-sw" link add "v$_h_i" type veth peer name eth0 netns "$_h_ns"
    ip -n "$_h_prefix-sw" link set "v$_h_i" master br0 up
    ip -n "$_h_ns" addr add "$(host_address "$_h_i")/24" dev eth0
    ip -n "$_h_ns" link set eth0 up
    ip -n "$_h_ns" link set lo up
    _h_map+="${_h_map:+,}$(host_address "$_h_i")=$_h_ns"
  done
  export LOCKSTEP_TEST_NETNS="$_h_map"  # read by $HOST_RSH
}

_h_hosts_down() {
  local _h_i
  for ((_h_i = 0; _h_i < _h_hosts; _h_i++)); do
    ip netns pids "$_h_prefix-h$_h_i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$_h_prefix-h$_h_i" 2>/dev/null || true
  done
  ip netns del "$_h_prefix-sw" 2>/dev/null || true
}

# shape_links RATE: a burst of 10 ms at the rate (at least 64 KiB) and a queue of 50 ms, on
# every cable in both directions (host -> switch on eth0, switch -> host on v<i>).
shape_links() {
  local _h_rate="$1" _h_bits _h_bytes _h_i
  _h_bits=$(echo "$_h_rate" | awk '{ r = $1; m = 1; if (r ~ /gbit$/) m = 1e9; else if (r ~ /mbit$/) m = 1e6;
                                     else if (r ~ /kbit$/) m = 1e3; sub(/[a-z]+$/, "", r); printf "%.0f", r * m }')
  _h_bytes=$((_h_bits / 8 / 100))
  ((_h_bytes < 65536)) && _h_bytes=65536
  for ((_h_i = 0; _h_i < _h_hosts; _h_i++)); do
    tc -n "$_h_prefix-h$_h_i" qdisc replace dev eth0 root tbf rate "$_h_rate" burst "$_h_bytes" latency 50ms
    tc -n "$_h_prefix-sw" qdisc replace dev "v$_h_i" root tbf rate "$_h_rate" burst "$_h_bytes" latency 50ms
  done
}
