# shellcheck shell=bash disable=SC2154  # check_all.sh sets the variables
# The checks of check_all.sh, sourced by it: each check_* function runs in a subshell of its own
# process group (check_all.sh's run_check), returns 0 for PASS, and prints its figures, or on a
# failure what went wrong, as its last line. They use check_all.sh's helpers (train, figures, ...)
# and variables (bin, lockstep_env, python, device, out, work); `steps GPU CPU` picks the number
# of steps for the device.

# start: lockstep starts against this machine's LibTorch, the one it was built against.
check_start() {
  local version built torch gpu
  version=$("${lockstep_env[@]}" "$bin" version 2>&1) || { echo "lockstep does not start here: $version"; return 1; }
  built=$(cat "$bundle/torch-version.txt")
  read -r torch gpu < <("$python" -c 'import torch
print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")') ||
    { echo "$python could not ask torch for its GPU"; return 1; }
  [ "${torch%%+*}" = "$built" ] || { echo "PyTorch $torch here, lockstep built against $built"; return 1; }
  if on_gpu && [ "$gpu" = "no GPU" ]; then echo "$version, but PyTorch $torch sees no GPU"; return 1; fi
  echo "$version, LibTorch $torch from $torch_dir, $gpu"
}

# The steps of the names run, which checkpoint-to-cpu resumes. On the CPU the runs of the pet-name
# model log from their second step on, where a few steps make the loss fall.
names_steps=$(steps 300 20)

# names-DEVICE: the pet-name model on the device, gradients clipped at norm 1: loss falls; samples/s.
# On the CPU with LOCKSTEP_NVML_LIBRARY set, the scripted NVML's GPU 0 is this run's GPU. On the
# CPU it samples no names at its end: sampling is a chain of tiny LSTM steps whose OpenMP barriers
# stall for seconds when other processes hold the cores (checkpoint-to-cpu samples on one thread).
check_names() {
  local n=$names_steps first last sps
  ! on_gpu && [ -n "${LOCKSTEP_NVML_LIBRARY:-}" ] && export CUDA_VISIBLE_DEVICES=0
  train names petnames.yaml "trainer.max_steps=$n" "trainer.log_every=$(steps 25 2)" trainer.clip_grad_norm=1 \
    "generate.samples=$(steps 5 0)" monitor.system_interval=0.25 || { echo "the run failed; see $out/names.log"; return 1; }
  read -r first last sps _ < <(figures names) && falls "$first" "$last" ||
    { echo "loss ${first:-?} -> ${last:-?}, not falling; see $out/names.log"; return 1; }
  echo "charlstm 4x128, batch 256, clipped at norm 1: loss $first -> $last in $n steps, $sps samples/s"
}

# step-breakdown: a run of its own without validation and checkpoints, so that its wall time is
# its steps. On the device's timeline (CUDA events) the phases tile the step, the step matches the
# measured throughput, and backward (its kernels, not their launch) outlasts forward.
check_breakdown() {
  train breakdown petnames.yaml "trainer.max_steps=$(steps 200 20)" "trainer.log_every=$(steps 50 10)" \
    trainer.validate=false checkpoint.dir=off checkpoint.resume=none generate.samples=0 ||
    { echo "the run failed; see $out/breakdown.log"; return 1; }
  "$python" - "$out/breakdown.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
p, step = r['phases_seconds'], r['step_seconds']
wall = r['global_batch'] / r['samples_per_second']
ok = abs(sum(p.values()) - step) <= 0.01 * step and abs(step - wall) <= 0.15 * wall and p['backward'] > p['forward']
print(f"step {1e3 * step:.2f} ms (throughput says {1e3 * wall:.2f}), in ms: " +
      ", ".join(f"{k} {1e3 * v:.2f}" for k, v in p.items()))
sys.exit(0 if ok else 1)
EOF
}

# nvml: the names run's system/rank0.jsonl has the GPU's fields: above zero on a GPU, the scripted
# GPU 0's values (30 %, 1 GiB of 80 GiB) under the fake NVML on the CPU.
check_nvml() {
  needs_pass "names-$device" || return 1
  local util mem total want='util > 0 and mem > 0 and total > 0'
  read -r _ _ _ _ _ util mem total < <(figures names)
  on_gpu || want='util == 30 and mem == 2**30 and total == 80 * 2**30'
  if "$python" -c "import sys; util, mem, total = $util, $mem, $total; sys.exit(0 if $want else 1)"; then
    echo "max utilisation $util %, max memory $((mem / 1048576)) MiB of $((total / 1048576)) MiB (system/rank0.jsonl)"
  else
    echo "system/rank0.jsonl: utilisation ${util:-?}, memory ${mem:-?} of ${total:-?} bytes; want $want"
    return 1
  fi
}

# convnet-DEVICE: the convnet on Fashion-MNIST (its test set as a small training set).
check_convnet() {
  local n first last sps
  n=$(steps 300 30)
  train convnet fashion_convnet.yaml "data.root=$bundle/data/fashion-mnist" "trainer.max_steps=$n" \
    "trainer.log_every=$(steps 25 10)" || { echo "the run failed; see $out/convnet.log"; return 1; }
  read -r first last sps _ < <(figures convnet) && falls "$first" "$last" ||
    { echo "loss ${first:-?} -> ${last:-?}, not falling; see $out/convnet.log"; return 1; }
  echo "convnet, batch 128: loss $first -> $last in $n steps, $sps samples/s"
}

# fp16-scaler: fp16 with the loss scaler; a scripted inf skips exactly one step. GPU only: the
# CPU's autocast has no float16 LSTM.
check_fp16() {
  local first last sps overflow scale
  train fp16 petnames.yaml precision=fp16 trainer.max_steps=200 trainer.log_every=25 testing.inf_gradient_step=30 &&
    read -r first last sps overflow scale _ < <(figures fp16) && falls "$first" "$last" && [ "$overflow" = 1 ] &&
    [ "$scale" = 32768.0 ] ||
    { echo "overflow steps ${overflow:-?} (want 1), scale ${scale:-?} (want 32768); see $out/fp16.log"; return 1; }
  echo "loss $first -> $last, 1 step skipped (the scripted inf), scale 65536 -> $scale, $sps samples/s"
}

# bf16: bf16 autocast on the device.
check_bf16() {
  local n first last sps
  n=$(steps 200 20)
  train bf16 petnames.yaml precision=bf16 "trainer.max_steps=$n" "trainer.log_every=$(steps 25 2)" &&
    read -r first last sps _ < <(figures bf16) && falls "$first" "$last" ||
    { echo "loss ${first:-?} -> ${last:-?}; see $out/bf16.log"; return 1; }
  echo "loss $first -> $last in $n steps, $sps samples/s"
}

# checkpoint-to-cpu: the names run's checkpoint on the CPU with every GPU hidden: names sampled
# from it (one line each, a name may be empty; on one thread, see names-DEVICE), and training
# resumed from it at its step.
check_checkpoint() {
  needs_pass "names-$device" || return 1
  local n=$names_steps ckpt
  ckpt=$(ls "$work/names/ckpt"/step-*.ckpt 2>/dev/null | tail -1)
  [ -n "$ckpt" ] || { echo "no checkpoint in $work/names/ckpt"; return 1; }
  OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES='' "${lockstep_env[@]}" "$bin" generate --checkpoint "$ckpt" -n 5 >"$out/generate.log" 2>&1 &&
    [ "$(wc -l <"$out/generate.log")" -ge 5 ] || { echo "no 5 names; see $out/generate.log"; return 1; }
  CUDA_VISIBLE_DEVICES='' "${lockstep_env[@]}" "$bin" train "$root/configs/petnames.yaml" "data.sources=$names" \
    device=cpu "monitor.dir=$work/resumed" "checkpoint.dir=$work/names/ckpt" "trainer.max_steps=$((n + 5))" \
    generate.samples=0 --result-json "$out/resumed.json" >"$out/resumed.log" 2>&1 &&
    "$python" -c "import json, sys; sys.exit(json.load(open('$out/resumed.json'))['resumed_from_step'] != $n)" ||
    { echo "not resumed at step $n; see $out/resumed.log"; return 1; }
  echo "$(head -3 "$out/generate.log" | paste -sd' ') ...; resumed at step $n on the CPU"
}

# nccl-world-1: the whole DDP path over the nccl backend at a world of one (CPU tensors staged to
# the GPU).
check_nccl_world() {
  local first last sps
  NCCL_DEBUG=WARN worlds nccl1 1 nccl trainer.max_steps=100 trainer.log_every=10 &&
    read -r first last sps _ < <(figures nccl1) && falls "$first" "$last" && grep -q "backend nccl" "$out/nccl1.log" ||
    { echo "see $out/nccl1.log"; return 1; }
  echo "lockstep run -np 1 --backend nccl: loss $first -> $last in 100 steps, $sps samples/s"
}

# nccl-allreduce: NCCL collectives on CUDA buffers at a world of one: lockstep bench allreduce,
# its values read after a wait on the stream (the gradient engine's wait), float32 and bfloat16.
check_nccl_allreduce() {
  local dtype
  for dtype in float32 bfloat16; do
    NCCL_DEBUG=WARN "${lockstep_env[@]}" "$bin" run -np 1 --backend nccl --no-prefix -- "$bin" bench allreduce \
      --dtype $dtype --bytes 4K,1M,64M --json >"$out/allreduce-$dtype.json" 2>"$out/allreduce-$dtype.log" &&
      "$python" -c "import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
sys.exit(0 if d['device'].startswith('cuda') and all(r['wrong'] == 0 for r in d['results']) else 1)" \
        "$out/allreduce-$dtype.json" || { echo "$dtype: see $out/allreduce-$dtype.json and .log"; return 1; }
  done
  echo "bench allreduce on cuda:0 over nccl, 4K/1M/64M, float32 and bfloat16: every element right"
}

# The runs that ddp-staged-gloo and zero2/zero3-equals-ddp compare, step by step.
same_steps=$(steps 20 10)
same=("trainer.max_steps=$same_steps" trainer.log_every=1 lr_scaling.rule=none)

# ddp-staged-gloo: two workers sharing the GPU over Gloo (CUDA tensors staged through host memory)
# equal one process on the global batch: the same losses step by step, TF32 off, lr not rescaled.
check_ddp_gloo() {
  local diff
  NVIDIA_TF32_OVERRIDE=0 worlds one 1 gloo trainer.batch_size=128 "${same[@]}" &&
    NVIDIA_TF32_OVERRIDE=0 worlds two 2 gloo trainer.batch_size=64 "${same[@]}" &&
    diff=$(maxdiff one two "$same_steps") && "$python" -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" ||
    { echo "max relative difference ${diff:-?} (want <= 1e-5); see $out/one.log and $out/two.log"; return 1; }
  echo "2 workers x batch 64 over staged Gloo vs 1 x 128: $same_steps losses, max relative difference $diff"
}

# zero2-equals-ddp, zero3-equals-ddp (check_zero zero2|zero3): the same two workers with that
# strategy (zero3: the whole model one unit, its memory freed between uses) equal DDP's run.
check_zero() {
  needs_pass ddp-staged-gloo || return 1
  local diff
  NVIDIA_TF32_OVERRIDE=0 worlds "$1" 2 gloo trainer.batch_size=64 "strategy.type=$1" "${same[@]}" &&
    diff=$(maxdiff two "$1" "$same_steps") && "$python" -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" ||
    { echo "max relative difference ${diff:-?} (want <= 1e-5); see $out/$1.log"; return 1; }
  echo "2 workers x batch 64 over staged Gloo, $1 vs ddp: $same_steps losses, max relative difference $diff"
}

# pipeline-DEVICE: the convnet in 2 stages (each moves its own layers to the device), 2 workers
# sharing it over staged Gloo: loss falls.
check_pipeline() {
  local n first last
  n=$(steps 60 12)
  shared pipe 2 fashion_convnet.yaml "data.root=$bundle/data/fashion-mnist" parallel.pipeline=2 \
    "trainer.max_steps=$n" "trainer.log_every=$(steps 10 3)" && read -r first last < <(ends pipe) &&
    falls "$first" "$last" && grep -q "pipeline of 2 stages" "$out/pipe.log" ||
    { echo "loss ${first:-?} -> ${last:-?}; see $out/pipe.log"; return 1; }
  echo "convnet in 2 stages x 8 micro-batches (1f1b), 2 workers on one device: loss $first -> $last in $n steps"
}

# async-ps-DEVICE: the parameter server with 1 server (host memory) and 2 workers sharing the
# device over Gloo; each push copies the gradients to the host.
check_async_ps() {
  local n first last
  n=$(steps 300 20)
  shared ps 3 petnames.yaml schedule.type=async_ps ps.servers=1 "trainer.max_steps=$n" \
    "trainer.log_every=$(steps 20 2)" generate.samples=0 && read -r first last < <(ends ps) &&
    falls "$first" "$last" || { echo "loss ${first:-?} -> ${last:-?}; see $out/ps.log"; return 1; }
  echo "1 server, 2 workers on one device, $n steps each: loss $first -> $last"
}

# fp16-scaler-2: fp16 over two workers sharing the device: an inf scripted into rank 1's gradient
# at step 30 skips that step on both (the found-inf flag is agreed over the ranks).
check_fp16_two() {
  local first last overflow scale
  worlds fp16x2 2 gloo precision=fp16 trainer.max_steps=100 trainer.log_every=10 testing.inf_gradient_step=30 \
    testing.inf_gradient_rank=1 && read -r first last _ overflow scale _ < <(figures fp16x2) &&
    falls "$first" "$last" && [ "$overflow" = 1 ] && [ "$scale" = 32768.0 ] ||
    { echo "overflow steps on rank 0 ${overflow:-?} (want 1), scale ${scale:-?}; see $out/fp16x2.log"; return 1; }
  echo "2 workers, inf on rank 1 at step 30: 1 step skipped on rank 0 too, scale 65536 -> $scale, loss $first -> $last"
}
