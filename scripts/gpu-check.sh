#!/usr/bin/env bash
# cutesmith's GPU checks on a machine with an NVIDIA GPU, CUDA 13 and no Rust toolchain
# (the lent GPU machine). Build on a development machine first:
#   cargo build --release && cargo test --release --no-run
#   mkdir -p .carry && cp target/release/cutesmith .carry/ && cp <the tests/all.rs binary> .carry/all-tests
#   (cd <cutlass wheel>/cutlass_library/source && tar czf <repo>/.carry/cutlass.tgz include tools/util/include)
# then run this from the repository root there. Results go to $OUT (default /tmp/cutesmith-gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cutesmith-gpu}
mkdir -p "$OUT" /tmp/cutlass
tar xzf .carry/cutlass.tgz -C /tmp/cutlass
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export CUTLASS_DIR=/tmp/cutlass
export CUTESMITH_CACHE_DIR=/tmp/cutesmith-cache
export CUTESMITH_NO_INSTALL=1
export CUTESMITH_WORKER_EXE="$PWD/.carry/cutesmith"
export CUTESMITH_TEMPLATES="$PWD/cutlass-templates"
# The test binary finds fixtures under the path it was built at.
built_at=${CUTESMITH_BUILT_AT:-/work/main}
if [ ! -e "$built_at" ]; then mkdir -p "$(dirname "$built_at")" && ln -s "$PWD" "$built_at"; fi
cs=.carry/cutesmith
chmod +x .carry/cutesmith .carry/all-tests

step() { echo; echo "== $* ($(date +%T))"; }
step doctor
$cs doctor 2>&1 | tee "$OUT/doctor.txt"
step "GPU tests (cargo test -- --ignored)"
.carry/all-tests --ignored --test-threads=1 --nocapture "${@}" 2>&1 | tee "$OUT/gpu-tests.log"
