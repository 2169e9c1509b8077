#!/usr/bin/env bash
# The main job: install what is needed, build, and train the pet-name
# generator on 2 local workers (data-parallel, gradients averaged every step),
# then print names it made up. About two minutes of training on 2 cores.
# Checkpoints go to runs/petnames/; run again to continue from the last one,
# delete that folder to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DLOCKSTEP_BUILD_TESTS=OFF
BUILD_DIR="${LOCKSTEP_BUILD_DIR:-build}"
"$BUILD_DIR/lockstep" run -np 2 -- "$BUILD_DIR/lockstep" train configs/petnames.yaml "$@"
