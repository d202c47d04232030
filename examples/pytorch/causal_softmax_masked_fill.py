# Causal attention probabilities from the scores of 4 sequences x 16 heads: scaled, the
# future hidden by masked_fill with a triangular mask built in forward (torch applies it to
# each head's last two dims), then the softmax. `cutesmith import` makes one softmax
# workload over the (B, H, T, T) dims whose [[before]] ops are the scale and a tril to
# -inf, each row's index within its head's T x T matrix.
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
    return [torch.randn(4, 16, 1024, 1024).bfloat16()]


def get_init_inputs():
    return [128]
