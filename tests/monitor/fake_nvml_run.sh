#!/usr/bin/env bash
# A 2-worker `lockstep train` run under the suite's scripted NVML (tests/helpers/fake_nvml.cpp):
# each worker's GPU fields reach system/rank<R>.jsonl, its TensorBoard run and its Chrome trace,
# for CUDA_VISIBLE_DEVICES given as indices (the library found on the loader's path, as the
# driver's is) and as UUIDs (found through LOCKSTEP_NVML_LIBRARY); a library that fails to
# initialise gives a run without GPU fields and without an error.
#
#   fake_nvml_run.sh LOCKSTEP_BIN PYTHON SOURCE_DIR FAKE_NVML_DIR
set -euo pipefail
BIN="$1" PY="$2" SRC="$3" FAKE="$4"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

train() {  # train RUN_DIR: a short run that samples the system often and traces every step
  "$BIN" run -np 2 --threads 1 -- "$BIN" train "$SRC/configs/fashion_convnet.yaml" trainer.max_steps=8 \
    trainer.log_every=4 checkpoint.dir=off checkpoint.resume=none monitor.dir="$1" monitor.progress=off \
    monitor.system_interval=0.1 monitor.trace_steps=-1
}

echo "== indices, library on the loader's path"
LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CUDA_VISIBLE_DEVICES=1,0 train "$work/indices"
python3 "$SRC/tests/monitor/check_fake_nvml.py" "$work/indices" 1,0
"$PY" "$SRC/tests/monitor/read_tensorboard.py" "$work/indices"

echo "== UUIDs, library named by LOCKSTEP_NVML_LIBRARY"
LOCKSTEP_NVML_LIBRARY="$FAKE/libnvidia-ml.so.1" CUDA_VISIBLE_DEVICES=GPU-fake-0,GPU-fake-1 train "$work/uuids"
python3 "$SRC/tests/monitor/check_fake_nvml.py" "$work/uuids" 0,1
"$PY" "$SRC/tests/monitor/read_tensorboard.py" "$work/uuids"

echo "== a library whose nvmlInit fails"
LOCKSTEP_NVML_LIBRARY="$FAKE/libnvidia-ml.so.1" FAKE_NVML_FAIL=nvmlInit_v2 CUDA_VISIBLE_DEVICES=0,1 \
  train "$work/failing" 2>&1 | tee "$work/failing.log"
python3 "$SRC/tests/monitor/check_fake_nvml.py" "$work/failing" --none
if grep -qi "nvml" "$work/failing.log"; then echo "a failing NVML should not be an error in the log"; exit 1; fi
echo "fake NVML run: all checks passed"
