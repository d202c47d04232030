#!/usr/bin/env bash
# What one candidate's evaluation costs (validation of every shape and seed, timing,
# re-validation), with validation on the GPU and with it on the host
# (CUTESMITH_HOST_VALIDATION=1), for the workloads of a suite (default `big`), on a GPU
# machine without Rust (see scripts/gpu-check.sh for what to carry). Writes
# $OUT/eval-cost.md: per workload, the evaluation's wall time both ways, the candidate's
# and cuBLAS's/the baselines' kernel times, and the verdicts.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cutesmith-gpu}
mkdir -p "$OUT"
. scripts/gpu-env.sh
suite=${1:-big}
for mode in device host; do
  echo "== bench $suite, validation on the $mode ($(date +%T))"
  if [ "$mode" = host ]; then export CUTESMITH_HOST_VALIDATION=1; else unset CUTESMITH_HOST_VALIDATION; fi
  rm -rf "/tmp/eval-cost-$mode"
  .carry/cutesmith bench "$suite" -j "$(nproc)" --runs-dir "/tmp/eval-cost-$mode" \
    --out "/tmp/eval-cost-$mode/bench" 2>"$OUT/eval-cost-$mode.log"
done
python3 - "$OUT/eval-cost.md" <<'PY'
import glob, json, sys
rows = {}
for mode in ("device", "host"):
    for f in sorted(glob.glob(f"/tmp/eval-cost-{mode}/*/versions/*/evaluation.json")):
        e = json.load(open(f))
        # The session directory is <workload>-<date>-<time>-<salt>.
        session = f.split("/")[3].rsplit("-", 3)[0]
        r = e.get("report") or {}
        t = r.get("timing") or {}
        cand = (t.get("candidate") or {}).get("median_us")
        base = ", ".join(f"{b['name']} {b['stats']['median_us']:.1f}" for b in t.get("baselines", []))
        fault = (e.get("fault") or {}).get("kind", "none")
        dev = (r.get("device") or {}).get("name", "?")
        rows.setdefault(session, {})[mode] = (e["seconds"], cand, base, fault, dev)
with open(sys.argv[1], "w") as out:
    out.write("| workload | device | evaluation s (GPU validation) | evaluation s (host validation) | candidate us | baselines us | fault (GPU / host) |\n|---|---|---|---|---|---|---|\n")
    for s, m in rows.items():
        d, h = m.get("device"), m.get("host")
        fmt = lambda x: f"{x[0]:.1f}" if x else "-"
        cand = f"{d[1]:.1f}" if d and d[1] else "-"
        out.write(f"| {s} | {(d or h)[4]} | {fmt(d)} | {fmt(h)} | {cand} | {(d or h)[2]} | {d[3] if d else '-'} / {h[3] if h else '-'} |\n")
print(open(sys.argv[1]).read())
PY
