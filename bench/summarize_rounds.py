#!/usr/bin/env python3
"""Summarises interleaved benchmark rounds: per workload and side the median and
spread of samples/s, and each side's ratio to a reference side with a bootstrap
interval.

    summarize_rounds.py RESULTS_FILE REFERENCE_SIDE [--fallback W=V]... [--seed N] [--resamples N]

RESULTS_FILE holds one run per line: "workload side round samples_per_s" (a
failed run: "fail" instead of the rate). The ratio is median(side) /
median(reference) over the rounds; its 90% interval comes from resampling the
rounds with replacement (pairs stay together: the runs of one round ran next to
each other, under the same load), 2000 times by default. --fallback W=V: where
workload W has no successful reference run, its ratios are taken against
workload V's reference runs (e.g. mlp-powersgd=mlp when PyTorch's PowerSGD hook
fails: lockstep's PowerSGD against PyTorch's plain DDP). Standard library only.
"""
import argparse
import random
import statistics
import sys
from collections import defaultdict


def read_runs(path):
    runs = defaultdict(dict)  # (workload, side) -> {round: rate}
    order = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 4:
                sys.exit(f"{path}:{n}: expected 'workload side round rate', got {line.strip()!r}")
            workload, side, rnd, rate = parts
            if workload not in order:
                order.append(workload)
            if rate != "fail":
                runs[(workload, side)][int(rnd)] = float(rate)
    return runs, order


def ratio_interval(ours, ref, resamples, rng):
    rounds = sorted(set(ours) & set(ref))
    if len(rounds) < 2:
        return None
    ratios = []
    for _ in range(resamples):
        pick = [rng.choice(rounds) for _ in rounds]
        ratios.append(statistics.median(ours[r] for r in pick) / statistics.median(ref[r] for r in pick))
    ratios.sort()
    return ratios[int(0.05 * resamples)], ratios[int(0.95 * resamples) - 1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results")
    p.add_argument("reference")
    p.add_argument("--fallback", action="append", default=[], metavar="W=V")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--resamples", type=int, default=2000)
    args = p.parse_args()
    runs, order = read_runs(args.results)
    fallback = dict(item.split("=", 1) for item in args.fallback)
    rng = random.Random(args.seed)
    sides = sorted({side for (_, side) in runs if side != args.reference})
    print(f"{'workload':<13} {'side':<16} {'runs':>4} {'median':>8} {'min':>8} {'max':>8}   "
          f"ratio to {args.reference} [90% bootstrap]")
    for workload in order:
        ref = runs.get((workload, args.reference), {})
        note = ""
        if not ref and workload in fallback:
            ref = runs.get((fallback[workload], args.reference), {})
            note = f" (of {fallback[workload]}: no {args.reference} run of {workload} succeeded)" if ref else ""
        for side in [args.reference] + sides:
            values = runs.get((workload, side), {})
            if not values:
                continue
            v = list(values.values())
            line = f"{workload:<13} {side:<16} {len(v):>4} {statistics.median(v):>8.0f} {min(v):>8.0f} {max(v):>8.0f}"
            if side != args.reference and ref:
                ratio = statistics.median(v) / statistics.median(ref.values())
                interval = ratio_interval(values, ref, args.resamples, rng)
                line += f"   {ratio:.2f}x"
                if interval:
                    line += f" [{interval[0]:.2f}, {interval[1]:.2f}]"
                line += note
            print(line)


if __name__ == "__main__":
    main()
