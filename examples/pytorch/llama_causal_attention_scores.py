# Causal attention probabilities as Llama's reference code writes them: the scores of 2
# sequences x 8 heads, scaled, plus an additive mask (-inf above the diagonal, built with
# torch.full(...).triu(1) in forward), the softmax taken in fp32 and cast back to the
# inputs' type. `cutesmith import` maps it onto one bf16 gemm_softmax workload whose chain
# is the scale and a tril filled with -inf (the widening cast passes its values on; the
# cast at the output sets the output's type).
import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k):
        t = q.shape[-2]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.full((t, t), float("-inf"), device=q.device)
        mask = torch.triu(mask, diagonal=1)
        scores = scores + mask
        return torch.softmax(scores.float(), dim=-1).type_as(q)


def get_inputs():
    q = torch.randn(2, 8, 1024, 128, dtype=torch.bfloat16)
    k = torch.randn(2, 8, 1024, 128, dtype=torch.bfloat16)
    return [q, k]


def get_init_inputs():
    return []
