# One bf16 nn.Linear GEMM per shape through PyTorch (cuBLAS / cuBLASLt: y = x @ w.t()), the
# timed launch inside an NVTX range named "gemm" so that Nsight Compute can pick it alone:
#   ncu --nvtx --nvtx-include "gemm/" ... python3 scripts/probes/ncu_torch_gemm.py MxNxK ...
import sys
import torch

dev = torch.device("cuda")
flush = torch.empty(256 * 2**20 // 4, device=dev)
for spec in sys.argv[1:]:
    m, n, k = (int(v) for v in spec.split("x"))
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        x @ w.t()
    flush.sum()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("gemm")
    x @ w.t()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
