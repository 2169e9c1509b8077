#!/usr/bin/env bash
# Installs LibTorch as PyPI's torch wheel (the CUDA 13.0 build; it runs without a GPU) into a
# Python environment, $LOCKSTEP_VENV (default /opt/lockstep/venv), which CMake reads
# (cmake/LockstepTorch.cmake). Does nothing when the pinned version is already there, so a
# new checkout does not download the wheels (about 2.7 GB) again. Idempotent.
set -euo pipefail

TORCH_VERSION=2.11.0   # cmake/LockstepTorch.cmake's LOCKSTEP_TORCH_VERSION says the same
VENV="${LOCKSTEP_VENV:-/opt/lockstep/venv}"

installed_version() {
  "$VENV/bin/python3" -c "import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null || true
}

case "$(installed_version)" in
  "$TORCH_VERSION" | "$TORCH_VERSION"+*)
    echo "setup_torch.sh: torch $TORCH_VERSION present in $VENV"
    exit 0
    ;;
esac

SUDO=""
if [ ! -w "$(dirname "$VENV")" ] && [ ! -w "$VENV" ] && [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ ! -x "$VENV/bin/python3" ]; then
  echo "setup_torch.sh: creating the Python environment $VENV"
  $SUDO mkdir -p "$(dirname "$VENV")"
  $SUDO python3 -m venv "$VENV"
fi
echo "setup_torch.sh: installing torch==$TORCH_VERSION into $VENV (about 2.7 GB with its CUDA libraries)"
if ! $SUDO "$VENV/bin/pip" install --no-input --disable-pip-version-check "torch==$TORCH_VERSION"; then
  echo "setup_torch.sh: pip could not install torch==$TORCH_VERSION into $VENV; check that PyPI is reachable" >&2
  echo "  (pip config list shows index and proxy settings), then run scripts/setup.sh again." >&2
  exit 1
fi
version="$(installed_version)"
case "$version" in
  "$TORCH_VERSION" | "$TORCH_VERSION"+*) echo "setup_torch.sh: torch $version installed in $VENV" ;;
  *) echo "setup_torch.sh: $VENV holds torch '$version' after pip, expected $TORCH_VERSION" >&2; exit 1 ;;
esac
