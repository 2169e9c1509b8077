#!/usr/bin/python3
"""When PyTorch's DDP launches and completes each bucket's allreduce, on the mlp workload.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/pytorch/ddp_bucket_timing.py \
        [--steps 30] [--gloo-threads 2]

Two workers (Gloo on 127.0.0.1, 1 intra-op thread each) train ddp_bench.py's mlp
(784 -> 4096 -> 4096 -> 10, batch 32 per worker, SGD momentum 0.9) on random inputs.
A DDP communication hook that does what DDP's default one does (divide by the world
size, allreduce) records, per bucket, when the allreduce was launched and when it
completed, in ms after rank 0's backward began; the figures are means over the steps
after the first two (DDP rebuilds its buckets after the first). --gloo-threads sets
the Gloo process group's worker threads (c10d's default is 2; lockstep uses 1 and
runs one operation at a time). This is the counterpart of the "allreduce ... ms per
step, N% hidden behind backward" line of lockstep's Trainer, for docs/performance.md.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_bench  # noqa: E402  (the same model definitions)


def worker(rank, args, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    options = dist.ProcessGroupGloo._Options()
    options._threads = args.gloo_threads
    options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    group = dist.ProcessGroupGloo(dist.PrefixStore("timing", dist.distributed_c10d._get_default_store()), rank, 2,
                                  options)
    torch.manual_seed(0)
    ddp = torch.nn.parallel.DistributedDataParallel(ddp_bench.ImageMlp([4096, 4096]), process_group=group)
    log = []

    def hook(_, bucket):
        launched = time.perf_counter()
        buffer = bucket.buffer().div_(2)
        future = group.allreduce([buffer]).get_future()

        def completed(f):
            log.append((bucket.index(), buffer.numel() * 4, launched, time.perf_counter()))
            return f.value()[0]
        return future.then(completed)

    ddp.register_comm_hook(None, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.02, momentum=0.9)
    x = torch.randn(32, 1, 28, 28)
    y = torch.randint(0, 10, (32,))
    steps = []
    start = time.perf_counter()
    for step in range(args.steps):
        if step == 2:
            start = time.perf_counter()
        log.clear()
        optimizer.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.item()
        began = time.perf_counter()
        loss.backward()
        ended = time.perf_counter()
        optimizer.step()
        if step >= 2:
            steps.append((began, ended, sorted(log)))
    elapsed = time.perf_counter() - start
    if rank == 0:
        n = len(steps)
        print(f"mlp, 2 workers, Gloo threads {args.gloo_threads}: {n * 64 / elapsed:.0f} samples/s over {n} steps; "
              f"backward including DDP's wait {1000 * sum(e - b for b, e, _ in steps) / n:.1f} ms per step")
        for i, (index, size, _, _) in enumerate(steps[0][2]):
            launched = 1000 * sum(s[2][i][2] - s[0] for s in steps) / n
            completed = 1000 * sum(s[2][i][3] - s[0] for s in steps) / n
            print(f"  bucket {index}: {size / 1e6:.1f} MB, launched at {launched:.1f} ms, completed at "
                  f"{completed:.1f} ms after backward began")
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--gloo-threads", type=int, default=2)
    args = p.parse_args()
    if args.steps < 4:
        p.error("--steps must be at least 4")
    mp.spawn(worker, args=(args, ddp_bench.free_port()), nprocs=2, join=True)


if __name__ == "__main__":
    main()
