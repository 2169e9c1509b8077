#!/usr/bin/env bash
# The device check of docs/gpus.md in one call of the device tool: bench/gpu/check_all.sh under a
# deadline, then, only when it passed, lockstep against PyTorch (bench/gpu/against_pytorch.sh)
# under a deadline of its own; both summaries last, and in $OUT/device_check.txt.
#
#   here:     scripts/build.sh && bench/gpu/bundle.sh
#   device:   run(command="bench/gpu/device_check.sh", carry=[".gpu-bundle"], timeout_s=600)
#   dry run:  CHECK_DEVICE=cpu PYTHON=/opt/lockstep/venv/bin/python3 bench/gpu/device_check.sh
#             (the comparison is then one short round without torch.compile, and PASS needs its
#             three rows, not the ratios: the script's own test, not a measurement)
#
# Environment: check_all.sh's (CHECK_DEVICE, PYTHON, BUNDLE_DIR, OUT, CHECK_* ...), and
#   CHECK_ALL_DEADLINE  seconds for check_all.sh (default 330; its CHECK_BUDGET defaults to 30 less)
#   PYTORCH_DEADLINE    seconds for against_pytorch.sh (default 180)
# A deadline stops its script with SIGTERM (check_all.sh then reports the running check and prints
# its summary), and with SIGKILL 10 s later. With PyTorch's import first (at most 60 s,
# bundle_env.sh) the defaults add up to at most 590 s, inside the device tool's 600 s for one
# command. SIGINT, SIGTERM or SIGHUP to this script reach the running one the same way.
# Exit status: 0 when both passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bundle_env.sh
source "$here/bundle_env.sh"
export OUT=${OUT:-/tmp/lockstep-check}
device=${CHECK_DEVICE:-cuda}
check_limit=${CHECK_ALL_DEADLINE:-330}
pytorch_limit=${PYTORCH_DEADLINE:-180}
mkdir -p "$OUT"
rm -f "$OUT/check_all.txt"  # a summary there is this run's
child='' started=$SECONDS
check_all_line='' pytorch_line='against-pytorch: not run (check_all.sh did not pass)'

# background COMMAND...: COMMAND in the background, waited for, so that a signal to this script
# is handled (on_signal) while it runs; its exit status.
background() {
  "$@" &
  child=$!
  wait "$child"
  local rc=$?
  child=''
  return $rc
}

summaries() {
  [ -n "$check_all_line" ] || check_all_line=$(grep '^check_all: [0-9]' "$OUT/check_all.txt" 2>/dev/null | tail -1)
  {
    echo "== device_check: the summaries"
    echo "${check_all_line:-check_all: no summary (stopped without one; see $OUT)}"
    echo "$pytorch_line"
    echo "device_check: $1 in $((SECONDS - started)) s, logs in $OUT"
  } | tee "$OUT/device_check.txt"
}

on_signal() {
  trap '' INT TERM HUP
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  while [ -n "$child" ] && kill -0 "$child" 2>/dev/null; do wait "$child"; done
  summaries "interrupted by SIG$1"
  exit $((128 + $2))
}
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP

# against_pytorch: runs the comparison and sets pytorch_line; true when it passed.
against_pytorch() {
  local quick=() file=$OUT/against-pytorch.txt rows summary rc
  [ "$device" = cpu ] && quick=(ROUNDS=1 COMPILED=0 "STEPS=charlstm=4 convnet=6 resnet18=2")
  background env ${quick[@]+"${quick[@]}"} DEADLINE=$(($(date +%s) + pytorch_limit - 10)) \
    LOCKSTEP_LD_LIBRARY_PATH="$lockstep_libs" timeout -k 10 "$pytorch_limit" \
    "$here/against_pytorch.sh" "$bin" "$python" "$bundle/data" "$OUT" "$device" >"$file" 2>&1
  rc=$?
  rows=$(grep -c '^RATIO .* ratio=' "$file")
  summary=$(sed -n 's/^RATIO //p' "$file" | paste -sd';')
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    pytorch_line="FAIL against-pytorch: timed out after $pytorch_limit s: ${summary:-no figures}; see $file"
  elif [ "$rows" = 3 ] && { [ "$device" = cpu ] || ! grep -o 'ratio[a-z_]*=[0-9.]*' "$file" | cut -d= -f2 | grep -qv '^[1-9]'; }; then
    pytorch_line="PASS against-pytorch: samples/s, one worker each (median[min-max]): $summary"
  else
    pytorch_line="FAIL against-pytorch: lockstep below PyTorch somewhere, or a run failed: ${summary:-no figures}; see $file and $OUT/ap-*.log"
  fi
  echo "$pytorch_line"
  [[ $pytorch_line == PASS* ]]
}

# Where PyTorch is, first: a bounded wait (bundle_env.sh), so the two deadlines are what is left.
bundle_env 2>"$OUT/bundle_env.txt"
env_rc=$?
CHECK_BUDGET=${CHECK_BUDGET:-$((check_limit - 30))} background timeout -k 10 "$check_limit" "$here/check_all.sh"
rc=$?
check_all_line=$(grep '^check_all: [0-9]' "$OUT/check_all.txt" 2>/dev/null | tail -1)
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  check_all_line="check_all: stopped at its deadline of $check_limit s; ${check_all_line:-no summary}"
fi
if [ "$rc" != 0 ]; then
  summaries failed
  exit 1
fi
if [ "$env_rc" != 0 ]; then
  pytorch_line="FAIL against-pytorch: $(cat "$OUT/bundle_env.txt")"
  summaries failed
  exit 1
fi
echo "device_check: against_pytorch.sh, at most $pytorch_limit s"
if against_pytorch; then summaries passed; else summaries failed; exit 1; fi
