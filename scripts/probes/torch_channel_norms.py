# What a PyTorch user runs today for the per-channel norm workloads, timed as the harness
# times (the L2 flushed by reading 256 MiB before every launch, CUDA events, median of 30):
# eager F.group_norm, and F.batch_norm in training mode, with the per-channel weight and bias
# (and the activation after it where the workload has one), and a device-to-device copy of
# the same bytes (x.clone()) beside each.
#   python3 scripts/probes/torch_channel_norms.py
import torch
import torch.nn.functional as F

from torch_timing import dev, median_us


# (workload, shape, groups (0: a training-mode batch norm), eps, dtype, activation after)
cases = [
    ("kb1_35_group_norm_f32", (112, 64, 512, 512), 8, 1e-5, torch.float32, None),
    ("norm_group_affine_silu_bf16", (2, 320, 64, 64), 32, 1e-6, torch.bfloat16, F.silu),
    ("kb1_33_batch_norm_f32", (64, 64, 512, 512), 0, 1e-5, torch.float32, None),
    ("norm_batch2d_relu_bf16", (32, 256, 56, 56), 0, 1e-5, torch.bfloat16, F.relu),
]
print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
print("| workload | shape | torch us | copy us | copy / torch |")
print("| --- | --- | --- | --- | --- |")
for name, shape, groups, eps, dtype, act in cases:
    x = torch.rand(shape, device=dev, dtype=torch.float32).mul_(2).sub_(1).to(dtype)
    w = torch.randn(shape[1], device=dev, dtype=dtype)
    b = torch.randn(shape[1], device=dev, dtype=dtype)

    rm = torch.zeros(shape[1], device=dev, dtype=torch.float32)
    rv = torch.ones(shape[1], device=dev, dtype=torch.float32)

    def run():
        if groups:
            y = F.group_norm(x, groups, w, b, eps)
        else:
            y = F.batch_norm(x, rm, rv, w, b, training=True, eps=eps)
        return act(y) if act else y

    run()
    t = median_us(run)
    c = median_us(lambda: x.clone())
    print(f"| {name} | {'x'.join(map(str, shape))} | {t:.1f} | {c:.1f} | {c / t:.0%} |")
    del x
    torch.cuda.empty_cache()
