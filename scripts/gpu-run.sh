#!/usr/bin/env bash
# Runs agent sessions (`cutesmith run`) on a GPU machine without Rust with the carried release
# binary (see scripts/gpu-check.sh for what to carry). Each argument is one session:
#   WORKLOAD[:builtin|:replay=FILE]
# Sessions go to $OUT/runs (default /tmp/cutesmith-gpu/runs); each log to $OUT/run-N.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cutesmith-gpu}
mkdir -p "$OUT/runs"
. scripts/gpu-env.sh
i=0
for spec in "$@"; do
  i=$((i + 1))
  w=${spec%%:*}
  mode=${spec#"$w"}
  args=(run "$w" --runs-dir "$OUT/runs" -j "$(nproc)")
  case "$mode" in
    :builtin) args+=(--builtin) ;;
    :replay=*) args+=(--replay "${mode#:replay=}") ;;
  esac
  echo "== cutesmith ${args[*]} ($(date +%T))"
  .carry/cutesmith "${args[@]}" >"$OUT/run-$i.log" 2>&1
  echo "exit $?"
  tail -n 20 "$OUT/run-$i.log"
done
