#!/usr/bin/env bash
# The main job: install what is needed, build, and run 2 local workers that
# talk through the real collective library (an allreduce benchmark between
# two processes, values checked).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DLOCKSTEP_BUILD_TESTS=OFF
BUILD_DIR="${LOCKSTEP_BUILD_DIR:-build}"
"$BUILD_DIR/lockstep" run -np 2 -- "$BUILD_DIR/lockstep" bench allreduce --bytes 4K,64K,1M,8M,32M
