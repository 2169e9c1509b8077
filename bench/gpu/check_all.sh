#!/usr/bin/env bash
# The GPU checks of docs/gpus.md, one PASS/FAIL/SKIP line each with its figures, on a machine with
# one NVIDIA GPU and PyTorch 2.11.0+cu130 (no network, no build: it runs the lockstep that
# bench/gpu/bundle.sh packed into .gpu-bundle/ against that machine's LibTorch).
#
#   here:     scripts/build.sh && bench/gpu/bundle.sh
#   device:   run(command="bench/gpu/device_check.sh", carry=[".gpu-bundle"], timeout_s=600)
#             (device_check.sh runs this script, then bench/gpu/against_pytorch.sh if it passed)
#   dry run:  CHECK_DEVICE=cpu PYTHON=/opt/lockstep/venv/bin/python3 bench/gpu/check_all.sh
#             (fewer steps on the CPU; a check that needs a GPU prints SKIP and is counted apart;
#             bench/gpu/dry_run_test.sh runs it as the suite's test)
#
# Each check runs in its own process group under its own deadline (check_table), and all of
# them within CHECK_BUDGET seconds of the script's start. A check past its deadline is stopped
# (SIGTERM to its group, SIGKILL 10 s later if any of it is left) and reported as
# "FAIL NAME: timed out after N s"; the next check runs. The summary line
# "check_all: P passed, F failed, S skipped (need a GPU)" is printed and written to
# $OUT/check_all.txt in every case, also after SIGINT, SIGTERM or SIGHUP.
#
# Environment:
#   CHECK_DEVICE          cuda (default) or cpu
#   PYTHON                the Python with PyTorch (default python3); it runs with the caller's
#                         environment, lockstep's processes with the bundle's (bundle_env.sh)
#   BUNDLE_DIR            the bundle (default .gpu-bundle/ in the source root)
#   OUT                   logs, result JSONs and check_all.txt (default /tmp/lockstep-check)
#   CHECK_BUDGET          seconds for the whole script (default 330)
#   CHECK_DEADLINE_SCALE  a factor on every check's deadline (default 1; tests shrink them)
#   CHECK_ONLY            the checks to run, names separated by spaces (default all). nvml and
#                         checkpoint-to-cpu read the names-DEVICE run, zero2- and
#                         zero3-equals-ddp the ddp-staged-gloo runs: they fail without those
#   CHECK_HANG            a check's name: that check, where it runs (not skipped), hangs instead
#                         (the bundle's `lockstep run` with two workers that sleep forever), to
#                         test deadlines
#   LOCKSTEP_NVML_LIBRARY on the CPU, a scripted NVML (the suite's fake libnvidia-ml.so.1): the
#                         names run samples it as GPU 0 and the nvml check wants its values;
#                         without it the nvml check is skipped on the CPU
# Exit status: 0 when no check failed, 1 when one did (a missing bundle or PyTorch fails start),
# 2 for an unknown name in CHECK_ONLY or CHECK_HANG, 128+N after signal N.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
# shellcheck source=bundle_env.sh
source "$(dirname "$0")/bundle_env.sh"
root=$bundle_root
device=${CHECK_DEVICE:-cuda}
out=${OUT:-/tmp/lockstep-check}
budget=${CHECK_BUDGET:-330}
scale=${CHECK_DEADLINE_SCALE:-1}
names="[$bundle/data/names.txt]"
mkdir -p "$out"
work=$(mktemp -d)
mkdir -p "$work/rc"
: >"$out/check_all.txt"
passed=0 failed=0 skipped=0 selected=0
# pause SECONDS: a sleep in the background, waited for: a trapped signal ends the wait at once
# and its trap runs (a foreground sleep would delay it, and bash prints "Terminated" when a
# SIGTERM to this process group kills one; `read -t` runs traps that fork with SIGCHLD blocked).
pause() {
  sleep "$1" &
  wait $!
}
running_pid='' current='' check_started=0 interrupted=''

