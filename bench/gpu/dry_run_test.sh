#!/usr/bin/env bash
# The suite's test of the device check on the CPU. It bundles BUILD_DIR into a directory of its
# own (BUNDLE_DIR, so a bundle in the source root stays as it is), then:
#   a. check_all.sh on the CPU with the fake NVML: exit status 0, every check that can pass on a
#      CPU prints PASS, those that need a GPU print SKIP, and the summary says 0 failed;
#   b. device_check.sh with CHECK_HANG=step-breakdown, CHECK_ONLY "start step-breakdown nvml" and
#      the deadlines shrunk: "FAIL step-breakdown: timed out", start PASS and nvml SKIP after it,
#      both summaries (against-pytorch not run), a non-zero exit within its bound, and the hung
#      launcher stopped by SIGTERM (which it forwards to its workers), not only by SIGKILL;
#   c. device_check.sh with the same hang, stopped by SIGTERM once the hang runs: the hung check
#      reported as interrupted and both summaries printed;
# and after b and c no process of the bundle is left. Exits 1 naming each expectation that failed.
#
#   bench/gpu/dry_run_test.sh BUILD_DIR PYTHON FAKE_NVML_LIB
set -uo pipefail
[ $# = 3 ] || { echo "usage: $0 BUILD_DIR PYTHON FAKE_NVML_LIB" >&2; exit 2; }
build=$1 python=$2 fake_nvml=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export BUNDLE_DIR=$tmp/bundle PYTHON=$python CHECK_DEVICE=cpu
unset LOCKSTEP_NVML_LIBRARY CHECK_ONLY CHECK_HANG CHECK_BUDGET CHECK_DEADLINE_SCALE
problems=0
problem() { echo "dry_run_test: $*"; problems=$((problems + 1)); }
# expect NAME FILE PATTERN: FILE has a line matching the extended regular expression PATTERN.
expect() { grep -qE "$3" "$2" || problem "$1: no line matching '$3' in $2"; }
# no_strays NAME: no process of the bundle is left (allowing a moment for the last to be reaped);
# those left are named, then killed.
no_strays() {
  local i pids=()
  for ((i = 0; i < 10; i++)); do
    pgrep -f -- "$BUNDLE_DIR/" >/dev/null || return 0
    sleep 0.5
  done
  problem "$1: processes of the bundle left: $(pgrep -af -- "$BUNDLE_DIR/" | paste -sd';')"
  mapfile -t pids < <(pgrep -f -- "$BUNDLE_DIR/")
  ((${#pids[@]} == 0)) || kill -KILL "${pids[@]}" 2>/dev/null
}

"$here/bundle.sh" "$build" >"$tmp/bundle.log" 2>&1 || { cat "$tmp/bundle.log"; echo "dry_run_test: bundle.sh failed"; exit 1; }

echo "== a. check_all.sh on the CPU with the fake NVML"
SECONDS=0
OUT=$tmp/a LOCKSTEP_NVML_LIBRARY=$fake_nvml "$here/check_all.sh" >"$tmp/a.txt" 2>&1
rc=$?
cat "$tmp/a.txt"
[ "$rc" = 0 ] || problem "a: exit status $rc, want 0"
for name in start names-cpu step-breakdown nvml convnet-cpu bf16 checkpoint-to-cpu ddp-staged-gloo \
  zero2-equals-ddp zero3-equals-ddp pipeline-cpu async-ps-cpu; do
  expect a "$tmp/a.txt" "^PASS $name: "
done
for name in fp16-scaler nccl-world-1 nccl-allreduce fp16-scaler-2; do
  expect a "$tmp/a.txt" "^SKIP $name: needs a GPU$"
done
expect a "$tmp/a.txt" '^check_all: 12 passed, 0 failed, 4 skipped \(need a GPU\)$'
echo "(a: $SECONDS s)"

echo "== b. device_check.sh with step-breakdown hanging"
SECONDS=0
OUT=$tmp/b CHECK_ONLY="start step-breakdown nvml" CHECK_HANG=step-breakdown CHECK_DEADLINE_SCALE=0.2 \
  timeout -k 5 120 "$here/device_check.sh" >"$tmp/b.txt" 2>&1
rc=$? took=$SECONDS
cat "$tmp/b.txt"
[ "$rc" = 1 ] || problem "b: exit status $rc, want 1"
((took <= 60)) || problem "b: took $took s, want at most 60 (step-breakdown's deadline is 9 s)"
expect b "$tmp/b.txt" '^PASS start: '
expect b "$tmp/b.txt" '^FAIL step-breakdown: timed out after 9 s'
expect b "$tmp/b.txt" '^SKIP nvml: needs a GPU$'
expect b "$tmp/b.txt" '^check_all: 1 passed, 1 failed, 1 skipped \(need a GPU\)$'
expect b "$tmp/b.txt" '^against-pytorch: not run \(check_all.sh did not pass\)$'
expect b "$tmp/b.txt" '^device_check: failed in '
expect b "$tmp/b/check_all.txt" '^check_all: 1 passed, 1 failed'
expect b "$tmp/b/step-breakdown.log" 'received SIGTERM, forwarded it to every worker'
no_strays b
echo "(b: $took s)"

echo "== c. device_check.sh stopped by SIGTERM during the hang"
SECONDS=0
OUT=$tmp/c CHECK_ONLY="step-breakdown nvml" CHECK_HANG=step-breakdown "$here/device_check.sh" >"$tmp/c.txt" 2>&1 &
pid=$!
for ((i = 0; i < 120; i++)); do  # until both sleeping workers of the hang run
  [ "$(pgrep -fc -- "^$BUNDLE_DIR/check-hang")" = 2 ] && break
  sleep 0.5
done
kill -TERM "$pid"
wait "$pid"
rc=$?
cat "$tmp/c.txt"
[ "$rc" = 143 ] || problem "c: exit status $rc, want 143 (SIGTERM)"
expect c "$tmp/c.txt" '^FAIL step-breakdown: interrupted by SIGTERM'
expect c "$tmp/c.txt" '^check_all: 0 passed, 1 failed, 0 skipped \(need a GPU\); interrupted by SIGTERM, 1 not run$'
expect c "$tmp/c.txt" '^device_check: interrupted by SIGTERM in '
no_strays c
echo "(c: $SECONDS s)"

if [ "$problems" = 0 ]; then echo "dry_run_test: passed"; else echo "dry_run_test: $problems problem(s)"; exit 1; fi
