"""Batched matrix multiplication in fp16, inputs made on the GPU (device='cuda')."""
import torch
import torch.nn as nn

batch_size = 32
m = 512
k = 256
n = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    A = torch.randn(batch_size, m, k, device="cuda", dtype=torch.float16)
    B = torch.randn(batch_size, k, n, device="cuda").half()
    return [A, B]


def get_init_inputs():
    return []
