# nn.GroupNorm without its affine weight and bias, then SiLU: family norm, a LayerNorm of
# each group of C / G channels (one contiguous row of (C / G) x H x W per sample and group).
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels, affine=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gn(x))


def get_inputs():
    return [torch.randn(4, 32, 64, 48)]


def get_init_inputs():
    return [8, 32]
