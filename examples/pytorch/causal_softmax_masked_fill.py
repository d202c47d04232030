# One head's causal attention probabilities from its scores: scaled, the future hidden by
# masked_fill with a triangular mask built in forward, then the softmax. `cutesmith import`
# makes one softmax workload whose [[before]] ops are the scale and a tril to -inf.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, att):
        t = att.size(-1)
        future = torch.ones(t, t, dtype=torch.bool, device=att.device).triu(1)
        att = (att * self.scale).masked_fill(future, float("-inf"))
        return torch.softmax(att, dim=-1)


def get_inputs():
    return [torch.randn(2048, 2048)]


def get_init_inputs():
    return [128]
