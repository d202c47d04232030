"""minGPT's causal self-attention as its module code writes it (KernelBench level 3's 43):
one projection to q, k and v, split and viewed as heads, the masked softmax of q kᵀ, the
heads put back with `.transpose(1, 2).contiguous().view(B, T, C)`, the output projection.

    cutesmith import examples/pytorch/mingpt_attention.py --out workloads/mingpt_attention.toml

imports as 8 stages: the QKV projection; a copy of each head tensor out of it (a
`[view]` of the projection: its third part of three held, T and the heads swapped), as
eager PyTorch copies them before its matmuls; the scores with the scale, the causal mask
and the softmax in one gemm_softmax; the product with v; a copy putting the heads back;
the output projection.
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, n_embd, n_head, max_seqlen):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.c_proj(y)
        return y


batch_size, seq_len, n_embd, n_head = 8, 512, 768, 12


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_head, seq_len]
