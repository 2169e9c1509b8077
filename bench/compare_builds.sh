#!/usr/bin/env bash
# Is a change faster? Two builds of lockstep, interleaved: for each round and
# workload, the same training run (2 workers x 1 thread by default) with the
# base build and with this one, the order alternating from round to round;
# samples/s over the same timed steps, per side the median and spread, and
# this build's ratio to the base with a bootstrap interval
# (bench/summarize_rounds.py).
#
#   BASE_BUILD=DIR bench/compare_builds.sh [STEPS] [key=value ...]
#
# Make the base build from the commit to compare with, e.g.
#   git worktree add /tmp/base <commit> && (cd /tmp/base && scripts/build.sh -DLOCKSTEP_BUILD_TESTS=OFF)
#   BASE_BUILD=/tmp/base/build WORKLOADS="mlp convnet" bench/compare_builds.sh 30
#
# A change inside the libraries only needs no second build: copy the base's
# build/liblockstep*.so to a folder before rebuilding, and BASE_LIBS=FOLDER
# (instead of BASE_BUILD) runs this build's binary on them (LD_LIBRARY_PATH
# comes before the binary's RUNPATH).
#   BASE_LIBS=/tmp/oldlib WORKLOADS=mlp bench/compare_builds.sh 20 strategy.type=zero2
#
# BASE_BUILD may also be a folder holding a copy of a build's lockstep and
# liblockstep*.so: the base side runs on the libraries in that folder.
#
# Environment: BASE_BUILD or BASE_LIBS (one is required), ROUNDS (default 5),
# WORKLOADS (default "convnet mlp"), NP (workers, default 2), BACKEND (gloo or
# mpi; default: lockstep run's own choice), LOCKSTEP_BUILD_DIR (this build,
# default build). Overrides after STEPS reach every run.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${1:-30}"
(($#)) && shift
ROUNDS="${ROUNDS:-5}"
WORKLOADS="${WORKLOADS:-convnet mlp}"
NP="${NP:-2}"
NEW="${LOCKSTEP_BUILD_DIR:-build}/lockstep"
if [ -n "${BASE_LIBS:-}" ]; then
  [ -f "$BASE_LIBS/liblockstep.so" ] || { echo "compare_builds.sh: $BASE_LIBS/liblockstep.so not found (BASE_LIBS)" >&2; exit 1; }
  BASE="$NEW"
else
  [ -n "${BASE_BUILD:-}" ] || { echo "compare_builds.sh: set BASE_BUILD to the base build's directory (or BASE_LIBS)" >&2; exit 2; }
  BASE="$BASE_BUILD/lockstep"
  [ -x "$BASE" ] || { echo "compare_builds.sh: $BASE not found; build the base first (see the header)" >&2; exit 1; }
fi
RUN_ARGS=()
if [ -n "${BACKEND:-}" ]; then RUN_ARGS=(--backend "$BACKEND"); fi
BIN="$NEW"
# shellcheck source=bench/harness.sh
. bench/harness.sh
bench_start

build_side() {  # NAME ROUND WORKLOAD [key=value ...]: one run with that build
  local name="$1" round="$2" workload="$3"
  shift 3
  if [ "$name" = base ]; then BIN="$BASE"; else BIN="$NEW"; fi
  if [ "$name" = base ]; then  # the base's own libraries, also for a copied build whose RUNPATH is elsewhere
    LD_LIBRARY_PATH="${BASE_LIBS:-$BASE_BUILD}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timed_run "$workload" "$name" "$round" "$NP" \
      "${RUN_ARGS[@]}" -- "$@"
  else
    timed_run "$workload" "$name" "$round" "$NP" "${RUN_ARGS[@]}" -- "$@"
  fi
}
one_round() {  # ROUND [key=value ...]
  local round="$1" workload
  shift
  for workload in $WORKLOADS; do in_turn "$round" base this -- build_side "$workload" "$@"; done
}
rounds one_round "$@"
summarize base
