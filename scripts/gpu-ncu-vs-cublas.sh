#!/usr/bin/env bash
# Nsight Compute on a built-in strategy and on cuBLAS (through PyTorch, x @ w.t()) for the
# same bf16 nn.Linear shape, side by side, on a GPU machine without Rust (see
# scripts/gpu-check.sh for what to carry). Each argument is WORKLOAD[:N]: the workload's
# strategy N as `cutesmith strategies WORKLOAD` numbers it (default 1). ncu runs with
# `--clock-control none`, the metric set of src/feedback/ncu.rs; CSVs and the summary table
# go to $OUT (default /tmp/cutesmith-ncu).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cutesmith-ncu}
mkdir -p "$OUT/src"
. scripts/gpu-env.sh
cs=${CUTESMITH_BIN:-.carry/cutesmith}
metrics="gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size,lts__t_sector_hit_rate.pct,dram__bytes.sum,regex:sm__pipe_tensor_op_.*_cycles_active\.avg\.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
summary=()
for spec in "$@"; do
  w=${spec%%:*}
  n=${spec#"$w"}; n=${n#:}; n=${n:-1}
  rm -rf "$OUT/src/$w"
  $cs strategies "$w" --emit "$OUT/src/$w" >"$OUT/$w.strategies" 2>&1 || { echo "$w: strategies failed"; continue; }
  f=$(ls "$OUT/src/$w"/$(printf '%02d' "$n")-*.cu | head -1)
  shape=$(head -1 "$OUT/$w.strategies" | grep -o 'headline [0-9x]*' | cut -d' ' -f2)
  echo "== $w ($shape): strategy $n, $(sed -n 1p "$f" | cut -c1-120)"
  $cs profile -w "$w" "$f" --save-csv "$OUT/$w-ours.csv" >"$OUT/$w-profile.log" 2>&1
  echo "profile exit $?"; grep -E "^time:|duration|top stalls" "$OUT/$w-profile.log"
  ncu --csv --clock-control none --nvtx --nvtx-include "gemm/" --metrics "$metrics" \
      --log-file "$OUT/$w-cublas.csv" python3 scripts/probes/ncu_torch_gemm.py "$shape" >/dev/null 2>&1
  echo "ncu (cuBLAS) exit $?"
  summary+=("$w ours=$OUT/$w-ours.csv" "$w cublas=$OUT/$w-cublas.csv")
done
args=()
for s in "${summary[@]}"; do args+=("${s// /:}"); done
python3 scripts/ncu-summary.py "${args[@]}" | tee "$OUT/summary.md"
