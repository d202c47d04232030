"""A 2D convolution then ReLU: no cutesmith workload family computes a convolution, so
`cutesmith import` refuses it, naming the node."""
import torch
import torch.nn as nn

batch_size = 16
in_channels = 3
out_channels = 64
kernel_size = 3
height = width = 256


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
