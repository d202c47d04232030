//! `cutesmith export --torch DIR`: a Python package around one kernel. The static parts
//! (the C++ operator, the build, the reference, the test) are shipped inside the binary;
//! what is particular to the workload is generated here: `workload.json` (read by the
//! Python side) and `csrc/cutesmith_workload.h` (the same facts for the C++ side).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::spec::chain::{BinOp, Op, Operand};
use crate::spec::{AtolScale, Family, Layout, Workload};

const TORCH_OP: &str = include_str!("package/torch_op.cpp");
const INIT: &str = include_str!("package/__init__.py");
const BUILD: &str = include_str!("package/_build.py");
const REFERENCE: &str = include_str!("package/_reference.py");
const TEST: &str = include_str!("package/test_kernel.py");

/// What the package is made of, besides the workload.
pub struct PackageInput<'a> {
    pub workload: &'a Workload,
    /// The kernel's file name under `csrc/` (already written there by the caller).
    pub kernel_file: &'a str,
    /// The architecture the session compiled for (`sm_90a`).
    pub arch: &'a str,
    /// Session id and version, for the README.
    pub session: &'a str,
    pub version: u32,
    /// What the session measured, one sentence.
    pub measured: &'a str,
    /// The CUTLASS include directory found at export time, recorded as a fallback.
    pub cutlass_include: Option<&'a Path>,
}

/// The Python package's name (also the torch.library namespace): `cutesmith_<workload>`.
pub fn package_name(workload: &Workload) -> String {
    let tail: String = workload
        .name()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("cutesmith_{tail}")
}

/// The directory of the kernel sources inside the package (`DIR/<package>/csrc`).
pub fn csrc_dir(out: &Path, workload: &Workload) -> PathBuf {
    out.join(package_name(workload)).join("csrc")
}

/// The op's inputs, in order: the GEMM operands (a, b, b2, c) or x, then the chain's
/// tensor operands by name.
pub fn input_names(w: &Workload) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    if w.family().is_gemm() {
        v.push("a".into());
        v.push("b".into());
        if w.family() == Family::GemmGlu {
            v.push("b2".into());
        }
        if w.params().beta != 0.0 {
            v.push("c".into());
        }
    } else {
        v.push("x".into());
    }
    v.extend(w.chain().tensors.iter().map(|t| t.name.clone()));
    v
}

fn finite(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

fn binop(b: BinOp) -> &'static str {
    match b {
        BinOp::Add => "add",
        BinOp::Sub => "sub",
        BinOp::Mul => "mul",
        BinOp::Div => "div",
        BinOp::RDiv => "rdiv",
        BinOp::Min => "min",
        BinOp::Max => "max",
        BinOp::Set => "set",
        BinOp::Fill { when: true, .. } => "masked_fill",
        BinOp::Fill { when: false, .. } => "where",
    }
}

