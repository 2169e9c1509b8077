# shellcheck shell=bash
# bench/workloads.sh — sourced by the bench scripts: the config file of each
# workload name they accept, one timed training run, and the set-up of the
# op-profile scripts (op_profile_start).
#
#   config_of WORKLOAD    prints the config's path (relative to the project root);
#                         an unknown name is an error naming the calling script.

config_of() {
  case "$1" in
    charlstm) echo configs/charlstm-bench.yaml ;;
    convnet) echo configs/fashion_convnet.yaml ;;
    mlp | mlp-powersgd) echo configs/mlp-bench.yaml ;;
    alexnet) echo configs/cifar_alexnet.yaml ;;
    *) echo "$(basename "$0"): unknown workload '$1' (expected charlstm, convnet, mlp or alexnet)" >&2; exit 2 ;;
  esac
}

# timed_run WORKLOAD SIDE ROUND NP [RUN-ARGS...] [-- KEY=VALUE...]: one
# `lockstep run -np NP --threads 1 RUN-ARGS -- lockstep train` of the workload's
# config for $STEPS steps (validation, checkpoints and monitoring off, the
# overrides last); "WORKLOAD SIDE ROUND samples/s" ("fail" for a failed run)
# appended to $OUT/results.txt. Needs BIN, OUT and STEPS; variables set before
# the call (LOCKSTEP_CPU_CACHE_MB=0 timed_run ...) reach the workers.
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
  echo "$workload $side $round $rate" | tee -a "$OUT/results.txt" >&2
}

# op_profile_start: sets PROFILE to the built bench/op_profile (an error naming the calling
# script and how to build it, when it is not) and makes the scratch folder $OUT (removed at exit).
op_profile_start() {
  PROFILE="${LOCKSTEP_BUILD_DIR:-build}/bench/op_profile"
  [ -x "$PROFILE" ] || {
    echo "$(basename "$0"): $PROFILE not found; cmake -B build -DLOCKSTEP_BUILD_BENCHMARKS=ON && cmake --build build --target op_profile" >&2
    exit 1
  }
  OUT="$(mktemp -d)"
  trap 'rm -rf "$OUT"' EXIT
}

# bench_start: checks that $BIN is built, makes the scratch folder $OUT
# (removed at exit) and checks every name in $WORKLOADS.
bench_start() {
  [ -x "$BIN" ] || { echo "$(basename "$0"): $BIN not found; build lockstep first (scripts/build.sh)" >&2; exit 1; }
  OUT="$(mktemp -d)"
  trap 'rm -rf "$OUT"' EXIT
  local workload
  for workload in $WORKLOADS; do config_of "$workload" > /dev/null; done  # an unknown name stops here
}
