#!/usr/bin/env bash
# The GPU checks of docs/gpus.md, one PASS/FAIL line each with its figures, on a machine with one
# NVIDIA GPU and PyTorch 2.11.0+cu130 (no network, no build: it runs the lockstep that
# bench/gpu/bundle.sh packed into .gpu-bundle/ against that machine's LibTorch). Under 8 minutes.
#
#   here:      scripts/build.sh && bench/gpu/bundle.sh
#   device:    run(command="bench/gpu/check_all.sh", carry=[".gpu-bundle"], timeout_s=540)
#   dry run:   CHECK_DEVICE=cpu PYTHON=/opt/lockstep/venv/bin/python3 bench/gpu/check_all.sh
#              (the same steps on the CPU: the script's own test; the GPU checks then fail)
#
# Logs and run directories go under $OUT (the device tool brings it back) or /tmp/lockstep-check.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$root/.gpu-bundle
out=${OUT:-/tmp/lockstep-check}
work=$(mktemp -d)
device=${CHECK_DEVICE:-cuda}
python=${PYTHON:-python3}
mkdir -p "$out"
passed=0 failed=0 unbuilt=0
pass() { echo "PASS $1: $2"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
unbuilt() { echo "NOT-BUILT $1: $2"; unbuilt=$((unbuilt + 1)); }

[ -x "$bundle/bin/lockstep" ] || { echo "FAIL bundle: $bundle/bin/lockstep is missing (run bench/gpu/bundle.sh here and carry .gpu-bundle)"; exit 1; }
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))') || { echo "FAIL torch: $python cannot import torch"; exit 1; }
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$bundle/lib:$torch_dir/lib:$(ls -d "$site"/nvidia/*/lib 2>/dev/null | paste -sd:)"
bin=$bundle/bin/lockstep
echo "check_all: $(date -u +%Y-%m-%dT%H:%MZ) device $device; $("$python" -c 'import torch
print("torch", torch.__version__, "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")')"
version=$("$bin" version 2>&1) || { echo "FAIL start: lockstep does not start here: $version"; exit 1; }
pass start "$version, LibTorch from $torch_dir"

names="[$bundle/data/names.txt]"
# train NAME CONFIG KEY=VALUE...: one worker (or what `launch`, when a caller sets it, starts);
# its log, run directory and result JSON under $out/NAME*.
train() {
  local name=$1 config=$2
  shift 2
  ${launch[@]+"${launch[@]}"} "$bin" train "$root/configs/$config" "data.sources=$names" "device=$device" "monitor.dir=$work/$name" \
    "checkpoint.dir=$work/$name/ckpt" monitor.progress=lines "$@" --result-json "$out/$name.json" >"$out/$name.log" 2>&1
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

# 1. The pet-name model on the device: loss falls; samples/s.
if train names petnames.yaml trainer.max_steps=300 trainer.log_every=25 trainer.clip_grad_norm=1 generate.samples=5 &&
  read -r first last sps _ _ util mem total < <(figures names) && falls "$first" "$last"; then
  pass names-$device "charlstm 4x128, batch 256, clipped at norm 1: loss $first -> $last in 300 steps, $sps samples/s"
else fail names-$device "see $out/names.log"; fi

# 1b. The step breakdown on the device's timeline (CUDA events): its phases tile the step, the
# step matches the measured throughput, and backward (its kernels, not their launch) outlasts forward.
if breakdown=$("$python" - "$out/names.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
p, step = r['phases_seconds'], r['step_seconds']
wall = r['global_batch'] / r['samples_per_second']
ok = abs(sum(p.values()) - step) <= 0.01 * step and abs(step - wall) <= 0.15 * wall and p['backward'] > p['forward']
print(f"step {1e3 * step:.2f} ms (throughput says {1e3 * wall:.2f}), in ms: " +
      ", ".join(f"{k} {1e3 * v:.2f}" for k, v in p.items()))
sys.exit(0 if ok else 1)
EOF
); then pass step-breakdown "$breakdown"
else fail step-breakdown "${breakdown:-no result} ($out/names.json)"; fi

# 2. NVML while training: the run directory's GPU fields filled.
if [ "${util:--1}" != "-1" ] && "$python" -c "import sys; sys.exit(0 if $util > 0 and $mem > 0 and $total > 0 else 1)"; then
  pass nvml "max utilisation $util %, max memory $((mem / 1048576)) MiB of $((total / 1048576)) MiB (system/rank0.jsonl)"
else fail nvml "no GPU fields with values in system/rank0.jsonl (util ${util:-?}, memory ${mem:-?})"; fi

# 3. The convnet on Fashion-MNIST (its test set as a small training set).
if train convnet fashion_convnet.yaml "data.root=$bundle/data/fashion-mnist" trainer.max_steps=300 trainer.log_every=25 &&
  read -r first last sps _ < <(figures convnet) && falls "$first" "$last"; then
  pass convnet-$device "convnet, batch 128: loss $first -> $last in 300 steps, $sps samples/s"
else fail convnet-$device "see $out/convnet.log"; fi

# 4. fp16 with the loss scaler: a scripted inf skips exactly one step.
if train fp16 petnames.yaml precision=fp16 trainer.max_steps=200 trainer.log_every=25 testing.inf_gradient_step=30 &&
  read -r first last sps overflow scale _ < <(figures fp16) && falls "$first" "$last" && [ "$overflow" = 1 ] &&
  [ "$scale" = 32768.0 ]; then
  pass fp16-scaler "loss $first -> $last, 1 step skipped (the scripted inf), scale 65536 -> $scale, $sps samples/s"
else fail fp16-scaler "overflow steps ${overflow:-?} (want 1), scale ${scale:-?} (want 32768); see $out/fp16.log"; fi

# 5. bf16 autocast on the device.
if train bf16 petnames.yaml precision=bf16 trainer.max_steps=200 trainer.log_every=25 &&
  read -r first last sps _ < <(figures bf16) && falls "$first" "$last"; then
  pass bf16 "loss $first -> $last, $sps samples/s"
else fail bf16 "see $out/bf16.log"; fi

# 6. The device run's checkpoint on the CPU: names sampled from it, and training resumed from it.
ckpt=$(ls "$work/names/ckpt"/step-*.ckpt 2>/dev/null | tail -1)
if [ -n "$ckpt" ] && CUDA_VISIBLE_DEVICES= "$bin" generate --checkpoint "$ckpt" -n 5 >"$out/generate.log" 2>&1 &&
  [ "$(grep -c . "$out/generate.log")" -ge 5 ] &&
  CUDA_VISIBLE_DEVICES= "$bin" train "$root/configs/petnames.yaml" "data.sources=$names" device=cpu \
    "monitor.dir=$work/resumed" "checkpoint.dir=$work/names/ckpt" trainer.max_steps=305 generate.samples=0 \
    --result-json "$out/resumed.json" >"$out/resumed.log" 2>&1 &&
  "$python" -c "import json, sys; sys.exit(json.load(open('$out/resumed.json'))['resumed_from_step'] != 300)"; then
  pass checkpoint-to-cpu "$(head -3 "$out/generate.log" | paste -sd' ') ...; resumed at step 300 on the CPU"
else fail checkpoint-to-cpu "see $out/generate.log and $out/resumed.log"; fi

# losses NAME: the train losses of NAME's run, one per line.
losses() { "$python" -c "import json, sys
for l in open(sys.argv[1]):
    if '\"kind\":\"train\"' in l: print(json.loads(l)['loss'])" "$work/$1/metrics.jsonl"; }
# maxdiff A B: the largest relative difference between runs A's and B's losses, step by step (20 each).
maxdiff() { "$python" -c "import sys
a, b = ([float(x) for x in open(f)] for f in sys.argv[1:])
assert len(a) == len(b) == 20, (len(a), len(b))
print(f'{max(abs(x - y) / abs(x) for x, y in zip(a, b)):.2e}')" <(losses "$1") <(losses "$2"); }
# worlds NAME NP BACKEND KEY=VALUE...: NP workers of the pet-name model through `lockstep run`.
worlds() {
  local launch=("$bin" run -np "$2" --backend "$3" --)
  train "$1" petnames.yaml generate.samples=0 "${@:4}"
}

# 7. NCCL at a world of one: the whole DDP path over the nccl backend (CPU tensors staged to the GPU).
if worlds nccl1 1 nccl trainer.max_steps=100 trainer.log_every=10 &&
  read -r first last sps _ < <(figures nccl1) && falls "$first" "$last" && grep -q "backend nccl" "$out/nccl1.log"; then
  pass nccl-world-1 "lockstep run -np 1 --backend nccl: loss $first -> $last in 100 steps, $sps samples/s"
else fail nccl-world-1 "see $out/nccl1.log"; fi

# 7b. NCCL collectives on CUDA buffers at a world of one: lockstep bench allreduce, its values read
#     after a wait on the stream (the gradient engine's wait), float32 and bfloat16.
ok=1
for dtype in float32 bfloat16; do
  "$bin" run -np 1 --backend nccl --no-prefix -- "$bin" bench allreduce --dtype $dtype --bytes 4K,1M,64M --json \
    >"$out/allreduce-$dtype.json" 2>"$out/allreduce-$dtype.log" &&
    "$python" -c "import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
sys.exit(0 if d['device'].startswith('cuda') and all(r['wrong'] == 0 for r in d['results']) else 1)" \
      "$out/allreduce-$dtype.json" || ok=0
done
if [ "$ok" = 1 ]; then
  pass nccl-allreduce "bench allreduce on cuda:0 over nccl, 4K/1M/64M, float32 and bfloat16: every element right"
else fail nccl-allreduce "see $out/allreduce-*.json and .log"; fi

# 8. Two workers sharing the GPU over Gloo (CUDA tensors staged through host memory) equal one
#    process on the global batch: the same losses step by step, TF32 off, lr not rescaled.
same=(trainer.max_steps=20 trainer.log_every=1 lr_scaling.rule=none)
if NVIDIA_TF32_OVERRIDE=0 worlds one 1 gloo trainer.batch_size=128 "${same[@]}" &&
  NVIDIA_TF32_OVERRIDE=0 worlds two 2 gloo trainer.batch_size=64 "${same[@]}" &&
  diff=$(maxdiff one two) &&
  "$python" -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)"; then
  pass ddp-staged-gloo "2 workers x batch 64 over staged Gloo vs 1 x 128: 20 losses, max relative difference $diff"
else fail ddp-staged-gloo "max relative difference ${diff:-?} (want <= 1e-5); see $out/one.log and $out/two.log"; fi

# 9. ZeRO-2 on the device equals DDP: the same two workers sharing the GPU, strategy zero2.
if NVIDIA_TF32_OVERRIDE=0 worlds zero2 2 gloo trainer.batch_size=64 strategy.type=zero2 "${same[@]}" &&
  diff=$(maxdiff two zero2) &&
  "$python" -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)"; then
  pass zero2-equals-ddp "2 workers x batch 64 over staged Gloo, zero2 vs ddp: 20 losses, max relative difference $diff"
else fail zero2-equals-ddp "max relative difference ${diff:-?} (want <= 1e-5); see $out/zero2.log"; fi

# 9b. ZeRO-3 on the device (the whole model one unit, its memory freed between uses) equals DDP.
if NVIDIA_TF32_OVERRIDE=0 worlds zero3 2 gloo trainer.batch_size=64 strategy.type=zero3 "${same[@]}" &&
  diff=$(maxdiff two zero3) &&
  "$python" -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)"; then
  pass zero3-equals-ddp "2 workers x batch 64 over staged Gloo, zero3 vs ddp: 20 losses, max relative difference $diff"
else fail zero3-equals-ddp "max relative difference ${diff:-?} (want <= 1e-5); see $out/zero3.log"; fi
# ends NAME: "first-loss last-loss" of NAME's train losses (every rank that logs, in file order).
ends() { losses "$1" | sed -n '1p;$p' | xargs printf '%.4f %.4f\n'; }
# shared NAME NP CONFIG KEY=VALUE...: NP workers sharing the device over staged Gloo.
shared() {
  local launch=("$bin" run -np "$2" --backend gloo --)
  train "$1" "$3" "${@:4}"
}

# 10. Pipeline stages on the device: the convnet in 2 stages (each moves its own layers to the
#     GPU), 2 workers sharing it over staged Gloo: loss falls.
if shared pipe 2 fashion_convnet.yaml "data.root=$bundle/data/fashion-mnist" parallel.pipeline=2 \
  trainer.max_steps=60 trainer.log_every=10 && read -r first last < <(ends pipe) && falls "$first" "$last" &&
  grep -q "pipeline of 2 stages" "$out/pipe.log"; then
  pass pipeline-$device "convnet in 2 stages x 8 micro-batches (1f1b), 2 workers on one device: loss $first -> $last in 60 steps"
else fail pipeline-$device "see $out/pipe.log"; fi

# 11. The parameter server with workers on the device: 1 server (host memory) and 2 workers
#     sharing the GPU over Gloo; each push copies the gradients to the host.
if shared ps 3 petnames.yaml strategy.type=async_ps ps.servers=1 trainer.max_steps=300 trainer.log_every=20 \
  generate.samples=0 && read -r first last < <(ends ps) && falls "$first" "$last"; then
  pass async-ps-$device "1 server, 2 workers on one device: loss $first -> $last"
else fail async-ps-$device "see $out/ps.log"; fi

# 12. fp16 over two workers sharing the device: an inf scripted into rank 1's gradient at step
#     30 skips that step on both (the found-inf flag is agreed over the ranks).
if worlds fp16x2 2 gloo precision=fp16 trainer.max_steps=100 trainer.log_every=10 testing.inf_gradient_step=30 \
  testing.inf_gradient_rank=1 && read -r first last _ overflow scale _ < <(figures fp16x2) &&
  falls "$first" "$last" && [ "$overflow" = 1 ] && [ "$scale" = 32768.0 ]; then
  pass fp16-scaler-2 "2 workers, inf on rank 1 at step 30: 1 step skipped on rank 0 too, scale 65536 -> $scale, loss $first -> $last"
else fail fp16-scaler-2 "overflow steps on rank 0 ${overflow:-?} (want 1), scale ${scale:-?}; see $out/fp16x2.log"; fi

# 13. Against PyTorch on this device: samples/s of one worker each, eager in interleaved rounds,
#    torch.compile once while time is left (bench/gpu/against_pytorch.sh). PASS: lockstep at
#    least as fast as each on every workload.
quick=()
[ "$device" = cpu ] && quick=(ROUNDS=1 COMPILED=0 "STEPS=charlstm=4 convnet=6 resnet18=2")
env "${quick[@]}" DEADLINE=$(($(date +%s) + ${CHECK_BUDGET:-450} - SECONDS)) "$root/bench/gpu/against_pytorch.sh" \
  "$bin" "$python" "$bundle/data" "$out" "$device" >"$out/against-pytorch.txt" 2>&1
rows=$(grep -c '^RATIO .* ratio=' "$out/against-pytorch.txt")
summary=$(sed -n 's/^RATIO //p' "$out/against-pytorch.txt" | paste -sd';')
if [ "$rows" = 3 ] && ! grep -o 'ratio[a-z_]*=[0-9.]*' "$out/against-pytorch.txt" | cut -d= -f2 |
  grep -qv '^[1-9]'; then
  pass against-pytorch "samples/s, one worker each (median[min-max]): $summary"
else fail against-pytorch "lockstep below PyTorch somewhere, or a run failed: ${summary:-no figures}; see $out/ap-*.log"; fi
echo "check_all: $passed passed, $failed failed, $unbuilt not built"
rm -rf "$work"
[ "$failed" = 0 ]
