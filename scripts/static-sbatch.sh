#!/usr/bin/env bash
# Builds the `sbatch` binary statically against musl, the form to install
# where scripts run one `sbatch` per job: a static musl process skips the
# dynamic loader and glibc's start-up CPU detection, and on a VM (where
# CPUID traps to the hypervisor) that is most of what starting a process
# costs (BENCHMARKS.md, "Slurm peer"). The result needs no shared library
# and hands command lines it does not submit itself to `berth` beside it.
#
# Installs when missing: Rust's x86_64-unknown-linux-musl target (rustup)
# and Debian's musl-tools (a C compiler for the crates that build C).
# Prints the path of the binary. Extra arguments go to cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'static-sbatch: %s\n' "$*" >&2; }
target=x86_64-unknown-linux-musl

if ! rustup target list --installed | grep -qx "$target"; then
    say "adding Rust's $target target"
    rustup target add "$target"
fi
if ! command -v musl-gcc >/dev/null 2>&1; then
    say "installing musl-tools (C code of dependencies is built for musl)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq musl-tools >/dev/null
fi
cargo build --release --target "$target" -p berth-client --bin sbatch "$@" >&2
dir="${CARGO_TARGET_DIR:-target}/$target/release"
echo "$dir/sbatch"
