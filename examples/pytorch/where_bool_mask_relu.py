# An elementwise chain with a bool mask passed to forward: torch.where(keep, x * 0.5, 0.0),
# then a ReLU. `cutesmith import` makes one activation workload: mul, a `where` by a bool
# matrix operand (fill 0), relu.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, keep):
        return torch.relu(torch.where(keep, x * 0.5, 0.0))


def get_inputs():
    return [torch.randn(4096, 4096), torch.rand(4096, 4096) > 0.5]


def get_init_inputs():
    return []
