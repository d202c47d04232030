"""A plain square matrix multiplication, C = A @ B (KernelBench level 1 style)."""
import torch
import torch.nn as nn

M = 2048
K = 1024
N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