/// The workload as the package's Python side reads it.
pub fn workload_json(input: &PackageInput<'_>) -> Value {
    let w = input.workload;
    let p = w.params();
    let lay = w.layouts();
    let chain = w.chain();
    let steps: Vec<Value> = chain
        .steps
        .iter()
        .map(|s| {
            let mut v = match s.op {
                Op::Act(a, p0, p1) => json!({"op": "act", "name": a.name(), "p0": p0, "p1": p1}),
                Op::Binary(b, o) => {
                    let operand = match o {
                        Operand::Scalar(x) => json!({"kind": "scalar", "value": finite(x)}),
                        Operand::Tensor(i) => json!({"kind": "tensor", "index": i}),
                        Operand::Z => json!({"kind": "z"}),
                        Operand::Saved(i) => json!({"kind": "saved", "index": i}),
                    };
                    let mut step = json!({"op": "binary", "fn": binop(b), "operand": operand});
                    // A masked_fill / where's fill: a number, or "inf" / "-inf".
                    if let Some(f) = b.fill() {
                        step["fill"] = if f.is_finite() {
                            json!(f)
                        } else {
                            json!(format!("{f}"))
                        };
                    }
                    step
                }
                Op::Clamp(lo, hi) => json!({"op": "clamp", "min": finite(lo), "max": finite(hi)}),
                Op::Neg => json!({"op": "neg"}),
                Op::Abs => json!({"op": "abs"}),
                Op::Exp => json!({"op": "exp"}),
                Op::Log => json!({"op": "log"}),
                Op::Sqrt => json!({"op": "sqrt"}),
                Op::Pow(p) => json!({"op": "pow", "value": p}),
                // The fill as a number, or "inf" / "-inf" (JSON has no infinity).
                Op::Tri { upper, diag, fill } => json!({
                    "op": "tri", "upper": upper, "diagonal": diag,
                    "fill": if fill.is_finite() { json!(fill) } else { json!(format!("{fill}")) },
                }),
            };
            v["save"] = s.save.map_or(Value::Null, |i| json!(i));
            v
        })
        .collect();
    let tensors: Vec<Value> = chain
        .tensors
        .iter()
        .map(|t| json!({"kind": t.kind.name(), "dtype": t.dtype.name(), "name": t.name}))
        .collect();
    let shapes: Vec<Value> = w
        .shapes()
        .iter()
        // Every dimension, the batch included (a norm's batches of rows side by side).
        .map(|s| json!({"m": s.m, "n": s.n, "k": s.k, "batch": s.batch}))
        .collect();
    let t = w.tolerance();
    // The validator's error model for the GEMM's dot products, as the worker applies it.
    let summation = crate::spec::Summation::of(w.dtype(), w.allow_tf32()).name();
    let roundoff = crate::spec::gemm_roundoff(w);
    let (g0, g1) = p.gate.default_params();
    json!({
        "name": w.name(),
        "description": w.description(),
        "namespace": package_name(w),
        "kernel": input.kernel_file,
        "arch": input.arch,
        "session": input.session,
        "version": input.version,
        "cutlass_include": input.cutlass_include.map(|p| p.display().to_string()),
        "family": w.family().name(),
        "dtype": w.dtype().name(),
        "out_dtype": w.out_dtype().name(),
        "acc_dtype": w.acc_dtype().name(),
        "allow_tf32": w.allow_tf32(),
        "layout": {
            "a": lay.a.name(), "b": lay.b.name(), "c": lay.c.name(),
            "shared_a": lay.shared_a, "shared_b": lay.shared_b,
        },
        "params": {
            "alpha": p.alpha, "beta": p.beta, "activation": p.activation.name(),
            "act_alpha": p.act_alpha, "act_beta": p.act_beta, "bias": p.bias,
            "scale_a": p.scale_a, "scale_b": p.scale_b, "scale_d": p.scale_d,
            "gate": p.gate.name(), "log_softmax": p.log_softmax,
            "norm": p.norm.name(), "eps": p.eps, "reduce": p.reduce.name(),
            "scan": p.scan.name(), "reverse": p.reverse, "exclusive": p.exclusive,
        },
        "gate_params": [g0, g1],
        "chain": {"steps": steps, "tensors": tensors, "describe": chain.describe()},
        "tolerance": {
            "rtol": t.rtol, "atol": t.atol,
            "atol_scale": match t.atol_scale {
                AtolScale::None => "none",
                AtolScale::SqrtK => "sqrt_k",
                AtolScale::InvN => "inv_n",
                AtolScale::InvSqrtN => "inv_sqrt_n",
                AtolScale::InvSqrtK => "inv_sqrt_k",
            },
            "atol_floor": t.atol_floor,
        },
        "roundoff": roundoff,
        "summation": summation,
        "shapes": shapes,
        "inputs": input_names(w),
    })
}

fn c_float(x: f32) -> String {
    if x.is_finite() {
        format!("{x:?}f")
    } else {
        "0.0f".into()
    }
}

