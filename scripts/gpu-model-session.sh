#!/usr/bin/env bash
# One agent session end to end on a GPU machine without Rust (carried build, see
# gpu-check.sh), the model being scripts/scripted-model-server.py serving a replay
# transcript over the OpenAI protocol: model requests, compile, validation and timing on
# the GPU, all in the sandbox. Results go to $OUT (default /tmp/cutesmith-gpu).
#   scripts/gpu-model-session.sh [WORKLOAD] [TRANSCRIPT]
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cutesmith-gpu}
mkdir -p "$OUT"
. scripts/gpu-env.sh
w=${1:-act_silu_bf16}
t=${2:-examples/replay/silu_bf16_from_broken.toml}
port=18431
python3 scripts/scripted-model-server.py "$t" $port "$OUT/model-requests.jsonl" &
server=$!
sleep 1
export CUTESMITH_MODEL_BASE_URL=http://127.0.0.1:$port/v1 CUTESMITH_MODEL=scripted
export OPENAI_API_KEY=sk-scripted-session-key
timeout 500 .carry/cutesmith run "$w" --rounds 2 --runs-dir /tmp/model-runs -j 16 \
  > "$OUT/session.log" 2>&1
echo "rc $?"
kill $server
d=$(ls -d /tmp/model-runs/*/ | head -1)
cp "$d/session.json" "$OUT/" 2>/dev/null
grep -c . "$OUT/model-requests.jsonl"
