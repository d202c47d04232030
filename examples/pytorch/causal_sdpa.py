# Causal self-attention through torch's fused entry point,
# F.scaled_dot_product_attention(q, k, v, is_causal=True). `cutesmith import` writes it
# out as the ops it is defined by and runs it as two stages: the scores' GEMM with the
# scale, the causal mask and the row softmax (gemm_softmax), then the GEMM by V.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    shape = (4, 16, 1024, 64)
    return [torch.randn(*shape, dtype=torch.bfloat16) for _ in range(3)]


def get_init_inputs():
    return []
