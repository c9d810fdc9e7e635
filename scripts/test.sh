#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run) and what the README gives.
# Installs what is missing, builds the binaries the cluster tests start as
# processes, checks formatting and lints, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
