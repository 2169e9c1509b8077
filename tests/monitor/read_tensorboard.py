"""Reads a lockstep run directory's event files with TensorBoard's own reader (PyPI's
tensorboard: EventAccumulator, which checks every record's CRC) and checks that every scalar
of metrics.jsonl comes back under its tag, at its step, with its value and wall time, and that
every sample of each worker's system/rank<R>.jsonl comes back from the run system/rank<R>
(CPU, memory, threads, and the GPU's fields where the sample has them).

    read_tensorboard.py RUN_DIR

Exits 1 naming the first difference, 0 after printing what matched.
"""
import json
import math
import os
import struct
import sys

try:
    import tensorboard
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator
except ImportError as e:
    sys.exit(f"read_tensorboard.py: TensorBoard is not installed for {sys.executable} ({e}); run scripts/setup.sh")

# metrics.jsonl field -> TensorBoard tag (docs/monitoring.md, "The files").
TAGS = {
    "train": {"loss": "train/loss", "lr": "train/lr", "samples_per_sec": "train/samples_per_sec",
              "step_time": "train/step_time"},
    "val": {"val_loss": "val/loss", "val_accuracy": "val/accuracy"},
    "generation": {"world_size": "elastic/world_size", "recovery_seconds": "elastic/recovery_seconds"},
}


# system/rank<R>.jsonl field -> (TensorBoard tag, factor) (docs/monitoring.md).
SYSTEM_TAGS = {"cpu_percent": ("system/cpu_percent", 1), "rss_bytes": ("system/rss_mib", 1 / 2**20),
               "threads": ("system/threads", 1), "gpu_util": ("gpu/util_percent", 1),
               "gpu_mem_bytes": ("gpu/mem_used_mib", 1 / 2**20), "gpu_power_watts": ("gpu/power_watts", 1),
               "gpu_sm_clock_mhz": ("gpu/sm_clock_mhz", 1), "gpu_temp_c": ("gpu/temp_c", 1)}


def as_float32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


def expected_scalars(run):
    expected = {}  # tag -> [(step, value, time)]
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            for field, tag in TAGS[record["kind"]].items():
                if record.get(field) is not None:
                    expected.setdefault(tag, []).append((record["step"], record[field], record["time"]))
    return expected


def read_scalars(run):
    accumulator = EventAccumulator(run, size_guidance={SCALARS: 0})  # 0: keep every scalar
    accumulator.Reload()
    return accumulator


def check_system(run, rank_file):
    """Every sample of system/rank<R>.jsonl against the event file of system/rank<R>."""
    samples = [json.loads(line) for line in open(rank_file)]
    events = read_scalars(rank_file[:-len(".jsonl")])
    got_tags = set(events.Tags()[SCALARS])
    count = 0
    for field, (tag, factor) in SYSTEM_TAGS.items():
        want = [(s["time"], s[field] * factor) for s in samples if field in s]
        if not want and tag not in got_tags:
            continue
        got = events.Scalars(tag) if tag in got_tags else []
        if len(got) != len(want):
            sys.exit(f"{rank_file}: {tag}: TensorBoard read {len(got)} values, the samples have {len(want)}")
        for event, (when, value) in zip(got, want):
            # The lines print some fields rounded (2 decimals for cpu_percent, 1 for the GPU's).
            if not math.isclose(event.value, as_float32(value), rel_tol=1e-6, abs_tol=0.06):
                sys.exit(f"{rank_file}: {tag} at {when}: TensorBoard read {event.value!r}, the sample has {value!r}")
            if abs(event.wall_time - when) > 1e-3:
                sys.exit(f"{rank_file}: {tag}: wall time {event.wall_time} in TensorBoard, {when} in the sample")
        steps = [e.step for e in got]
        if steps != sorted(steps):
            sys.exit(f"{rank_file}: {tag}: steps go backwards: {steps}")
        count += len(got)
    if count == 0:
        sys.exit(f"{rank_file}: no system scalars in TensorBoard")
    return count


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = sys.argv[1]
    expected = expected_scalars(run)
    accumulator = read_scalars(run)
    tags = sorted(accumulator.Tags()[SCALARS])
    if tags != sorted(expected):
        sys.exit(f"{run}: TensorBoard read the tags {tags}; metrics.jsonl has {sorted(expected)}")
    count = 0
    for tag in tags:
        got = accumulator.Scalars(tag)
        want = expected[tag]
        if [e.step for e in got] != [step for step, _, _ in want]:
            sys.exit(f"{run}: {tag}: TensorBoard read steps {[e.step for e in got]}, "
                     f"metrics.jsonl has {[step for step, _, _ in want]}")
        for event, (step, value, when) in zip(got, want):
            # The event holds a float32; metrics.jsonl the double it came from, printed in decimal.
            if not math.isclose(event.value, as_float32(value), rel_tol=1e-7, abs_tol=0.0):
                sys.exit(f"{run}: {tag} at step {step}: TensorBoard read {event.value!r}, metrics.jsonl has {value!r}")
            if abs(event.wall_time - when) > 1e-3:
                sys.exit(f"{run}: {tag} at step {step}: wall time {event.wall_time} in TensorBoard, {when} in metrics.jsonl")
            count += 1
    print(f"TensorBoard {tensorboard.__version__} read {count} scalars of {len(tags)} tags "
          f"({', '.join(tags)}) from {run}: each matches metrics.jsonl")
    system = os.path.join(run, "system")
    rank_files = sorted(os.path.join(system, f) for f in os.listdir(system) if f.endswith(".jsonl")) \
        if os.path.isdir(system) else []
    for rank_file in rank_files:
        print(f"TensorBoard read {check_system(run, rank_file)} system scalars from {rank_file[:-6]}: "
              "each matches a sample")


if __name__ == "__main__":
    main()
