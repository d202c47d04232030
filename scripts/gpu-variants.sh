#!/usr/bin/env bash
# Validates and times variants of one built-in strategy on a GPU machine without Rust (see
# scripts/gpu-check.sh for what to carry): the workload's strategy N (default 1, as
# `cutesmith strategies WORKLOAD` numbers them) as it is, and once per VARIANT with its
# defines placed right after the source's first line (before the template's defaults), the
# strategy's own #define of each name it sets left out.
#
#   scripts/gpu-variants.sh WORKLOAD[:N] NAME=DEF=V[,DEF=V...] ...
#   e.g. scripts/gpu-variants.sh fp32_4096 trunc=CS_F32_SPLIT=0 k32p2=CS_TILE_K=32,CS_F32_PROMOTE=2
#
# Sources go to $OUT/variants, logs to $OUT (scripts/gpu-check-strategies.sh runs them).
# Keep OUT to a few files (or tar it) where only a few files can be copied back.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cutesmith-gpu}
spec=${1:?usage: $0 WORKLOAD[:N] NAME=DEF=V[,DEF=V...] ...}
shift
w=${spec%%:*}
n=${spec#"$w"}
n=${n#:}
n=${n:-1}
dir="$OUT/variants"
rm -rf "$dir" "$dir.emit"
mkdir -p "$dir"
.carry/cutesmith strategies "$w" --emit "$dir.emit" >/dev/null 2>&1 || { echo "$w: strategies failed"; exit 1; }
base=$(ls "$dir.emit"/$(printf '%02d' "$n")-*.cu 2>/dev/null | head -1)
[ -n "$base" ] || { echo "$w: no strategy $n"; exit 1; }
cp "$base" "$dir/base.cu"
args=("$w=$dir/base.cu")
for v in "$@"; do
  name=${v%%=*}
  defs=${v#*=}
  f="$dir/$name.cu"
  IFS=',' read -ra kv <<<"$defs"
  # The strategy's own #define of a name the variant sets would come later and win: drop it.
  names=$(for d in "${kv[@]}"; do printf '%s|' "${d%%=*}"; done)
  { head -n 1 "$base"; for d in "${kv[@]}"; do echo "#define ${d%%=*} ${d#*=}"; done
    tail -n +2 "$base" | grep -v -E "^#define (${names%|})( |$)"; } >"$f"
  args+=("$w=$f")
done
rm -rf "$dir.emit"
OUT="$OUT" bash scripts/gpu-check-strategies.sh "${args[@]}"
