"""The workload in PyTorch ops: random inputs in the kernel's layouts, the reference
(exact in float64, or in the inputs' dtypes for timing) and the tolerance check, all read
from workload.json."""

import math

import torch
import torch.nn.functional as F

DTYPES = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "e4m3": getattr(torch, "float8_e4m3fn", None),
    "e5m2": getattr(torch, "float8_e5m2", None),
    "i64": torch.int64,
    "bool": torch.bool,
}
GEMM = ("gemm", "gemm_bias_act", "gemm_softmax", "gemm_glu")


def dims(shape):
    return (int(shape.get("m", 1)), int(shape["n"]), int(shape.get("k", 0)),
            int(shape.get("batch", 1)))


def _signed(size, dtype, gen, device):
    """Uniform values in [-1, 1) of dtype; a bool mask is about half True."""
    t = torch.rand(*size, generator=gen, device=device, dtype=torch.float32) * 2 - 1
    return t > 0 if dtype == torch.bool else t.to(dtype)


def _matrix(rows, cols, layout, batch, batched, dtype, gen, device):
    def rand(*s):
        return _signed(s, dtype, gen, device)

    lead = (batch,) if batched else ()
    if layout == "row":
        return rand(*lead, rows, cols)
    return rand(*lead, cols, rows).transpose(-1, -2)


def make_inputs(w, shape, device="cuda", seed=0):
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    m, n, k, batch = dims(shape)
    ab, cd = DTYPES[w["dtype"]], DTYPES[w["out_dtype"]]
    lay = w["layout"]
    out = []
    batched = batch > 1
    if w["family"] in GEMM:
        out.append(_matrix(m, k, lay["a"], batch, batched and not lay["shared_a"], ab, gen, device))
        out.append(_matrix(k, n, lay["b"], batch, batched and not lay["shared_b"], ab, gen, device))
        if w["family"] == "gemm_glu":
            out.append(_matrix(k, n, lay["b"], batch, batched and not lay["shared_b"], ab, gen, device))
        if w["params"]["beta"] != 0:
            out.append(_matrix(m, n, lay["c"], batch, batched, cd, gen, device))
    elif w["family"] == "reduce":
        # Rows of k reduced: (batch, k, m) for rows side by side (dimension -2), else
        # (batch, m, k) / (m, k) / (k,) (dimension -1).
        lead = (batch,) if batched else ()
        if w["layout"]["a"] == "col":
            shape_x = (*lead, k, m)
        else:
            shape_x = (*lead, m, k) if (m > 1 or batched) else (k,)
        out.append((torch.rand(*shape_x, generator=gen, device=device) * 2 - 1).to(ab))
    elif _norm_cols(w):
        # A norm or a scan over dimension -2: batches of m rows of n side by side, (batch, n, m).
        shape_x = (batch, n, m) if batched else (n, m)
        out.append((torch.rand(*shape_x, generator=gen, device=device) * 2 - 1).to(ab))
    else:
        shape_x = (m, n) if m > 1 else (n,)
        if w["family"] in ("norm", "scan") and batched:
            shape_x = (batch, m, n)
        out.append((torch.rand(*shape_x, generator=gen, device=device) * 2 - 1).to(ab))
    cols = _norm_cols(w)
    for t in w["chain"]["tensors"]:
        dt = DTYPES[t["dtype"]]
        if w["family"] == "reduce":
            # One value a row (the rules take only column operands here), shared by the batch.
            out.append(_signed((m,), dt, gen, device))
        elif t["kind"] == "row":
            # One value per column j of a row: dimension -2 when the rows are side by side.
            size = (n, 1) if cols else (n,)
            out.append(_signed(size, dt, gen, device))
        elif t["kind"] == "col":
            size = (m,) if cols else (m, 1)
            out.append(_signed(size, dt, gen, device))
        else:
            out.append(_matrix(m, n, lay["c"], batch, batched, dt, gen, device))
    return out


def _norm_cols(w):
    return w["family"] in ("norm", "scan") and w["layout"]["a"] == "col"


