# Attention probabilities with a bool key-padding mask passed to forward ([B, 1, 1, T], True
# where a key is padding), as many attention modules write them: the scores scaled, the
# padded keys filled with -inf, then the softmax over the keys. `cutesmith import` makes one
# softmax workload whose [[before]] ops are the scale and a masked_fill by a bool operand
# broadcast over dims 0 and 3 of the (B, H, T, T) scores.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, scores, pad):
        return torch.softmax((scores * self.scale).masked_fill(pad, float("-inf")), dim=-1)


def get_inputs():
    return [torch.randn(8, 12, 512, 512).bfloat16(), torch.rand(8, 1, 1, 512) > 0.9]


def get_init_inputs():
    return [64]
