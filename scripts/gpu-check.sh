#!/usr/bin/env bash
# cutesmith's GPU checks on a machine with an NVIDIA GPU, CUDA 13 and no Rust toolchain
# (a GPU machine without Rust). Build on a development machine first:
#   cargo build --release && cargo test --release --no-run
#   mkdir -p .carry && cp target/release/cutesmith .carry/ && cp <the tests/all.rs binary> .carry/all-tests
#   (cd <cutlass wheel>/cutlass_library/source && tar czf <repo>/.carry/cutlass.tgz include tools/util/include)
# then run this from the repository root there. Results go to $OUT (default /tmp/cutesmith-gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cutesmith-gpu}
mkdir -p "$OUT"
. scripts/gpu-env.sh
cs=.carry/cutesmith

step() { echo; echo "== $* ($(date +%T))"; }
step doctor
$cs doctor 2>&1 | tee "$OUT/doctor.txt"
step "GPU tests (cargo test -- --ignored)"
# The sandbox test checks that a hostile kernel cannot find this in any environment.
export CUTESMITH_HOSTILE_SECRET=${CUTESMITH_HOSTILE_SECRET:-planted-by-gpu-check}
.carry/all-tests --ignored --test-threads=1 --nocapture "${@}" 2>&1 | tee "$OUT/gpu-tests.log"
