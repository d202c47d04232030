# What a PyTorch user's unfused code costs on this GPU: the eager ops of the coverage
# suite's fused workloads (SwiGLU, three GEMM epilogue chains, the broadcast activation
# chain), each op timed on its own and the whole sequence, so that the harness's
# `unfused` baseline can be compared with it in the same machine session.
# Timing as the harness does it: the L2 flushed by reading a buffer of 4x its size before
# each timed launch, CUDA events, median of 30, inputs rotated between two sets.
# Run on a GPU machine with PyTorch: python3 scripts/torch-unfused.py [WORD] (WORD: only the
# reports whose name holds it, e.g. batchnorm)
import statistics
import sys
import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
L2 = torch.cuda.get_device_properties(0).L2_cache_size
flush_buf = torch.ones(4 * L2 // 4, dtype=torch.float32, device=dev)
print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)


def timed(fn, reps=30):
    ts = []
    for i in range(reps):
        flush_buf.sum()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn(i % 2)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1000)
    return statistics.median(ts)


ONLY = sys.argv[1] if len(sys.argv) > 1 else None


def report(name, parts, nbytes):
    if ONLY and ONLY not in name:
        return
    total = 0.0
    for label, fn, b in parts:
        fn(0)
        fn(1)
        torch.cuda.synchronize()
        us = timed(fn)
        total += us
        bw = f"{b / us / 1e6:.2f} TB/s" if b else ""
        print(f"  {name:34s} {label:44s} {us:9.2f} us {bw}")
    print(f"  {name:34s} {'sum of the ops':44s} {total:9.2f} us")


def bf(*shape):
    return [torch.randn(*shape, device=dev, dtype=torch.bfloat16) for _ in range(2)]


# Copy bandwidth of the same kind of tensor (read + write), for scale.
xs = bf(4096, 14336)
ys = bf(4096, 14336)
report("copy 4096x14336 bf16", [("y.copy_(x)", lambda k: ys[k].copy_(xs[k]), 2 * xs[0].numel() * 2)], 0)

# SwiGLU: silu(x W1^T) * (x W3^T), 4096 x 14336 x 4096.
x = bf(4096, 4096)
w1 = bf(14336, 4096)
w3 = bf(14336, 4096)
g = [x[k] @ w1[k].t() for k in range(2)]
u = [x[k] @ w3[k].t() for k in range(2)]
s = [F.silu(g[k]) for k in range(2)]
e = g[0].numel() * 2
report(
    "swiglu 4096x14336x4096",
    [
        ("x @ w1.t()", lambda k: x[k] @ w1[k].t(), 0),
        ("x @ w3.t()", lambda k: x[k] @ w3[k].t(), 0),
        ("F.silu(g)", lambda k: F.silu(g[k]), 2 * e),
        ("s * u", lambda k: s[k] * u[k], 3 * e),
    ],
    0,
)

# GEMM chains at 4096^3 (the GEMM itself is the same for all; the ops after it differ).
a = bf(4096, 4096)
b = bf(4096, 4096)
z = [a[k] @ b[k].t() for k in range(2)]
bias = bf(4096)
res = bf(4096, 4096)
e = z[0].numel() * 2
report("gemm 4096^3", [("a @ b.t()", lambda k: a[k] @ b[k].t(), 0)], 0)
report(
    "chain scale, hardtanh, gelu",
    [
        ("z * 0.5", lambda k: z[k] * 0.5, 2 * e),
        ("F.hardtanh(., -2, 2)", lambda k: F.hardtanh(z[k], -2.0, 2.0), 2 * e),
        ("F.gelu(.)", lambda k: F.gelu(z[k]), 2 * e),
    ],
    0,
)
report(
    "chain bias, relu, residual",
    [
        ("z + bias", lambda k: z[k] + bias[k], 2 * e),
        ("F.relu(.)", lambda k: F.relu(z[k]), 2 * e),
        (". + res", lambda k: z[k] + res[k], 3 * e),
    ],
    0,
)
report(
    "chain bias, swish, scale",
    [
        ("y = z + bias", lambda k: z[k] + bias[k], 2 * e),
        ("torch.sigmoid(y)", lambda k: torch.sigmoid(z[k]), 2 * e),
        (". * y", lambda k: z[k] * res[k], 3 * e),
        (". * 2", lambda k: z[k] * 2.0, 2 * e),
    ],
    0,
)
# The activation chain with broadcast vectors: gelu_tanh(x) * row + col over 4096 x 4096.
colv = [t.view(4096, 1) for t in bf(4096)]
report(
    "act chain broadcast 4096x4096",
    [
        ("F.gelu(x, 'tanh')", lambda k: F.gelu(z[k], approximate="tanh"), 2 * e),
        (". * row (per column)", lambda k: z[k] * bias[k], 2 * e),
        (". + col (per row)", lambda k: z[k] + colv[k], 2 * e),
    ],
    0,
)

