# A biased linear layer, GELU, then a softmax over its outputs (KernelBench level 2's
# Matmul_GELU_Softmax, in bf16 at a classifier-like size): family gemm_softmax with the
# chain `add row (the bias), gelu_erf` run before the softmax.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(F.gelu(self.linear(x)), dim=1)


def get_inputs():
    return [torch.randn(512, 1024, dtype=torch.bfloat16)]


def get_init_inputs():
    return [1024, 4096]