/// `csrc/cutesmith_workload.h`: the workload's constants for `torch_op.cpp`, the same
/// values the cutesmith harness puts in `cs_problem`.
pub fn workload_header(w: &Workload) -> String {
    let p = w.params();
    let lay = w.layouts();
    let chain = w.chain();
    let (mut act, mut a0, mut a1) = (p.activation, p.act_alpha, p.act_beta);
    if w.family() == Family::Activation {
        if let Some((a, p0, p1)) = chain.single_activation() {
            (act, a0, a1) = (a, p0 as f32, p1 as f32);
        }
    }
    let inputs = input_names(w);
    let shapes = w.shape_list();
    let layout = |l: Layout| l.abi_value();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// Generated by `cutesmith export --torch` from workload {}: do not edit.\n\
         // {}\n#pragma once\n",
        w.name(),
        w.description()
    );
    let mut def = |k: &str, v: String| {
        let _ = writeln!(s, "#define {k} {v}");
    };
    def("CSW_NAME", format!("{:?}", w.name()));
    def("CSW_NAMESPACE", package_name(w));
    def("CSW_FAMILY", w.family().abi_value().to_string());
    def("CSW_IS_GEMM", u8::from(w.family().is_gemm()).to_string());
    // The preprocessor's own flags: cs_family and cs_layout are enums, which an `#if`
    // reads as 0.
    def(
        "CSW_IS_GLU",
        u8::from(w.family() == Family::GemmGlu).to_string(),
    );
    def(
        "CSW_IS_NORM",
        u8::from(w.family() == Family::Norm).to_string(),
    );
    def(
        "CSW_IS_REDUCE",
        u8::from(w.family() == Family::Reduce).to_string(),
    );
    def(
        "CSW_IS_SCAN",
        u8::from(w.family() == Family::Scan).to_string(),
    );
    def("CSW_A_COL", u8::from(lay.a == Layout::Col).to_string());
    def("CSW_DTYPE_AB", w.dtype().abi_value().to_string());
    def("CSW_DTYPE_CD", w.out_dtype().abi_value().to_string());
    def("CSW_DTYPE_ACC", w.acc_dtype().abi_value().to_string());
    def("CSW_LAYOUT_A", layout(lay.a).to_string());
    def("CSW_LAYOUT_B", layout(lay.b).to_string());
    def("CSW_LAYOUT_CD", layout(lay.c).to_string());
    def("CSW_SHARED_A", u8::from(lay.shared_a).to_string());
    def("CSW_SHARED_B", u8::from(lay.shared_b).to_string());
    def("CSW_ALPHA", c_float(p.alpha));
    def("CSW_BETA", c_float(p.beta));
    def("CSW_HAS_C", u8::from(p.beta != 0.0).to_string());
    def("CSW_ACTIVATION", act.abi_value().to_string());
    def("CSW_ACT_ALPHA", c_float(a0));
    def("CSW_ACT_BETA", c_float(a1));
    def("CSW_BIAS", u8::from(p.bias).to_string());
    def("CSW_SCALE_A", c_float(p.scale_a));
    def("CSW_SCALE_B", c_float(p.scale_b));
    def("CSW_SCALE_D", c_float(p.scale_d));
    def("CSW_GATE", p.gate.abi_value().to_string());
    def("CSW_LOG_SOFTMAX", i32::from(p.log_softmax).to_string());
    def("CSW_NORM", p.norm.abi_value().to_string());
    def("CSW_NORM_EPS", c_float(p.eps));
    def("CSW_REDUCE", p.reduce.abi_value().to_string());
    def("CSW_SCAN", p.scan.abi_value().to_string());
    def(
        "CSW_SCAN_FLAGS",
        crate::spec::ScanKind::flags(p.reverse, p.exclusive).to_string(),
    );
    def("CSW_NUM_INPUTS", inputs.len().to_string());
    def("CSW_INPUTS", format!("{:?}", inputs.join(", ")));
    def("CSW_SHAPES", format!("{shapes:?}"));
    def("CSW_NUM_OPERANDS", chain.tensors.len().to_string());
    // One C array of CS_MAX_OPERANDS entries per property of the chain's tensor operands,
    // padded with `fill`.
    let mut array = |decl: &str, fill: &str, values: Vec<String>| {
        let mut v = values;
        while v.len() < 4 {
            v.push(fill.into());
        }
        let _ = writeln!(s, "{decl}[CS_MAX_OPERANDS] = {{{}}};", v.join(", "));
    };
    array(
        "static const int csw_operand_kind",
        "0",
        chain
            .tensors
            .iter()
            .map(|t| t.kind.abi_value().to_string())
            .collect(),
    );
    array(
        "static const int csw_operand_dtype",
        "0",
        chain
            .tensors
            .iter()
            .map(|t| t.dtype.abi_value().to_string())
            .collect(),
    );
    array(
        "static const char* const csw_operand_name",
        "\"\"",
        chain
            .tensors
            .iter()
            .map(|t| format!("{:?}", t.name))
            .collect(),
    );
    s
}

