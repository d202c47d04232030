# An inference BatchNorm2d + ReLU (a ResNet stage's activations, the Model in eval mode):
# `cutesmith import` folds the running statistics into a per-channel scale and shift,
# operands broadcast over dim 1 of the (N, C, H, W) output.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(self.bn(x))


def get_inputs():
    return [torch.randn(32, 256, 56, 56)]


def get_init_inputs():
    return [256]
