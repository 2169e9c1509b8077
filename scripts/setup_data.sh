#!/usr/bin/env bash
# Installs the datasets lockstep trains on (see docs/data.md). Idempotent.
#
#   Debian: wamerican (/usr/share/dict/american-english), ruby-faker (name, dog and cat
#           YAML files), dataset-fashion-mnist (/usr/share/datasets/fashion-mnist/*-ubyte.gz)
#
# Runs as root, or uses sudo for apt-get.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"

DATA_PACKAGES=(
  wamerican     # /usr/share/dict/american-english: capitalised entries are mostly given names
  ruby-faker    # lib/locales/en/{name,dog,cat}.yml: first names, dog and cat names
  dataset-fashion-mnist  # /usr/share/datasets/fashion-mnist: 60k train + 10k test 28x28 images (openFashionMnist)
)

# shellcheck source=lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
lockstep_sudo_setup setup_data.sh
lockstep_apt_install setup_data.sh "${DATA_PACKAGES[@]}"
