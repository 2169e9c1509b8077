"""Checks what a 2-worker run under the suite's scripted NVML (tests/helpers/fake_nvml.cpp)
wrote of its GPUs: every line of each worker's system/rank<R>.jsonl carries the fields of the
device CUDA gave that worker, with the values the fake library scripts for it, and so does the
"gpu %" counter of the worker's Chrome trace. With --none: no GPU field anywhere.

    check_fake_nvml.py RUN_DIR INDEX_OF_RANK0,INDEX_OF_RANK1,...
    check_fake_nvml.py RUN_DIR --none

Exits 1 naming the first difference.
"""
import json
import os
import sys

GIB = 2**30


def scripted(index):
    """The fields fake_nvml.cpp reports for device `index`."""
    return {"gpu_index": index, "gpu_util": 30.0 + index, "gpu_mem_bytes": (index + 1) * GIB,
            "gpu_mem_total_bytes": 80 * GIB, "gpu_power_watts": 100.0 + index,
            "gpu_sm_clock_mhz": 1400 + index, "gpu_temp_c": 40 + index}


def fail(message):
    sys.exit(f"check_fake_nvml.py: {message}")


def system_lines(run, rank):
    path = os.path.join(run, "system", f"rank{rank}.jsonl")
    if not os.path.exists(path):
        fail(f"{path} is missing")
    with open(path) as f:
        lines = [json.loads(line) for line in f]
    if not lines:
        fail(f"{path} has no samples")
    return path, lines


def gpu_counters(run, rank):
    path = os.path.join(run, "timeline", f"rank{rank}.trace.json")
    if not os.path.exists(path):
        fail(f"{path} is missing")
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return path, [e for e in events if e.get("ph") == "C" and e.get("name", "").startswith("gpu")]


def main():
    run, spec = sys.argv[1], sys.argv[2]
    ranks = 2 if spec == "--none" else len(spec.split(","))
    for rank in range(ranks):
        path, lines = system_lines(run, rank)
        trace, counters = gpu_counters(run, rank)
        if spec == "--none":
            for line in lines:
                if any(key.startswith("gpu_") for key in line):
                    fail(f"{path}: GPU fields without a working NVML: {line}")
            if counters:
                fail(f"{trace}: GPU counters without a working NVML: {counters[0]}")
            continue
        index = int(spec.split(",")[rank])
        want = scripted(index)
        for number, line in enumerate(lines, 1):
            got = {key: line.get(key) for key in want}
            if got != want:
                fail(f"{path} line {number}: rank {rank} should watch device {index}: want {want}, got {got}")
        utils = [e["args"]["util"] for e in counters if e["name"] == "gpu %"]
        if not utils or any(u != want["gpu_util"] for u in utils):
            fail(f"{trace}: 'gpu %' counter should read {want['gpu_util']} throughout, read {utils}")
        print(f"rank {rank}: device {index}, {len(lines)} samples, {len(utils)} trace counters as scripted")


main()
