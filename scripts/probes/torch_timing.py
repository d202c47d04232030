# The timing the torch probes share, as the harness times: the L2 flushed by reading 256 MiB
# before every launch, CUDA events around one launch, the median of 30.
import torch

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
