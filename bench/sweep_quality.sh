#!/usr/bin/env bash
# Search quality of `lockstep sweep`'s samplers against Optuna's (PyPI's optuna, pinned in
# scripts/python-requirements.txt and installed by scripts/setup.sh into $LOCKSTEP_VENV) on
# Branin and Hartmann-6: the median best value of S seeds after N trials each, per method
# (bench/sweep_quality.py). No training: the objectives are functions.
#   bench/sweep_quality.sh [TRIALS=50] [SEEDS=101]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${LOCKSTEP_VENV:-/opt/lockstep/venv}/bin/python3"
if ! "$PY" -c 'import optuna' 2>/dev/null; then
  echo "sweep_quality.sh: no Optuna for $PY; run scripts/setup.sh (it installs the pinned Python tools)" >&2
  exit 1
fi
BIN="${LOCKSTEP_BIN:-build/lockstep}"
exec "$PY" bench/sweep_quality.py "$BIN" "${1:-50}" "${2:-101}"
