#!/usr/bin/env bash
# Where the convnet's forward+backward goes, op by op, with lockstep's one-pass
# ReLU + pooling (nn/pooling.h) and with LibTorch's relu + max_pool2d
# (LOCKSTEP_PLAIN_POOLING=1): bench/op_profile (LibTorch's profiler, one thread,
# batch 128, STEPS steps) for each side, then the milliseconds per step of the
# TOP most expensive op names (nested ops count inside their callers too).
#
#   bench/op_profile.sh [STEPS] [fp32|bf16]     (defaults 20, fp32)
#
# Environment: TOP (default 12), LOCKSTEP_BUILD_DIR (default build, configured with
# -DLOCKSTEP_BUILD_BENCHMARKS=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${1:-20}"
PRECISION="${2:-fp32}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
op_profile_start
LOCKSTEP_PLAIN_POOLING=1 "$PROFILE" "$OUT/libtorch.json" convnet 128 "$STEPS" "$PRECISION"
LOCKSTEP_PLAIN_POOLING=0 "$PROFILE" "$OUT/fused.json" convnet 128 "$STEPS" "$PRECISION"
python3 bench/summarize_trace.py "$STEPS" "${TOP:-12}" libtorch="$OUT/libtorch.json" fused="$OUT/fused.json"
