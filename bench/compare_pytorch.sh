#!/usr/bin/env bash
# lockstep against PyTorch's own Python DistributedDataParallel on the same
# workloads, on this machine, in one run (docs/performance.md, "Against PyTorch DDP").
#
#   bench/compare_pytorch.sh [STEPS]        (default 30 optimizer steps per run)
#
# Workloads (the harness's config_of; both sides: 2 workers on loopback, Gloo,
# 1 intra-op thread each, the same model, batch, optimizer and step count):
#   charlstm  configs/charlstm-bench.yaml  (Python side: synthetic windows of the same shape)
#   convnet   configs/fashion_convnet.yaml (both: Fashion-MNIST)
#   mlp       configs/mlp-bench.yaml       (both: Fashion-MNIST; 20 M parameters, batch 32)
#   mlp-powersgd  the mlp with PowerSGD at rank 4 from the 3rd step on both sides (lockstep's
#             ddp.compression powersgd with its default buckets against PyTorch's
#             powerSGD_hook with ONE bucket: with more, the hook's chained allreduces of two buckets
#             can reach the ranks in different orders over Gloo and abort them;
#             should PyTorch's side fail anyway, its ratio is against PyTorch's plain DDP on the
#             mlp workload of the same command); not in the default list
# Rows: PyTorch DDP eager (bench/pytorch/ddp_bench.py, torch.multiprocessing.spawn), the same
# under torch.compile (TorchInductor, CPU; --compile: its compilation and two warm-up steps are
# not timed; COMPILED=0 leaves this row out), `lockstep run -np 2 --threads 1` over Gloo, and
# `lockstep run --backend mpi ...` (lockstep's default on one machine; BACKENDS=gloo leaves it out). Runs are
# interleaved (python, lockstep, ... then the reverse order in the next round) so that machine
# noise hits every side; the tables (bench/summarize_rounds.py) give each side's median, min
# and max over the rounds and the ratio of medians lockstep / PyTorch, against eager and
# against compiled, with a 90% bootstrap interval (rounds resampled, each round's runs kept
# together).
#
# Trainer overhead: bench/bare_loop (the convnet in a minimal LibTorch loop, one process,
# 1 thread) plain (LibTorch's Adam and allocator) and with --trainer-kernels (lockstep's
# one-pass Adam and block-reusing allocator, what the Trainer runs on), against `lockstep run
# -np 1 --threads 1 -- lockstep train configs/fashion_convnet.yaml`, interleaved, for
# OVERHEAD_STEPS steps (default 2 x STEPS). The overhead is against the loop on the same kernels.
#
# Samples/s are global and exclude the first step, as lockstep's Trainer reports them
# ("done: ... samples/s"); lockstep runs write no checkpoint (checkpoint.dir empty).
#
# Environment: LOCKSTEP_BUILD_DIR (default build: uses $LOCKSTEP_BUILD_DIR/lockstep and,
# if built with -DLOCKSTEP_BUILD_BENCHMARKS=ON, $LOCKSTEP_BUILD_DIR/bench/bare_loop),
# ROUNDS (default 5), RUN_TIMEOUT (seconds for one PyTorch run, default 600), OVERHEAD_ROUNDS (default 3), WORKLOADS (default
# "charlstm convnet mlp overhead"), KEEP_LOGS=1 to keep the run logs.
# Nothing is built here. PyTorch is the torch wheel lockstep builds against, in the Python
# environment scripts/setup.sh made ($LOCKSTEP_VENV, default /opt/lockstep/venv), with NumPy
# (scripts/python-requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${LOCKSTEP_BUILD_DIR:-build}"
BIN="$BUILD/lockstep"
BARE="$BUILD/bench/bare_loop"
VENV="${LOCKSTEP_VENV:-/opt/lockstep/venv}"
PY="$VENV/bin/python3"  # the same torch as LibTorch's build (scripts/setup_venv.sh)
STEPS="${1:-30}"
ROUNDS="${ROUNDS:-5}"
OVERHEAD_ROUNDS="${OVERHEAD_ROUNDS:-3}"
OVERHEAD_STEPS="${OVERHEAD_STEPS:-$((2 * STEPS))}"
WORKLOADS="${WORKLOADS:-charlstm convnet mlp overhead}"

# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
[ -x "$PY" ] || { echo "compare_pytorch.sh: no Python environment at $VENV; run scripts/setup.sh" >&2; exit 1; }
"$PY" -c 'import numpy' 2>/dev/null ||
  { echo "compare_pytorch.sh: no NumPy for $PY; run scripts/setup.sh (it installs the pinned Python tools)" >&2; exit 1; }

read -r -a BACKENDS <<< "${BACKENDS:-gloo mpi}"
PYTHON_SIDES=(pytorch)
[ "${COMPILED:-1}" = 0 ] || PYTHON_SIDES+=(pytorch-compiled)

scratch_dir
declare -A RESULTS  # "workload/side" -> space-separated samples/s of every run
SEQ=0

rate_of() { grep -o 'done: .*' "$1" | tail -1 | sed -n 's/.* \([0-9][0-9]*\) samples\/s.*/\1/p'; }

# measure WORKLOAD SIDE ROUND COMMAND...: runs it, appends its samples/s to RESULTS and records it
# (the overhead rows are summarised here, not by summarize_rounds.py).
measure() {
  local workload="$1" side="$2" round="$3"; shift 3
  SEQ=$((SEQ + 1))
  local log="$OUT/$SEQ-$workload-$side.log" rate=""
  if "$@" > "$log" 2>&1; then rate="$(rate_of "$log")"; fi
  if [ -z "$rate" ]; then
    echo "  $workload/$side FAILED (log: $log):" >&2
    tail -5 "$log" | sed 's/^/    /' >&2
    rate="fail"
  fi
  printf '  %-12s %-14s %8s samples/s\n' "$workload" "$side" "$rate"
  RESULTS["$workload/$side"]="${RESULTS["$workload/$side"]:-} $rate"
  [ "$workload" = overhead ] || record "$workload" "$side" "$round" "$rate"
}

# Extra `lockstep train` overrides and ddp_bench.py arguments of a workload.
lockstep_extra_of() {
  [ "$1" = mlp-powersgd ] && echo "ddp.compression=powersgd ddp.powersgd_rank=4 ddp.powersgd_start_step=2"
  return 0
}
pytorch_args_of() {
  case "$1" in
    mlp-powersgd) echo "mlp --powersgd 4 --powersgd-start 2 --bucket-cap-mb 1000 --first-bucket-mb 1000" ;;
    *) echo "$1" ;;
  esac
}

lockstep_train() {  # backend np steps config [overrides...]
  local backend="$1" np="$2" steps="$3" config="$4"
  shift 4
  # The backend is named on every side: the default (auto) is MPI on one node.
  "$BIN" run -np "$np" --threads 1 --backend "$backend" -- "$BIN" train "$config" trainer.max_steps="$steps" \
    trainer.validate=false checkpoint.dir=off checkpoint.resume=none generate.samples=0 "$@"
}

bare_loop() {  # steps [--trainer-kernels]; the thread variables as `lockstep run --threads 1` sets them
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 "$BARE" "$@"
}

pytorch_ddp() {  # workload steps [ddp_bench.py options...]
  local workload="$1" steps="$2"
  shift 2
  # shellcheck disable=SC2046  # the workload's arguments are words
  # timeout: when one of PyTorch's workers aborts, the other can wait for it for Gloo's 30 minutes.
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 timeout "${RUN_TIMEOUT:-600}" \
    "$PY" bench/pytorch/ddp_bench.py $(pytorch_args_of "$workload") --steps "$steps" --nproc 2 --threads 1 "$@"
}

median() {  # numbers... ("fail" entries are left out) -> median, or "-"
  printf '%s\n' "$@" | grep -E '^[0-9]+$' | sort -n |
    awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
                              else printf "%.0f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# pytorch_side SIDE ROUND WORKLOAD CONFIG [overrides...]: SIDE is pytorch, pytorch-compiled or a
# lockstep backend.
pytorch_side() {
  local side="$1" round="$2" workload="$3" config="$4"
  shift 4
  case "$side" in
    pytorch) measure "$workload" pytorch-ddp "$round" pytorch_ddp "$workload" "$STEPS" ;;
    pytorch-compiled) measure "$workload" pytorch-compiled "$round" pytorch_ddp "$workload" "$STEPS" --compile ;;
    *) measure "$workload" "lockstep-$side" "$round" lockstep_train "$side" 2 "$STEPS" "$config" "$@" ;;
  esac
}

