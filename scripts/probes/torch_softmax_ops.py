# What a PyTorch user runs today for the `softmax_ops` suite's workloads, timed as the
# harness times (the L2 flushed by reading 256 MiB before every launch, CUDA events, median
# of 30): eager ops before a softmax (an attention mask, an ALiBi bias, a causal
# masked_fill, a bias and a temperature), F.scaled_dot_product_attention's math is not
# involved; and a device-to-device copy of the input (x.clone()) beside each.
#   python3 scripts/probes/torch_softmax_ops.py
import torch
import torch.nn.functional as F

from torch_timing import dev, print_table

bf16, f32 = torch.bfloat16, torch.float32
rows = []

s = torch.randn(8, 12, 512, 512, device=dev, dtype=bf16)
mask = torch.randn(8, 1, 1, 512, device=dev, dtype=bf16)
rows.append(("softmax_attn_mask_bf16", "torch.softmax(x * 0.125 + mask, -1)", s,
             lambda: torch.softmax(s * 0.125 + mask, dim=-1)))
rows.append(("softmax_attn_mask_bf16", "torch.softmax(x / 8 + mask, -1, dtype=float32).to(bf16)", s,
             lambda: torch.softmax(s / 8 + mask, dim=-1, dtype=f32).to(bf16)))

a = torch.randn(4, 16, 1024, 1024, device=dev, dtype=bf16)
al = torch.randn(1, 16, 1, 1024, device=dev, dtype=bf16)
rows.append(("softmax_alibi_bf16", "torch.softmax(x * 0.125 + alibi, -1)", a,
             lambda: torch.softmax(a * 0.125 + al, dim=-1)))

c = torch.randn(4096, 4096, device=dev, dtype=f32)
causal = torch.ones(4096, 4096, device=dev, dtype=torch.bool).triu(1)
rows.append(("softmax_causal_f32", "torch.softmax((x * scale).masked_fill(causal, -inf), -1)", c,
             lambda: torch.softmax((c * 0.08838834764831845).masked_fill(causal, float("-inf")), dim=-1)))

g = torch.randn(8, 12, 1024, 1024, device=dev, dtype=bf16)
gm = torch.randn(8, 1, 1, 1024, device=dev, dtype=bf16)
fut = torch.ones(1024, 1024, device=dev, dtype=torch.bool).triu(1)
rows.append(("softmax_causal_padded_bf16", "torch.softmax((x / 8).masked_fill(causal, -inf) + mask, -1)", g,
             lambda: torch.softmax((g / 8).masked_fill(fut, float("-inf")) + gm, dim=-1)))

l = torch.randn(2048, 32000, device=dev, dtype=f32)
lb = torch.randn(32000, device=dev, dtype=f32)
rows.append(("log_softmax_row_bias_f32", "F.log_softmax((x + bias) / 0.7, -1)", l,
             lambda: F.log_softmax((l + lb) / 0.7, dim=-1)))

print_table(rows)
