# What a PyTorch user runs today for the `broadcast` suite's workloads, timed as the harness
# times (the L2 flushed by reading 256 MiB before every launch, CUDA events, median of 30):
# eager ops with operands broadcast over some dims, and a device-to-device copy of the
# input (x.clone()) beside each.
#   python3 scripts/probes/torch_broadcast.py
import torch
import torch.nn.functional as F

from torch_timing import dev, print_table

bf16, f32 = torch.bfloat16, torch.float32
rows = []

x = torch.randn(32, 256, 56, 56, device=dev, dtype=bf16)
rm, rv = torch.randn(256, device=dev, dtype=bf16), torch.rand(256, device=dev, dtype=bf16) + 0.5
w, b = torch.randn(256, device=dev, dtype=bf16), torch.randn(256, device=dev, dtype=bf16)
s, t = w.view(1, -1, 1, 1), b.view(1, -1, 1, 1)
rows.append(("act_bn_eval_relu_bf16", "F.relu(F.batch_norm(x, rm, rv, w, b, False))", x,
             lambda: F.relu(F.batch_norm(x, rm, rv, w, b, training=False))))
rows.append(("act_bn_eval_relu_bf16", "torch.relu(x * s + t), s and t [1, C, 1, 1]", x,
             lambda: torch.relu(x * s + t)))

e = torch.randn(8, 1024, 768, device=dev, dtype=bf16)
pos = torch.randn(1, 1024, 768, device=dev, dtype=bf16)
rows.append(("act_pos_embed_add_bf16", "x + pos", e, lambda: e + pos))

c = torch.randn(16, 64, 128, 128, device=dev, dtype=f32)
cb = torch.randn(64, 1, 1, device=dev, dtype=f32)
rows.append(("act_chan_bias_gelu_f32", "F.gelu(x + bias)", c, lambda: F.gelu(c + cb)))

sc = torch.randn(4, 16, 1024, 1024, device=dev, dtype=bf16)
al = torch.randn(1, 16, 1, 1024, device=dev, dtype=bf16)
rows.append(("act_alibi_bias_bf16", "x * 0.125 + alibi", sc, lambda: sc * 0.125 + al))

g = torch.randn(32, 256, 28, 28, device=dev, dtype=bf16)
gs = torch.randn(32, 256, 1, 1, device=dev, dtype=bf16)
rows.append(("act_se_gate_bf16", "x * torch.sigmoid(s)", g, lambda: g * torch.sigmoid(gs)))

print_table(rows)
