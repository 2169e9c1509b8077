#!/usr/bin/env bash
# Installs LibTorch as PyPI's torch wheel (the CUDA 13.0 build; it runs without a GPU) into a
# Python environment, $LOCKSTEP_VENV (default /opt/lockstep/venv), which CMake reads
# (cmake/LockstepTorch.cmake), and next to it the pinned Python tools of the tests and
# benchmarks (scripts/python-requirements.txt: TensorBoard, Optuna, NumPy). Downloads nothing
# when the pinned versions are already there, so a new checkout does not fetch the wheels
# (about 2.7 GB) again. Idempotent.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
# The pinned torch version, one file for this script and CMake (cmake/LockstepTorch.cmake).
TORCH_VERSION="$(head -n 1 "$HERE/../cmake/torch-version.txt")"
REQUIREMENTS="$HERE/python-requirements.txt"
VENV="${LOCKSTEP_VENV:-/opt/lockstep/venv}"

installed_version() {
  "$VENV/bin/python3" -c "import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null || true
}

SUDO=""
if [ ! -w "$(dirname "$VENV")" ] && [ ! -w "$VENV" ] && [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
pip_install() {  # pip arguments...; a failure names the environment and what to check
  if ! $SUDO "$VENV/bin/pip" install --no-input --disable-pip-version-check "$@"; then
    echo "setup_venv.sh: pip could not install $* into $VENV; check that PyPI is reachable" >&2
    echo "  (pip config list shows index and proxy settings), then run scripts/setup.sh again." >&2
    exit 1
  fi
}

case "$(installed_version)" in
  "$TORCH_VERSION" | "$TORCH_VERSION"+*)
    echo "setup_venv.sh: torch $TORCH_VERSION present in $VENV"
    ;;
  *)
    if [ ! -x "$VENV/bin/python3" ]; then
      echo "setup_venv.sh: creating the Python environment $VENV"
      $SUDO mkdir -p "$(dirname "$VENV")"
      $SUDO python3 -m venv "$VENV"
    fi
    echo "setup_venv.sh: installing torch==$TORCH_VERSION into $VENV (about 2.7 GB with its CUDA libraries)"
    pip_install "torch==$TORCH_VERSION"
    version="$(installed_version)"
    case "$version" in
      "$TORCH_VERSION" | "$TORCH_VERSION"+*) echo "setup_venv.sh: torch $version installed in $VENV" ;;
      *) echo "setup_venv.sh: $VENV holds torch '$version' after pip, expected $TORCH_VERSION" >&2; exit 1 ;;
    esac
    ;;
esac

# The tools' pins, checked without pip (which would ask the index); installed when one differs.
if ! "$VENV/bin/python3" - "$REQUIREMENTS" <<'PY' 2>/dev/null; then
import importlib.metadata as m, re, sys
for line in open(sys.argv[1]):
    pin = re.match(r"\s*([A-Za-z0-9_.-]+)==(\S+)", line)
    if pin and m.version(pin[1]) != pin[2]:
        sys.exit(1)
PY
  echo "setup_venv.sh: installing $(grep -o '^[a-z0-9_.-]*==[^ ]*' "$REQUIREMENTS" | tr '\n' ' ')into $VENV"
  pip_install -r "$REQUIREMENTS"
else
  echo "setup_venv.sh: $(grep -c '^[a-z]' "$REQUIREMENTS") pinned Python tools present in $VENV"
fi
