#!/usr/bin/env python3
"""PyTorch's own Python DistributedDataParallel on lockstep's benchmark workloads.

    $LOCKSTEP_VENV/bin/python3 bench/pytorch/ddp_bench.py WORKLOAD [--steps 30] [--nproc 2] [--threads 1]
        [--compile] [--device cpu|cuda] [--no-flip]

WORKLOAD is one of (the same shapes as lockstep's configs):
  charlstm  configs/charlstm-bench.yaml: one-hot characters (vocabulary --vocab, 29 for
            lockstep's pet-name data), window 16, 4 LSTM layers of 128, a dense layer to
            the vocabulary, cross entropy summed over every position and divided by
            batch*window (lockstep's charLstmLoss), batch 1024 per worker, Adam 1e-3.
            Data: SYNTHETIC random windows of that shape (lockstep trains on real names).
  convnet   configs/fashion_convnet.yaml: lockstep's convnet, batch 128 per worker,
            Adam 1e-3, random horizontal flips, Fashion-MNIST (Debian's IDX files).
  mlp       configs/mlp-bench.yaml: 784 -> 4096 -> 4096 -> 10 (20,037,642 parameters),
            batch 32 per worker, SGD momentum 0.9, Fashion-MNIST.
  resnet18  configs/cifar_resnet18.yaml: lockstep's resnet18 with the CIFAR stem (3x3 stride-1
            conv, no max pool), batch 128 per worker, SGD 0.1 momentum 0.9 weight decay 5e-4.
            Data: SYNTHETIC random 3x32x32 images (the speed does not depend on the pixels).

--device cuda puts each worker on cuda:(rank mod GPUs), over NCCL when every worker has its own
GPU, else Gloo; batches are pinned and copied without blocking, as lockstep's loader does.
--no-flip leaves out the convnet's random flips (lockstep: data.random_flip=false).

Workers are started with torch.multiprocessing.spawn, join a Gloo process group over
TCP on 127.0.0.1 and wrap the model in torch.nn.parallel.DistributedDataParallel with its
defaults (25 MB buckets, as lockstep's ddp.bucket_cap_mb). Each sets
torch.set_num_threads(--threads); the caller should also export OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS (bench/compare_pytorch.sh does, as `lockstep run --threads` does).
The learning rate is scaled by the world size as lockstep's default lr_scaling (linear;
sqrt for the convnet config), which does not change the speed.

--compile runs the DDP-wrapped model through torch.compile (TorchInductor, the default
backend, which generates C++/OpenMP kernels on the CPU) with static shapes; DDP's compiled
form splits the graph at bucket boundaries (DDPOptimizer) so that allreduces still overlap
the backward pass. Compilation happens in the first step, which is not timed; the
--warmup-steps (default 2 with --compile, else 0) before it are not timed either, so that
any recompilation falls outside the clock.

Timing follows lockstep's Trainer: rank 0 starts the clock after the first optimizer
step and stops it after the last; the last line has the Trainer's format:
    done: N steps in X s, Y samples/s (global, after the first step), 0.0 s waiting for data
"""
import argparse
import gzip
import math
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
FASHION_MEAN, FASHION_STD = 0.2860, 0.3530  # lockstep's standardNormalisation("fashion-mnist")


class CharLstm(nn.Module):
    """lockstep::CharLstmImpl (src/models/char_lstm.cpp)."""

    def __init__(self, vocab, hidden=128, layers=4):
        super().__init__()
        self.vocab = vocab
        self.lstm = nn.LSTM(vocab, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, indices):
        x = F.one_hot(indices, self.vocab).float()
        return self.head(self.lstm(x)[0])


def char_lstm_loss(logits, targets):
    """lockstep::charLstmLoss: summed cross entropy / batch*window, -100 ignored."""
    summed = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum",
                             ignore_index=-100)
    return summed / targets.numel()


class ConvNet(nn.Module):
    """lockstep's "convnet" (src/models/vision.cpp, ConvNetImpl) on 1x28x28."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class ImageMlp(nn.Module):
    """lockstep's "mlp" (src/models/vision.cpp, ImageMlpImpl) with model.hidden_sizes."""

    def __init__(self, hidden_sizes, inputs=784, classes=10):
        super().__init__()
        sizes = [inputs] + list(hidden_sizes) + [classes]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        x = x.flatten(1)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        return x


