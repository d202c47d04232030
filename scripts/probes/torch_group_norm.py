# What a PyTorch user runs today for the GroupNorm workloads, timed as the harness times
# (the L2 flushed by reading 256 MiB before every launch, CUDA events, median of 30): eager
# F.group_norm with its per-channel weight and bias (and F.silu after it where the workload
# has one), and a device-to-device copy of the same bytes (x.clone()) beside each.
#   python3 scripts/probes/torch_group_norm.py
import torch
import torch.nn.functional as F

dev = torch.device("cuda")
flush = torch.empty(256 * 2**20 // 4, device=dev)


def median_us(fn, reps=30):
    times = []
    for _ in range(reps):
        flush.sum()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    times.sort()
    return times[len(times) // 2]


# (workload, shape, groups, eps, dtype, SiLU after)
cases = [
    ("kb1_35_group_norm_f32", (112, 64, 512, 512), 8, 1e-5, torch.float32, False),
    ("norm_group_affine_silu_bf16", (2, 320, 64, 64), 32, 1e-6, torch.bfloat16, True),
]
print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
print("| workload | shape | torch us | copy us | copy / torch |")
print("| --- | --- | --- | --- | --- |")
for name, shape, groups, eps, dtype, silu in cases:
    x = torch.rand(shape, device=dev, dtype=torch.float32).mul_(2).sub_(1).to(dtype)
    w = torch.randn(shape[1], device=dev, dtype=dtype)
    b = torch.randn(shape[1], device=dev, dtype=dtype)

    def run():
        y = F.group_norm(x, groups, w, b, eps)
        return F.silu(y) if silu else y

    run()
    t = median_us(run)
    c = median_us(lambda: x.clone())
    print(f"| {name} | {'x'.join(map(str, shape))} | {t:.1f} | {c:.1f} | {c / t:.0%} |")
    del x
    torch.cuda.empty_cache()
