# What a PyTorch user runs today for the scan suite's workloads, timed as the harness times
# (the L2 flushed by reading 256 MiB before every launch, CUDA events, median of 30): eager
# torch.cumsum / cumprod, the reverse form KernelBench writes (flip, cumsum, flip), the
# exclusive one (zeros cat the cumsum of all but the last slice), KernelBench's masked cumsum
# (cumsum(x * mask) with a bool mask), a bf16 cumsum over a middle dim, and a
# device-to-device copy of x (x.clone()) beside each.
#   python3 scripts/probes/torch_scan.py
import torch

from torch_timing import dev, median_us


def exclusive(x, d):
    n = x.size(d)
    c = torch.cumsum(x.narrow(d, 0, n - 1), dim=d)
    return torch.cat((torch.zeros_like(x.select(d, 0).unsqueeze(d)), c), dim=d)


# The masked case's bool mask, made beside its x.
MASK = [None]

cases = [
    ("scan_cumsum_f32_kernelbench", (32768, 32768), torch.float32, lambda x: torch.cumsum(x, 1)),
    ("scan_cumprod_f32_kernelbench", (32768, 32768), torch.float32, lambda x: torch.cumprod(x, 1)),
    (
        "scan_cumsum_reverse_f32_kernelbench",
        (32768, 32768),
        torch.float32,
        lambda x: torch.cumsum(x.flip(1), 1).flip(1),
    ),
    ("scan_cumsum_exclusive_f32_kernelbench", (32768, 32768), torch.float32, lambda x: exclusive(x, 1)),
    (
        "scan_masked_cumsum_f32_kernelbench",
        (32768, 32768),
        torch.float32,
        lambda x: torch.cumsum(x * MASK[0], dim=1),
    ),
    ("scan_cumsum_bf16_middle", (16, 2048, 4096), torch.bfloat16, lambda x: torch.cumsum(x, 1)),
]
print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
print("| workload | shape | torch us | copy us | torch / copy |")
print("| --- | --- | --- | --- | --- |")
for name, shape, dtype, fn in cases:
    x = torch.rand(shape, device=dev, dtype=torch.float32).mul_(2).sub_(1).to(dtype)
    MASK[0] = torch.rand(shape, device=dev) > 0.5 if "masked" in name else None
    fn(x)
    t = median_us(lambda: fn(x))
    c = median_us(lambda: x.clone())
    print(f"| {name} | {'x'.join(map(str, shape))} | {t:.1f} | {c:.1f} | {c / t:.0%} |")
    del x
    MASK[0] = None
    torch.cuda.empty_cache()
