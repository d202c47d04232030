# cutesmith's PyTorch tracer (shipped inside the cutesmith binary; `cutesmith import` runs
# it with the Python of CUTESMITH_PYTHON or python3 on PATH).
#
# usage: python3 trace.py PROBLEM.py [--train]
#
# Loads a problem file in the KernelBench convention (class Model(nn.Module),
# get_inputs(), get_init_inputs()), builds the model and its inputs on the `meta` device
# (no memory is allocated and no GPU is needed: device="cuda", .cuda() and .to("cuda") in
# the file are redirected to meta), traces it with torch.export into ATen ops, and prints
# the graph as one JSON object on stdout. It maps nothing: cutesmith (Rust) reads the
# graph and decides what it becomes.
#
# Output: {"torch": VERSION, "nodes": [...], "output": [NAME...], "inputs": [...]}, or
# {"error": {"stage": ..., "message": ..., "detail": ...}} with exit code 3.

import json
import os
import sys
import traceback
import warnings

warnings.filterwarnings("ignore")


def fail(stage, message, detail=""):
    print(json.dumps({"error": {"stage": stage, "message": message, "detail": detail}}))
    sys.exit(3)


try:
    import torch
except Exception as e:  # noqa: BLE001 - any failure to import is "no usable torch"
    fail("torch", f"{type(e).__name__}: {e}", f"python: {sys.executable}")

from torch.overrides import TorchFunctionMode  # noqa: E402


def _is_device_arg(v):
    if isinstance(v, torch.device):
        return True
    if isinstance(v, int) and not isinstance(v, bool):
        return False
    if isinstance(v, str):
        return v.split(":")[0] in ("cuda", "cpu", "meta", "mps", "xpu", "hip")
    return False


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def scalar_value(t):
    """The value of a 0-d tensor that holds data (not on meta), else None."""
    if isinstance(t, torch.Tensor) and t.dim() == 0 and t.device.type != "meta" and t.is_floating_point():
        v = float(t.detach())
        return encode(v)
    return None


# What a tensor made on the meta device holds, where the problem file built it from a
# constant (its values are not there to read): `_cs_fill`, the one value of a tensor of
# ones or of full(v); `_cs_triangle`, ("tril" | "triu", diagonal, value) for the tril / triu
# of such a tensor (a registered causal mask: torch.tril(torch.ones(T, T)).view(1, 1, T, T)).
# Views that keep the last two dims keep the mark (a view remembers the tensor it views in
# `_cs_root`); casts keep it only for the value 1 (a 0/1 triangle stays one; -inf does
# not survive an integer or bool cast). Any write in place (an op whose name ends in `_`,
# x[i] = v, x &= y and the other in-place operators, an `out=`), to the tensor or to any view
# or base of it, or a read of its `.data`, drops the mark of the whole storage.
_VIEWS = {"view", "reshape", "unsqueeze", "expand", "contiguous", "clone", "detach"}
_CASTS = {"to", "float", "bool", "half", "bfloat16", "int", "long", "type", "double"}
_IN_PLACE = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
             "__ifloordiv__", "__imod__", "__ipow__", "__imatmul__", "__iand__", "__ior__",
             "__ixor__", "__ilshift__", "__irshift__", "__get__", "__set__"}
_MARKS = ("_cs_fill", "_cs_triangle")


def _root(t):
    """The tensor whose storage `t` views (itself when it views none)."""
    seen = 0
    while seen < 64:
        up = getattr(t, "_cs_root", None)
        if up is None:
            up = t._base if isinstance(t, torch.Tensor) else None
        if up is None or up is t:
            return t
        t, seen = up, seen + 1
    return t


def _unmark(t):
    if not isinstance(t, torch.Tensor):
        return
    for x in (t, _root(t)):
        for attr in _MARKS:
            if hasattr(x, attr):
                delattr(x, attr)
        x._cs_written = True


def _written(t):
    return isinstance(t, torch.Tensor) and (getattr(t, "_cs_written", False)
                                            or getattr(_root(t), "_cs_written", False))


def _mark(func, name, args, kwargs, out):
    first = args[0] if args else None
    outs = kwargs.get("out")
    if outs is not None:
        for t in outs if isinstance(outs, (list, tuple)) else [outs]:
            _unmark(t)
    if (name.endswith("_") and not name.endswith("__")) or name in _IN_PLACE:
        _unmark(first)
        if name != "__get__":
            _unmark(out)
        return
    if not isinstance(out, torch.Tensor):
        return
    try:
        fill = None
        if name in ("ones", "ones_like", "new_ones"):
            fill = 1.0
        elif name in ("full", "full_like", "new_full"):
            v = kwargs.get("fill_value", args[2] if name == "new_full" and len(args) > 2
                           else args[1] if len(args) > 1 else None)
            fill = float(v) if _is_number(v) else None
        if fill is not None:
            # An integer or bool tensor holds 1 exactly, not -inf or a fraction.
            if out.is_floating_point() or fill == 1.0:
                out._cs_fill = fill
            return
        if not isinstance(first, torch.Tensor) or _written(first):
            return
        if name in ("tril", "triu"):
            fill = getattr(first, "_cs_fill", None)
            d = kwargs.get("diagonal", args[1] if len(args) > 1 else 0)
            if fill is not None and isinstance(d, int) and not isinstance(d, bool):
                out._cs_triangle = (name, d, fill)
            return
        dtype_view = name == "view" and any(isinstance(a, torch.dtype) for a in args[1:])
        cast = name in _CASTS or dtype_view
        if (name in _VIEWS or cast) and first.dim() >= 2 and out.dim() >= 2 \
                and tuple(first.shape[-2:]) == tuple(out.shape[-2:]):
            for attr in _MARKS:
                if not hasattr(first, attr):
                    continue
                value = getattr(first, attr)
                held = value if attr == "_cs_fill" else value[2]
                if cast and held != 1.0:
                    continue
                setattr(out, attr, value)
            if name in ("view", "reshape", "unsqueeze", "expand") and not dtype_view:
                out._cs_root = _root(first)
    except Exception:  # noqa: BLE001 (a mark is a hint; never fail the trace for it)
        pass