fn readme(input: &PackageInput<'_>, pkg: &str) -> String {
    let w = input.workload;
    let inputs = input_names(w);
    let shapes = w.shape_list();
    let lay = w.layouts();
    let mut args = String::new();
    for name in &inputs {
        let line = match name.as_str() {
            "a" => format!(
                "`a`: A, m x k (or batch x m x k), {}, {}",
                w.dtype(),
                layout_words(lay.a)
            ),
            "b" | "b2" => format!(
                "`{name}`: B, k x n (or batch x k x n{}), {}, {}",
                if lay.shared_b {
                    "; shared by the batch: 2-D"
                } else {
                    ""
                },
                w.dtype(),
                layout_words(lay.b)
            ),
            "c" => format!("`c`: C, like the output, {}", w.out_dtype()),
            "x" => format!(
                "`x`: the input, contiguous, {}; rows are its last dimension",
                w.dtype()
            ),
            other => {
                let t = w.chain().tensors.iter().find(|t| t.name == *other);
                match t {
                    Some(t) => format!(
                        "`{other}`: a {} operand of the epilogue chain ({}), {}",
                        t.kind.name(),
                        match t.kind.name() {
                            "row" => "n values, one per output column",
                            "col" => "m values, one per output row",
                            _ => "m x n like the output",
                        },
                        t.dtype
                    ),
                    None => format!("`{other}`"),
                }
            }
        };
        let _ = writeln!(args, "- {line}");
    }
    format!(
        r#"# {pkg}

The cutesmith kernel for workload `{name}` ({desc}) as a PyTorch custom operator:
`torch.ops.{pkg}.run([{list}])`, on PyTorch's current CUDA stream, with tensors PyTorch
allocates. Exported by `cutesmith export --torch` from session `{session}` (version
v{version}). Measured by cutesmith: {measured}. Validated on the shapes {shapes}.

## Build and run

Needs an NVIDIA GPU ({arch}), PyTorch with CUDA, nvcc (`CUDA_HOME`) and the CUTLASS 4.2
headers: `CUTLASS_DIR` (a checkout, its `include/`, or the nvidia-cutlass wheel's tree), or
`load(cutlass_dir=...)`, or `pip install nvidia-cutlass==4.2.0.0`; the directory cutesmith
used at export is recorded in `{pkg}/workload.json` as the last resort.

```sh
CUTLASS_DIR=/path/to/cutlass python test_kernel.py     # correctness on every shape, then timing
```

```python
import torch, {pkg}
{pkg}.load()                            # compiles once (torch.utils.cpp_extension; cached)
inputs = {pkg}.make_inputs()            # random inputs of the headline shape
d = {pkg}.run(*inputs)                  # the kernel
ref = {pkg}.reference(*inputs)          # the same computation in PyTorch ops
```

## Inputs (in this order)

{args}
The output is allocated by the operator: {out_dtype}, {out_layout}. Every input must be a
CUDA tensor on one device, of the dtype above, packed in the layout above (a transposed
view such as `W.t()` of a contiguous `W` is column-major) and 16-byte aligned; anything
else raises a RuntimeError saying what to pass instead. A problem the kernel does not
handle raises with the kernel's CS_ERR_UNSUPPORTED.

## Files

- `{pkg}/csrc/{kernel}`: the kernel (C ABI: `cutesmith_abi.h`), with the cutesmith headers it includes
- `{pkg}/csrc/torch_op.cpp`: the operator (TORCH_LIBRARY), `cutesmith_workload.h` its constants
- `{pkg}/workload.json`: the workload (shapes, dtypes, layouts, epilogue chain, tolerance)
- `{pkg}/_build.py`, `_reference.py`: the build, the reference and the tolerance check
- `test_kernel.py`: the check and the timing (CUDA events, median; also a pytest test)
"#,
        name = w.name(),
        desc = w.description(),
        list = inputs.join(", "),
        session = input.session,
        version = input.version,
        measured = input.measured,
        arch = input.arch,
        kernel = input.kernel_file,
        out_dtype = w.out_dtype(),
        out_layout = if w.family().is_gemm() {
            layout_words(lay.c)
        } else {
            "the input's shape"
        },
    )
}

fn layout_words(l: Layout) -> &'static str {
    match l {
        Layout::Row => "row-major (contiguous)",
        Layout::Col => "column-major (the .t() of a contiguous tensor)",
    }
}

