# A language model's training loss: the cross entropy of bf16 logits (batch 4, 512 tokens,
# a 32000-word vocabulary) against the next tokens, -100 marking padding.
#   cutesmith import examples/pytorch/cross_entropy_loss.py --out workloads/my_lm_loss.toml
# maps it to one reduce workload (reduce = "cross_entropy", total = "mean"): a fused kernel
# that reads the logits once, where PyTorch writes a log-softmax of their size and reads it
# back (`bench/cross-entropy-h200.md`).
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, logits, targets):
        vocab = logits.size(-1)
        return F.cross_entropy(logits.view(-1, vocab), targets.view(-1), ignore_index=-100)


def get_inputs():
    logits = torch.randn(4, 512, 32000, dtype=torch.bfloat16)
    targets = torch.randint(0, 32000, (4, 512))
    return [logits, targets]


def get_init_inputs():
    return []
