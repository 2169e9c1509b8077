#!/usr/bin/env bash
# Search quality of `lockstep sweep`'s samplers against Optuna's (Debian's python3-optuna, a
# benchmark-only dependency) on Branin and Hartmann-6: the median best value of S seeds after N
# trials each, per method (bench/sweep_quality.py). No training: the objectives are functions.
#   bench/sweep_quality.sh [TRIALS=50] [SEEDS=101]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! /usr/bin/python3 -c 'import optuna' 2>/dev/null; then
  # shellcheck source=scripts/lib/apt.sh
  source scripts/lib/apt.sh
  lockstep_sudo_setup sweep_quality.sh
  lockstep_apt_install sweep_quality.sh python3-optuna
fi
BIN="${LOCKSTEP_BIN:-build/lockstep}"
exec /usr/bin/python3 bench/sweep_quality.py "$BIN" "${1:-50}" "${2:-101}"
