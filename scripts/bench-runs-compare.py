#!/usr/bin/env python3
"""Compares two `cutesmith bench` reports of one suite (JSON, as `bench --out` writes them).

Usage: scripts/bench-runs-compare.py FIRST.json SECOND.json

For each workload measured in both: the best time and its speedup over cuBLAS in each run,
and how many candidates each run evaluated; then, over those workloads, the candidates
evaluated, the distinct kernel instances they needed (distinct strategies: the workloads
of a suite like `llm` share dtypes, layouts and epilogue, so a strategy is one kernel),
and the geometric mean of the speedups. Prints Markdown.
"""
import json
import math
import sys


def rows(path):
    with open(path) as f:
        return {r["workload"]: r for r in json.load(f)["rows"]}


def cublas(r):
    return next((us for name, us, _ in r["baselines"] if name == "cublas"), None)


def tried(r):
    return (r.get("search") or {}).get("tried") or []


def label(t):
    s = t["strategy"]
    return s["template"] + " " + " ".join(f"{k}={v}" for k, v in sorted(s["params"].items()))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = rows(sys.argv[1]), rows(sys.argv[2])
    both = [w for w in a if w in b]
    print("| workload | run 1 us (vs cuBLAS) | tried | run 2 us (vs cuBLAS) | tried |")
    print("| --- | --- | --- | --- | --- |")
    logs = {1: [], 2: []}
    for w in both:
        cells = []
        for i, r in ((1, a[w]), (2, b[w])):
            c = cublas(r)
            s = c / r["best_us"] if c and r.get("best_us") else None
            if s:
                logs[i].append(math.log(s))
            cells.append(f"{r['best_us']:.2f} ({s:.2f}x)" if s else "-")
            cells.append(str(len(tried(r))))
        print(f"| {w} | " + " | ".join(cells) + " |")
    print()
    print("| | run 1 | run 2 |")
    print("| --- | --- | --- |")
    for name, f in (
        ("candidates evaluated", lambda rs: sum(len(tried(rs[w])) for w in both)),
        ("distinct kernel instances", lambda rs: len({label(t) for w in both for t in tried(rs[w])})),
    ):
        print(f"| {name} | {f(a)} | {f(b)} |")
    g = [math.exp(sum(v) / len(v)) if v else float("nan") for v in (logs[1], logs[2])]
    print(f"| geomean vs cuBLAS ({len(both)} workloads) | {g[0]:.3f} | {g[1]:.3f} |")


if __name__ == "__main__":
    main()
