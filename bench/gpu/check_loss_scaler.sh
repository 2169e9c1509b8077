#!/usr/bin/env bash
# lockstep's LossScaler on a GPU: float16 training under CUDA autocast against
# PyTorch's GradScaler on the same model and data (scale after every step,
# skipped steps, losses, final parameters bit for bit), then the time of one
# unscale() of many gradients. Needs a CUDA GPU, PyTorch with CUDA (its
# LibTorch builds the program) and g++; it is not part of the CPU test suite.
#
#   bench/gpu/check_loss_scaler.sh [STEPS] [BASE_SOURCE]
#
# BASE_SOURCE: another loss_scaler.cpp (e.g. an earlier commit's) to time
# against this one, 5 interleaved rounds (bench/harness.sh).
set -euo pipefail
steps=${1:-60}
base=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=bench/harness.sh
. "$here/../harness.sh"  # interleave

torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
build() {  # build OUTPUT LOSS_SCALER_SOURCE
  g++ -std=c++17 -O2 -D_GLIBCXX_USE_CXX11_ABI="$abi" -I"$root/include" -I"$root/src" -I"$torch_dir/include" \
    -I"$torch_dir/include/torch/csrc/api/include" "$here/loss_scaler_cuda.cpp" "$2" "$root/src/common/error.cpp" \
    "$root/src/comm/communicator.cpp" "$root/src/nn/autocast_scope.cpp" \
    -o "$1" -L"$torch_dir/lib" -Wl,--no-as-needed -ltorch -ltorch_cuda -ltorch_cpu -lc10_cuda -lc10 \
    -Wl,--as-needed -Wl,-rpath,"$torch_dir/lib"
}
echo "== build ($(python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())'))"
if [ -n "$base" ]; then
  build "$work/scaler_base" "$base" &
  base_build=$!
fi
build "$work/scaler" "$root/src/optim/loss_scaler.cpp"
[ -n "$base" ] && wait "$base_build"

echo "== float16 training: lockstep LossScaler vs PyTorch GradScaler, $steps steps"
mkdir -p "$work/in" "$work/out"
python3 "$here/loss_scaler_reference.py" inputs "$work/in" "$steps"
"$work/scaler" train "$work/in" "$work/out"
status=0
python3 "$here/loss_scaler_reference.py" compare "$work/in" "$work/out" || status=1

echo "== one unscale()+update(), 200 gradients of 65536 floats, median of 200 calls"
# shellcheck disable=SC2317  # called by interleave
time_side() {  # base|this ROUND: one timing of that build
  local program="$work/scaler"
  [ "$1" = base ] && program="$work/scaler_base"
  echo "round $2 $1: $("$program" time 200 65536 200)"
}
sides=(this)
[ -n "$base" ] && sides=(base this)
ROUNDS=5 interleave "${sides[@]}" -- time_side
exit $status
