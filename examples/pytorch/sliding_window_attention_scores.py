# Sliding-window causal attention probabilities (a Mistral-style window of 512 keys), as
# eager code writes them: the scores of 8 heads, scaled, the future and the keys 512 or
# more behind hidden by masked_fill with `triu(1) | tril(-512)` built in forward, then the
# row softmax. `cutesmith import` maps it onto one gemm_softmax workload whose chain is
# the scale, a tril and a triu(-511), both filled with -inf: the band each query sees.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim, window):
        super().__init__()
        self.scale = head_dim ** -0.5
        self.window = window

    def forward(self, q, k):
        t = q.size(1)
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        ones = torch.ones(t, t, dtype=torch.bool, device=q.device)
        hidden = ones.triu(1) | ones.tril(-self.window)
        return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)


def get_inputs():
    q = torch.randn(8, 2048, 128, dtype=torch.bfloat16)
    k = torch.randn(8, 2048, 128, dtype=torch.bfloat16)
    return [q, k]


def get_init_inputs():
    return [128, 512]
