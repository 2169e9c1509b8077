#!/usr/bin/env bash
# Installs the datasets lockstep trains on (see docs/data.md). Idempotent.
#
#   Debian: wamerican (/usr/share/dict/american-english), ruby-faker (name YAML files),
#           dataset-fashion-mnist (/usr/share/datasets/fashion-mnist/*-ubyte.gz)
#   npm:    dog-names@3, cat-names@4, pinned by src/data/npm/package{,-lock}.json and
#           installed under $LOCKSTEP_NPM_DIR (default /usr/local/share/lockstep/npm),
#           which is where lockstep::loadNames looks for them. Node is not needed at
#           run time: lockstep reads the packages' name files directly.
#
# Runs as root, or uses sudo for apt-get and for writing the npm directory.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
NPM_SPEC_DIR="$ROOT/src/data/npm"
NPM_DIR="${LOCKSTEP_NPM_DIR:-/usr/local/share/lockstep/npm}"

DATA_PACKAGES=(
  wamerican     # /usr/share/dict/american-english: capitalised entries are mostly given names
  ruby-faker    # lib/locales/en/{name,dog,cat}.yml: first names, dog and cat names
  dataset-fashion-mnist  # /usr/share/datasets/fashion-mnist: 60k train + 10k test 28x28 images (openFashionMnist)
)

# shellcheck source=lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
lockstep_sudo_setup setup_data.sh

# npm: Debian's nodejs+npm unless a node with its own npm (e.g. a NodeSource build) is present.
NODE_PACKAGES=()
command -v npm >/dev/null 2>&1 || NODE_PACKAGES=(nodejs npm)
lockstep_apt_install setup_data.sh "${DATA_PACKAGES[@]}" "${NODE_PACKAGES[@]}"

# The npm packages: reinstall only when the pinned lock file differs from the installed one
# or a package directory is missing.
npm_ready() {
  [ -f "$NPM_DIR/package-lock.json" ] &&
    cmp -s "$NPM_SPEC_DIR/package-lock.json" "$NPM_DIR/package-lock.json" &&
    [ -f "$NPM_DIR/node_modules/dog-names/package.json" ] &&
    [ -f "$NPM_DIR/node_modules/cat-names/package.json" ]
}

if npm_ready; then
  echo "setup_data.sh: npm name packages present in $NPM_DIR"
else
  echo "setup_data.sh: installing dog-names and cat-names into $NPM_DIR"
  $SUDO mkdir -p "$NPM_DIR"
  $SUDO cp "$NPM_SPEC_DIR/package.json" "$NPM_SPEC_DIR/package-lock.json" "$NPM_DIR/"
  # --ignore-scripts: nothing is built or run, only files are unpacked.
  if ! (cd "$NPM_DIR" && $SUDO npm ci --ignore-scripts --no-audit --no-fund --loglevel=error); then
    echo "setup_data.sh: npm could not install dog-names and cat-names into $NPM_DIR." >&2
    echo "  Behind a TLS-inspecting proxy, make npm trust its CA (npm config set cafile /path/ca.crt," >&2
    echo "  or NODE_EXTRA_CA_CERTS), then run scripts/setup.sh again." >&2
    exit 1
  fi
  npm_ready || { echo "setup_data.sh: npm install into $NPM_DIR did not produce the packages" >&2; exit 1; }
fi
