# BERT's eager attention probabilities: the raw scores scaled by 1 / sqrt(head dim), the
# additive padding mask (one row of keys a sequence, [B, 1, 1, T]) added, then the softmax
# over the keys. `cutesmith import` makes one softmax workload whose [[before]] ops are the
# scale and the mask, an operand broadcast over dims 0 and 3 of the (B, H, T, T) scores.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, scores, mask):
        return torch.softmax(scores * self.scale + mask, dim=-1)


def get_inputs():
    return [torch.randn(8, 12, 512, 512).bfloat16(), torch.randn(8, 1, 1, 512).bfloat16()]


def get_init_inputs():
    return [64]
