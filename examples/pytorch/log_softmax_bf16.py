"""Row log-softmax over the last dimension in bf16, inputs on the GPU."""
import torch
import torch.nn as nn

batch_size = 1024
dim = 50257


class Model(nn.Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.bfloat16, device="cuda")]


def get_init_inputs():
    return [-1]
