# The largest value over dim 1 of a 3-D tensor, then a scale, as KernelBench level 1 writes
# the reduction (`torch.max(x, dim=1)[0]`): `cutesmith import` maps it to family reduce
# with the rows side by side (a column-major A) and the scale as an epilogue op.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim)[0] * 0.5


batch_size = 16
dim1 = 512
dim2 = 255


def get_inputs():
    return [torch.rand(batch_size, dim1, dim2)]


def get_init_inputs():
    return [1]