overhead_side() {  # SIDE ROUND
  case "$1" in
    bare-loop) measure overhead bare-loop "$2" bare_loop "$OVERHEAD_STEPS" ;;
    bare-kernels) measure overhead bare-kernels "$2" bare_loop "$OVERHEAD_STEPS" --trainer-kernels ;;
    *) measure overhead lockstep-np1 "$2" lockstep_train gloo 1 "$OVERHEAD_STEPS" configs/fashion_convnet.yaml ;;
  esac
}

echo "lockstep ($BIN) vs PyTorch DDP (torch $("$PY" -c 'import torch; print(torch.__version__)')):" \
     "$STEPS steps per run, $ROUNDS interleaved rounds, $(nproc) cores"
for workload in $WORKLOADS; do
  [ "$workload" = overhead ] && continue
  config="$(config_of "$workload")"
  [ -n "$config" ] || { echo "compare_pytorch.sh: unknown workload '$workload'" >&2; exit 2; }
  # shellcheck disable=SC2207  # overrides are words
  extra=($(lockstep_extra_of "$workload"))
  interleave "${PYTHON_SIDES[@]}" "${BACKENDS[@]}" -- pytorch_side "$workload" "$config" "${extra[@]}"
done

overhead_done=0
if [[ " $WORKLOADS " == *" overhead "* ]]; then
  if [ -x "$BARE" ]; then
    ROUNDS="$OVERHEAD_ROUNDS" interleave bare-loop bare-kernels lockstep-np1 -- overhead_side
    overhead_done=1
  else
    echo "(no $BARE: configure with -DLOCKSTEP_BUILD_BENCHMARKS=ON and build bare_loop for the overhead row)"
  fi
fi

if [ "${WORKLOADS// /}" != overhead ]; then
echo
echo "Samples/s (global, first step excluded) over $ROUNDS interleaved rounds; ratio = median lockstep / median PyTorch DDP"
summarize pytorch-ddp --fallback mlp-powersgd=mlp
if [[ " ${PYTHON_SIDES[*]} " == *" pytorch-compiled "* ]]; then
  echo
  echo "The same against PyTorch DDP under torch.compile:"
  summarize pytorch-compiled
fi
echo "every run:"
for key in "${!RESULTS[@]}"; do printf '  %-27s%s\n' "$key" "${RESULTS[$key]}"; done | sort
fi

if ((overhead_done)); then
  # shellcheck disable=SC2086
  plain="$(median ${RESULTS[overhead/bare-loop]})"
  # shellcheck disable=SC2086
  bare="$(median ${RESULTS[overhead/bare-kernels]})"
  # shellcheck disable=SC2086
  trained="$(median ${RESULTS[overhead/lockstep-np1]})"
  echo
  echo "Trainer overhead (convnet, 1 process x 1 thread, $OVERHEAD_STEPS steps, median of $OVERHEAD_ROUNDS):"
  awk -v p="$plain" -v a="$bare" -v b="$trained" 'BEGIN {
    printf "  LibTorch loop %s, the loop on the Trainer'"'"'s kernels %s, lockstep train %s samples/s", p, a, b
    if (a ~ /^[0-9]+$/ && b ~ /^[0-9]+$/ && b > 0)
      printf ": overhead %+.1f%% (time per step, lockstep / loop on the same kernels - 1)\n", 100 * (a / b - 1)
    else printf "\n" }'
  # The same from each round's pair (the runs next to each other), which cancels slow drifts in the load.
  awk -v a="${RESULTS[overhead/bare-kernels]}" -v b="${RESULTS[overhead/lockstep-np1]}" 'BEGIN {
    n = split(a, x, " "); split(b, y, " "); k = 0
    for (i = 1; i <= n; i++) if (x[i] ~ /^[0-9]+$/ && y[i] ~ /^[0-9]+$/ && y[i] > 0) r[++k] = 100 * (x[i] / y[i] - 1)
    if (k == 0) exit
    for (i = 2; i <= k; i++) for (j = i; j > 1 && r[j - 1] > r[j]; j--) { t = r[j]; r[j] = r[j - 1]; r[j - 1] = t }
    m = (k % 2) ? r[(k + 1) / 2] : (r[k / 2] + r[k / 2 + 1]) / 2
    printf "  per round:"; for (i = 1; i <= k; i++) printf " %+.1f%%", r[i]
    printf " (sorted); median %+.1f%%\n", m }'
fi
