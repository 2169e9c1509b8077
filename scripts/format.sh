#!/usr/bin/env bash
# Applies the project's C++ style (.clang-format) to every C++ source, or with
# --check lists the files that differ from it and fails. clang-format comes
# from scripts/setup.sh (Debian 12's clang-format 14; other versions format
# some constructs differently, so the check insists on 14).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=apply
if [[ "${1:-}" == "--check" ]]; then mode=check; elif [[ $# -gt 0 ]]; then
  echo "usage: scripts/format.sh [--check]" >&2
  exit 2
fi
tool=""
for candidate in clang-format-14 clang-format; do
  if command -v "$candidate" >/dev/null; then tool=$candidate; break; fi
done
if [[ -z "$tool" ]]; then
  echo "scripts/format.sh: clang-format not found; scripts/setup.sh installs it (Debian package clang-format)" >&2
  exit 1
fi
version=$("$tool" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [[ "$version" != "14" ]]; then
  echo "scripts/format.sh: $tool is version $version; the style is defined for clang-format 14 (Debian 12)" >&2
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.cpp' '*.h')
else
  mapfile -t files < <(find src include tests bench examples -name '*.cpp' -o -name '*.h' | sort)
fi
if [[ $mode == apply ]]; then
  "$tool" -i --style=file "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$tool" --style=file "$f" | cmp -s - "$f"; then bad+=("$f"); fi
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "scripts/format.sh: ${#bad[@]} file(s) differ from .clang-format; run scripts/format.sh to fix:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "scripts/format.sh: ${#files[@]} files follow .clang-format"
