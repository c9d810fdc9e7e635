#!/usr/bin/env bash
# Installs what a fresh machine lacks to build Berth, then builds every
# binary. Idempotent: a second run installs nothing and rebuilds only what
# changed.
#
# Needs: a Rust toolchain (cargo). Installs when missing: a C/C++ compiler
# and libclang (RocksDB is compiled from source; bindgen needs libclang),
# and Debian's chromium (the web UI's browser test drives it headless).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

if ! command -v cargo >/dev/null 2>&1; then
    say "cargo is not installed; install a Rust toolchain (rustup) first"
    exit 1
fi

missing=()
command -v c++ >/dev/null 2>&1 || missing+=(g++)
if ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; then
    missing+=(libclang-dev)
fi
if ((${#missing[@]})); then
    say "installing ${missing[*]} (RocksDB builds from source and bindgen needs libclang)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The web UI test (chaos-tests/tests/ui_browser.rs) loads every page in
# headless Chromium and fails, saying so, when it is absent.
if ! command -v chromium >/dev/null 2>&1; then
    say "installing chromium (headless browser for the web UI test)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

say "building (the first build compiles RocksDB: about 15 minutes on 2 cores)"
cargo build --workspace --bins
