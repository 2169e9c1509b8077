#!/usr/bin/env python3
"""Checks that every thread the library starts goes through detail::startThread() or
startThreadOn() (src/common/worker_thread.h), which make the worker's device current in the new
thread before it runs (docs/gpus.md, "Which device a worker uses"):

    check_threads.py SOURCE_DIR

Flags, in src/, a std::thread or std::jthread constructed with a function, std::async, and an
emplace_back into a vector of threads. Prints each place and exits 1 if there is one.
"""
import glob
import os
import re
import sys

ALLOWED = {os.path.join("src", "common", "worker_thread.h")}
CONSTRUCTED = re.compile(r"std::j?thread\s*(\w+\s*)?[({](?!\s*[)}])")
ASYNC = re.compile(r"std::async\s*\(")
THREAD_VECTOR = re.compile(r"std::vector<std::j?thread>\s+(\w+)")


def problems_in(root, path):
    rel = os.path.relpath(path, root)
    if rel in ALLOWED:
        return []
    text = open(path, encoding="utf-8").read()
    vectors = THREAD_VECTOR.findall(text)
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("//", 1)[0]
        emplaced = any(re.search(rf"\b{v}(\.|->)emplace_back\(", code) for v in vectors)
        if CONSTRUCTED.search(code) or ASYNC.search(code) or emplaced:
            found.append(f"{rel}:{number}: a thread not started by detail::startThread(): {line.strip()}")
    return found


def main():
    root = sys.argv[1]
    files = sorted(glob.glob(os.path.join(root, "src", "**", "*.cpp"), recursive=True) +
                   glob.glob(os.path.join(root, "src", "**", "*.h"), recursive=True))
    problems = [p for f in files for p in problems_in(root, f)]
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} thread(s) would run on device 0 instead of the worker's device: start them with "
              "detail::startThread() (src/common/worker_thread.h)")
        return 1
    print(f"check_threads: every thread of {len(files)} files starts on the worker's device")
    return 0


sys.exit(main())