class ToMeta(TorchFunctionMode):
    """Sends every tensor the problem file makes to the meta device, whatever device it
    names: factories get device="meta", and .cuda() / .to(device) keep the tensor where it
    is (on meta). Marks tensors built from constants (see `_mark`)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name == "tensor" and args and _is_number(args[0]):
            # A 0-d tensor of a Python number (nn.Parameter(torch.tensor(c))): made for real
            # on the CPU, a few bytes, so that its value can be read after the trace.
            kwargs["device"] = "cpu"
            return func(*args, **kwargs)
        if kwargs.get("device") is not None:
            kwargs["device"] = "meta"
        if name in ("cuda", "cpu"):
            return args[0]
        if name == "to":
            meta = torch.device("meta")
            args = tuple(meta if i > 0 and _is_device_arg(a) else a for i, a in enumerate(args))
        out = func(*args, **kwargs)
        _mark(func, name, args, kwargs, out)
        return out


def load_problem(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("cutesmith_problem", path)
    if spec is None or spec.loader is None:
        fail("load", f"cannot load {path} as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        with torch.device("meta"), ToMeta():
            spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001
        fail("load", f"{type(e).__name__}: {e}", traceback.format_exc(limit=4))
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, name):
            fail(
                "load",
                f"{path} defines no `{name}`; a problem file has class Model(nn.Module), "
                "get_inputs() and get_init_inputs() (the KernelBench convention)",
            )
    return mod


def meta_of(v):
    if isinstance(v, torch.Tensor):
        return {
            "shape": [int(s) for s in v.shape],
            "stride": [int(s) for s in v.stride()],
            "offset": int(v.storage_offset()),
            "dtype": str(v.dtype).replace("torch.", ""),
        }
    return None


def encode(a):
    if isinstance(a, torch.fx.Node):
        return {"node": a.name}
    if isinstance(a, bool) or a is None or isinstance(a, (int, str)):
        return a
    if isinstance(a, float):
        if a != a:
            return {"float": "nan"}
        if a in (float("inf"), float("-inf")):
            return {"float": "inf" if a > 0 else "-inf"}
        return a
    if isinstance(a, (list, tuple)):
        return [encode(x) for x in a]
    if isinstance(a, torch.dtype):
        return {"dtype": str(a).replace("torch.", "")}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    return {"other": repr(a)}


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--train"):
        fail("usage", "usage: trace.py PROBLEM.py [--train]")
    path = sys.argv[1]
    train = len(sys.argv) == 3
    mod = load_problem(path)
    with torch.device("meta"), ToMeta():
        try:
            init = list(mod.get_init_inputs())
            model = mod.Model(*init)
        except Exception as e:  # noqa: BLE001
            fail("init", f"Model(*get_init_inputs()) failed: {type(e).__name__}: {e}",
                 traceback.format_exc(limit=4))
        try:
            inputs = mod.get_inputs()
        except Exception as e:  # noqa: BLE001
            fail("inputs", f"get_inputs() failed: {type(e).__name__}: {e}",
                 traceback.format_exc(limit=4))
        # Eval mode unless asked: dropout is then the identity and a BatchNorm uses its
        # running statistics. Training mode (nn.Module's default, as KernelBench runs
        # its problems): a BatchNorm normalizes with the batch's own statistics.
        model = model.train(train)
    inputs = tuple(x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs)
    try:
        ep = torch.export.export(model, inputs)
    except Exception as e:  # noqa: BLE001
        fail("export", f"torch.export could not trace Model: {type(e).__name__}: {e}",
             traceback.format_exc(limit=6))
    kinds = {}
    for s in ep.graph_signature.input_specs:
        kinds[s.arg.name] = (s.kind.name.lower(), s.target)
    # The values of 0-d parameters, buffers and constants made from Python numbers.
    held = dict(ep.state_dict)
    held.update(getattr(ep, "constants", {}) or {})
    # The module's own buffers (the tensors __init__ marked, by their attribute path).
    own = dict(model.named_buffers())
    nodes = []
    output = []
    for n in ep.graph.nodes:
        if n.op == "output":
            outs = n.args[0]
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            output = [encode(o) for o in outs]
            continue
        kind, target = kinds.get(n.name, (None, None))
        value = scalar_value(held.get(target)) if n.op == "placeholder" and target else None
        buf = own.get(target) if n.op == "placeholder" and target else None
        tri = getattr(buf, "_cs_triangle", None) if buf is not None and not _written(buf) else None
        nodes.append({
            "name": n.name,
            "op": n.op,
            "target": str(n.target) if n.op != "placeholder" else target,
            "kind": kind,
            "args": encode(list(n.args)),
            "kwargs": {k: encode(v) for k, v in n.kwargs.items()},
            "val": meta_of(n.meta.get("val")),
            "value": value,
            "triangle": encode(list(tri)) if tri else None,
        })
    print(json.dumps({
        "torch": torch.__version__,
        "nodes": nodes,
        "output": output,
        "inputs": [meta_of(x) for x in inputs],
    }))


main()
