#!/usr/bin/env bash
# How fast the dashboard answers for a long run: trains the tiny pet-name LSTM
# on 2 workers for STEPS steps, logging every step (so metrics.jsonl and each
# phases/rank<R>.jsonl get STEPS lines), serves the run with `lockstep
# dashboard`, and times GET /api/runs/long with curl: three requests, then one
# more after a line is appended to metrics.jsonl (the incremental read).
#   bench/dashboard_latency.sh [STEPS]     (default 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$(realpath "${LOCKSTEP_BUILD_DIR:-build}/lockstep")"
STEPS="${1:-10000}"
WORK="$(mktemp -d)"
DASH=""
trap '[ -n "$DASH" ] && kill "$DASH" 2>/dev/null; rm -rf "$WORK"' EXIT
cat > "$WORK/long.yaml" <<YAML
model:
  hidden: 16
  layers: 2
  window: 8
data:
  sources: [faker-pets]
  validation_fraction: 0.1
trainer:
  batch_size: 16
  seed: 7
  max_steps: $STEPS
  log_every: 1
optimizer:
  type: adam
  lr: 0.01
generate:
  samples: 0
YAML
echo "training $STEPS steps on 2 workers (the run to serve)..."
(cd "$WORK" && "$BIN" run -np 2 --no-prefix -- "$BIN" train long.yaml > train.log 2>&1)
wc -l "$WORK/runs/long/metrics.jsonl" "$WORK"/runs/long/phases/rank*.jsonl
"$BIN" dashboard --logdir "$WORK/runs" --port 0 > "$WORK/dashboard.log" 2>&1 &
DASH=$!
for _ in $(seq 100); do grep -q "http://" "$WORK/dashboard.log" && break; sleep 0.1; done
URL="$(grep -o 'http://[^ ]*' "$WORK/dashboard.log" | head -n1)api/runs/long"
fetch() { curl -s -o /dev/null -w "$1: %{time_total} s, %{size_download} bytes\n" "$URL"; }
fetch "first request (parses every file)"
fetch "second"
fetch "third"
tail -n1 "$WORK/runs/long/metrics.jsonl" >> "$WORK/runs/long/metrics.jsonl"
fetch "after appending a line"