fn write(path: &Path, text: &str, written: &mut Vec<PathBuf>) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    std::fs::write(path, text).map_err(|e| Error::io(path, e))?;
    written.push(path.to_path_buf());
    Ok(())
}

/// Writes the package under `out` (the kernel and its headers are already in
/// [`csrc_dir`]); returns the files written.
pub fn write_package(input: &PackageInput<'_>, out: &Path) -> Result<Vec<PathBuf>> {
    let w = input.workload;
    if w.view().is_some() {
        return Err(Error::Usage(format!(
            "workload {}: an activation read through a view ([view]) is not exported as a \
             torch op yet (the op takes its input shaped like its output); export the \
             session without --torch",
            w.name()
        )));
    }
    let pkg = package_name(w);
    let root = out.join(&pkg);
    let mut written = Vec::new();
    let json = serde_json::to_string_pretty(&workload_json(input)).map_err(|e| Error::Format {
        context: "workload.json".into(),
        message: e.to_string(),
    })?;
    write(&root.join("workload.json"), &json, &mut written)?;
    write(
        &root.join("csrc/cutesmith_workload.h"),
        &workload_header(w),
        &mut written,
    )?;
    write(&root.join("csrc/torch_op.cpp"), TORCH_OP, &mut written)?;
    write(&root.join("__init__.py"), INIT, &mut written)?;
    write(&root.join("_build.py"), BUILD, &mut written)?;
    write(&root.join("_reference.py"), REFERENCE, &mut written)?;
    write(
        &out.join("test_kernel.py"),
        &TEST.replace("__PACKAGE__", &pkg),
        &mut written,
    )?;
    write(&out.join("README.md"), &readme(input, &pkg), &mut written)?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::TORCH_OP;

    /// The operator's `#if`s test only macros: an enum constant of the ABI header
    /// (`CS_FAMILY_NORM`, `CS_LAYOUT_COL`) reads as 0 in the preprocessor, which made the
    /// GLU's b2 and a norm's or reduction's rows side by side dead code.
    #[test]
    fn the_operators_conditions_read_macros_not_enum_constants() {
        for line in TORCH_OP.lines().map(str::trim_start) {
            if line.starts_with("#if") || line.starts_with("#elif") {
                assert!(
                    !line.contains("CS_FAMILY_") && !line.contains("CS_LAYOUT_"),
                    "an enum constant in a preprocessor condition: {line}"
                );
            }
        }
        for flag in ["CSW_IS_GLU", "CSW_IS_NORM", "CSW_IS_REDUCE", "CSW_A_COL"] {
            assert!(TORCH_OP.contains(flag), "{flag} is not used");
        }
    }
}
