#!/usr/bin/env bash
# Configures and builds lockstep into build/ (Ninja, -j2, ccache when present) against the
# LibTorch that scripts/setup.sh installed into $LOCKSTEP_VENV (default /opt/lockstep/venv).
# Usage: scripts/build.sh [extra cmake -D options...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${LOCKSTEP_BUILD_DIR:-build}"
VENV_OPTION=()
[ -n "${LOCKSTEP_VENV:-}" ] && VENV_OPTION=("-DLOCKSTEP_VENV=$LOCKSTEP_VENV")
# ccache may reuse objects built with a precompiled header only when told these are safe.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${VENV_OPTION[@]}" "$@"
cmake --build "$BUILD_DIR" -j "${LOCKSTEP_JOBS:-2}"
