#!/usr/bin/env bash
# One command on a fresh machine: install what is missing, build, and start
# a local Berth cluster (3 nodes, 2 agents) on loopback. Ctrl-C stops it.
# Extra arguments go to `berthd dev` (e.g. --dir, --agents).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec target/debug/berthd dev "$@"
