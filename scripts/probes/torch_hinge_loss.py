# What a PyTorch user runs today for KernelBench level 1's hinge loss (100), timed as the
# harness times (the L2 flushed by reading 256 MiB before every launch, CUDA events, median
# of 30): eager torch.mean(torch.clamp(1 - predictions * targets, min=0)) of 32768 x 32768
# f32 predictions and a target vector along the last dim, and a device-to-device copy of
# the predictions (x.clone()) beside it.
#   python3 scripts/probes/torch_hinge_loss.py
import torch

from torch_timing import dev, median_us


n = 32768
p = torch.rand(n, n, device=dev)
t = torch.randint(0, 2, (n,), device=dev).float() * 2 - 1
run = lambda: torch.mean(torch.clamp(1 - p * t, min=0))
run()
print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
print("| workload | shape | torch us | copy us |")
print("| --- | --- | --- | --- |")
print(f"| kb1_100_hinge_loss_f32 | {n}x{n} | {median_us(run):.1f} | {median_us(lambda: p.clone()):.1f} |")