# --- Reporting and the runner -------------------------------------------------------------------

say() { echo "$*" | tee -a "$out/check_all.txt"; }
# report KIND NAME DETAIL: one PASS, FAIL or SKIP line, counted.
report() {
  say "$1 $2: $3"
  case $1 in
    PASS) passed=$((passed + 1)) ;;
    FAIL) failed=$((failed + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
  esac
}
summary() {
  local line="check_all: $passed passed, $failed failed, $skipped skipped (need a GPU)"
  [ -n "$interrupted" ] && line+="; interrupted by SIG$interrupted, $((selected - passed - failed - skipped)) not run"
  say "$line"
}
on_gpu() { [ "$device" != cpu ]; }
steps() { if on_gpu; then echo "$1"; else echo "$2"; fi; }  # steps ON_GPU ON_CPU
scaled() { awk -v d="$1" -v s="$scale" 'BEGIN { x = int(d * s + 0.5); print (x < 1 ? 1 : x) }'; }

# group_alive PGID: true while the process group has a member that is not a zombie (the group's
# leader is this shell's child, a zombie until bash reaps it).
group_alive() {
  local stat s
  for stat in /proc/[0-9]*/stat; do
    { read -r s <"$stat"; } 2>/dev/null || continue
    s=${s##*) }  # after the command's name: state, parent, process group, ...
    [ "${s%% *}" != Z ] || continue
    s=${s#* }
    s=${s#* }
    [ "${s%% *}" = "$1" ] && return 0
  done
  return 1
}

# stop_group PGID: SIGTERM to a check's process group, SIGKILL 10 s later if any of it is left.
# `lockstep run` forwards SIGTERM to its workers, and they die with it (PR_SET_PDEATHSIG).
stop_group() {
  kill -TERM -- "-$1" 2>/dev/null || return 0
  local i
  for ((i = 0; i < 50; i++)); do
    group_alive "$1" || return 0
    pause 0.2
  done
  kill -KILL -- "-$1" 2>/dev/null
  return 0
}

# hang NAME: CHECK_HANG's stand-in for a check. The bundle's launcher with two workers that
# sleep forever, named after the bundle (`exec -a`) so that a test can look for strays.
hang() {
  # shellcheck disable=SC2016  # $0 is the inner bash's
  "${lockstep_env[@]}" "$bin" run -np 2 --no-prefix -- bash -c 'exec -a "$0" sleep infinity' "$bundle/check-hang" \
    >"$out/$1.log" 2>&1
}

# run_check NAME DEADLINE NEEDS FUNCTION [ARG...]: runs FUNCTION in a background subshell of its
# own process group (job control on for that fork only) and reports it: PASS when it returns 0,
# else FAIL, with the last line it printed; stopped and FAIL at the earlier of DEADLINE seconds
# and the end of the budget. NEEDS: gpu (SKIP on the CPU), nvml (SKIP on the CPU unless
# LOCKSTEP_NVML_LIBRARY is set) or -. Its stderr, when any, goes to $OUT/NAME.stderr.
run_check() {
  local name=$1 limit=$2 needs=$3 left rc timed_out=''
  shift 3
  if ! on_gpu && { [ "$needs" = gpu ] || { [ "$needs" = nvml ] && [ -z "${LOCKSTEP_NVML_LIBRARY:-}" ]; }; }; then
    report SKIP "$name" "needs a GPU"
    return
  fi
  left=$((budget - SECONDS))
  if ((left < 3)); then
    report FAIL "$name" "not started: check_all's $budget s were spent"
    return
  fi
  ((limit > left)) && limit=$left
  current=$name check_started=$SECONDS
  set -m
  (
    trap - INT TERM HUP EXIT
    if [ "$name" = "${CHECK_HANG:-}" ]; then hang "$name"; else "$@"; fi
  ) </dev/null >"$work/message" 2>"$work/stderr" &
  running_pid=$!
  set +m
  while kill -0 "$running_pid" 2>/dev/null; do
    if ((SECONDS - check_started >= limit)); then
      timed_out=1
      stop_group "$running_pid"
      break
    fi
    pause 0.2
  done
  wait "$running_pid"
  rc=$?
  kill -KILL -- "-$running_pid" 2>/dev/null  # whatever the check left running
  running_pid=''
  [ -s "$work/stderr" ] && cp "$work/stderr" "$out/$name.stderr"
  echo "$rc" >"$work/rc/$name"
  local message
  message=$(grep . "$work/message" | tail -1)
  if [ -n "$timed_out" ]; then
    echo 124 >"$work/rc/$name"
    report FAIL "$name" "timed out after $limit s (logs in $out)"
  elif [ "$rc" = 0 ]; then
    report PASS "$name" "$message ($((SECONDS - check_started)) s)"
  else
    report FAIL "$name" "${message:-exit status $rc, no message} ($((SECONDS - check_started)) s)"
  fi
}

# on_signal NAME NUMBER: stops the running check, reports it, prints the summary and exits.
on_signal() {
  trap '' INT TERM HUP
  interrupted=$1
  if [ -n "$running_pid" ]; then
    stop_group "$running_pid"
    running_pid=''
    report FAIL "$current" "interrupted by SIG$1 after $((SECONDS - check_started)) s (logs in $out)"
  fi
  summary
  exit $((128 + $2))
}
cleanup() {
  [ -n "$running_pid" ] && stop_group "$running_pid"
  rm -rf "$work"
}
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP
trap cleanup EXIT

# --- Runs and their figures ---------------------------------------------------------------------

# train NAME CONFIG KEY=VALUE...: one worker (or what the caller's `launch` starts); its log and
# result JSON under $OUT/NAME*, its run directory in $work/NAME.
train() {
  local name=$1 config=$2
  shift 2
  "${lockstep_env[@]}" ${launch[@]+"${launch[@]}"} "$bin" train "$root/configs/$config" "data.sources=$names" \
    "device=$device" "monitor.dir=$work/$name" "checkpoint.dir=$work/$name/ckpt" monitor.progress=lines "$@" \
    --result-json "$out/$name.json" >"$out/$name.log" 2>&1
}
# worlds NAME NP BACKEND KEY=VALUE...: NP workers of the pet-name model through `lockstep run`.
worlds() {
  local launch=("$bin" run -np "$2" --backend "$3" --)
  train "$1" petnames.yaml generate.samples=0 "${@:4}"
}
# shared NAME NP CONFIG KEY=VALUE...: NP workers sharing the device over staged Gloo.
shared() {
  local launch=("$bin" run -np "$2" --backend gloo --)
  train "$1" "$3" "${@:4}"
}
# figures NAME: "first-loss last-loss samples/s overflow-steps loss-scale max-gpu-util max-gpu-mem gpu-mem-total"
figures() {
  "$python" - "$work/$1" "$out/$1.json" <<'EOF'
import json, sys
run, result = sys.argv[1], json.load(open(sys.argv[2]))
losses = [json.loads(l)['loss'] for l in open(run + '/metrics.jsonl') if '"kind":"train"' in l]
system = [json.loads(l) for l in open(run + '/system/rank0.jsonl')]
top = lambda key: max([s.get(key, -1) for s in system] or [-1])
print(f"{losses[0]:.4f} {losses[-1]:.4f} {result['samples_per_second']:.0f} {result['overflow_steps']}",
      result['loss_scale'] or 0, top('gpu_util'), top('gpu_mem_bytes'), top('gpu_mem_total_bytes'))
EOF
}
falls() { "$python" -c "import sys; sys.exit(0 if $2 < 0.95 * $1 else 1)"; }  # the last logged loss below the first
# losses NAME: the train losses of NAME's run, one per line.
losses() {
  "$python" -c "import json, sys
for l in open(sys.argv[1]):
    if '\"kind\":\"train\"' in l: print(json.loads(l)['loss'])" "$work/$1/metrics.jsonl"
}
# maxdiff A B N: the largest relative difference between runs A's and B's losses, step by step (N each).
maxdiff() {
  "$python" -c "import sys
a, b = ([float(x) for x in open(f)] for f in sys.argv[1:3])
assert len(a) == len(b) == int(sys.argv[3]), (len(a), len(b))
print(f'{max(abs(x - y) / abs(x) for x, y in zip(a, b)):.2e}')" <(losses "$1") <(losses "$2") "$3"
}
# ends NAME: "first-loss last-loss" of NAME's train losses (every rank that logs, in file order).
ends() { losses "$1" | sed -n '1p;$p' | xargs printf '%.4f %.4f\n'; }
# needs_pass NAME: true when check NAME ran in this script and passed.
needs_pass() {
  [ "$(cat "$work/rc/$1" 2>/dev/null)" = 0 ] || { echo "needs check $1's run, which did not pass here"; return 1; }
}

# shellcheck source=checks.sh
source "$(dirname "$0")/checks.sh"  # the check_* functions of the table below

# --- The checks, in order -----------------------------------------------------------------------

# NAME, deadline in seconds on a GPU and on the CPU, NEEDS (gpu, nvml or -), function and arguments.
check_table() {
  cat <<EOF
start              90  60  -     check_start
names-$device      90  60  -     check_names
step-breakdown     60  45  -     check_breakdown
nvml               20  20  nvml  check_nvml
convnet-$device    90  45  -     check_convnet
fp16-scaler        60  45  gpu   check_fp16
bf16               60  45  -     check_bf16
checkpoint-to-cpu  60  45  -     check_checkpoint
nccl-world-1       60  45  gpu   check_nccl_world
nccl-allreduce     60  45  gpu   check_nccl_allreduce
ddp-staged-gloo    90  60  -     check_ddp_gloo
zero2-equals-ddp   60  45  -     check_zero zero2
zero3-equals-ddp   60  45  -     check_zero zero3
pipeline-$device   60  45  -     check_pipeline
async-ps-$device   90  60  -     check_async_ps
fp16-scaler-2      60  45  gpu   check_fp16_two
EOF
}

# known NAME...: true when every NAME is in the table, else a line on stderr.
known() {
  local all name
  all=" $(check_table | awk '{print $1}' | paste -sd' ') "
  for name in "$@"; do
    [[ $all == *" $name "* ]] || { echo "check_all: no check named '$name'; the checks:$all" >&2; return 1; }
  done
}

main() {
  # shellcheck disable=SC2086  # names separated by spaces
  known ${CHECK_ONLY:-} ${CHECK_HANG:-} || exit 2
  if ! bundle_env 2>"$work/why"; then
    selected=1
    report FAIL start "$(cat "$work/why")"
    summary
    exit 1
  fi
  local rows=() row name gpu cpu needs rest
  mapfile -t rows < <(check_table)
  for row in "${rows[@]}"; do
    read -r name _ <<<"$row"
    [ -z "${CHECK_ONLY:-}" ] || [[ " $CHECK_ONLY " == *" $name "* ]] && selected=$((selected + 1))
  done
  say "check_all: device $device, bundle $bundle, $selected checks in $budget s at most from $(date -u +%H:%M:%SZ)${CHECK_HANG:+, $CHECK_HANG made to hang}"
  for row in "${rows[@]}"; do
    read -r name gpu cpu needs rest <<<"$row"
    [ -z "${CHECK_ONLY:-}" ] || [[ " $CHECK_ONLY " == *" $name "* ]] || continue
    # shellcheck disable=SC2086  # rest is a function name and its arguments
    run_check "$name" "$(scaled "$(steps "$gpu" "$cpu")")" "$needs" $rest
  done
  summary
  [ "$failed" = 0 ]
}
main
