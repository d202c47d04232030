#!/usr/bin/env bash
# The views' GPU run (bench/views-h200.md): two attention Models imported and benched stage
# by stage beside their eager PyTorch time, and the view template's paths checked and timed.
# KB43: KernelBench level 3's 43_MinGPTCausalAttention.py (default scratch-v/kb3_43.py). RES: where
# the logs and tables go (default /tmp/views-out). Carry .carry (scripts/gpu-check.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
export CUTESMITH_PYTHON=python3
cs=$PWD/.carry/cutesmith
O=${RES:-/tmp/views-out}
mkdir -p /tmp/wl "$O"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for p in examples/pytorch/mingpt_attention.py "${KB43:-scratch-v/kb3_43.py}"; do
  stem=$(basename "$p" .py)
  $cs import "$p" --out "/tmp/wl/$stem.toml" >"$O/import-$stem.log" 2>&1; echo "import $stem exit $?"
done
SEEDS=2 OUT=$O/check scripts/gpu-check-strategies.sh act_view_transpose_f32 tests/fixtures/workloads/act_view_transpose2d_f16_small.toml tests/fixtures/workloads/act_view_heads_bf16_small.toml 2>&1 | grep -E "^== check|exit|result:|\| candidate|\| copy" 
for s in mingpt_attention kb3_43; do
  echo "== bench $s ($(date +%T))"
  $cs bench "/tmp/wl/suites/$s.toml" --workloads-dir /tmp/wl --out "$O/bench" -j "$(nproc)" --max-candidates 2 >"$O/bench-$s.log" 2>&1
  echo "bench $s exit $?"
  grep -E "^\| |total|Model" "$O/bench/$s.md" | grep -v "^| ---" | cut -c1-260 | head -30
done
cd scripts/probes && python3 torch_model.py ../../examples/pytorch/mingpt_attention.py "../../${KB43:-scratch-v/kb3_43.py}" 2>&1 | tail -6
