"""NetVLAD's soft assignment with its ghost clusters dropped, and each cluster's mass
weighting its centre (the first half of KernelBench level 3's NetVLAD problems):
`assignment[:, :K]` is a slice inside a dim, and `a_sum * centres` broadcasts the computed
[B, 1, K] against a [1, D, K] parameter into a larger [B, D, K].

    cutesmith import examples/pytorch/netvlad_cluster_mass.py --out workloads/netvlad_cluster_mass.toml

imports as stages: the assignment product with its softmax; a copy of the kept clusters
(a `[view]` with `narrow`); the sum over the features of each item; the mass broadcast over
D and times the centres (an activation reading its input through a `[view]` with `expand`,
the centres a broadcast operand).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, feature_size, clusters, ghosts):
        super().__init__()
        self.clusters = clusters
        self.feature_size = feature_size
        scale = 1 / math.sqrt(feature_size)
        self.assign = nn.Parameter(scale * torch.randn(feature_size, clusters + ghosts))
        self.centres = nn.Parameter(scale * torch.randn(1, feature_size, clusters))

    def forward(self, x):
        n = x.shape[1]
        a = F.softmax(torch.matmul(x.reshape(-1, self.feature_size), self.assign), dim=1)
        a = a[:, : self.clusters].reshape(-1, n, self.clusters)
        a_sum = a.sum(dim=1, keepdim=True)
        return a_sum * self.centres


def get_inputs():
    return [torch.randn(64, 100, 512)]


def get_init_inputs():
    return [512, 32, 16]
