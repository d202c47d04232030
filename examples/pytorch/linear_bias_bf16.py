"""nn.Linear with bias in bf16: y = x @ W.T + b (W stored (out, in), so B is column-major)."""
import torch
import torch.nn as nn

batch_size = 1024
in_features = 4096
out_features = 11008


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features).to(torch.bfloat16)

    def forward(self, x):
        return self.linear(x)


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.bfloat16).cuda()]


def get_init_inputs():
    return [in_features, out_features]
