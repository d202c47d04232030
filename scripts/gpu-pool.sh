#!/usr/bin/env bash
# Times a suite on a GPU pool on a GPU machine without Rust (see scripts/gpu-check.sh for
# what to carry): `cutesmith bench SUITE --gpus 0`, then `--gpus all`, with the tuning
# database off so both runs try the same candidates. The compile cache is warmed first, so
# neither wall time includes nvcc; the session phase of each run is also timed from its
# suite events file. nvidia-smi samples every GPU's utilization once a second during the
# second run. Tables, logs and the samples go to $OUT (default /tmp/cutesmith-pool).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
suite=${1:-pool}
OUT=${OUT:-/tmp/cutesmith-pool}
mkdir -p "$OUT"
export CUTESMITH_TUNING_DB=off
cs=.carry/cutesmith
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
# Seconds between the first and the last event of the newest suite events file.
span() {
  f=$(ls -t runs/suite-"$suite"-*.jsonl | head -1)
  python3 - "$f" <<'PY'
import json, sys, datetime
ts = [json.loads(l)["ts"] for l in open(sys.argv[1]) if '"ts"' in l]
p = lambda s: datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ")
print(int((p(ts[-1]) - p(ts[0])).total_seconds()))
PY
}
# Compile every candidate both runs will try first (the suite's first max_candidates of each
# workload), so that neither run's wall time includes nvcc.
python3 - "$suite" >"$OUT/precompile.txt" <<'PY'
import sys, tomllib
s = tomllib.load(open(f"workloads/suites/{sys.argv[1]}.toml", "rb"))
n = s.get("max_candidates", 4)
for w in s["workloads"]:
    print(w, n)
PY
mkdir -p "$OUT/pre"
# (Each source as kernel.cu in a folder of its own: the file name is part of the compile
# cache's key, and a session compiles its versions as kernel.cu.)
while read -r w n; do
  $cs strategies "$w" --emit "$OUT/pre/$w" >/dev/null 2>&1
  for f in $(ls "$OUT/pre/$w"/*.cu 2>/dev/null | head -n "$n"); do
    d="${f%.cu}"; mkdir -p "$d"; mv "$f" "$d/kernel.cu"; echo "$d/kernel.cu"
  done
done <"$OUT/precompile.txt" | xargs $cs compile -j "$(nproc)" >"$OUT/precompile.log" 2>&1
rm -rf "$OUT/pre"
echo "== compile cache warmed ($(grep -c 'compiled' "$OUT/precompile.log") kernels)"
for gpus in 0 all; do
  echo "== bench $suite --gpus $gpus ($(date +%T))"
  if [ "$gpus" = all ]; then
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader -l 1 \
      >"$OUT/smi-gpus-all.csv" 2>&1 &
    smi=$!
  fi
  t0=$(date +%s)
  $cs bench "$suite" --gpus "$gpus" --out "$OUT/gpus-$gpus" -j "$(nproc)" 2>"$OUT/bench-gpus-$gpus.log" \
    >"$OUT/table-gpus-$gpus.md"
  t1=$(date +%s)
  [ "$gpus" = all ] && kill "$smi"
  echo "wall $((t1 - t0)) s, sessions $(span) s (exit code above 1 = error: see the log)"
  grep -E "^\| " "$OUT/table-gpus-$gpus.md" | head -14
done
echo "== GPU utilization samples during --gpus all (index: samples > 50%, of all)"
awk -F', ' '{gsub(/ %/,"",$3); n[$2]++; if ($3+0 > 50) b[$2]++} END {for (i in n) print "GPU " i ": " b[i]+0 " of " n[i]}' \
  "$OUT/smi-gpus-all.csv"
