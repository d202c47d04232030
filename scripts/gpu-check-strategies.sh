#!/usr/bin/env bash
# Validates and times chosen built-in strategies on a GPU machine without Rust (see
# scripts/gpu-check.sh for what to carry). Each argument is WORKLOAD[:N[,N...]]: the
# workload's valid strategies numbered as `cutesmith strategies WORKLOAD` lists them
# (default: the first; WORKLOAD may be a spec file's path), or WORKLOAD=FILE.cu (a source as it is, e.g. one emitted from an
# earlier template for a before/after comparison). All sources compile first, in parallel;
# then `cutesmith check` runs each in turn (CHECK_TIMEOUT: seconds before a hanging worker
# is killed, default the check's own). Sources and logs go to $OUT (default /tmp/cutesmith-gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cutesmith-gpu}
SEEDS=${SEEDS:-2}
mkdir -p "$OUT/src"
. scripts/gpu-env.sh
cs=${CUTESMITH_BIN:-.carry/cutesmith}
files=()
pairs=()
for spec in "$@"; do
  if [[ "$spec" == *=*.cu ]]; then   # WORKLOAD=FILE.cu: a source as it is
    files+=("${spec#*=}")
    pairs+=("${spec%%=*} ${spec#*=}")
    continue
  fi
  w=${spec%%:*}
  nums=${spec#"$w"}
  nums=${nums#:}
  nums=${nums:-1}
  rm -rf "$OUT/src/$w"
  $cs strategies "$w" --emit "$OUT/src/$w" >/dev/null 2>&1 || { echo "$w: strategies failed"; continue; }
  for n in ${nums//,/ }; do
    f=$(ls "$OUT/src/$w"/$(printf '%02d' "$n")-*.cu 2>/dev/null | head -1)
    [ -n "$f" ] || { echo "$w: no strategy $n"; continue; }
    files+=("$f")
    pairs+=("$w $f")
  done
done
echo "== compile ${#files[@]} sources ($(date +%T))"
$cs compile -j "$(nproc)" "${files[@]}" >"$OUT/compile.log" 2>&1 || true
grep -E "FAILED|error" "$OUT/compile.log" | head -40
for p in "${pairs[@]}"; do
  w=${p%% *}
  f=${p#* }
  tag="$(basename "$w" .toml)-$(basename "$f" .cu)"
  echo "== check $tag ($(date +%T))"
  $cs check -w "$w" "$f" --seeds "$SEEDS" ${CHECK_TIMEOUT:+--timeout "$CHECK_TIMEOUT"} >"$OUT/$tag.log" 2>&1
  echo "exit $?"
  tail -n 25 "$OUT/$tag.log"
done
