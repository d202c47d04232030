# A Llama feed-forward block: w2(silu(w1(x)) * w3(x)), bf16, 256 tokens (a decode batch)
# of Llama-3-8B's sizes. `cutesmith import` writes it as two stages: the gated pair of
# GEMMs of one input as one gemm_glu workload (SwiGLU), then the down projection reading
# its output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False).to(torch.bfloat16)
        self.w3 = nn.Linear(dim, hidden, bias=False).to(torch.bfloat16)
        self.w2 = nn.Linear(hidden, dim, bias=False).to(torch.bfloat16)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def get_inputs():
    return [torch.randn(256, 4096, dtype=torch.bfloat16)]


def get_init_inputs():
    return [4096, 14336]
