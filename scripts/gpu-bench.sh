#!/usr/bin/env bash
# Runs `cutesmith bench` for each suite named on the command line on a GPU
# machine (see scripts/gpu-check.sh for what to carry), copying bench/<suite>.md/.json
# to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
for suite in "$@"; do
  echo "== bench $suite ($(date +%T))"
  .carry/cutesmith bench "$suite" -j "$(nproc)" 2>"${OUT:-/tmp}/bench-$suite.log"
  [ -n "${OUT:-}" ] && cp "bench/$suite.md" "bench/$suite.json" "$OUT/" 2>/dev/null
done
