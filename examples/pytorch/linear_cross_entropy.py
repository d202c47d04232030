# A language model's loss head: the vocabulary projection of the last hidden states, then
# the cross entropy against the next tokens, in fp32 as training code writes it
# (`logits.float()`). `cutesmith import` writes it as two stages: the bf16 GEMM writing fp32
# logits, then the cross entropy of their rows (family reduce).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.lm_head = nn.Linear(d_model, vocab, bias=False).to(torch.bfloat16)

    def forward(self, hidden, targets):
        logits = self.lm_head(hidden).float()
        return nn.functional.cross_entropy(logits, targets)


def get_inputs():
    hidden = torch.randn(4096, 2048, dtype=torch.bfloat16)
    targets = torch.randint(0, 32000, (4096,))
    return [hidden, targets]


def get_init_inputs():
    return [2048, 32000]
