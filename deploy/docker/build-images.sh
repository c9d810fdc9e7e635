#!/usr/bin/env bash
# Builds the Berth container images FROM scratch out of the project's own
# binaries: each image holds the binaries and exactly the shared libraries
# `ldd` names for them (and the dynamic loader), nothing pulled from a
# registry.
#
#   deploy/docker/build-images.sh [--profile release|debug] [--tag TAG]
#
# Images:
#   berth/berthd:TAG  berthd (entrypoint) and the berth CLI
#   berth/agent:TAG   berth-agent (entrypoint), berth-job-shim, and /bin/sh
#                     with the few tools the example jobs use (jobs run
#                     under `/bin/sh -c`, which a scratch image lacks)
#
# Build the binaries first: cargo build --release --bins (or --profile
# debug for a quick local try). BERTH_BIN_DIR overrides where they are.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/deploy/docker"
profile=release
tag=latest
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="${2:?--profile needs release or debug}"; shift 2 ;;
    --tag) tag="${2:?--tag needs a value}"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "build-images.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
done
case "$profile" in
  release|debug) ;;
  *) echo "build-images.sh: --profile must be release or debug, not $profile" >&2; exit 2 ;;
esac
bin_dir="${BERTH_BIN_DIR:-$root/target/$profile}"
for b in berthd berth berth-agent berth-job-shim; do
  if [ ! -x "$bin_dir/$b" ]; then
    echo "build-images.sh: $bin_dir/$b is missing; build it first: cargo build --$profile --bins" >&2
    [ "$profile" = debug ] && echo "  (for debug: cargo build --workspace --bins)" >&2
    exit 1
  fi
done
command -v docker >/dev/null || { echo "build-images.sh: docker is not installed" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# copy_program CTX SRC DEST: SRC into CTX at DEST (debug info stripped to
# keep images small), then every library ldd names for SRC at its own path.
copy_program() {
  local ctx="$1" src="$2" dest="$3"
  mkdir -p "$ctx$(dirname "$dest")"
  cp -L "$src" "$ctx$dest"
  if command -v strip >/dev/null; then strip --strip-debug "$ctx$dest" 2>/dev/null || true; fi
  # Lines look like "libz.so.1 => /lib/.../libz.so.1 (0x...)" or
  # "/lib64/ld-linux-x86-64.so.2 (0x...)"; "statically linked" has none.
  ldd "$src" 2>/dev/null | grep -o '/[^ )]*' | while read -r lib; do
    if [ ! -e "$ctx$lib" ]; then
      mkdir -p "$ctx$(dirname "$lib")"
      cp -L "$lib" "$ctx$lib"
    fi
  done
}

# Both images: a passwd and group naming root (tools that look the user
# up), a writable /tmp, and the data directories the configs name.
base_files() {
  local ctx="$1"
  mkdir -p "$ctx/etc" "$ctx/tmp" "$ctx/var/lib/berth" "$ctx/etc/berth"
  chmod 1777 "$ctx/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\n' > "$ctx/etc/passwd"
  printf 'root:x:0:\n' > "$ctx/etc/group"
  printf 'hosts: files dns\n' > "$ctx/etc/nsswitch.conf"
}

node_ctx="$work/node"
base_files "$node_ctx"
copy_program "$node_ctx" "$bin_dir/berthd" /usr/local/bin/berthd
copy_program "$node_ctx" "$bin_dir/berth" /usr/local/bin/berth
cp "$here/Dockerfile.berthd" "$node_ctx/Dockerfile"

agent_ctx="$work/agent"
base_files "$agent_ctx"
copy_program "$agent_ctx" "$bin_dir/berth-agent" /usr/local/bin/berth-agent
copy_program "$agent_ctx" "$bin_dir/berth-job-shim" /usr/local/bin/berth-job-shim
# The shell jobs run under, and the tools the example jobs call, each as
# /bin/NAME (on PATH in the container whatever its real name here).
for tool in sh sleep date cat true false env hostname; do
  path="$(type -P "$tool" || true)"
  case "$path" in
    /*) copy_program "$agent_ctx" "$path" "/bin/$tool" ;;
    *) echo "build-images.sh: $tool not found on this machine; the agent image goes without it" >&2 ;;
  esac
done
cp "$here/Dockerfile.agent" "$agent_ctx/Dockerfile"

docker build -q -t "berth/berthd:$tag" "$node_ctx"
docker build -q -t "berth/agent:$tag" "$agent_ctx"
docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^berth/(berthd|agent):'"$tag"' '
