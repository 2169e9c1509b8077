#!/usr/bin/env python3
"""Milliseconds per step of the most expensive op names in bench/op_profile's Chrome traces.

    bench/summarize_trace.py STEPS TOP NAME=TRACE.json [NAME=TRACE.json ...]

Nested ops count inside their callers too (aten::linear includes its aten::to), so
the rows do not add up to the step; autograd's evaluate_function wrappers are left out.
"""
import collections
import json
import sys


def main():
    steps, top = int(sys.argv[1]), int(sys.argv[2])
    for arg in sys.argv[3:]:
        side, path = arg.split("=", 1)
        total = collections.Counter()
        for event in json.load(open(path)):
            if event.get("ph") == "X" and not event["name"].startswith("autograd::engine::evaluate_function"):
                total[event["name"]] += event["dur"]
        print(f"{side}: ms per step by op (top {top})")
        for name, us in total.most_common(top):
            print(f"  {us / steps / 1000:8.2f}  {name}")


if __name__ == "__main__":
    main()
