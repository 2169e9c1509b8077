#!/usr/bin/env bash
# TensorBoard itself reads what a 2-worker `lockstep train` run wrote: every scalar of
# metrics.jsonl comes back from the event file under its tag and step, and every system sample
# of each worker from that worker's event file (read_tensorboard.py); an elastic run's new
# generation comes back under elastic/.
#
#   tensorboard_reader.sh LOCKSTEP_BIN PYTHON SOURCE_DIR
#
# PYTHON is the environment's interpreter that holds PyPI's tensorboard (scripts/setup.sh).
set -euo pipefail
BIN="$1" PY="$2" SRC="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$BIN" run -np 2 --threads 1 -- "$BIN" train "$SRC/configs/fashion_convnet.yaml" trainer.max_steps=12 \
  trainer.log_every=4 trainer.validate=true checkpoint.dir=off checkpoint.resume=none \
  monitor.dir="$work/run" monitor.progress=off monitor.system_interval=0.2 monitor.trace_steps=0
ls "$work/run"
"$PY" "$SRC/tests/monitor/read_tensorboard.py" "$work/run"
[ -d "$work/run/system/rank1" ] || { echo "no TensorBoard run system/rank1"; exit 1; }
# An elastic run that loses rank 2 at the end of step 5: its new generation under elastic/.
LOCKSTEP_FAULT_KILL_AT_STEP=5 LOCKSTEP_FAULT_KILL_RANK=2 \
  "$BIN" run -np 3 --min-np 2 --threads 1 -- "$BIN" train "$SRC/configs/fashion_convnet.yaml" trainer.max_steps=8 \
  trainer.log_every=4 trainer.validate=false checkpoint.dir=off checkpoint.resume=none \
  monitor.dir="$work/elastic" monitor.progress=off monitor.system_interval=0 monitor.trace_steps=0
grep -q '"kind":"generation","step":5,' "$work/elastic/metrics.jsonl" || { echo "no generation in metrics.jsonl"; exit 1; }
"$PY" "$SRC/tests/monitor/read_tensorboard.py" "$work/elastic" | tee "$work/elastic.txt"
grep -q "elastic/world_size" "$work/elastic.txt" || { echo "TensorBoard read no elastic/world_size"; exit 1; }
