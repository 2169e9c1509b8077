#!/usr/bin/env bash
# lockstep's activation checkpointing on a GPU: a dropout MLP on CUDA, plain
# against checkpointSequential, in float32 and under CUDA float16 autocast
# (bench/gpu/checkpoint_cuda.cpp): loss, gradients and the next random draw
# bit-equal. To show that the check can fail it also builds two broken copies,
# one that does not save the GPU generator's state and one that does not
# replay CUDA autocast in backward: each must print FAIL. Needs a CUDA GPU,
# PyTorch with CUDA (its LibTorch builds the programs), g++ and fmt's headers
# (FMT_INCLUDE, default /usr/include; used header-only). Not part of the CPU
# test suite.
#
#   bench/gpu/check_checkpoint.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'wait; rm -rf "$work"' EXIT  # the background builds first

torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
build() {  # build OUTPUT ACTIVATION_CHECKPOINT_SOURCE
  g++ -std=c++17 -O2 -D_GLIBCXX_USE_CXX11_ABI="$abi" -DFMT_HEADER_ONLY -I"$root/include" -I"$root/src" \
    -I"${FMT_INCLUDE:-/usr/include}" -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" \
    "$here/checkpoint_cuda.cpp" "$2" "$root/src/nn/autocast_scope.cpp" "$root/src/common/error.cpp" \
    -o "$1" -L"$torch_dir/lib" -Wl,--no-as-needed -ltorch -ltorch_cuda -ltorch_cpu -lc10_cuda -lc10 \
    -Wl,--as-needed -Wl,-rpath,"$torch_dir/lib"
}
source=$root/src/nn/activation_checkpoint.cpp
sed 's/if (!x.defined() || x.device().is_cpu()) continue;/continue;/' "$source" >"$work/no_gpu_rng.cpp"
sed '/AutocastScope cudaAmp(/d' "$source" >"$work/no_cuda_autocast.cpp"
for broken in no_gpu_rng no_cuda_autocast; do
  if cmp -s "$source" "$work/$broken.cpp"; then echo "check_checkpoint.sh: could not break $broken" >&2; exit 1; fi
done
echo "== build ($(python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())'))"
build "$work/no_gpu_rng" "$work/no_gpu_rng.cpp" &
first=$!
build "$work/no_cuda_autocast" "$work/no_cuda_autocast.cpp" &
second=$!
build "$work/checkpoint" "$source"
wait "$first"
wait "$second"
status=0
echo "== this build"
"$work/checkpoint" || status=1
for broken in no_gpu_rng no_cuda_autocast; do
  echo "== broken on purpose: $broken (must FAIL)"
  if "$work/$broken"; then echo "the check did not catch $broken"; status=1; fi
done
exit $status
