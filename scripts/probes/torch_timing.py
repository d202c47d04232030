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


def print_table(rows):
    """The device, then a Markdown row a (workload, what, input, fn): the eager op's median
    and a device-to-device copy of its input (x.clone()) beside it."""
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| workload | eager torch | torch us | copy us |")
    print("| --- | --- | --- | --- |")
    for name, what, inp, fn in rows:
        fn()
        print(f"| {name} | `{what}` | {median_us(fn):.1f} | {median_us(lambda: inp.clone()):.1f} |")
