# A transformer's feed-forward block as PyTorch writes it: Linear, GELU, Linear. No one
# workload computes two GEMMs, so `cutesmith import` writes it as two stages run one after
# another (the first GEMM with its bias and GELU, then the second GEMM with its bias,
# reading the first's output) and a suite of them for `cutesmith bench`.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff).to(torch.bfloat16)
        self.down = nn.Linear(d_ff, d_model).to(torch.bfloat16)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


def get_inputs():
    return [torch.randn(4096, 1024, dtype=torch.bfloat16)]


def get_init_inputs():
    return [1024, 4096]
