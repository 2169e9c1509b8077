#!/usr/bin/env bash
# Configures and builds lockstep into build/ (Ninja, -j2, ccache when present).
# Usage: scripts/build.sh [extra cmake -D options...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${LOCKSTEP_BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$BUILD_DIR" -j "${LOCKSTEP_JOBS:-2}"
