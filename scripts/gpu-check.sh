#!/usr/bin/env bash
# Checks a GPU host end to end with the real binaries: what the agent
# discovers (NVML, AMD KFD), then a one-host cluster (`berthd dev`, 3 nodes
# and 1 agent on this host, under a temporary directory) running a job
# that asks for one GPU of the discovered type and prints what it got.
# Usage: scripts/gpu-check.sh [BIN_DIR]   (default: target/debug, else PATH)
# Exits non-zero when no GPU is discovered or the job does not see it.
set -uo pipefail
bin=${1:-$(cd "$(dirname "$0")/.." && pwd)/target/debug}
[ -x "$bin/berthd" ] && export PATH="$bin:$PATH"
work=$(mktemp -d /tmp/berth-gpu-check.XXXXXX)
servers=127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103
berth() { command berth --server "$servers" "$@"; }

echo "== what the agent discovers"
berth-agent --print-inventory | tee "$work/inventory.txt" || exit 1
model=$(sed -n 's/^  gpu 0: \([^,]*\),.*/\1/p' "$work/inventory.txt")
if [ -z "$model" ]; then
    echo "gpu-check: the agent discovered no GPU" >&2
    exit 1
fi

echo "== a cluster on this host"
berthd dev --dir "$work/dev" --agents 1 > "$work/dev.log" 2>&1 &
dev=$!
trap 'kill $dev 2>/dev/null; wait $dev 2>/dev/null' EXIT
for _ in $(seq 90); do
    berth sinfo -N -l 2>/dev/null | grep -q idle && break
    sleep 1
done
berth scontrol show node

echo "== a job asking for one $model GPU"
mkdir -p "$work/jobs"
cd "$work/jobs" || exit 1
smi=$(command -v nvidia-smi || true)
probe='echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES=$ROCR_VISIBLE_DEVICES'
[ -n "$smi" ] && probe="$probe; $smi -L"
timeout 120 berth submit --wait -o "$work/jobs/gpu.out" --gpus "$model:1" -t 2 --wrap "$probe"
status=$?
cat "$work/jobs/gpu.out"
grep -q "VISIBLE_DEVICES=0" "$work/jobs/gpu.out" || status=1
echo "gpu-check: $([ $status -eq 0 ] && echo ok || echo FAILED) (logs under $work)"
exit $status
