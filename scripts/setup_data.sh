#!/usr/bin/env bash
# Installs the datasets lockstep trains on (see docs/data.md). Idempotent.
set -euo pipefail