def normalize(w, x):
    """The norm of each row of x: dimension -1, or -2 where the rows are side by side."""
    p = w["params"]
    dim = -2 if _norm_cols(w) else -1
    eps = p["eps"]
    kind = p["norm"]
    if kind == "rms":
        return x / torch.sqrt((x * x).mean(dim, keepdim=True) + eps)
    if kind == "layer":
        mean = x.mean(dim, keepdim=True)
        var = ((x - mean) ** 2).mean(dim, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps)
    if kind == "l2":
        return x / torch.clamp_min(torch.sqrt((x * x).sum(dim, keepdim=True)), eps)
    return x / torch.clamp_min(x.abs().sum(dim, keepdim=True), eps)


def scan_rows(w, x, with_bound):
    """Each row of x scanned (dimension -1, or -2 for rows side by side; from the row's end
    with reverse, each element left out of its own output with exclusive), and with
    with_bound the bound on an fp32 kernel's honest error there (the harness's
    `ScanKind::eval`: 8 u times the sum of |x| before each output for a sum, (terms + 1)
    times 4 u of the output for a product)."""
    p = w["params"]
    dim = -2 if _norm_cols(w) else -1
    u = 8.0 * 2.0 ** -24
    if p["reverse"]:
        x = x.flip(dim)
    prod = p["scan"] == "prod"
    y = torch.cumprod(x, dim) if prod else torch.cumsum(x, dim)
    n = x.shape[dim]
    terms = torch.arange(1, n + 1, dtype=torch.float64, device=x.device)
    a = x.abs().cumsum(dim) if with_bound and not prod else None
    if p["exclusive"]:
        first = torch.ones_like(y.narrow(dim, 0, 1)) if prod else torch.zeros_like(y.narrow(dim, 0, 1))
        y = torch.cat((first, y.narrow(dim, 0, n - 1)), dim)
        terms = terms - 1
        if a is not None:
            a = torch.cat((torch.zeros_like(first), a.narrow(dim, 0, n - 1)), dim)
    e = None
    if with_bound:
        if prod:
            shape = [1] * y.dim()
            shape[dim] = n
            e = (terms.view(shape) + 1) * u / 2 * y.abs()
        else:
            e = u * a
        e = e.nan_to_num(0.0, posinf=0.0)
    if p["reverse"]:
        y = y.flip(dim)
        e = e.flip(dim) if e is not None else None
    return y, e


def _reduce_dim(w):
    return -2 if w["layout"]["a"] == "col" else -1


def reduce_rows(w, x, with_bound):
    """Each row of x reduced (dimension -1, or -2 for rows side by side), and with
    with_bound the bound on an fp32 kernel's honest error there (the harness's
    `ReduceKind::eval`; None for max, min, argmax and argmin, which are exact)."""
    dim = _reduce_dim(w)
    kind = w["params"]["reduce"]
    u = 4.0 * 2.0 ** -24
    e = None
    if kind in ("sum", "mean"):
        y = x.sum(dim) if kind == "sum" else x.mean(dim)
        if with_bound:
            e = u * x.abs().sum(dim) / (1 if kind == "sum" else x.shape[dim])
    elif kind == "max":
        y = x.amax(dim)
    elif kind == "min":
        y = x.amin(dim)
    elif kind in ("argmax", "argmin"):
        # The first extreme's index (a NaN's first), as the kernel's: exact.
        y = x.argmax(dim) if kind == "argmax" else x.argmin(dim)
    elif kind == "logsumexp":
        y = torch.logsumexp(x, dim)
        if with_bound:
            e = u * (2.0 + y.abs())
    else:
        y = torch.linalg.vector_norm(x, 2, dim)
        if with_bound:
            e = u * y
    return y, e