# Row softmax and log-softmax (the GEMM + softmax workload's tail, and the softmax rows).
for (rows, cols, dt) in [(1024, 32000, torch.bfloat16), (4096, 32000, torch.bfloat16), (1024, 50257, torch.float32)]:
    zz = [torch.randn(rows, cols, device=dev, dtype=dt) for _ in range(2)]
    e = zz[0].numel() * zz[0].element_size()
    report(
        f"rows {rows}x{cols} {str(dt)[6:]}",
        [
            ("torch.softmax(z, -1)", lambda k: torch.softmax(zz[k], -1), 2 * e),
            ("torch.log_softmax(z, -1)", lambda k: torch.log_softmax(zz[k], -1), 2 * e),
        ],
        0,
    )

# Linear + BatchNorm1d in training mode (+ ReLU): the gemm_norm batch workloads' tails.
for (rows, feats, dt) in [(8192, 4096, torch.bfloat16), (16384, 4096, torch.float32), (1024, 8192, torch.float32)]:
    zz = [torch.randn(rows, feats, device=dev, dtype=dt) for _ in range(2)]
    w = torch.randn(feats, device=dev, dtype=dt)
    bb = torch.randn(feats, device=dev, dtype=dt)
    rm = torch.zeros(feats, device=dev, dtype=dt)
    rv = torch.ones(feats, device=dev, dtype=dt)
    e = zz[0].numel() * zz[0].element_size()
    report(
        f"batchnorm {rows}x{feats} {str(dt)[6:]}",
        [
            ("F.batch_norm(z, training=True)", lambda k: F.batch_norm(zz[k], rm, rv, w, bb, training=True), 2 * e),
            ("F.relu(.)", lambda k: F.relu(zz[k]), 2 * e),
        ],
        0,
    )

# Causal and sliding-window attention probabilities (gemm_causal_softmax_bf16,
# gemm_sliding_window_softmax_bf16) as eager attention code writes them: the scores
# q @ k^T, the scale, masked_fill of the positions a query may not see, the row softmax;
# and the whole sequence timed as one.
for (heads, t, window) in [(16, 1024, None), (8, 2048, 512)]:
    q = bf(heads, t, 128)
    kt = [x.transpose(1, 2) for x in bf(heads, t, 128)]
    hidden = torch.ones(t, t, dtype=torch.bool, device=dev).triu(1)
    if window:
        hidden |= torch.ones(t, t, dtype=torch.bool, device=dev).tril(-window)
    sc = [torch.bmm(q[k], kt[k]) for k in range(2)]
    e = sc[0].numel() * 2
    scale = 128 ** -0.5
    name = f"{'window ' + str(window) if window else 'causal'} softmax {heads}x{t}x{t}x128"
    report(
        name,
        [
            ("torch.bmm(q, k^T)", lambda k: torch.bmm(q[k], kt[k]), 0),
            ("s * scale", lambda k: sc[k] * scale, 2 * e),
            (".masked_fill(hidden, -inf)", lambda k: sc[k].masked_fill(hidden, float("-inf")), 2 * e),
            ("torch.softmax(., -1)", lambda k: torch.softmax(sc[k], -1), 2 * e),
        ],
        0,
    )
    report(
        name,
        [
            (
                "the whole sequence, one timing",
                lambda k: torch.softmax((torch.bmm(q[k], kt[k]) * scale).masked_fill(hidden, float("-inf")), -1),
                0,
            ),
        ],
        0,
    )
