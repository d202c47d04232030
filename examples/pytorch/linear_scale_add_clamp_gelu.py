"""A KernelBench level-2 style chain: Linear, scale by an init argument, add a constant,
clamp, GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 512
in_features = 1024
out_features = 2048
scale_factor = 0.5
clamp_min = -1.0
clamp_max = 1.0


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale_factor, clamp_min, clamp_max):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale_factor = scale_factor
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.scale_factor
        x = x + 2.0
        x = torch.clamp(x, min=self.clamp_min, max=self.clamp_max)
        x = F.gelu(x)
        return x


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale_factor, clamp_min, clamp_max]
