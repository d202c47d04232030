#!/usr/bin/env bash
# The PyTorch round trip on a GPU machine without Rust (see scripts/gpu-check.sh for what
# to carry; the CUTLASS archive must hold include/ and tools/util/include/): import a
# KernelBench-style problem file, run a built-in session on it and on a built-in workload,
# export both with --torch, build each package and run its test_kernel.py (every shape and
# seed against the workload's reference, then the kernel timed beside PyTorch's own op).
# Also checks the GPU pool flag on this machine (--gpus 0 runs, --gpus 9 is refused).
# Logs go to $OUT (default /tmp/cutesmith-torch).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
OUT=${OUT:-/tmp/cutesmith-torch}
mkdir -p "$OUT" /tmp/wl
cs=$PWD/.carry/cutesmith
export CUTESMITH_PYTHON=${CUTESMITH_PYTHON:-python3}
problem=${1:-examples/pytorch/linear_scale_add_clamp_gelu.py}
builtin=${2:-act_gelu_erf_bf16}
stem=$(basename "$problem" .py)
python3 -c "import torch; print('torch', torch.__version__, 'built for CUDA', torch.version.cuda, 'on', torch.cuda.get_device_name(0))"
$cs import "$problem" --out "/tmp/wl/$stem.toml" >"$OUT/import.log" 2>&1
echo "import exit $?"; cat "$OUT/import.log" | tail -5
for w in "/tmp/wl/$stem.toml" "$builtin"; do
  name=$(basename "$w" .toml)
  echo "== $name ($(date +%T))"
  $cs run "$w" --builtin --max-candidates 2 --rounds 2 --no-profile --gpus 0 \
    --runs-dir /tmp/torch-runs >"$OUT/run-$name.log" 2>&1
  echo "run exit $?"; grep -E "^\| v|goal|stopped" "$OUT/run-$name.log" | head -8
  dir=$(ls -td /tmp/torch-runs/"$name"-* | head -1)
  $cs export "$dir" --torch "/tmp/pkg-$name" >"$OUT/export-$name.log" 2>&1
  echo "export exit $?"
  (cd "/tmp/pkg-$name" && python3 test_kernel.py --cutlass /tmp/cutlass) >"$OUT/test-$name.log" 2>&1
  echo "test_kernel.py exit $?"; tail -20 "$OUT/test-$name.log"
done
echo "== --gpus 9 on this machine"
$cs run "$builtin" --builtin --gpus 9 --runs-dir /tmp/torch-runs 2>&1 | tail -2
