# nn.GroupNorm as it runs by default, with a per-channel weight and bias: family norm over
# a batch of the 4 samples, each 8 rows (one group of 4 channels x 64 x 48 each), the weight
# and bias `channel` operands (4 channels a row).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


def get_inputs():
    return [torch.randn(4, 32, 64, 48)]


def get_init_inputs():
    return [8, 32]