def output_shape(w, inputs):
    cd = DTYPES[w["out_dtype"]]
    if w["family"] == "reduce":
        s = list(inputs[0].shape)
        del s[_reduce_dim(w)]
        return tuple(s), cd
    if w["family"] not in GEMM:
        return tuple(inputs[0].shape), cd
    a, b = inputs[0], inputs[1]
    m, n = a.shape[-2], b.shape[-1]
    if a.dim() == 3 or b.dim() == 3:
        batch = a.shape[0] if a.dim() == 3 else b.shape[0]
        return (batch, m, n), cd
    return (m, n), cd


def activation(name, x, p0, p1):
    if name == "identity":
        return x
    if name == "relu":
        return torch.relu(x)
    if name == "leaky_relu":
        return F.leaky_relu(x, p0)
    if name == "gelu_erf":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if name == "silu":
        return x * torch.sigmoid(p0 * x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "tanh":
        return torch.tanh(x)
    if name == "selu":
        return F.selu(x)
    if name == "elu":
        return F.elu(x, alpha=p0)
    if name == "hardsigmoid":
        return F.hardsigmoid(x)
    if name == "hardswish":
        return F.hardswish(x)
    if name == "hardtanh":
        return F.hardtanh(x, p0, p1)
    if name == "softplus":
        return F.softplus(x, beta=p0, threshold=p1)
    if name == "softsign":
        return F.softsign(x)
    if name == "mish":
        return F.mish(x)
    raise ValueError(f"unknown activation {name}")


def chain(w, z, tensors):
    """The epilogue chain on z (any dtype; tensors already broadcastable to z)."""
    x = z
    saved = {}
    for step in w["chain"]["steps"]:
        op = step["op"]
        if op == "act":
            x = activation(step["name"], x, step["p0"], step["p1"])
        elif op == "binary":
            o = step["operand"]
            y = {"scalar": lambda: o["value"], "tensor": lambda: tensors[o["index"]],
                 "z": lambda: z, "saved": lambda: saved[o["index"]]}[o["kind"]]()
            fn = step["fn"]
            if fn == "add":
                x = x + y
            elif fn == "sub":
                x = x - y
            elif fn == "mul":
                x = x * y
            elif fn == "div":
                x = x / y
            elif fn == "rdiv":
                x = y / x
            elif fn == "set":
                x = y if torch.is_tensor(y) else torch.full_like(x, y)
            elif fn in ("masked_fill", "where"):
                # The fill where the mask is non-zero (masked_fill) or zero (where).
                if not torch.is_tensor(y):
                    y = torch.full_like(x, y)
                fill = torch.full_like(x, float(step["fill"]))
                on = y != 0
                x = torch.where(on, fill, x) if fn == "masked_fill" else torch.where(on, x, fill)
            elif fn in ("min", "max"):
                if not torch.is_tensor(y):
                    y = torch.full_like(x, y)
                x = torch.minimum(x, y) if fn == "min" else torch.maximum(x, y)
        elif op == "clamp":
            x = torch.clamp(x, min=step["min"], max=step["max"])
        elif op == "neg":
            x = -x
        elif op == "abs":
            x = torch.abs(x)
        elif op == "exp":
            x = torch.exp(x)
        elif op == "log":
            x = torch.log(x)
        elif op == "sqrt":
            x = torch.sqrt(x)
        elif op == "pow":
            x = torch.pow(x, step["value"])
        elif op == "tri":
            # Keep one side of each matrix's diagonal (the last two dims), fill the rest.
            keep = torch.ones(x.shape[-2:], dtype=torch.bool, device=x.device)
            keep = keep.triu(step["diagonal"]) if step["upper"] else keep.tril(step["diagonal"])
            x = torch.where(keep, x, torch.full_like(x, float(step["fill"])))
        if step.get("save") is not None:
            saved[step["save"]] = x
    return x


def _split(w, inputs):
    fam = w["family"]
    i = 0
    parts = {}
    if fam in GEMM:
        parts["a"], parts["b"] = inputs[0], inputs[1]
        i = 2
        if fam == "gemm_glu":
            parts["b2"] = inputs[i]
            i += 1
        if w["params"]["beta"] != 0:
            parts["c"] = inputs[i]
            i += 1
    else:
        parts["x"] = inputs[0]
        i = 1
    parts["tensors"] = inputs[i:]
    return parts


def _dot_bound(w, sum_abs, k):
    # Mirrors the harness (src/eval/worker/validate.rs: dot_bound).
    u = w["roundoff"]
    kf = max(k, 1)
    extra = {"rounded": 0.0,
             "tc_f32": 12.0 * 2.0 ** -21 / math.sqrt(kf),
             "tc": 1.0 * math.sqrt(kf) * 2.0 ** -24}[w["summation"]]
    return (4.0 * u + extra) * sum_abs


def reference(w, inputs, exact=False, with_slack=False):
    """The workload in PyTorch. exact: in float64 (with with_slack, also the per-element
    room the GEMM's own rounding needs); else in the inputs' dtypes."""
    p = w["params"]
    fam = w["family"]
    parts = _split(w, inputs)
    dt = torch.float64 if exact else DTYPES[w["out_dtype"]]

    def cast(t):
        if exact:
            return t.to(torch.float64)
        if t.dtype in (DTYPES["e4m3"], DTYPES["e5m2"]):
            return t.to(torch.bfloat16)
        return t

    tensors = [cast(t).to(dt) for t in parts["tensors"]]
    if fam not in GEMM:
        x = cast(parts["x"])
        if fam in ("softmax", "log_softmax"):
            log = fam == "log_softmax"
            f = torch.log_softmax if log else torch.softmax
            if not w["chain"]["steps"]:
                return _ret(f(x, -1).to(dt), None, with_slack)
            # The ops before the softmax ([[before]]), then the softmax; exact: each value's
            # bound on the ops' fp32 evaluation (8 fp32 ulps of the input's and the
            # result's magnitudes, the first carried through the ops) carried through the
            # row as the harness does: 2 (e_i + sum_j p_j e_j), times p_i for softmax.
            xd = x.to(dt)
            v = chain(w, xd, tensors)
            want = f(v, -1)
            if not (exact and with_slack):
                return _ret(want.to(dt), None, with_slack)
            u = 8.0 * 2.0**-24
            e0 = u * xd.abs()
            dev = torch.zeros_like(v)
            for d in (-1.0, -0.5, 0.5, 1.0):
                dev = torch.maximum(dev, _moved(chain(w, xd + d * e0, tensors), v))
            e = torch.where(v.isfinite(), dev + u * v.abs(), torch.zeros_like(v))
            p = torch.softmax(v, -1)
            ebar = (torch.where(p > 0, p * e, torch.zeros_like(e))).sum(-1, keepdim=True)
            bound = (2.0 * (e + ebar)).clamp(max=0.5)
            slack = bound if log else torch.where(p > 0, bound * p, torch.zeros_like(p))
            return _ret(want, slack, with_slack)
        if fam == "norm":
            y = normalize(w, x.to(torch.float64 if exact else torch.float32)).to(dt)
            return _ret(chain(w, y, tensors), None, with_slack)
        if fam in ("scan", "reduce"):
            # In the inputs' dtype, as PyTorch runs it (a 16-bit sum accumulates in fp32
            # inside the op); exact: in float64 with the kernel's error bound, carried
            # through the chain.
            rows = scan_rows if fam == "scan" else reduce_rows
            y, e = rows(w, x.to(torch.float64) if exact else x, exact and with_slack)
            y = y.to(dt)
            want = chain(w, y, tensors)
            if e is None:
                return _ret(want, None, with_slack)
            e = e.to(dt)
            dev = torch.zeros_like(want)
            for d in (-1.0, -0.5, 0.5, 1.0):
                dev = torch.maximum(dev, _moved(chain(w, y + d * e, tensors), want))
            return _ret(want, dev.nan_to_num(0.0), with_slack)
        return _ret(chain(w, x.to(dt), tensors), None, with_slack)
    a, b = cast(parts["a"]), cast(parts["b"])
    scale = p["alpha"] * p["scale_a"] * p["scale_b"]
    acc = torch.matmul(a, b)
    z = scale * acc.to(dt)
    if "c" in parts:
        z = z + p["beta"] * cast(parts["c"]).to(dt)
    e = None
    if exact and with_slack:
        k = a.shape[-1]
        sum_abs = abs(scale) * torch.matmul(a.abs(), b.abs())
        e = _dot_bound(w, sum_abs, k) + 1.2e-7 * z.abs()
    if fam == "gemm_glu":
        z2 = scale * torch.matmul(a, cast(parts["b2"])).to(dt)
        g = lambda u, v: activation(p["gate"], u, *w["gate_params"]) * v  # noqa: E731
        want = g(z, z2)
        if e is None:
            return _ret(want, None, with_slack)
        e2 = _dot_bound(w, abs(scale) * torch.matmul(a.abs(), cast(parts["b2"]).abs()), a.shape[-1])
        dev = torch.zeros_like(want)
        for d1 in (-1.0, -0.5, 0.5, 1.0):
            for d2 in (-1.0, 1.0):
                dev = torch.maximum(dev, (g(z + d1 * e, z2 + d2 * e2) - want).abs())
        return _ret(want, dev, with_slack)
    if fam == "gemm_softmax":
        f = torch.log_softmax if p["log_softmax"] else torch.softmax
        # The chain runs before the softmax; its error bound is carried through it.
        x = chain(w, z, tensors)
        want = f(x, -1)
        if e is None:
            return _ret(want, None, with_slack)
        ex = torch.zeros_like(x)
        for d in (-1.0, -0.5, 0.5, 1.0):
            ex = torch.maximum(ex, _moved(chain(w, z + d * e, tensors), x))
        emax = ex.amax(-1, keepdim=True)
        dev = 2 * emax if p["log_softmax"] else 2 * emax * want
        return _ret(want, dev, with_slack)
    want = chain(w, z, tensors)
    if e is None:
        return _ret(want, None, with_slack)
    dev = torch.zeros_like(want)
    for d in (-1.0, -0.5, 0.5, 1.0):
        dev = torch.maximum(dev, _moved(chain(w, z + d * e, tensors), want))
    return _ret(want, dev, with_slack)


def _moved(v, want):
    """How far v is from want; 0 where that is NaN: both the same infinity (an element a
    triu or tril filled with -inf moves nowhere), or a NaN on either side, which the
    harness's bounds pass over too (f64::max)."""
    d = (v - want).abs()
    return torch.where(d.isnan(), torch.zeros_like(d), d)


def _ret(want, dev, with_slack):
    if with_slack:
        return want, (dev if dev is not None else torch.zeros_like(want))
    return want


def check(w, shape, got, inputs):
    """(passed, max abs error, count of elements out of tolerance) of `got` against the
    exact reference, with the workload's tolerance on `shape`."""
    want, slack = reference(w, inputs, exact=True, with_slack=True)
    g = got.to(torch.float64)
    if w["out_dtype"] in ("e4m3", "e5m2"):
        want = want * w["params"]["scale_d"]
        slack = slack * abs(w["params"]["scale_d"])
    tol = w["tolerance"]
    m, n, k, _ = dims(shape)
    atol = tol["atol"] * {"none": 1.0, "sqrt_k": math.sqrt(max(k, 1)),
                          "inv_n": 1.0 / max(n, 1),
                          "inv_sqrt_n": 1.0 / math.sqrt(max(n, 1)),
                          "inv_sqrt_k": 1.0 / math.sqrt(max(k, 1))}[tol["atol_scale"]]
    atol = max(atol, tol.get("atol_floor", 0.0))
    err = (g - want).abs()
    bad = ~(err <= atol + tol["rtol"] * want.abs() + slack)
    bad = bad & ~(torch.isnan(want) & torch.isnan(g))
    return (int(bad.sum()) == 0, float(err.nan_to_num(float("inf")).max()), int(bad.sum()))
