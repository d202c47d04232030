"""A KernelBench level-2 style problem with a scalar parameter and a residual: Linear,
torch.min with a 0-d nn.Parameter made from an init argument, subtract it, add the Linear's
result kept with clone().detach()."""
import torch
import torch.nn as nn

batch_size = 256
in_features = 1024
out_features = 512
constant = 2.0


class Model(nn.Module):
    def __init__(self, in_features, out_features, constant):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.constant = nn.Parameter(torch.tensor(constant))

    def forward(self, x):
        x = self.linear(x)
        original_x = x.clone().detach()
        x = torch.min(x, self.constant)
        x = x - self.constant
        return x + original_x


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, constant]
