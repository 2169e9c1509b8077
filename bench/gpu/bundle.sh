#!/usr/bin/env bash
# Packs what bench/gpu/check_all.sh needs on a GPU machine into .gpu-bundle/ (ignored by git; the
# device tool carries it, 64 MiB at most with the working tree), or into $BUNDLE_DIR when set
# (check_all.sh reads the same variable; bench/gpu/dry_run_test.sh bundles into a directory of its
# own that way):
#   bin/, lib/   lockstep and its two libraries, stripped, and the shared libraries they need that
#                such a machine's image lacks (Debian's yaml-cpp, fmt, OpenMPI, httplib, ...); not
#                LibTorch, CUDA, NCCL or glibc, which the machine's PyTorch and system provide
#   data/        the pet names of ruby-faker (one per line) and Fashion-MNIST's test set, copied
#                as a small training set too (the machine has no network and no Debian datasets)
# The GPU machine's PyTorch must be the torch==2.11.0 this was built against (it is: cu130).
#
#   scripts/build.sh && [BUNDLE_DIR=DIR] bench/gpu/bundle.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=${BUNDLE_DIR:-$root/.gpu-bundle}
for f in lockstep liblockstep.so liblockstep_workloads.so; do
  [ -f "$build/$f" ] || { echo "bundle.sh: $build/$f is missing: run scripts/build.sh first" >&2; exit 2; }
done
# What is replaced: an earlier bundle or an empty directory, never another directory.
if [ -d "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -f "$out/torch-version.txt" ]; then
  echo "bundle.sh: $out is not empty and holds no bundle; not replacing it" >&2
  exit 2
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/data/fashion-mnist"
if [ "$out" = "$root/.gpu-bundle" ] && [ -d "$root/.git/info" ]; then
  grep -qx '/.gpu-bundle/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu-bundle/' >>"$root/.git/info/exclude"
fi

cp "$build/lockstep" "$out/bin/"
cp "$build/liblockstep.so" "$build/liblockstep_workloads.so" "$out/lib/"
strip --strip-unneeded "$out/bin/lockstep" "$out/lib/"*.so

# The libraries outside the wheel and outside glibc (which must come from the machine itself).
ldd "$build/lockstep" "$build/liblockstep.so" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r lib; do
    case "$lib" in
      */site-packages/* | "$build"/*) continue ;;                                  # LibTorch, CUDA, ours
      */libc.so.* | */libm.so.* | */libpthread.so.* | */libdl.so.* | */librt.so.* | */libutil.so.*) continue ;;
    esac
    cp -L "$lib" "$out/lib/"
  done
strip --strip-unneeded "$out/lib/"lib*.so.* 2>/dev/null || true

# Data: the names as a plain list (a source path with one name per line), Fashion-MNIST's test set.
python3 - "$out/data/names.txt" <<'EOF'
import glob, re, sys, yaml
gem = sorted(glob.glob('/usr/share/rubygems-integration/all/gems/faker-*/lib/locales/en'))[-1]
faker = lambda f: yaml.safe_load(open(f'{gem}/{f}'))['en']['faker']
lists = [faker('name.yml')['name'][k] for k in ('first_name', 'male_first_name', 'female_first_name', 'neutral_first_name')]
lists += [faker(f)['creature'][f[:3]]['name'] for f in ('dog.yml', 'cat.yml')]
names = sorted({n for l in lists for n in l if isinstance(n, str) and re.fullmatch(r"[A-Za-z][A-Za-z' .-]*", n)})
open(sys.argv[1], 'w').write('\n'.join(names) + '\n')
EOF
fashion=/usr/share/datasets/fashion-mnist
for kind in images-idx3 labels-idx1; do
  cp "$fashion/t10k-$kind-ubyte.gz" "$out/data/fashion-mnist/"
  cp "$fashion/t10k-$kind-ubyte.gz" "$out/data/fashion-mnist/train-$kind-ubyte.gz"
done
cp "$root/cmake/torch-version.txt" "$out/"
echo "bundle.sh: $(du -sh "$out" | cut -f1) in $out ($(wc -l <"$out/data/names.txt") names)"
