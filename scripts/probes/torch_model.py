# A problem file's Model (KernelBench convention: class Model, get_inputs(),
# get_init_inputs()) timed in eager PyTorch on the GPU as the harness times a kernel (the
# L2 flushed before every launch, CUDA events, median of 30), in eval mode without grad:
# the time to set beside the sum of the stages `cutesmith import` wrote for it.
#   python3 scripts/probes/torch_model.py PROBLEM.py [PROBLEM.py ...]
import importlib.util
import sys

import torch

from torch_timing import dev, median_us


def load(path):
    spec = importlib.util.spec_from_file_location("problem", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def to_dev(x):
    return x.to(dev) if isinstance(x, torch.Tensor) else x


print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
print("| problem | eager torch us |")
print("| --- | --- |")
for path in sys.argv[1:]:
    mod = load(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).to(dev).eval()
    inputs = [to_dev(x) for x in mod.get_inputs()]
    with torch.no_grad():
        model(*inputs)
        us = median_us(lambda: model(*inputs))
    print(f"| {path.rsplit('/', 1)[-1]} | {us:.1f} |")
    del model, inputs
    torch.cuda.empty_cache()
