# nn.InstanceNorm2d with a per-channel weight and bias (affine=True): family norm over a
# batch of the 4 samples, each 32 rows (one channel's 64 x 48 plane each), the weight and
# bias `col` operands (one value a row, shared by the samples).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(channels, affine=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inorm(x)


def get_inputs():
    return [torch.randn(4, 32, 64, 48)]


def get_init_inputs():
    return [32]
