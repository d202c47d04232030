"""NetVLAD aggregation (as in KernelBench level 3's NetVLAD problems): a soft assignment of
each of N features to K + G clusters with the G ghost clusters dropped, each cluster's mass
times its centre, the residuals' sum per cluster, normalized per cluster and then whole.

    cutesmith import examples/pytorch/netvlad.py --out workloads/netvlad.toml

What it exercises in the importer (`src/pytorch/import/pack.rs`):
- `assignment[:, :K]` is a slice inside a dim: a copy with a `[view]` `narrow`, read
  through a reshape that torch leaves a view;
- `a_sum * centres` multiplies the computed [B, 1, K] by a [1, D, K] parameter into a
  larger [B, D, K]: one activation that reads the mass through a `[view]` with `expand`
  (the broadcast is not written out) and multiplies by the centres, a broadcast operand;
- `vlad.transpose(1, 2) - a` leaves torch's result (and the normalized values after it)
  transposed in memory, so that torch's reshape copies; the stages write every value
  packed, and the graph is read with the layouts they make.

It imports as 9 stages: the assignment product with its softmax, the kept clusters'
copy, the sum over the features, the mass broadcast times the centres, the product of the
assignment and the features, the transpose's copy, the difference, the L2 norm over D (a
middle dim) and the L2 norm of the whole.
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
        b, n, d = x.shape
        a = F.softmax(torch.matmul(x.reshape(-1, d), self.assign), dim=1)
        a = a[:, : self.clusters].reshape(b, n, self.clusters)
        mass = a.sum(dim=1, keepdim=True) * self.centres
        vlad = torch.matmul(a.transpose(1, 2), x).transpose(1, 2) - mass
        vlad = F.normalize(vlad, dim=1)
        return F.normalize(vlad.reshape(b, -1), dim=1)


def get_inputs():
    return [torch.randn(32, 100, 512)]


def get_init_inputs():
    return [512, 32, 16]
