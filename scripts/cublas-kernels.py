# Which kernel cuBLAS runs for small-M bf16 GEMMs (nn.Linear: X[M,K] W[N,K]^T), with its
# grid, block and time: the configuration a built-in kernel competes with. Run on a GPU
# machine with PyTorch: python3 scripts/cublas-kernels.py [MxNxK ...]
# DTYPE=f32 (SGEMM, no TF32), tf32 (fp32 on TF32 tensor cores) or bf16 (the default).
import json, os, sys, tempfile
import torch
from torch.profiler import profile, ProfilerActivity

shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1:]] or [
    (16, 4096, 4096), (32, 11008, 4096), (16, 18944, 3584), (16, 14336, 4096),
    (16, 4096, 14336), (64, 6144, 4096), (64, 18944, 3584), (256, 4096, 4096)]
dtype = os.environ.get("DTYPE", "bf16")
if dtype not in ("bf16", "f32", "tf32"):
    sys.exit(f"DTYPE={dtype}: expected bf16, f32 or tf32")
torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
elem = torch.bfloat16 if dtype == "bf16" else torch.float32
dev = torch.device("cuda")
print(torch.cuda.get_device_name(), dtype)
flush = torch.empty(4 * torch.cuda.get_device_properties(0).L2_cache_size // 4, device=dev)
for (m, n, k) in shapes:
    x = torch.randn(m, k, device=dev, dtype=elem)
    w = torch.randn(n, k, device=dev, dtype=elem)
    for _ in range(3):
        x @ w.t()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            flush.sum()
            x @ w.t()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    events = json.load(open(path))["traceEvents"]
    gemm = [e for e in events if e.get("cat") == "kernel" and "at::native" not in e["name"]]
    seen = {}
    for e in gemm:
        a = e.get("args", {})
        key = (e["name"][:110], str(a.get("grid")), str(a.get("block")))
        seen.setdefault(key, []).append(e["dur"])
    print(f"{m}x{n}x{k}:")
    for (name, grid, block), durs in seen.items():
        durs.sort()
        print(f"  {durs[len(durs) // 2]:7.1f} us  grid {grid} block {block}  {name}")
