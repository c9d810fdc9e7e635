#!/usr/bin/env bash
# Regenerates the benchmark plots under docs/plots/ (see BENCHMARKS.md,
# "Plots") with release builds:
#   pass-grid.svg / .json    scheduling pass cost, pending jobs × hosts
#   drill-failover.svg       failover distribution of a short chaos drill
#   raft-writes.svg / .json  Berth submits/s vs etcd puts/s per client
#                            count; only where etcd is installed
# Usage: scripts/plots.sh
# Environment: DRILL_FAULTS (default 20), PASSES (default 10), and cargo's
# own (CARGO_TARGET_DIR, ROCKSDB_LIB_DIR for a prebuilt RocksDB).
# Exits non-zero when a step fails; a drill that finds a violation still
# writes its plot, and the script goes on to the next one first.
set -euo pipefail
cd "$(dirname "$0")/.."

drill_faults=${DRILL_FAULTS:-20}
passes=${PASSES:-10}
out=docs/plots
bin="${CARGO_TARGET_DIR:-target}/release"
say() { printf 'plots: %s\n' "$*" >&2; }

say "building berth-drill, berthd and berth-agent (release)"
cargo build --release -p berth-chaos -p berth-node -p berth-agent --bins
mkdir -p "$out"
status=0

say "pass grid -> $out/pass-grid.svg"
"$bin/berth-drill" bench pass-grid --passes "$passes" \
    --json "$out/pass-grid.json" --plot "$out/pass-grid.svg"

say "chaos drill, $drill_faults faults -> $out/drill-failover.svg"
if ! BERTH_BIN_DIR="$bin" "$bin/berth-drill" chaos --seed 7 --seconds 30 \
    --min-faults "$drill_faults" --fault-gap-ms 1500 \
    --plot "$out/drill-failover.svg"; then
    say "the drill failed (its plot is written if it ran to its checks)"
    status=1
fi

if etcd=$(command -v etcd); then
    say "raft writes vs $etcd -> $out/raft-writes.svg"
    BERTH_ETCD="$etcd" BERTH_BIN_DIR="$bin" "$bin/berth-drill" bench raft-writes \
        --json "$out/raft-writes.json" --plot "$out/raft-writes.svg"
else
    say "skipped raft-writes.svg: etcd is not installed (it is the reference" \
        "the benchmark measures against; Debian: apt-get install etcd-server)"
fi
exit "$status"
