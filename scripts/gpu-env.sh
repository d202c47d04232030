# Sourced by the scripts/gpu-*.sh scripts: the environment for running a carried
# cutesmith build on a GPU machine without Rust (system CUDA, carried CUTLASS headers).
mkdir -p /tmp/cutlass
[ -f /tmp/cutlass/include/cutlass/version.h ] || tar xzf .carry/cutlass.tgz -C /tmp/cutlass
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export CUTLASS_DIR=/tmp/cutlass
export CUTESMITH_CACHE_DIR=${CUTESMITH_CACHE_DIR:-/tmp/cutesmith-cache}
export CUTESMITH_NO_INSTALL=1
export CUTESMITH_WORKER_EXE="${CUTESMITH_WORKER_EXE:-$PWD/.carry/cutesmith}"
export CUTESMITH_TEMPLATES="$PWD/cutlass-templates"
built_at=${CUTESMITH_BUILT_AT:-/work/main}
if [ ! -e "$built_at" ]; then mkdir -p "$(dirname "$built_at")" && ln -s "$PWD" "$built_at"; fi
chmod +x .carry/cutesmith .carry/all-tests 2>/dev/null || true
