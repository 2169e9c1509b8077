# shellcheck shell=bash
# Sourced by check_all.sh and device_check.sh: where the bundle is and how lockstep's own
# processes find their libraries.
#   bundle         $BUNDLE_DIR, default .gpu-bundle/ in the source root (bundle.sh writes there)
#   bin            the bundle's lockstep
#   python         $PYTHON, default python3: the machine's PyTorch
#   torch_dir      that PyTorch's package directory (its lib/ is the LibTorch lockstep runs on)
#   lockstep_libs  the bundle's lib/, LibTorch's lib/ and the wheel's nvidia/*/lib, then the
#                  caller's LD_LIBRARY_PATH (where such a machine may keep libcuda.so.1 and
#                  libnvidia-ml.so.1); the bundle first, so its libstdc++ and LibTorch's CUDA
#                  libraries win over others of the same name
#   lockstep_env   (env LD_LIBRARY_PATH=$lockstep_libs): the prefix of every lockstep command.
#                  Only lockstep's processes get it (workers of `lockstep run` inherit it); Python
#                  keeps the caller's environment, so PyTorch loads its own libstdc++ and libgomp.
# bundle_env sets torch_dir, lockstep_libs and lockstep_env; it returns non-zero with a line on
# stderr when the bundle is missing or PyTorch cannot be imported within 60 s.
bundle_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=${BUNDLE_DIR:-$bundle_root/.gpu-bundle}
bin=$bundle/bin/lockstep
python=${PYTHON:-python3}

bundle_env() {
  [ -x "$bin" ] || {
    echo "$bin is missing (run bench/gpu/bundle.sh here and carry .gpu-bundle)" >&2
    return 1
  }
  torch_dir=$(timeout 60 "$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))') || {
    echo "$python cannot import torch" >&2
    return 1
  }
  local wheel_libs
  wheel_libs=$(ls -d "$(dirname "$torch_dir")"/nvidia/*/lib 2>/dev/null | paste -sd:)
  lockstep_libs=$bundle/lib:$torch_dir/lib${wheel_libs:+:$wheel_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # shellcheck disable=SC2034  # read by the scripts that source this file
  lockstep_env=(env "LD_LIBRARY_PATH=$lockstep_libs")
}
