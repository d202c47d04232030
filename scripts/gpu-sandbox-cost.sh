#!/usr/bin/env bash
# The sandbox's cost on a GPU machine without Rust (carried build, see gpu-check.sh):
# `cutesmith bench headline` with the sandbox and with --no-sandbox, one after the other
# on the same machine (the second reuses the first's compile cache, so both time the same
# kernels), and one Nsight Compute profile of a kernel in the sandbox.
# Results go to $OUT (default /tmp/cutesmith-gpu).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cutesmith-gpu}
mkdir -p "$OUT"
. scripts/gpu-env.sh
cs=.carry/cutesmith
echo "== profile in the sandbox $(date +%T)"
timeout 200 $cs profile tests/fixtures/hostile/probe_relu.cu -w act_relu_bf16 > "$OUT/profile.txt" 2>&1
echo "rc $?"; grep -E "ncu|duration|DRAM" "$OUT/profile.txt" | head -5
for mode in sandbox no-sandbox; do
  echo "== bench headline, $mode $(date +%T)"
  flag=""; [ "$mode" = no-sandbox ] && flag="--no-sandbox"
  timeout 280 $cs $flag bench headline --max-candidates 1 -j 16 --runs-dir "/tmp/runs-$mode" \
    --out "/tmp/bench-$mode" > "$OUT/headline-$mode.log" 2>&1
  echo "rc $?"
  cp "/tmp/bench-$mode/headline.md" "$OUT/headline-$mode.md" 2>/dev/null
done
