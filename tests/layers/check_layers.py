#!/usr/bin/env python3
"""Checks every #include of src/ and include/ against the layer order that
docs/architecture.md states on its line "Layer order (lowest first): a → b → ...".

    check_layers.py SOURCE_DIR

A layer is a folder of src/ (and include/lockstep/), or a folder inside one when the
order names it so ("comm/store": src/comm/store/, below the rest of comm/); a file
belongs to the deepest layer whose folder holds it.

A file of layer L (src/L/... or include/lockstep/L/...) may include
  - its own layer's headers, public ("lockstep/L/x.h") or private ("L/x.h");
  - the public headers ("lockstep/M/x.h") of a layer M below L in that order;
  - private headers of a layer M below L only where M is common (the library's internal
    utilities: POSIX I/O, shell quoting, socket addresses), where M has no public headers
    (dashboard, sweep: libraries of the CLI), or where SHARED names the header for L;
and nothing else of lockstep's. include/lockstep/lockstep.h, the umbrella header, may
include every public header. Prints each violation as FILE:LINE: what and why, and
exits 1 if there is one (or if an entry of EXCEPTIONS no longer occurs).
"""
import os
import re
import sys

# Private headers shared with one layer above on purpose: not a user's API, so not installed.
SHARED = {
    "optim/piece_optimizer.h": {"ddp", "ps"},  # ZeRO-2/3 and the servers step the user's optimizer over their pieces
    "launch/launch_commands.h": {"cli"},  # `lockstep run`'s command lines and option checks
    "monitor/run_files.h": {"dashboard"},  # the run directory's files, which the dashboard reads
    "monitor/memory_json.h": {"cli"},     # FitResult::memory as JSON, for --result-json too
    "comm/store/store_impl.h": {"comm"},  # the backend store behind a Store, for the communicators
}

# Known violations, each waiting for its fix; the test fails once one is gone, so
# that the list only shrinks. (file, included header) -> what will remove it.
EXCEPTIONS = {}

INCLUDE = re.compile(r'\s*#\s*include\s+([<"])([^">]+)[">]')
ORDER_LINE = re.compile(r"^Layer order \(lowest first\): (.+)$", re.MULTILINE)


def layer_order(source):
    path = os.path.join(source, "docs", "architecture.md")
    match = ORDER_LINE.search(open(path).read())
    if not match:
        sys.exit(f"{path}: no line 'Layer order (lowest first): a → b → ...'")
    return [name.strip().strip("`") for name in match.group(1).split("→")]


def deepest_layer(folders, layers):
    """The deepest layer among the leading folders of a path ("comm/store" before "comm")."""
    for depth in range(len(folders), 0, -1):
        name = "/".join(folders[:depth])
        if name in layers:
            return name
    return None


def files_by_layer(source, layers):
    """(path relative to SOURCE_DIR, its layer or None for the umbrella header); a folder of
    src/ or include/lockstep/ that is no layer is its own name."""
    for root, prefix_depth in (("src", 1), (os.path.join("include", "lockstep"), 2)):
        top = os.path.join(source, root)
        for folder, _, names in os.walk(top):
            for name in sorted(names):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.relpath(os.path.join(folder, name), source)
                folders = path.split(os.sep)[prefix_depth:-1]
                yield path, (deepest_layer(folders, layers) or folders[0]) if folders else None


def target_of(header, layers):
    """(layer, public?) of an included lockstep header, or None for anything else."""
    folders = header.split("/")[:-1]
    if folders[:1] == ["lockstep"]:
        layer = deepest_layer(folders[1:], layers)
        return (layer, True) if layer else None
    layer = deepest_layer(folders, layers)
    return (layer, False) if layer else None


def violation(layer, header, target, public, rank, has_public):
    if layer is None:  # the umbrella header
        return None if public else "the umbrella header includes a private header"
    if target == layer:
        return None
    if rank[target] > rank[layer]:
        return f"{layer} is below {target} in docs/architecture.md's layer order"
    if public or target == "common" or target not in has_public or layer in SHARED.get(header, ()):
        return None
    return f"a private header of {target}; {layer} may use only lockstep/{target}/... (public)"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    source = sys.argv[1]
    order = layer_order(source)
    rank = {name: i for i, name in enumerate(order)}
    seen_folders = {layer for _, layer in files_by_layer(source, rank) if layer}
    public_root = os.path.join(source, "include", "lockstep")
    has_public = {name for name in order if os.path.isdir(os.path.join(public_root, name))}
    unknown = sorted(seen_folders - set(order))
    if unknown:
        sys.exit(f"docs/architecture.md's layer order lacks {', '.join(unknown)} (folders of src/ or include/lockstep/)")
    problems, used_exceptions = [], set()
    for path, layer in files_by_layer(source, rank):
        with open(os.path.join(source, path), errors="replace") as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE.match(line)
                target = match and target_of(match.group(2), rank)
                if not target:
                    continue
                why = violation(layer, match.group(2), target[0], target[1], rank, has_public)
                if not why:
                    continue
                if (path, match.group(2)) in EXCEPTIONS:
                    used_exceptions.add((path, match.group(2)))
                    continue
                problems.append(f"{path}:{number}: includes {match.group(2)}: {why}")
    for stale in sorted(set(EXCEPTIONS) - used_exceptions):
        problems.append(f"{stale[0]}: no longer includes {stale[1]}: remove it from EXCEPTIONS in {sys.argv[0]}")
    for problem in problems:
        print(problem)
    if problems:
        sys.exit(1)
    print(f"{len(order)} layers ({' → '.join(order)}): every include follows the order; "
          f"{len(EXCEPTIONS)} known exceptions")


if __name__ == "__main__":
    main()
