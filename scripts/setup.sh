#!/usr/bin/env bash
# Installs every Debian package lockstep needs, and LibTorch: PyPI's torch wheel (CUDA build) in
# a Python environment at $LOCKSTEP_VENV (default /opt/lockstep/venv), reused while it holds the
# pinned version. Idempotent; runs as root or via sudo. Why each package is here: docs/dependencies.md.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  python3 python3-venv    # the environment that holds the torch wheel (LibTorch)
  libgloo-dev             # Gloo's headers, which c10d/ProcessGroupGloo.hpp includes (never its library)
  libcli11-dev            # command-line parsing for the `lockstep` CLI
  nlohmann-json3-dev      # --json output of benchmarks
  libyaml-cpp-dev         # training configs (lockstep train CONFIG.yaml)
  zlib1g-dev              # gzip-compressed IDX files (Fashion-MNIST)
  libssl-dev              # libcrypto: HMAC-SHA256 and random job tokens for the rendezvous store
  iproute2                # `ip netns`/veth/tc: multi-host tests and emulated links make hosts out of network namespaces
  libstb-dev              # stb_image: PNG/JPEG decoding for image folders
  libcpp-httplib-dev      # HTTP server of `lockstep dashboard` (and the client in its tests)
  chromium                # headless browser: the dashboard's end-to-end test renders the page
  libgtest-dev libgmock-dev googletest   # tests
  clang-format            # the C++ style (.clang-format), checked by the format_check test
  procps psmisc           # ps/pkill used by tests of the launcher
  curl                    # bench/dashboard_latency.sh times the dashboard's API as a client would
  openmpi-bin             # mpirun: workers started by OpenMPI find each other (tested)
  libopenmpi-dev          # the MPI communicator backend (shared memory between local ranks)
  slurm-wlm               # a real one-host Slurm for the `lockstep sweep --scheduler slurm` and srun tests
  munge                   # Slurm's authentication: tests/support/slurm_cluster.sh runs a private munged
)

# shellcheck source=lib/apt.sh
source "$(dirname "$0")/lib/apt.sh"
lockstep_sudo_setup setup.sh
lockstep_apt_install setup.sh "${PACKAGES[@]}"

# Datasets from Debian packages (names for the pet-name generator, ...).
"$(dirname "$0")/setup_data.sh"

# LibTorch (PyPI's torch wheel) and the pinned Python tools in $LOCKSTEP_VENV (skipped when present).
"$(dirname "$0")/setup_venv.sh"
