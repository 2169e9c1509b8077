#!/usr/bin/env python3
"""Checks the size limits of CONTRIBUTING.md on src/ and include/:

    check_sizes.py SOURCE_DIR [MAX_FILE_LINES [MAX_FUNCTION_LINES]]

- a source file together with its header (src/L/x.cpp with src/L/x.h or
  include/lockstep/L/x.h) has at most MAX_FILE_LINES lines (default 600);
- a function body, from the line that opens it to its closing brace, has at
  most MAX_FUNCTION_LINES lines (default 85: "about 80"). Functions are found
  by the project's format (clang-format): a definition opens with "{" at the end
  of a line at namespace level or one class level (two spaces) in, and closes
  with "}" at the same indentation.
Prints each file or function over its limit and exits 1 if there is one.
"""
import glob
import os
import re
import sys

NOT_A_FUNCTION = re.compile(r"\s*(namespace|class|struct|enum|union|extern|switch|for|if|while|else|do|try|catch)\b")


def file_sizes(root, limit):
    problems = []
    for cpp in sorted(glob.glob(os.path.join(root, "src", "**", "*.cpp"), recursive=True)):
        rel = os.path.relpath(cpp, root)
        layer_path = os.path.splitext(os.path.relpath(cpp, os.path.join(root, "src")))[0]
        headers = [os.path.join(root, "src", layer_path + ".h"),
                   os.path.join(root, "include", "lockstep", layer_path + ".h")]
        lines = sum(1 for _ in open(cpp, encoding="utf-8"))
        counted = [rel]
        for header in headers:
            if os.path.exists(header):
                lines += sum(1 for _ in open(header, encoding="utf-8"))
                counted.append(os.path.relpath(header, root))
        if lines > limit:
            problems.append(f"{' + '.join(counted)}: {lines} lines, more than {limit}: split it by responsibility")
    return problems


def function_sizes(path, rel, limit):
    lines = open(path, encoding="utf-8").read().split("\n")
    problems = []
    for indent in ("", "  "):
        start = None  # the first line of the definition whose body is open
        head = None   # the first line of the declaration being read (signatures span lines)
        for i, line in enumerate(lines):
            stripped = line.strip()
            at_level = line.startswith(indent) and not line.startswith(indent + " ") and stripped != ""
            if start is None:
                if at_level and not stripped.startswith(("}", "//", "#", "{")):
                    head = i
                if head is None or not line.rstrip().endswith("{"):
                    if stripped.endswith((";", "}")):
                        head = None
                    continue
                signature = " ".join(l.strip() for l in lines[head:i + 1])
                if "(" in signature and not NOT_A_FUNCTION.match(lines[head]) and "=" not in signature.split("(")[0]:
                    start = head
                head = None
            elif at_level and line.startswith(indent + "}"):
                length = i - start + 1
                if length > limit:
                    problems.append(f"{rel}:{start + 1}: a function of {length} lines, more than {limit}: "
                                    f"{lines[start].strip()[:70]}")
                start = None
    return problems


def main():
    root = sys.argv[1]
    max_file = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    max_function = int(sys.argv[3]) if len(sys.argv) > 3 else 85
    problems = file_sizes(root, max_file)
    sources = glob.glob(os.path.join(root, "src", "**", "*.[ch]*"), recursive=True)
    sources += glob.glob(os.path.join(root, "include", "**", "*.h"), recursive=True)
    for path in sorted(p for p in sources if p.endswith((".cpp", ".h"))):
        problems += function_sizes(path, os.path.relpath(path, root), max_function)
    for problem in problems:
        print(problem)
    print(f"{len(problems)} over the limits (files {max_file} lines with their header, functions {max_function})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
