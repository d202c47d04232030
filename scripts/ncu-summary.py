#!/usr/bin/env python3
# Summarizes Nsight Compute CSV logs (`ncu --csv --metrics ...`, the metric set of
# src/feedback/ncu.rs): one line per profiled kernel with its time, SM / DRAM / tensor-pipe
# throughput, L2 hit rate, grid and the top three warp stalls.
#   python3 scripts/ncu-summary.py LABEL=FILE.csv ...
import csv, sys

def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    return list(csv.DictReader(lines))

def num(v):
    try:
        return float(v.replace(",", ""))
    except (AttributeError, ValueError):
        return None

print("| case | kernel | us | SM % | DRAM % | tensor % | L2 hit % | grid x block | regs | top stalls (warps per issue) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for arg in sys.argv[1:]:
    label, path = arg.split("=", 1)
    kernels = {}
    for r in rows(path):
        key = (r.get("ID"), r.get("Kernel Name"))
        k = kernels.setdefault(key, {"grid": r.get("Grid Size"), "block": r.get("Block Size")})
        name, unit, val = r.get("Metric Name"), r.get("Metric Unit"), num(r.get("Metric Value"))
        if val is None:
            continue
        if name == "gpu__time_duration.sum":
            val = val / 1000.0 if unit in ("nsecond", "ns") else val * 1000.0 if unit in ("msecond", "ms") else val
        k[name] = val
    for (kid, kname), k in kernels.items():
        if "gpu__time_duration.sum" not in k:
            continue
        tensor = max((v for n, v in k.items() if n.startswith("sm__pipe_tensor_op_") and isinstance(v, float)), default=None)
        stalls = sorted(((v, n[len("smsp__average_warps_issue_stalled_"):-len("_per_issue_active.ratio")])
                         for n, v in k.items() if n.startswith("smsp__average_warps_issue_stalled_")), reverse=True)[:3]
        f = lambda n: "-" if k.get(n) is None else f"{k[n]:.1f}"
        print(f"| {label} | {kname[:60]} | {k['gpu__time_duration.sum']:.2f} | "
              f"{f('sm__throughput.avg.pct_of_peak_sustained_elapsed')} | "
              f"{f('dram__throughput.avg.pct_of_peak_sustained_elapsed')} | "
              f"{'-' if tensor is None else f'{tensor:.1f}'} | {f('lts__t_sector_hit_rate.pct')} | "
              f"{k['grid']} x {k['block']} | {f('launch__registers_per_thread')} | "
              + ", ".join(f"{n} {v:.1f}" for v, n in stalls) + " |")
