"""A Linear, a GroupNorm, each row's minimum, and a bias of shape [1, C, 1, 1] added to it
(KernelBench level 2's GEMM + GroupNorm + min + bias pattern). The minimum is [B, 1]; torch
broadcasts it against the [1, C, 1, 1] bias into a [1, C, B, 1] result, larger than either.

    cutesmith import examples/pytorch/groupnorm_min_bias.py --out workloads/groupnorm_min_bias.toml

imports as 3 stages: the Linear with its GroupNorm (`gemm_norm`), the minimum (`reduce`),
and one activation that reads the minimum through a `[view]` with `expand` (broadcast to
the result's shape, not written out) and adds the bias (a broadcast operand).
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.norm = nn.GroupNorm(groups, out_features)
        self.bias = nn.Parameter(torch.randn(1, out_features, 1, 1))

    def forward(self, x):
        x = self.norm(self.gemm(x))
        x = torch.min(x, dim=1, keepdim=True)[0]
        return x + self.bias


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return [1024, 512, 32]
