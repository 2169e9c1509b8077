"""PyTorch's GradScaler on the run loss_scaler_cuda.cpp makes, for check_loss_scaler.sh.

  python3 loss_scaler_reference.py inputs DIR STEPS    weights and batches (raw float32/int64)
  python3 loss_scaler_reference.py compare DIR CPP_OUT  GradScaler's run against lockstep's LossScaler's

The same 64-256-10 MLP, data, float16 autocast, SGD (momentum 0.9, lr 0.05,
foreach=False: C++'s per-tensor loop) and GradScaler(init_scale=2**20,
growth_interval=3). Step INF_STEP's batch holds an inf, so that step must be
skipped on both sides. Compared: the scale after every step, which steps were
skipped, the loss, and the final parameters (bit for bit).
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F

IN, HIDDEN, OUT, BATCH, INF_STEP = 64, 256, 10, 32, 7


def write_inputs(d, steps):
    g = torch.Generator().manual_seed(5)
    t = {
        "w1.f32": torch.randn(HIDDEN, IN, generator=g) * 0.1,
        "b1.f32": torch.randn(HIDDEN, generator=g) * 0.1,
        "w2.f32": torch.randn(OUT, HIDDEN, generator=g) * 0.1,
        "b2.f32": torch.randn(OUT, generator=g) * 0.1,
        "x.f32": torch.randn(steps, BATCH, IN, generator=g) * 4,
        "y.i64": torch.randint(0, OUT, (steps, BATCH), generator=g),
        "steps.i64": torch.tensor([steps]),
    }
    t["x.f32"][INF_STEP, 0, 0] = float("inf")
    for name, v in t.items():
        v.contiguous().numpy().tofile(f"{d}/{name}")


def load(d, name, shape, dtype):
    return torch.from_numpy(np.fromfile(f"{d}/{name}", dtype=dtype).reshape(shape)).cuda()


def reference(d):
    steps = int(np.fromfile(f"{d}/steps.i64", dtype=np.int64)[0])
    fc1, fc2 = torch.nn.Linear(IN, HIDDEN).cuda(), torch.nn.Linear(HIDDEN, OUT).cuda()
    with torch.no_grad():
        fc1.weight.copy_(load(d, "w1.f32", (HIDDEN, IN), np.float32))
        fc1.bias.copy_(load(d, "b1.f32", (HIDDEN,), np.float32))
        fc2.weight.copy_(load(d, "w2.f32", (OUT, HIDDEN), np.float32))
        fc2.bias.copy_(load(d, "b2.f32", (OUT,), np.float32))
    xs = load(d, "x.f32", (steps, BATCH, IN), np.float32)
    ys = load(d, "y.i64", (steps, BATCH), np.int64)
    params = [fc1.weight, fc1.bias, fc2.weight, fc2.bias]
    sgd = torch.optim.SGD(params, lr=0.05, momentum=0.9, foreach=False)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**20, growth_interval=3)
    rows = []
    for s in range(steps):
        sgd.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(fc2(F.relu(fc1(xs[s]))), ys[s])
        scaler.scale(loss).backward()
        before = scaler.get_scale()
        scaler.step(sgd)
        scaler.update()
        skipped = scaler.get_scale() < before  # GradScaler backs off exactly when it skipped the step
        rows.append((s, scaler.get_scale(), int(skipped), loss.item()))
    return rows, torch.cat([p.detach().flatten() for p in params]).cpu()


def same_loss(printed, loss):
    if loss != loss:
        return printed.lstrip("-") == "nan"
    return np.float32(float(printed)) == np.float32(loss)  # %.9g round-trips a float32


def compare(d, cpp):
    rows, ref_params = reference(d)
    mine = [line.split() for line in open(f"{cpp}/steps.txt")]
    bad = 0
    for (s, scale, skipped, loss), m in zip(rows, mine):
        ok = float(m[1]) == scale and int(m[2]) == skipped and same_loss(m[3], loss)
        bad += not ok
        print(f"step {s:3d}  GradScaler scale {scale:10.0f} skipped {skipped} loss {loss:.6g}   "
              f"LossScaler {float(m[1]):10.0f} {m[2]} {m[3]}  {'' if ok else '<-- differs'}")
    if len(mine) != len(rows):
        print(f"LossScaler wrote {len(mine)} steps, GradScaler ran {len(rows)}")
        bad += 1
    mine_params = torch.from_numpy(np.fromfile(f"{cpp}/params.f32", dtype=np.float32))
    diff = (mine_params - ref_params).abs().max().item()
    equal = torch.equal(mine_params, ref_params)
    skips = sum(r[2] for r in rows)
    print(f"{len(rows)} steps, {skips} skipped by GradScaler; final parameters bit-equal: {equal} "
          f"(largest difference {diff:.3g})")
    print("PASS" if bad == 0 and equal and skips > 1 else "FAIL")
    return 0 if bad == 0 and equal and skips > 1 else 1


if __name__ == "__main__":
    if sys.argv[1] == "inputs":
        write_inputs(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
