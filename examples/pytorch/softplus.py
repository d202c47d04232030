"""Softplus activation with beta 2 and threshold 10 over a (batch, dim) tensor."""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.Softplus(beta=2.0, threshold=10.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
