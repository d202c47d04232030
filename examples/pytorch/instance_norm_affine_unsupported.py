# nn.InstanceNorm2d with a per-channel weight and bias (affine=True): not a row
# normalization cutesmith runs (the norm family's weight and bias run along the row), so
# the import names the node and says why.
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
