"""Self-attention written with `chunk` and `reshape` (no mask): q, k and v as the three
chunks of one projection, heads split with `view(...).transpose(1, 2)`, the output put back
with `.transpose(1, 2).reshape(B, T, C)`, which copies (the transposed heads are not
viewable as rows).

    cutesmith import examples/pytorch/attention_chunk_reshape.py --out workloads/attention_chunk_reshape.toml

imports as stages: the projection; a copy of each head tensor (a `[view]` of a chunk); the
scores with their softmax; the product with v; a copy for the reshape; the output
projection.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = F.softmax(q @ k.transpose(-2, -1) / (C // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.out(y)


batch, seq, dim, heads = 4, 256, 512, 8


def get_inputs():
    return [torch.randn(batch, seq, dim)]


def get_init_inputs():
    return [dim, heads]