class BasicBlock(nn.Module):
    """lockstep's BasicBlockImpl (src/models/vision.cpp): torchvision's, without biases in the convs."""

    def __init__(self, inputs, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inputs != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inputs, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet18Cifar(nn.Module):
    """lockstep's "resnet18" on 32x32 images: the CIFAR stem, 4 stages of 2 blocks, average pool, fc."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        blocks, inputs = [], 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(inputs, planes, stride), BasicBlock(planes, planes, 1)]
            inputs = planes
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(data), dtype=torch.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist(root):
    """The training images, normalised as lockstep does, [N, 1, 28, 28] float, and labels."""
    images = read_idx(os.path.join(root, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(root, "train-labels-idx1-ubyte.gz"))
    x = images.float().div_(255).sub_(FASHION_MEAN).div_(FASHION_STD)
    return x.unsqueeze(1).contiguous(), labels.long()


WORKLOADS = {
    # name: batch per worker, optimizer, base lr, lr scaling with the world size
    "charlstm": dict(batch=1024, optimizer="adam", lr=1e-3, scaling="linear"),
    "convnet": dict(batch=128, optimizer="adam", lr=1e-3, scaling="sqrt"),
    "mlp": dict(batch=32, optimizer="sgd", lr=0.01, scaling="linear"),
    "resnet18": dict(batch=128, optimizer="sgd", lr=0.05, scaling="linear", weight_decay=5e-4),
}


def build(args, rank, world):
    """Model, loss function, and the (inputs, targets) tensors this rank samples from."""
    torch.manual_seed(0)
    if args.workload == "charlstm":
        model = CharLstm(args.vocab)
        gen = torch.Generator().manual_seed(1 + rank)
        inputs = torch.randint(0, args.vocab, (args.samples, 16), generator=gen)
        targets = torch.randint(1, args.vocab, (args.samples, 16), generator=gen)
        return model, char_lstm_loss, inputs, targets
    if args.workload == "resnet18":
        gen = torch.Generator().manual_seed(1 + rank)
        inputs = torch.randn(args.samples // 4, 3, 32, 32, generator=gen)
        targets = torch.randint(0, 10, (inputs.size(0),), generator=gen)
        return ResNet18Cifar(), F.cross_entropy, inputs, targets
    inputs, targets = fashion_mnist(args.data)
    model = ConvNet() if args.workload == "convnet" else ImageMlp(args.hidden_sizes)
    return model, F.cross_entropy, inputs, targets


def worker(rank, args, port):
    world = args.nproc
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    backend = "gloo"
    if args.device == "cuda":
        gpus = torch.cuda.device_count()
        device = torch.device("cuda", rank % gpus)
        torch.cuda.set_device(device)
        backend = "nccl" if world <= gpus else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    spec = WORKLOADS[args.workload]
    batch = spec["batch"]
    model, loss_fn, inputs, targets = build(args, rank, world)
    model.to(device)
    if args.first_bucket_mb is not None:
        # DDP's documented knob for the size of its first bucket (1 MB by default).
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.first_bucket_mb * 1024 * 1024)
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb,
                                  device_ids=[device.index] if device.type == "cuda" else None)
    forward = torch.compile(ddp, dynamic=False) if args.compile else ddp
    if args.powersgd:
        # PyTorch's own PowerSGD hook, the reference for lockstep's ddp.compression powersgd.
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd,
                                       start_powerSGD_iter=args.powersgd_start)
        ddp.register_comm_hook(state, powersgd.batched_powerSGD_hook if args.powersgd_batched else powersgd.powerSGD_hook)
    factor = world if spec["scaling"] == "linear" else math.sqrt(world)
    lr = spec["lr"] * factor
    if spec["optimizer"] == "adam":
        optimizer = torch.optim.Adam(ddp.parameters(), lr=lr)
    else:
        optimizer = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9, weight_decay=spec.get("weight_decay", 0))

    # DistributedSampler's order: one permutation of the whole set, rank r takes r, r+world, ...
    order = torch.randperm(inputs.size(0), generator=torch.Generator().manual_seed(0))[rank::world]
    flip = args.workload == "convnet" and not args.no_flip
    flips = torch.Generator().manual_seed(100 + rank)
    ddp.train()
    phases = [0.0, 0.0, 0.0, 0.0]  # data, forward, backward (with DDP's allreduce wait), optimizer; timed steps
    start = run_start = time.perf_counter()
    first_timed = args.warmup_steps  # the clock starts after this step
    for step in range(args.warmup_steps + args.steps):
        t0 = time.perf_counter()
        idx = order[(step * batch) % (order.numel() - batch):][:batch]
        x = inputs.index_select(0, idx)
        y = targets.index_select(0, idx)
        if flip:  # random horizontal flips, as configs/fashion_convnet.yaml's data.random_flip
            mask = torch.rand(batch, generator=flips) < 0.5
            x[mask] = x[mask].flip(3)
        if device.type == "cuda":
            x = x.pin_memory().to(device, non_blocking=True)
            y = y.pin_memory().to(device, non_blocking=True)
        t1 = time.perf_counter()
        optimizer.zero_grad()
        loss = loss_fn(forward(x), y)
        loss.item()  # lockstep's Trainer reads the loss every step
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        optimizer.step()
        t4 = time.perf_counter()
        if step <= first_timed:
            start = t4
        else:
            for i, d in enumerate((t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                phases[i] += d
    end = time.perf_counter()
    if rank == 0:
        rate = (args.steps - 1) * batch * world / (end - start)
        params = sum(p.numel() for p in model.parameters())
        form = "torch.compile (inductor)" if args.compile else "eager"
        print(f"pytorch ddp ({form}): {args.workload}, {params} parameters, {world} workers x {torch.get_num_threads()} "
              f"thread(s), batch {batch} per worker, torch {torch.__version__}, device {device}, backend {backend}",
              flush=True)
        ms = [1000 * p / (args.steps - 1) for p in phases]
        print(f"per step (rank 0, mean of {args.steps - 1}): {1000 * (end - start) / (args.steps - 1):.1f} ms = "
              f"data {ms[0]:.1f} + forward {ms[1]:.1f} + backward and allreduce wait {ms[2]:.1f} + "
              f"optimizer {ms[3]:.1f}", flush=True)
        print(f"done: {args.steps} steps in {end - run_start:.1f} s, {rate:.0f} samples/s (global, after the first "
              f"step), 0.0 s waiting for data", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--vocab", type=int, default=29, help="charlstm vocabulary (lockstep's pet-name data: 29)")
    p.add_argument("--samples", type=int, default=65536, help="charlstm: synthetic windows per worker")
    p.add_argument("--hidden-sizes", type=int, nargs="+", default=[4096, 4096], help="mlp hidden layers")
    p.add_argument("--data", default=FASHION_MNIST, help="folder with Fashion-MNIST's IDX .gz files")
    p.add_argument("--bucket-cap-mb", type=float, default=25, help="DDP's bucket_cap_mb (PyTorch's default: 25)")
    p.add_argument("--first-bucket-mb", type=float, default=None,
                   help="size of DDP's first bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES; PyTorch: 1)")
    p.add_argument("--compile", action="store_true", help="torch.compile the DDP model (inductor backend)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where each worker trains")
    p.add_argument("--no-flip", action="store_true", help="convnet: no random horizontal flips")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help="untimed steps before the first one (default: 2 with --compile, else 0)")
    p.add_argument("--powersgd", type=int, default=0, help="PowerSGD comm hook at this rank (0: plain allreduce)")
    p.add_argument("--powersgd-batched", action="store_true",
                   help="PyTorch's batched_powerSGD_hook (the whole bucket as one square matrix) instead")
    p.add_argument("--powersgd-start", type=int, default=2,
                   help="iterations of plain allreduce before PowerSGD (PyTorch needs at least 2)")
    args = p.parse_args()
    if args.warmup_steps is None:
        args.warmup_steps = 2 if args.compile else 0
    if args.steps < 2:
        p.error("--steps must be at least 2 (the first step is not timed)")
    if not dist.is_available() or not dist.is_gloo_available():
        sys.exit("ddp_bench.py: this torch has no Gloo process group (torch.distributed)")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("ddp_bench.py: --device cuda, but torch sees no CUDA device")
    mp.spawn(worker, args=(args, free_port()), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
