#!/usr/bin/env bash
# Where bf16 autocast's time goes against float32, op by op: bench/op_profile
# (LibTorch's profiler, one thread, STEPS steps of forward+backward on a random
# batch) once with precision fp32 and once with bf16, then the milliseconds per
# step of the TOP most expensive op names on each side (nested ops count inside
# their callers too). For the mlp the casts of the weights to bfloat16
# (aten::to / aten::_to_copy / aten::copy_) and back show against aten::linear.
#
#   bench/precision_ops.sh [MODEL] [BATCH] [STEPS] [HIDDEN]
#     (defaults mlp, 32, 20, 4096,4096: configs/mlp-bench.yaml's model and batch)
#
# Environment: TOP (default 12), LOCKSTEP_BUILD_DIR (default build, configured with
# -DLOCKSTEP_BUILD_BENCHMARKS=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-mlp}"
BATCH="${2:-32}"
STEPS="${3:-20}"
HIDDEN="${4:-4096,4096}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
op_profile_start
for precision in fp32 bf16; do
  "$PROFILE" "$OUT/$precision.json" "$MODEL" "$BATCH" "$STEPS" "$precision" "$HIDDEN"
done
python3 bench/summarize_trace.py "$STEPS" "${TOP:-12}" fp32="$OUT/fp32.json" bf16="$OUT/bf16.json"
