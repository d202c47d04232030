# Causal attention probabilities as eager attention code writes them: the scores of 16
# heads, scaled, the future hidden by masked_fill with a triangular mask built in forward,
# then the row softmax. `cutesmith import` maps it onto one gemm_softmax workload whose
# chain is the scale and a tril filled with -inf.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q, k):
        t = q.size(1)
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    q = torch.randn(16, 1024, 128, dtype=torch.bfloat16)
    k = torch.randn(16, 1024, 128, dtype=torch.bfloat16)
    return [q, k]


def get_init_inputs():
    return [128]
