#!/usr/bin/env bash
# `cutesmith bench headline` (one candidate per workload) with an earlier build
# (.carry/cutesmith-before with its own templates and workloads in .carry/before.tgz) and
# with this build, on the same GPU machine, one after the other; results to $OUT.
set -u
. scripts/gpu-env.sh
mkdir -p /tmp/before && tar xzf .carry/before.tgz -C /tmp/before
echo "== before $(date +%T)"
( export CUTESMITH_WORKER_EXE=$PWD/.carry/cutesmith-before CUTESMITH_TEMPLATES=/tmp/before/cutlass-templates CUTESMITH_CACHE_DIR=/tmp/cc-before; cd /tmp/before && timeout 290 $OLDPWD/.carry/cutesmith-before bench headline --workloads-dir /tmp/before/workloads --out /tmp/before/bench --max-candidates 1 -j 16 > $OUT/before.log 2>&1; echo rc $? )
cp /tmp/before/bench/headline.md $OUT/headline-before.md; cp /tmp/before/bench/headline.json $OUT/headline-before.json
echo "== after $(date +%T)"
timeout 290 .carry/cutesmith bench headline --max-candidates 1 -j 16 --runs-dir /tmp/runs-after --out /tmp/after-bench > $OUT/after.log 2>&1; echo rc $?
cp /tmp/after-bench/headline.md $OUT/headline-after.md; cp /tmp/after-bench/headline.json $OUT/headline-after.json
tail -n 3 $OUT/before.log $OUT/after.log
