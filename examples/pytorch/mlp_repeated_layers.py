# A deep MLP (KernelBench level 3's DeepNarrowMLP kind): Linear + ReLU layers, three of them
# the same size, then an output Linear. `cutesmith import` writes it as stages run one after
# another; stages with the same spec (the repeated hidden layers) are one workload, written
# once, and the suite lists the stages in order so `cutesmith bench` adds up the Model's time.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        layers = [nn.Linear(d_in, d_hidden), nn.ReLU()]
        for _ in range(3):
            layers += [nn.Linear(d_hidden, d_hidden), nn.ReLU()]
        layers.append(nn.Linear(d_hidden, d_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(1024, 512)]


def get_init_inputs():
    return [512, 1024, 256]
