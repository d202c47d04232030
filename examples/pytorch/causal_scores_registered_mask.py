"""Causal attention probabilities with the mask as minGPT and nanoGPT register it: a buffer
holding tril(ones(T, T)), cut to the sequence in forward and compared with 0.

    cutesmith import examples/pytorch/causal_scores_registered_mask.py --out workloads/causal_scores_registered_mask.toml

imports as one gemm_softmax workload: the batched product q kᵀ over (batch x heads), the
scale, the future filled with -inf (`tril`), then the row softmax.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, max_seqlen):
        super().__init__()
        # The causal mask: 1 on and below the diagonal.
        self.register_buffer(
            "bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen)
        )

    def forward(self, q, k):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        return F.softmax(att, dim=-1)


batch, heads, seq, head_dim = 2, 8, 1024, 128


def get_inputs():
    q = torch.randn(batch, heads, seq, head_dim, dtype=torch.bfloat16)
    k = torch.randn(batch, heads, seq, head_dim, dtype=torch.bfloat16)
    return [q, k]


def get_init_inputs():
    return [2048]
