#!/usr/bin/env python3
"""Search quality of lockstep's samplers against Optuna's on synthetic objectives.

For each objective (Branin, Hartmann-6) and each method -- lockstep TPE (multivariate, the
default), lockstep TPE univariate, lockstep random, Optuna TPE (TPESampler with its defaults),
Optuna random -- the best value after N trials for
seeds 0..S-1; prints the median best and its spread per method. Run by bench/sweep_quality.sh.

    /usr/bin/python3 bench/sweep_quality.py LOCKSTEP_BIN [TRIALS] [SEEDS]
"""
import json
import math
import statistics
import subprocess
import sys

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def branin(x, y):
    a = y - 5.1 / (4 * math.pi ** 2) * x * x + 5 / math.pi * x - 6
    return a * a + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x) + 10


ALPHA = [1.0, 1.2, 3.0, 3.2]
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886], [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650], [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def hartmann6(xs):
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (xs[j] - P[i][j]) ** 2 for j in range(6))) for i in range(4))


def optuna_objective(name):
    if name == "branin":
        return lambda t: branin(t.suggest_float("x", -5, 10), t.suggest_float("y", 0, 15))
    return lambda t: hartmann6([t.suggest_float(f"x{j}", 0, 1) for j in range(6)])


def optuna_best(name, sampler_name, trials, seed):
    sampler = optuna.samplers.TPESampler(seed=seed) if sampler_name == "tpe" else optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(sampler=sampler, direction="minimize")
    study.optimize(optuna_objective(name), n_trials=trials)
    return study.best_value


def lockstep_best(binary, name, algorithm, trials, seeds, *extra):
    out = subprocess.run([binary, "bench", "sampler", "--objective", name, "--algorithm", algorithm,
                          "--trials", str(trials), "--seeds", str(seeds), "--json", *extra],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["best"]


def main():
    binary = sys.argv[1]
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    seeds = int(sys.argv[3]) if len(sys.argv) > 3 else 101
    print(f"| objective (minimum) | method | median best of {seeds} seeds, {trials} trials each | mean | min | max |")
    print("|---|---|---|---|---|---|")
    for name, minimum in (("branin", 0.397887), ("hartmann6", -3.32237)):
        results = {
            "lockstep tpe": lockstep_best(binary, name, "tpe", trials, seeds),
            "lockstep tpe, univariate": lockstep_best(binary, name, "tpe", trials, seeds, "--univariate"),
            "optuna tpe": [optuna_best(name, "tpe", trials, s) for s in range(seeds)],
            "lockstep random": lockstep_best(binary, name, "random", trials, seeds),
            "optuna random": [optuna_best(name, "random", trials, s) for s in range(seeds)],
        }
        for method, best in results.items():
            print(f"| {name} ({minimum}) | {method} | {statistics.median(best):.4f} | {statistics.mean(best):.4f} | "
                  f"{min(best):.4f} | {max(best):.4f} |")


if __name__ == "__main__":
    main()
