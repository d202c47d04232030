#!/usr/bin/env bash
# Times a suite on a GPU pool on a GPU machine without Rust (see scripts/gpu-check.sh for
# what to carry): `cutesmith bench SUITE --gpus 0`, then `--gpus all`, with the tuning
# database off so both runs try the same candidates (the first run also fills the compile
# cache; the session phase of each run is timed from its suite events file, excluding the
# up-front compile). nvidia-smi samples every GPU's utilization once a second during the
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
