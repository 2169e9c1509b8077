#!/usr/bin/env bash
# lockstep against PyTorch on one device (docs/gpus.md, "The device check"): one worker each,
# the same model, batch, optimizer and step count, PyTorch eager and under torch.compile
# (bench/pytorch/ddp_bench.py --nproc 1), on charlstm (the pet names as the data on lockstep's
# side, synthetic windows of the same shape on PyTorch's), the convnet (Fashion-MNIST on both,
# no flips) and ResNet-18 at CIFAR shapes (synthetic 32x32 images on both: CIFAR-10's binary
# format written here for lockstep). Rounds are interleaved, the order reversed every round;
# torch.compile runs once per workload after them (its compilation is not timed).
#
#   bench/gpu/against_pytorch.sh LOCKSTEP_BIN PYTHON DATA_DIR OUT_DIR DEVICE
#
# DATA_DIR holds names.txt and fashion-mnist/ (bench/gpu/bundle.sh packs both). Environment:
# ROUNDS (default 3), COMPILED (default 1; 0 leaves torch.compile out), STEPS ("charlstm=150
# convnet=300 resnet18=80"), DEADLINE (Unix seconds: a round after the first starts only while
# the longest round so far fits before it, with 10 s to spare; a torch.compile run starts only
# with a minute left before it, and is stopped there), LOCKSTEP_LD_LIBRARY_PATH (the
# LD_LIBRARY_PATH of lockstep's runs only, bundle_env.sh's lockstep_libs; Python keeps the
# caller's). Prints one line per workload:
#   RATIO workload lockstep=MEDIAN[MIN-MAX] eager=MEDIAN[MIN-MAX] ratio=R [compiled=X ratio_compiled=R]
# (samples/s, global, after the first step; ratios of medians), and its logs go to OUT_DIR.
set -uo pipefail
bin=$1 python=$2 data=$3 out=$4 device=$5
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${ROUNDS:-3}
compiled=${COMPILED:-1}
declare -A steps=([charlstm]=150 [convnet]=300 [resnet18]=80)
for kv in ${STEPS:-}; do steps[${kv%%=*}]=${kv#*=}; done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
threads=$(nproc)
deadline=${DEADLINE:-$(($(date +%s) + 86400))}
lockstep_env=(env)
[ -n "${LOCKSTEP_LD_LIBRARY_PATH:-}" ] && lockstep_env=(env "LD_LIBRARY_PATH=$LOCKSTEP_LD_LIBRARY_PATH")
mkdir -p "$out"

# CIFAR-10's binary format (1 label byte, 3072 pixel bytes per record) with random pixels.
"$python" - "$work/cifar" <<'EOF'
import os, random, sys
os.makedirs(sys.argv[1], exist_ok=True)
rng = random.Random(0)
for name, records in (("data_batch_1.bin", 5000), ("test_batch.bin", 200)):
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        for _ in range(records):
            f.write(bytes([rng.randrange(10)]) + rng.randbytes(3072))
EOF

lockstep() {  # workload: one run; its samples/s on stdout
  local w=$1 log="$out/ap-$1-lockstep-$2.log" config extra=()
  case $w in
    charlstm) config=charlstm-bench.yaml extra=("data.sources=[$data/names.txt]") ;;
    convnet) config=fashion_convnet.yaml extra=("data.root=$data/fashion-mnist" data.random_flip=false) ;;
    resnet18) config=cifar_resnet18.yaml extra=("data.root=$work/cifar" data.random_flip=false data.crop_padding=0) ;;
  esac
  "${lockstep_env[@]}" "$bin" train "$root/configs/$config" "device=$device" "trainer.max_steps=${steps[$w]}" trainer.validate=false \
    checkpoint.dir=off checkpoint.resume=none generate.samples=0 "monitor.dir=$work/run-$w" monitor.progress=off \
    "${extra[@]}" --result-json "$work/$w.json" >"$log" 2>&1 &&
    "$python" -c "import json; print(round(json.load(open('$work/$w.json'))['samples_per_second']))"
}
pytorch() {  # workload tag [--compile]: one run (stopped after $limit seconds when set); its samples/s on stdout
  local w=$1 log="$out/ap-$1-$2.log"
  shift 2
  timeout "${limit:-0}" "$python" "$root/bench/pytorch/ddp_bench.py" "$w" --nproc 1 --threads "$threads" --device "$device" \
    --steps "${steps[$w]}" --no-flip --data "$data/fashion-mnist" "$@" >"$log" 2>&1 &&
    grep -o 'done: .*' "$log" | sed -n 's/.* \([0-9][0-9]*\) samples\/s.*/\1/p'
}

declare -A rates
longest=0
for ((r = 1; r <= rounds; r++)); do
  if ((r > 1 && $(date +%s) + longest + 10 > deadline)); then
    echo "ROUNDS $((r - 1)) of $rounds: the next would end past the deadline" >&2
    break
  fi
  started=$(date +%s)
  for w in charlstm convnet resnet18; do
    if ((r % 2)); then
      rates[$w/lockstep]+=" $(lockstep "$w" "$r")" rates[$w/eager]+=" $(pytorch "$w" "eager-$r")"
    else
      rates[$w/eager]+=" $(pytorch "$w" "eager-$r")" rates[$w/lockstep]+=" $(lockstep "$w" "$r")"
    fi
  done
  (($(date +%s) - started > longest)) && longest=$(($(date +%s) - started))
done
if [ "$compiled" = 1 ]; then
  for w in charlstm convnet resnet18; do
    left=$((deadline - $(date +%s)))
    ((left > 60)) && rates[$w/compiled]=" $(limit=$left pytorch "$w" compiled --compile)"
  done
fi
for w in charlstm convnet resnet18; do
  "$python" - "$w" "${rates[$w/lockstep]}" "${rates[$w/eager]}" "${rates[$w/compiled]:-}" <<'EOF'
import statistics, sys
w, *sides = sys.argv[1:]
lockstep, eager, compiled = ([float(x) for x in s.split()] for s in sides)
def show(xs):
    return f"{statistics.median(xs):.0f}[{min(xs):.0f}-{max(xs):.0f}]" if xs else "none"
line = f"RATIO {w} lockstep={show(lockstep)} eager={show(eager)}"
if lockstep and eager:
    line += f" ratio={statistics.median(lockstep) / statistics.median(eager):.2f}"
if lockstep and compiled:
    line += f" compiled={show(compiled)} ratio_compiled={statistics.median(lockstep) / statistics.median(compiled):.2f}"
print(line)
EOF
done
