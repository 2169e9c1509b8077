#!/usr/bin/env python3
"""Search quality on a real objective: the validation accuracy of a Fashion-MNIST MLP after
STEPS optimizer steps, over learning rate x batch size x width, equal trial budgets.

Methods: lockstep TPE and lockstep random (`lockstep sweep`), Optuna's TPE (TPESampler defaults)
calling the very same `lockstep run -np 1 --threads 1 -- lockstep train ...` per trial. One trial
at a time on every side. Prints the median best accuracy of SEEDS seeds per method.

    $LOCKSTEP_VENV/bin/python3 bench/sweep_real.py LOCKSTEP_BIN [TRIALS=20] [SEEDS=5] [STEPS=600]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

import optuna

optuna.logging.set_verbosity(optuna.logging.ERROR)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(ROOT, "configs", "mlp-bench.yaml")
BATCHES = [16, 32, 64, 128, 256]
WIDTHS = ["[32]", "[128]", "[512]", "[256, 128]"]


def fixed(steps):
    return [f"trainer.max_steps={steps}", "trainer.validate=true", "data.num_workers=0", "monitor.dir=off",
            "checkpoint.dir=off"]


def lockstep_sweep(binary, algorithm, trials, seed, steps, work):
    spec = os.path.join(work, f"{algorithm}-{seed}.yaml")
    with open(spec, "w") as f:
        f.write(f"base: {BASE}\n"
                f"overrides: {{trainer.max_steps: {steps}, trainer.validate: true, data.num_workers: 0,"
                " monitor.trace_steps: 0, monitor.system_interval: 0, checkpoint.every: 0}\n"
                "space:\n  optimizer.lr: {type: loguniform, low: 0.0003, high: 0.5}\n"
                f"  trainer.batch_size: {BATCHES}\n"
                "  model.hidden_sizes: [[32], [128], [512], [256, 128]]\n"
                "objective: {metric: validation_accuracy, mode: max}\n"
                f"budget: {{trials: {trials}}}\nalgorithm: {algorithm}\nseed: {seed}\n")
    out = os.path.join(work, f"{algorithm}-{seed}")
    subprocess.run([binary, "sweep", spec, "-j", "1", "--threads", "1", "--dir", out], check=True,
                   capture_output=True)
    best = 0.0
    with open(os.path.join(out, "trials.jsonl")) as f:
        for line in f:
            t = json.loads(line)
            if t["objective"] is not None:
                best = max(best, t["objective"])
    return best


def optuna_tpe(binary, trials, seed, steps, work):
    result = os.path.join(work, "optuna-result.json")

    def objective(trial):
        lr = trial.suggest_float("lr", 0.0003, 0.5, log=True)
        batch = trial.suggest_categorical("batch", BATCHES)
        width = trial.suggest_categorical("width", WIDTHS)
        argv = [binary, "run", "-np", "1", "--threads", "1", "--", binary, "train", BASE, *fixed(steps),
                f"optimizer.lr={lr}", f"trainer.batch_size={batch}", f"model.hidden_sizes={width}",
                "--result-json", result]
        subprocess.run(argv, check=True, capture_output=True)
        with open(result) as f:
            return json.load(f)["last_validation_accuracy"]

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed), direction="maximize")
    # A failed trial (a diverging learning rate stops training) counts, as in `lockstep sweep`.
    study.optimize(objective, n_trials=trials, catch=(subprocess.CalledProcessError,))
    return study.best_value


def main():
    binary = os.path.abspath(sys.argv[1])
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    seeds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 600
    results = {"lockstep tpe": [], "optuna tpe": [], "lockstep random": []}
    with tempfile.TemporaryDirectory() as work:
        for seed in range(1, seeds + 1):
            results["lockstep tpe"].append(lockstep_sweep(binary, "tpe", trials, seed, steps, work))
            results["optuna tpe"].append(optuna_tpe(binary, trials, seed, steps, work))
            results["lockstep random"].append(lockstep_sweep(binary, "random", trials, seed, steps, work))
            print(f"seed {seed}: " + ", ".join(f"{k} {v[-1]:.4f}" for k, v in results.items()), flush=True)
    print(f"| method | median best validation accuracy, {seeds} seeds x {trials} trials of {steps} steps | min | max |")
    print("|---|---|---|---|")
    for method, best in results.items():
        print(f"| {method} | {statistics.median(best):.4f} | {min(best):.4f} | {max(best):.4f} |")


if __name__ == "__main__":
    main()
