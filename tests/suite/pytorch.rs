//! The PyTorch bridge: `cutesmith import` on the example problem files in
//! `examples/pytorch/` (each spec checked field by field, and loaded back through the
//! normal loader), the refusal of a convolution (the node named, no file written), and
//! `cutesmith export --torch`: its files, its Python reference and tolerance check run on
//! the CPU, and its C++ operator compiled by nvcc against torch's headers for sm_90a.
//!
//! These need a Python with torch (CUTESMITH_PYTHON, else python3): without one they
//! print why and return, except under CI, where they fail (.ci/run installs torch into a
//! venv and sets CUTESMITH_PYTHON).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use cutesmith::spec::chain::{BinOp, Op, Operand, TensorKind};
use cutesmith::spec::{Activation, DType, Family, Layout, Shape, Workload, WorkloadSpec};

use super::common::{fixture, output_text, root, toolchain};
use crate::require_tool;

/// The Python with torch the tests use, probed once.
fn python() -> Option<PathBuf> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = PY.get_or_init(|| {
        let py = cutesmith::pytorch::python::python();
        cutesmith::pytorch::python::probe(&py)
            .map(|info| PathBuf::from(info.python))
            .map_err(|e| e.to_string())
    });
    match found {
        Ok(p) => Some(p.clone()),
        Err(e) => {
            require_tool(
                &format!("a Python with torch (CUTESMITH_PYTHON or python3): {e}"),
                false,
            );
            None
        }
    }
}

fn cutesmith(python: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .args(args)
        .env("CUTESMITH_PYTHON", python)
        .current_dir(root())
        .output()
        .unwrap()
}

/// `cutesmith import examples/pytorch/<file>.py --out OUT [extra]`.
fn import_to(python: &Path, file: &str, out: &Path, extra: &[&str]) -> Output {
    let problem = root().join(format!("examples/pytorch/{file}.py"));
    import_path(python, &problem, out, extra)
}

/// `cutesmith import PROBLEM --out OUT [extra]`.
fn import_path(python: &Path, problem: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "import",
        problem.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    cutesmith(python, &args)
}

/// Imports `examples/pytorch/<file>.py` into a temp dir; the spec as written and as the
/// normal loader validates it.
/// An imported spec's `[[epilogue]]` as (op, operand) pairs.
fn chain_ops(spec: &WorkloadSpec) -> Vec<(&str, Option<&str>)> {
    ops_of(&spec.epilogue)
}

fn import(file: &str) -> Option<(WorkloadSpec, Workload, String)> {
    let py = python()?;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{file}.toml"));
    let o = import_to(&py, file, &out, &[]);
    let t = output_text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains(&format!("wrote {}", out.display())), "{t}");
    let toml_text = std::fs::read_to_string(&out).unwrap();
    assert!(
        toml_text.starts_with("# Imported by `cutesmith import` from "),
        "{toml_text}"
    );
    let spec: WorkloadSpec = toml::from_str(&toml_text).unwrap();
    let w = Workload::load(&out).unwrap_or_else(|e| panic!("{e}\n{toml_text}"));
    assert_eq!(w.name(), file);
    Some((spec, w, toml_text))
}

fn shapes(w: &Workload) -> Vec<Shape> {
    w.shapes().to_vec()
}

/// Every GEMM import lists the headline, then a ragged shape (about a quarter, odd
/// sizes) and a small one.
fn assert_gemm_shapes(w: &Workload, m: u64, n: u64, k: u64, batch: u64) {
    let s = shapes(w);
    assert_eq!(
        s[0],
        Shape {
            m,
            n,
            k,
            batch,
            dims: Default::default()
        }
    );
    assert_eq!(s.len(), 3, "{s:?}");
    let r = s[1];
    assert!(r.m % 2 == 1 && r.n % 2 == 1 && r.k % 2 == 1, "{r:?}");
    assert!(r.m < m && r.n < n && r.k < k, "{r:?}");
    assert_eq!(
        (s[2].m, s[2].n, s[2].k),
        (m.min(127), n.min(255), k.min(64))
    );
}

#[test]
fn import_plain_matmul() {
    let Some((spec, w, _)) = import("matmul") else {
        return;
    };
    assert_eq!(spec.family, Family::Gemm);
    assert_eq!(spec.dtype, DType::F32);
    assert_eq!(spec.out_dtype, None);
    assert!(!spec.allow_tf32);
    let l = spec.layout.clone().unwrap();
    assert_eq!(
        (l.a, l.b, l.c),
        (Some(Layout::Row), Some(Layout::Row), None)
    );
    assert!(spec.epilogue.is_empty());
    assert_eq!(w.family(), Family::Gemm);
    assert_eq!((w.layouts().a, w.layouts().b), (Layout::Row, Layout::Row));
    assert_eq!(w.layouts().c, Layout::Row);
    assert!(w.chain().is_identity());
    assert_gemm_shapes(&w, 2048, 4096, 1024, 1);
}

#[test]
fn import_transposed_matmul_reads_a_column_major() {
    let Some((spec, w, _)) = import("matmul_transposed_a") else {
        return;
    };
    assert_eq!(spec.family, Family::Gemm);
    assert_eq!(spec.dtype, DType::F32);
    // A.T of a contiguous (K, M) tensor is an M x K column-major matrix.
    let l = spec.layout.unwrap();
    assert_eq!((l.a, l.b), (Some(Layout::Col), Some(Layout::Row)));
    assert_eq!(w.layouts().a, Layout::Col);
    assert_gemm_shapes(&w, 1024, 2048, 4096, 1);
}

#[test]
fn import_bmm_made_on_cuda_in_half() {
    // get_inputs() says device="cuda" and .half(): the import runs on the meta device.
    let Some((spec, w, _)) = import("bmm_half_cuda") else {
        return;
    };
    assert_eq!(spec.family, Family::Gemm);
    assert_eq!(spec.dtype, DType::F16);
    let l = spec.layout.unwrap();
    assert_eq!(
        (l.a, l.b, l.shared),
        (Some(Layout::Row), Some(Layout::Row), None)
    );
    assert_eq!(spec.shapes[0].batch, Some(32));
    assert_gemm_shapes(&w, 512, 1024, 256, 32);
    assert_eq!(w.shapes()[1].batch, 3);
    assert!(!w.layouts().shared_a && !w.layouts().shared_b);
}

#[test]
fn import_linear_with_bias_is_b_column_major_plus_a_row_vector() {
    let Some((spec, w, _)) = import("linear_bias_bf16") else {
        return;
    };
    assert_eq!(spec.family, Family::GemmBiasAct);
    assert_eq!(spec.dtype, DType::BF16);
    let l = spec.layout.unwrap();
    // W is (out, in) contiguous: B = W^T is column-major.
    assert_eq!((l.a, l.b), (Some(Layout::Row), Some(Layout::Col)));
    assert_eq!(spec.params.bias, Some(true));
    assert_eq!(spec.params.activation, Some(Activation::Identity));
    assert!(spec.epilogue.is_empty());
    assert_gemm_shapes(&w, 1024, 11008, 4096, 1);
    let c = w.chain();
    assert_eq!(c.tensors.len(), 1);
    assert_eq!(c.tensors[0].kind, TensorKind::Row);
    assert_eq!(c.tensors[0].dtype, DType::BF16);
    assert_eq!(
        c.steps[0].op,
        Op::Binary(BinOp::Add, Operand::Tensor(0)),
        "{}",
        c.describe()
    );
}

#[test]
fn import_level2_chain_folds_constants_into_the_epilogue() {
    let Some((spec, w, toml_text)) = import("linear_scale_add_clamp_gelu") else {
        return;
    };
    assert_eq!(spec.family, Family::GemmBiasAct);
    assert_eq!(spec.dtype, DType::F32);
    assert_eq!(spec.params.bias, Some(true));
    type Row<'a> = (&'a str, Option<f64>, Option<f64>, Option<f64>);
    let ops: Vec<Row> = spec
        .epilogue
        .iter()
        .map(|o| (o.op.as_str(), o.value, o.min, o.max))
        .collect();
    // x * scale_factor (an init argument), + 2.0, clamp(-1, 1), gelu.
    assert_eq!(
        ops,
        vec![
            ("mul", Some(0.5), None, None),
            ("add", Some(2.0), None, None),
            ("clamp", None, Some(-1.0), Some(1.0)),
            ("gelu_erf", None, None, None),
        ],
        "{toml_text}"
    );
    assert_gemm_shapes(&w, 512, 2048, 1024, 1);
    assert_eq!(
        w.chain().describe(),
        "z -> x + bias -> identity(x) -> x * 0.5 -> x + 2 -> clamp(x, -1, 1) -> gelu_erf(x)"
    );
}

/// A 0-d nn.Parameter of a Python number is its value; a residual kept with
/// clone().detach() is the linear's result, bias included.
#[test]
fn import_a_scalar_parameter_and_a_detached_residual() {
    let Some((spec, w, toml_text)) = import("linear_min_param_residual") else {
        return;
    };
    // The residual is the linear's result with its bias: the bias add is written out and
    // saved, since a spec's z is the value before the bias.
    assert_eq!(spec.family, Family::Gemm);
    type Row<'a> = (&'a str, Option<f64>, Option<&'a str>, Option<&'a str>);
    let ops: Vec<Row> = spec
        .epilogue
        .iter()
        .map(|o| {
            (
                o.op.as_str(),
                o.value,
                o.operand.as_deref(),
                o.save.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            ("add", None, Some("row"), Some("lin")),
            ("min", Some(2.0), None, None),
            ("sub", Some(2.0), None, None),
            ("add", None, Some("lin"), None),
        ],
        "{toml_text}"
    );
    // z = 3 before a bias of 0.5: min(3.5, 2) - 2 + 3.5.
    assert_eq!(w.chain().eval(3.0, &[0.5]), 3.5);
    assert_gemm_shapes(&w, 256, 512, 1024, 1);
}

/// RMSNorm written out over dim 1 of a 4-D tensor: family norm with the rows side by side
/// (a column-major A), batched over the leading dim, its eps kept.
#[test]
fn import_a_written_out_rmsnorm_over_a_middle_dim() {
    let Some((spec, w, toml_text)) = import("rmsnorm_dim1") else {
        return;
    };
    assert_eq!(spec.family, Family::Norm, "{toml_text}");
    assert_eq!(w.params().norm, cutesmith::spec::NormKind::Rms);
    assert_eq!(w.params().eps, 1e-5);
    assert_eq!(w.layouts().a, cutesmith::spec::Layout::Col);
    let h = w.headline();
    assert_eq!((h.batch, h.m, h.n), (16, 256 * 256, 64), "{toml_text}");
    assert!(w.chain().is_identity(), "{toml_text}");
}

/// nn.LayerNorm's weight and bias become the chain's row operands, before the ops after it.
#[test]
fn import_a_layernorm_and_the_ops_after_it() {
    let Some((spec, w, toml_text)) = import("layernorm_gelu") else {
        return;
    };
    assert_eq!(spec.family, Family::Norm, "{toml_text}");
    assert_eq!(w.params().norm, cutesmith::spec::NormKind::Layer);
    let ops = chain_ops(&spec);
    assert_eq!(
        ops,
        vec![
            ("mul", Some("row")),
            ("add", Some("row")),
            ("gelu_erf", None),
            ("mul", None)
        ],
        "{toml_text}"
    );
    let h = w.headline();
    assert_eq!((h.batch, h.m, h.n), (1, 8 * 512, 1024));
    assert_eq!(w.layouts().a, cutesmith::spec::Layout::Row);
}

/// nn.InstanceNorm2d (no affine, the input's statistics): a layer norm over each (n, c)
/// plane, the rows H x W, its eps kept, the ReLU after it in the chain.
#[test]
fn import_an_instance_norm_as_a_layer_norm_of_each_plane() {
    let Some((spec, w, toml_text)) = import("instance_norm_relu") else {
        return;
    };
    assert_eq!(spec.family, Family::Norm, "{toml_text}");
    assert_eq!(w.params().norm, cutesmith::spec::NormKind::Layer);
    assert!((w.params().eps - 1e-6).abs() < 1e-12, "{toml_text}");
    assert_eq!(w.layouts().a, Layout::Row);
    let h = w.headline();
    assert_eq!((h.batch, h.m, h.n), (1, 4 * 32, 64 * 48), "{toml_text}");
    assert_eq!(chain_ops(&spec), vec![("relu", None)], "{toml_text}");
    assert!(toml_text.contains("InstanceNorm"), "{toml_text}");
    assert!(!cutesmith::strategy::candidates(&w).is_empty());
}

/// nn.GroupNorm(8, 32, affine=False): 4 x 8 rows of 4 channels x 64 x 48, SiLU after.
#[test]
fn import_a_group_norm_as_a_layer_norm_of_each_group() {
    let Some((spec, w, toml_text)) = import("group_norm_silu") else {
        return;
    };
    assert_eq!(spec.family, Family::Norm, "{toml_text}");
    assert_eq!(w.params().norm, cutesmith::spec::NormKind::Layer);
    let h = w.headline();
    assert_eq!((h.batch, h.m, h.n), (1, 4 * 8, 4 * 64 * 48), "{toml_text}");
    assert_eq!(chain_ops(&spec), vec![("silu", None)], "{toml_text}");
    assert!(toml_text.contains("GroupNorm"), "{toml_text}");
}

/// With a per-channel weight and bias (affine=True, nn.GroupNorm's default): the samples
/// are the batch, each row a group of 4 whole channels (a `channel` operand of 4 a row) or
/// one channel's plane (a `col` operand), with a built-in candidate.
#[test]
fn import_affine_group_and_instance_norms_with_per_channel_operands() {
    for (file, rows, per_row, what) in [
        ("group_norm_affine", 8, 4, "channel"),
        ("instance_norm_affine", 32, 1, "col"),
    ] {
        let Some((spec, w, toml_text)) = import(file) else {
            return;
        };
        assert_eq!(spec.family, Family::Norm, "{toml_text}");
        let h = w.headline();
        assert_eq!(
            (h.batch, h.m, h.n),
            (4, rows, per_row * 64 * 48),
            "{toml_text}"
        );
        assert_eq!(
            chain_ops(&spec),
            vec![("mul", Some(what)), ("add", Some(what))],
            "{toml_text}"
        );
        let channels = spec.epilogue.iter().map(|o| o.channels).collect::<Vec<_>>();
        let want = (per_row > 1).then_some(per_row as u32);
        assert_eq!(channels, vec![want, want], "{toml_text}");
        // Every shape's rows split into whole channels.
        assert!(w.shapes().iter().all(|s| s.n % per_row == 0), "{toml_text}");
        assert!(w.shapes().len() >= 2, "{toml_text}");
        assert!(!cutesmith::strategy::candidates(&w).is_empty());
    }
}

/// An inference BatchNorm2d + ReLU (eval mode, the default): the running statistics folded
/// into a per-channel scale and shift, broadcast over dim 1 of the (N, C, H, W) output, as
/// N * C rows of H * W; a built-in candidate takes it.
#[test]
fn import_an_eval_batch_norm2d_as_broadcast_operands_over_its_channels() {
    let Some((spec, w, toml_text)) = import("batch_norm2d_eval_relu") else {
        return;
    };
    assert_eq!(spec.family, Family::Activation, "{toml_text}");
    assert_eq!(
        chain_ops(&spec),
        vec![
            ("mul", Some("broadcast")),
            ("add", Some("broadcast")),
            ("relu", None)
        ],
        "{toml_text}"
    );
    assert!(
        spec.epilogue[..2].iter().all(|o| o.over == Some(vec![1])),
        "{toml_text}"
    );
    let h = w.headline();
    assert_eq!(h.dims.as_slice(), [32, 256, 56, 56], "{toml_text}");
    assert_eq!((h.m, h.n), (32 * 256, 56 * 56), "{toml_text}");
    assert!(w.shapes().len() >= 2, "{toml_text}");
    assert!(!cutesmith::strategy::candidates(&w).is_empty());
}

/// A chain's ops as (op, operand) pairs.
fn ops_of(specs: &[cutesmith::spec::chain::OpSpec]) -> Vec<(&str, Option<&str>)> {
    specs
        .iter()
        .map(|o| (o.op.as_str(), o.operand.as_deref()))
        .collect()
}

/// A bool key-padding mask passed to forward: `softmax((scores * scale).masked_fill(pad,
/// -inf))`, one softmax workload whose second [[before]] op is a masked_fill by a bool
/// operand broadcast over dims 0 and 3; a built-in candidate takes it.
#[test]
fn import_a_masked_fill_by_a_bool_padding_mask_before_a_softmax() {
    let Some((spec, w, toml_text)) = import("bool_padding_mask_softmax") else {
        return;
    };
    assert_eq!(spec.family, Family::Softmax, "{toml_text}");
    assert_eq!(
        ops_of(&spec.before),
        vec![("mul", None), ("masked_fill", Some("broadcast"))],
        "{toml_text}"
    );
    let m = &spec.before[1];
    assert_eq!(m.value, Some(f64::NEG_INFINITY), "{toml_text}");
    assert_eq!(m.dtype, Some(cutesmith::spec::DType::Bool), "{toml_text}");
    assert_eq!(m.over.as_deref(), Some(&[0, 3][..]), "{toml_text}");
    assert_eq!(w.chain().tensors[0].dtype, cutesmith::spec::DType::Bool);
    assert!(!cutesmith::strategy::candidates(&w).is_empty());
}

/// `torch.relu(torch.where(keep, x * 0.5, 0.0))` with a bool `keep`: an activation workload
/// whose chain is the scale, a `where` by a bool matrix (fill 0) and the relu.
#[test]
fn import_a_where_by_a_bool_mask() {
    let Some((spec, w, toml_text)) = import("where_bool_mask_relu") else {
        return;
    };
    assert_eq!(spec.family, Family::Activation, "{toml_text}");
    assert_eq!(
        chain_ops(&spec),
        vec![("mul", None), ("where", Some("matrix")), ("relu", None)],
        "{toml_text}"
    );
    assert_eq!(spec.epilogue[1].value, Some(0.0), "{toml_text}");
    assert_eq!(w.chain().eval(-2.0, &[0.0]), 0.0);
    assert_eq!(w.chain().eval(2.0, &[1.0]), 1.0);
    assert!(!cutesmith::strategy::candidates(&w).is_empty());
}

/// BERT's attention probabilities, `softmax(scores * scale + mask)` with a [B, 1, 1, T]
/// padding mask: one softmax workload whose [[before]] ops are the scale and the mask, an
/// operand broadcast over dims 0 and 3, its rows the last dim; a built-in candidate takes it.
#[test]
fn import_ops_before_a_softmax_with_a_broadcast_attention_mask() {
    let Some((spec, w, toml_text)) = import("bert_attention_mask_softmax") else {
        return;
    };
    assert_eq!(spec.family, Family::Softmax, "{toml_text}");
    assert!(spec.epilogue.is_empty(), "{toml_text}");
    assert_eq!(
        ops_of(&spec.before),
        vec![("mul", None), ("add", Some("broadcast"))],
        "{toml_text}"
    );
    assert_eq!(spec.before[0].value, Some(0.125), "{toml_text}");
    assert_eq!(spec.before[1].over, Some(vec![0, 3]), "{toml_text}");
    let h = w.headline();
    assert_eq!(h.dims.as_slice(), [8, 12, 512, 512], "{toml_text}");
    assert_eq!((h.m, h.n), (8 * 12 * 512, 512), "{toml_text}");
    assert!(!cutesmith::strategy::candidates(&w).is_empty());
}

/// A causal softmax of (B, H, T, T) scores (`masked_fill` by a triangular mask built in
/// forward, which torch applies to each head's T x T matrix): a softmax over the dims whose
/// [[before]] ops are the scale and a tril to -inf, its rows the last dim.
#[test]
fn import_a_causal_masked_fill_before_a_softmax() {
    let Some((spec, w, toml_text)) = import("causal_softmax_masked_fill") else {
        return;
    };
    assert_eq!(spec.family, Family::Softmax, "{toml_text}");
    assert_eq!(
        ops_of(&spec.before),
        vec![("mul", None), ("tril", None)],
        "{toml_text}"
    );
    assert_eq!(spec.before[1].value, Some(f64::NEG_INFINITY), "{toml_text}");
    assert!(w.chain().positional());
    let h = w.headline();
    assert_eq!(h.dims.as_slice(), [4, 16, 1024, 1024], "{toml_text}");
    assert_eq!((h.m, h.n), (4 * 16 * 1024, 1024), "{toml_text}");
    // Each row's index op sees its row within its head's matrix.
    assert_eq!(w.tri_rows(h), 1024);
    assert!(!cutesmith::strategy::candidates(&w).is_empty());
}

/// Eager causal attention scores (`masked_fill` by `ones(T, T).triu(1)` built in forward,
/// then softmax): gemm_softmax over the 16 heads, the scale and a tril filled with -inf.
#[test]
fn import_causal_attention_scores_as_a_masked_gemm_softmax() {
    let Some(w) = causal_scores("causal_attention_scores", "mul") else {
        return;
    };
    assert!(w.chain().positional());
}

/// minGPT's form: the causal mask a registered `tril(ones)` buffer, cut to the sequence
/// (`bias[:, :, :T, :T] == 0`) in forward. The tracer marks the buffer as a triangle (its
/// values are on the meta device), and the mask is the same tril filled with -inf.
#[test]
fn import_causal_scores_with_a_registered_mask_buffer() {
    let Some(w) = causal_scores("causal_scores_registered_mask", "mul") else {
        return;
    };
    assert!(w.chain().positional());
}

/// A mask buffer written after its tril, directly or through a view of it (one corner
/// zeroed, the diagonal zeroed), no longer holds the triangle the tracer saw built: the
/// mark is dropped and the import refuses the mask, writing nothing.
#[test]
fn import_refuses_a_triangle_buffer_written_in_place() {
    let Some(py) = python() else {
        return;
    };
    let example =
        std::fs::read_to_string(root().join("examples/pytorch/causal_scores_registered_mask.py"))
            .unwrap();
    let registered = "        self.register_buffer(\n            \"bias\", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen)\n        )";
    assert!(example.contains(registered));
    for write in [
        "b[:, :, 0, 0] = 0.0",
        "b.view(max_seqlen, max_seqlen).diagonal().zero_()",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let problem = dir.path().join("written_mask.py");
        let text = example.replace(
            registered,
            &format!("        b = torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen)\n        {write}\n        self.register_buffer(\"bias\", b)"),
        );
        std::fs::write(&problem, text).unwrap();
        let out = dir.path().join("written_mask.toml");
        let o = import_path(&py, &problem, &out, &[]);
        let t = output_text(&o);
        assert_ne!(o.status.code(), Some(0), "{write}: {t}");
        assert!(t.contains("aten.slice"), "{write}: {t}");
        assert!(!out.exists(), "{write}");
    }
}

/// Imports an example of causal attention scores and checks what both forms share: a
/// gemm_softmax over 16 heads of 1024 x 1024 x 128 whose chain is the scale (`scale_op`)
/// then a tril filled with -inf, with a built-in candidate.
fn causal_scores(example: &str, scale_op: &str) -> Option<Workload> {
    let (spec, w, toml_text) = import(example)?;
    assert_eq!(spec.family, Family::GemmSoftmax, "{toml_text}");
    assert_eq!(
        chain_ops(&spec),
        vec![(scale_op, None), ("tril", None)],
        "{toml_text}"
    );
    assert_eq!(spec.epilogue[1].value, Some(f64::NEG_INFINITY));
    assert_gemm_shapes(&w, 1024, 1024, 128, 16);
    assert!(!cutesmith::strategy::candidates(&w).is_empty());
    Some(w)
}

/// Llama's reference attention (`scores + full(-inf).triu(1)`, the softmax of `.float()`
/// cast back with `type_as`): bf16 gemm_softmax, the scale and a tril filled with -inf, the
/// output bf16 as the inputs.
#[test]
fn import_llama_attention_scores_with_an_additive_mask_and_casts() {
    let Some(w) = causal_scores("llama_causal_attention_scores", "div") else {
        return;
    };
    assert_eq!((w.dtype(), w.out_dtype()), (DType::BF16, DType::BF16));
}

/// torch.argmax over a vocabulary: the reduce family's argmax into int64, with a built-in
/// candidate.
#[test]
fn import_argmax_over_a_vocabulary() {
    let Some((spec, w, toml_text)) = import("argmax_over_vocab") else {
        return;
    };
    assert_eq!(
        (spec.family, spec.params.reduce),
        (Family::Reduce, Some(cutesmith::spec::ReduceKind::Argmax)),
        "{toml_text}"
    );
    assert_eq!(w.out_dtype(), DType::I64);
    assert!(!cutesmith::strategy::candidates(&w).is_empty());
}

/// A language model's loss (`F.cross_entropy` of (B, T, V) bf16 logits viewed as rows,
/// against int64 targets): one reduce workload, cross_entropy with torch's mean and default
/// ignore index, its rows the B * T tokens, with a built-in candidate.
#[test]
fn import_a_language_model_cross_entropy() {
    let Some((spec, w, toml_text)) = import("cross_entropy_loss") else {
        return;
    };
    assert_eq!(
        (spec.family, spec.dtype, spec.params.reduce),
        (
            Family::Reduce,
            DType::BF16,
            Some(cutesmith::spec::ReduceKind::CrossEntropy)
        ),
        "{toml_text}"
    );
    let p = w.params();
    assert_eq!(
        (p.total, p.ignore_index),
        (cutesmith::spec::TotalKind::Mean, -100)
    );
    let h = w.headline();
    assert_eq!((h.m, h.k, w.d_elements(h)), (2048, 32000, 1), "{toml_text}");
    assert!(!cutesmith::strategy::candidates(&w).is_empty());
}

/// A sliding window (`triu(1) | tril(-512)` hidden): the band as a tril, then a triu(-511),
/// both filled with -inf, before the softmax.
#[test]
fn import_sliding_window_scores_as_a_band() {
    let Some((spec, w, toml_text)) = import("sliding_window_attention_scores") else {
        return;
    };
    assert_eq!(spec.family, Family::GemmSoftmax, "{toml_text}");
    let kept: Vec<_> = spec
        .epilogue
        .iter()
        .map(|e| (e.op.as_str(), e.diagonal, e.value))
        .collect();
    let inf = Some(f64::NEG_INFINITY);
    assert_eq!(
        kept[1..],
        [("tril", None, inf), ("triu", Some(-511), inf)],
        "{toml_text}"
    );
    assert_gemm_shapes(&w, 2048, 2048, 128, 8);
}

/// A biased linear, GELU and a softmax: gemm_softmax, the bias and GELU its chain before
/// the softmax, with a built-in candidate.
#[test]
fn import_a_linear_gelu_softmax() {
    let Some((spec, w, toml_text)) = import("linear_gelu_softmax") else {
        return;
    };
    assert_eq!(spec.family, Family::GemmSoftmax, "{toml_text}");
    let ops = chain_ops(&spec);
    assert_eq!(
        ops,
        vec![("add", Some("row")), ("gelu_erf", None)],
        "{toml_text}"
    );
    let h = w.headline();
    assert_eq!((h.m, h.n, h.k), (512, 4096, 1024));
    assert_eq!(w.dtype(), cutesmith::spec::DType::BF16);
    assert!(!cutesmith::strategy::candidates(&w).is_empty());
}

/// KernelBench's max over dim 1 (`torch.max(x, dim=1)[0]`) then a scale: family reduce with
/// the rows side by side, the values through getitem 0.
#[test]
fn import_a_max_over_a_middle_dim() {
    let Some((spec, w, _)) = import("max_over_dim1") else {
        return;
    };
    assert_eq!(w.family(), Family::Reduce);
    assert_eq!(w.params().reduce, cutesmith::spec::ReduceKind::Max);
    assert_eq!(w.layouts().a, Layout::Col);
    let s = w.headline();
    assert_eq!((s.batch, s.m, s.k, s.n), (16, 255, 512, 1));
    assert_eq!(chain_ops(&spec), vec![("mul", None)]);
}

#[test]
fn import_softplus_keeps_its_parameters() {
    let Some((spec, w, _)) = import("softplus") else {
        return;
    };
    assert_eq!(spec.family, Family::Activation);
    assert_eq!(spec.dtype, DType::F32);
    assert!(spec.layout.is_none());
    assert_eq!(spec.epilogue.len(), 1);
    let op = &spec.epilogue[0];
    assert_eq!(
        (op.op.as_str(), op.beta, op.threshold),
        ("softplus", Some(2.0), Some(10.0))
    );
    assert_eq!(
        w.chain().single_activation(),
        Some((Activation::Softplus, 2.0, 10.0))
    );
    assert_eq!(w.shapes()[0], Shape::rows(4096, 16384));
    assert_eq!(w.shapes()[1], Shape::rows(1025, 4097));
}

#[test]
fn import_selu_is_the_activation_family() {
    let Some((spec, w, _)) = import("selu") else {
        return;
    };
    assert_eq!(spec.family, Family::Activation);
    assert_eq!(spec.params.activation, Some(Activation::Selu));
    assert!(spec.epilogue.is_empty());
    assert_eq!(w.shapes()[0], Shape::rows(16, 16384));
    assert_eq!(w.params().activation, Activation::Selu);
}

#[test]
fn import_softmax_over_dim_1() {
    let Some((spec, w, _)) = import("softmax") else {
        return;
    };
    assert_eq!(spec.family, Family::Softmax);
    assert_eq!(spec.dtype, DType::F32);
    assert!(spec.layout.is_none() && spec.epilogue.is_empty());
    assert_eq!(w.shapes()[0], Shape::rows(4096, 32768));
    assert_eq!(w.shapes().len(), 3);
}

#[test]
fn import_log_softmax_bf16_made_on_cuda() {
    let Some((spec, w, _)) = import("log_softmax_bf16") else {
        return;
    };
    assert_eq!(spec.family, Family::LogSoftmax);
    assert_eq!(spec.dtype, DType::BF16);
    assert_eq!(w.shapes()[0], Shape::rows(1024, 50257));
    assert_eq!(w.shapes()[1], Shape::rows(257, 12565));
}

#[test]
fn import_refuses_a_convolution_naming_the_node_and_writes_nothing() {
    let Some(py) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("conv.toml");
    let o = import_to(&py, "conv2d_unsupported", &out, &[]);
    let t = output_text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("node `conv2d` (aten.conv2d.default)") && t.contains("convolution"),
        "{t}"
    );
    assert!(t.contains("nothing was written"), "{t}");
    assert!(!out.exists());
    // The ReLU after it maps: only the convolution is listed.
    assert!(!t.contains("node `relu`"), "{t}");
}

#[test]
fn import_will_not_replace_a_spec_without_force() {
    let Some(py) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("selu.toml");
    std::fs::write(&out, "keep me").unwrap();
    let o = import_to(&py, "selu", &out, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", output_text(&o));
    assert!(output_text(&o).contains("--force"), "{}", output_text(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
    let o = import_to(&py, "selu", &out, &["--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("activation = \"selu\""));
}

#[test]
fn doctor_names_the_python_and_its_torch() {
    let Some(py) = python() else {
        return;
    };
    let o = cutesmith(&py, &["doctor"]);
    let t = output_text(&o);
    let line = t
        .lines()
        .find(|l| l.starts_with("PyTorch "))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(
        line.contains("torch 2.") && line.contains("Python 3."),
        "{line}"
    );
    let o = cutesmith(Path::new("/nonexistent/python3"), &["doctor"]);
    let t = output_text(&o);
    let line = t.lines().find(|l| l.starts_with("PyTorch ")).unwrap();
    assert!(line.contains("/nonexistent/python3"), "{line}");
}

// ---------------------------------------------------------------------------------
// export --torch

/// Runs `code` with the test's Python, the package directory first on sys.path.
fn run_python(py: &Path, dir: &Path, code: &str) -> String {
    let o = Command::new(py)
        .arg("-c")
        .arg(format!(
            "import sys, warnings\nwarnings.filterwarnings('ignore')\nsys.path.insert(0, {:?})\n{code}",
            dir.display().to_string()
        ))
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .unwrap();
    let t = output_text(&o);
    assert!(o.status.success(), "{t}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The package's reference and tolerance check on small CPU inputs: the exact answer
/// rounded to the output type passes, one element off by 1 fails with one bad element,
/// and the op's output shape is what the reference computes.
fn check_reference_on_cpu(py: &Path, dir: &Path, pkg: &str) {
    let code = format!(
        r#"
import json, torch
import {pkg} as pkg
from {pkg} import _reference as R
w = pkg.WORKLOAD
gemm = w["family"] in R.GEMM
shape = {{"m": 37, "n": 45, "k": 29, "batch": 3 if w["shapes"][0].get("batch", 1) > 1 else 1}} if gemm else {{"m": 7, "n": 129}}
if w["family"] == "reduce":
    shape = {{"m": 7, "n": 1, "k": 129, "batch": 3 if w["layout"]["a"] == "col" else 1}}
inputs = pkg.make_inputs(shape, device="cpu", seed=1)
assert len(inputs) == len(pkg.INPUTS), (len(inputs), pkg.INPUTS)
out_shape, out_dtype = R.output_shape(w, inputs)
got = pkg.reference(*inputs, exact=True).to(out_dtype)
assert tuple(got.shape) == tuple(out_shape), (got.shape, out_shape)
ok, err, bad = R.check(w, shape, got, inputs)
assert ok and bad == 0, (err, bad)
native = pkg.reference(*inputs)
assert tuple(native.shape) == tuple(out_shape) and native.dtype == out_dtype, (native.shape, native.dtype)
wrong = got.clone().contiguous()
wrong.view(-1)[5] += 1
ok2, err2, bad2 = R.check(w, shape, wrong, inputs)
assert not ok2 and bad2 == 1, (ok2, bad2)
print(json.dumps({{"inputs": pkg.INPUTS, "namespace": pkg.NAMESPACE, "shape": list(out_shape)}}))
"#
    );
    let out = run_python(py, dir, &code);
    let v: serde_json::Value = serde_json::from_str(out.trim().lines().last().unwrap()).unwrap();
    assert_eq!(v["namespace"], pkg);
}

/// torch's include directories and its C++ ABI flag, from the test's Python.
fn torch_flags(py: &Path) -> Vec<String> {
    let out = run_python(
        py,
        Path::new("."),
        "import json, torch, torch.utils.cpp_extension as c\nprint(json.dumps({'inc': c.include_paths(), 'abi': int(torch._C._GLIBCXX_USE_CXX11_ABI)}))",
    );
    let v: serde_json::Value = serde_json::from_str(out.trim().lines().last().unwrap()).unwrap();
    let mut flags: Vec<String> = v["inc"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("-I{}", p.as_str().unwrap()))
        .collect();
    flags.push(format!("-D_GLIBCXX_USE_CXX11_ABI={}", v["abi"]));
    flags
}

/// nvcc -c for sm_90a: the operator against torch's headers (C++20, as
/// torch.utils.cpp_extension builds it), or the kernel against CUTLASS and only the
/// headers the package carries.
fn nvcc_object(nvcc: &Path, source: &Path, flags: &[String]) {
    let obj = source.with_extension("o");
    let o = Command::new(nvcc)
        .args([
            "-c",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-O1",
            "-Xcompiler",
            "-fPIC",
            "--expt-relaxed-constexpr",
        ])
        .args(flags)
        .arg(source)
        .arg("-o")
        .arg(&obj)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "nvcc {} failed:\n{}",
        source.display(),
        output_text(&o)
    );
    assert!(std::fs::metadata(&obj).unwrap().len() > 1000);
}

/// A gemm_reduce session is refused by `export --torch` (the operator would return the
/// product's m x n), with the reason and the other export named, and nothing is written.
#[test]
fn export_torch_refuses_a_gemm_reduce_session_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("runs/act_silu_bf16-20261122-062719-9469");
    let session = tmp.path().join("session");
    std::fs::create_dir_all(session.join("versions/v004")).unwrap();
    for f in ["session.json", "state.json", "probe.json"] {
        std::fs::copy(src.join(f), session.join(f)).unwrap();
    }
    for e in std::fs::read_dir(src.join("versions/v004")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), session.join("versions/v004").join(e.file_name())).unwrap();
    }
    let gr = std::fs::read_to_string(root().join("workloads/gemm_reduce_sigmoid_sum_bf16.toml"))
        .unwrap();
    std::fs::write(session.join("act_silu_bf16.toml"), gr).unwrap();
    let out = tmp.path().join("pkg");
    let o = Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .args(["export", session.to_str().unwrap(), "--torch"])
        .arg(&out)
        .output()
        .unwrap();
    let text = output_text(&o);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains("does not take family gemm_reduce") && text.contains("without --torch"),
        "{text}"
    );
    assert!(!out.exists(), "nothing may be written");
}

#[test]
fn export_torch_writes_a_package_whose_operator_compiles() {
    let Some(py) = python() else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let session = fixture("runs/act_silu_bf16-20261122-062719-9469");
    let o = Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .args(["export", session.to_str().unwrap(), "--torch"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let pkg = "cutesmith_act_silu_bf16";
    let root_pkg = out.path().join(pkg);
    let csrc = root_pkg.join("csrc");
    for f in [
        "csrc/act_silu_bf16.cu",
        "csrc/cutesmith_abi.h",
        "csrc/cutesmith_workload.h",
        "csrc/torch_op.cpp",
        "__init__.py",
        "_build.py",
        "_reference.py",
        "workload.json",
    ] {
        assert!(root_pkg.join(f).is_file(), "{f} missing");
    }
    let test_py = std::fs::read_to_string(out.path().join("test_kernel.py")).unwrap();
    assert!(test_py.contains(&format!("import {pkg} as pkg")));
    let readme = std::fs::read_to_string(out.path().join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("torch.ops.{pkg}.run([x])")) && readme.contains("CUTLASS_DIR"),
        "{readme}"
    );
    let wj: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root_pkg.join("workload.json")).unwrap())
            .unwrap();
    assert_eq!(wj["family"], "activation");
    assert_eq!(wj["dtype"], "bf16");
    assert_eq!(wj["inputs"], serde_json::json!(["x"]));
    assert_eq!(wj["kernel"], "act_silu_bf16.cu");
    assert_eq!(wj["chain"]["steps"][0]["name"], "silu");
    let header = std::fs::read_to_string(csrc.join("cutesmith_workload.h")).unwrap();
    for line in [
        "#define CSW_NAMESPACE cutesmith_act_silu_bf16",
        "#define CSW_FAMILY 2",
        "#define CSW_DTYPE_AB 2",
        "#define CSW_ACTIVATION 5",
        "#define CSW_NUM_INPUTS 1",
    ] {
        assert!(header.contains(line), "{line} not in\n{header}");
    }
    check_reference_on_cpu(&py, out.path(), pkg);
    let Some(tc) = toolchain() else {
        return;
    };
    let mut torch = torch_flags(&py);
    torch.extend(["-std=c++20".into(), format!("-I{}", csrc.display())]);
    let mut kernel = vec![
        "-std=c++17".to_string(),
        format!("-I{}", csrc.display()),
        format!("-I{}", tc.cutlass.include.display()),
    ];
    if let Some(u) = &tc.cutlass.util_include {
        kernel.push(format!("-I{}", u.display()));
    }
    std::thread::scope(|s| {
        s.spawn(|| nvcc_object(&tc.nvcc.path, &csrc.join("torch_op.cpp"), &torch));
        s.spawn(|| nvcc_object(&tc.nvcc.path, &csrc.join("act_silu_bf16.cu"), &kernel));
    });
}

/// The operator for GEMM workloads (chain operands, a batch with a shared operand, GLU's
/// second weight, a column-major output): the package's reference passes its own check
/// on the CPU, and torch_op.cpp compiles against each workload's header.
#[test]
fn torch_operator_compiles_for_gemm_workloads() {
    let Some(py) = python() else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let names = [
        "gemm_chain_bias_relu_residual_bf16",
        "gemm_bf16_batched_shared_b",
        "gemm_glu_swiglu_bf16",
        "gemm_chain_col_leaky_max_bf16",
        "gemm_bf16_rr_dcol",
        "gemm_softmax_bf16_head",
        // Norms: rows side by side (x is (batch, n, m)), and a weight, bias and GELU after.
        "norm_rms_f32_dim1",
        "norm_layer_bf16_gelu",
        // Reductions: over a middle dim (x is (batch, k, m), the result (batch, m)), and
        // over the last dim of bf16 rows into f32.
        "reduce_max_f32_kernelbench",
        "reduce_logsumexp_bf16_vocab",
        // Scans: over a middle dim in bf16 (x is (batch, n, m)), a reverse exclusive f32 one
        // over the last dim, a cumprod from the row's end into f32 with a scale after.
        "scan_cumsum_bf16_middle",
        "scan_cumsum_exclusive_f32_kernelbench",
        "fixtures:scan_prod_rev_bf16_small",
        // Index ops: a causal mask (-inf) before a batched softmax, tril then a bias row,
        // an elementwise triu.
        "gemm_causal_softmax_bf16",
        "fixtures:gemm_tril_bf16_small",
        "act_triu_relu_f32",
        // An index reduction over a middle dim: int64 out.
        "kb1_51_argmax_f32",
    ];
    let mut dirs = Vec::new();
    for name in names {
        let path = match name.strip_prefix("fixtures:") {
            Some(f) => root().join(format!("tests/fixtures/workloads/{f}.toml")),
            None => root().join(format!("workloads/{name}.toml")),
        };
        let w = Workload::load(path).unwrap();
        let dir = out.path().join(name);
        let csrc = cutesmith::pytorch::package::csrc_dir(&dir, &w);
        std::fs::create_dir_all(&csrc).unwrap();
        std::fs::copy(
            root().join("cutlass-templates/include/cutesmith_abi.h"),
            csrc.join("cutesmith_abi.h"),
        )
        .unwrap();
        let input = cutesmith::pytorch::package::PackageInput {
            workload: &w,
            kernel_file: "kernel.cu",
            arch: "sm_90a",
            session: "test",
            version: 1,
            measured: "not timed",
            cutlass_include: None,
        };
        cutesmith::pytorch::package::write_package(&input, &dir).unwrap();
        let pkg = cutesmith::pytorch::package::package_name(&w);
        check_reference_on_cpu(&py, &dir, &pkg);
        dirs.push(csrc);
    }
    // The chain operands are the op's inputs after the operands, by the chain's names.
    let h = std::fs::read_to_string(dirs[0].join("cutesmith_workload.h")).unwrap();
    assert!(
        h.contains("#define CSW_INPUTS \"a, b, bias, matrix1\""),
        "{h}"
    );
    assert!(
        h.contains("csw_operand_kind[CS_MAX_OPERANDS] = {1, 3, 0, 0}"),
        "{h}"
    );
    let h = std::fs::read_to_string(dirs[1].join("cutesmith_workload.h")).unwrap();
    assert!(h.contains("#define CSW_SHARED_B 1"), "{h}");
    let h = std::fs::read_to_string(dirs[2].join("cutesmith_workload.h")).unwrap();
    assert!(h.contains("#define CSW_INPUTS \"a, b, b2\""), "{h}");
    let h = std::fs::read_to_string(dirs[6].join("cutesmith_workload.h")).unwrap();
    for line in [
        "#define CSW_FAMILY 7",
        "#define CSW_IS_NORM 1",
        "#define CSW_A_COL 1",
        "#define CSW_NORM 0",
        "#define CSW_LAYOUT_A 1",
    ] {
        assert!(h.contains(line), "{line} not in\n{h}");
    }
    let h = std::fs::read_to_string(dirs[10].join("cutesmith_workload.h")).unwrap();
    for line in [
        "#define CSW_FAMILY 10",
        "#define CSW_IS_SCAN 1",
        "#define CSW_A_COL 1",
        "#define CSW_SCAN 0",
        "#define CSW_SCAN_FLAGS 0",
    ] {
        assert!(h.contains(line), "{line} not in\n{h}");
    }
    let h = std::fs::read_to_string(dirs[11].join("cutesmith_workload.h")).unwrap();
    assert!(h.contains("#define CSW_SCAN_FLAGS 2"), "{h}");
    let h = std::fs::read_to_string(dirs[12].join("cutesmith_workload.h")).unwrap();
    assert!(
        h.contains("#define CSW_SCAN 1") && h.contains("#define CSW_SCAN_FLAGS 1"),
        "{h}"
    );
    let h = std::fs::read_to_string(dirs[8].join("cutesmith_workload.h")).unwrap();
    for line in [
        "#define CSW_FAMILY 8",
        "#define CSW_IS_REDUCE 1",
        "#define CSW_A_COL 1",
        "#define CSW_REDUCE 2",
        "#define CSW_LAYOUT_A 1",
    ] {
        assert!(h.contains(line), "{line} not in\n{h}");
    }
    let h = std::fs::read_to_string(dirs[16].join("cutesmith_workload.h")).unwrap();
    for line in ["#define CSW_REDUCE 6", "#define CSW_DTYPE_CD 6"] {
        assert!(h.contains(line), "{line} not in\n{h}");
    }
    let Some(tc) = toolchain() else {
        return;
    };
    let mut flags = torch_flags(&py);
    flags.push("-std=c++20".into());
    std::thread::scope(|s| {
        for csrc in &dirs {
            let mut f = flags.clone();
            f.push(format!("-I{}", csrc.display()));
            let nvcc = tc.nvcc.path.clone();
            s.spawn(move || nvcc_object(&nvcc, &csrc.join("torch_op.cpp"), &f));
        }
    });
}

/// Imports a Model no one workload computes: the stages written as `<file>_s<k>.toml`
/// beside the suite `suites/<file>.toml`; each stage as written and as loaded, and the
/// command's output.
/// An imported stage: its spec as written, as loaded, and its text.
type StageFile = (WorkloadSpec, Workload, String);

fn import_stages(file: &str) -> Option<(Vec<StageFile>, Vec<String>, String)> {
    let py = python()?;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{file}.toml"));
    let o = import_to(&py, file, &out, &[]);
    let t = output_text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    // No file of the requested name: the stages and their suite.
    assert!(!out.exists(), "{t}");
    let suite_path = dir.path().join("suites").join(format!("{file}.toml"));
    let suite: toml::Table = toml::from_str(&std::fs::read_to_string(&suite_path).unwrap())
        .unwrap_or_else(|e| panic!("{e}\n{t}"));
    let list = |key: &str| -> Vec<String> {
        suite[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    // The distinct workloads, and the stages in the order they run.
    let names = list("workloads");
    let order = list("stages");
    let mut stages = Vec::new();
    for name in &names {
        let k = order.iter().position(|s| s == name).unwrap();
        assert_eq!(name, &format!("{file}_s{}", k + 1));
        let path = dir.path().join(format!("{name}.toml"));
        assert!(t.contains(&format!("wrote {}", path.display())), "{t}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(&format!("# Stage {} of {}", k + 1, order.len())),
            "{text}"
        );
        let spec: WorkloadSpec = toml::from_str(&text).unwrap();
        let w = Workload::load(&path).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(w.name(), name);
        stages.push((spec, w, text));
    }
    // The suite loads as `bench` finds it (the stages' directory as --workloads-dir).
    let (stem, loaded) =
        cutesmith::spec::suite::load(dir.path(), &suite_path.display().to_string()).unwrap();
    assert_eq!(stem, file);
    assert_eq!(loaded.workloads, names);
    assert_eq!(loaded.stages, order);
    assert!(
        t.contains(&format!("--workloads-dir {}", dir.path().display())),
        "{t}"
    );
    Some((stages, order, t))
}

#[test]
fn import_a_feed_forward_block_as_two_stages() {
    let Some((stages, order, t)) = import_stages("feed_forward_two_linears") else {
        return;
    };
    assert_eq!(stages.len(), 2, "{t}");
    assert_eq!(
        order,
        ["feed_forward_two_linears_s1", "feed_forward_two_linears_s2"]
    );
    // Linear + bias + GELU, then Linear + bias reading the first's output.
    let (up, up_w, _) = &stages[0];
    assert_eq!(up.family, Family::GemmBiasAct);
    assert_eq!(up_w.params().activation, Activation::GeluErf);
    assert_gemm_shapes(up_w, 4096, 4096, 1024, 1);
    let (down, down_w, text) = &stages[1];
    assert_eq!(down.family, Family::GemmBiasAct);
    assert_eq!(down_w.params().activation, Activation::Identity);
    assert_gemm_shapes(down_w, 4096, 1024, 4096, 1);
    assert!(
        text.contains("Its input `gelu` is the output of stage 1 (feed_forward_two_linears_s1)"),
        "{text}"
    );
    assert_eq!(down.dtype, DType::BF16);
    assert!(
        t.contains("reads `gelu`, the output of feed_forward_two_linears_s1"),
        "{t}"
    );
}

/// The headline (m, n, k, batch), and three shapes in all.
fn assert_head(w: &Workload, head: (u64, u64, u64, u64)) {
    let s = shapes(w);
    assert_eq!((s[0].m, s[0].n, s[0].k, s[0].batch), head, "{s:?}");
    assert_eq!(s.len(), 3, "{s:?}");
}

#[test]
fn import_causal_sdpa_as_masked_scores_then_the_product_by_v() {
    let Some((stages, _, t)) = import_stages("causal_sdpa") else {
        return;
    };
    assert_eq!(stages.len(), 2, "{t}");
    let (scores, scores_w, _) = &stages[0];
    assert_eq!(scores.family, Family::GemmSoftmax);
    // 4 x 16 heads of 1024 x 1024 scores over a head dim of 64; K read as Kᵀ.
    assert_head(scores_w, (1024, 1024, 64, 64));
    assert_eq!(scores.layout.as_ref().and_then(|l| l.b), Some(Layout::Col));
    let ops: Vec<(&str, Option<f64>)> = scores
        .epilogue
        .iter()
        .map(|o| (o.op.as_str(), o.value))
        .collect();
    assert_eq!(
        ops,
        [("mul", Some(0.125)), ("tril", Some(f64::NEG_INFINITY))]
    );
    let (pv, pv_w, text) = &stages[1];
    assert_eq!(pv.family, Family::Gemm);
    // P (1024 x 1024 a head) times V (1024 x 64, row-major).
    assert_head(pv_w, (1024, 64, 1024, 64));
    assert_eq!(pv.layout.as_ref().and_then(|l| l.b), Some(Layout::Row));
    assert!(
        text.contains("is the output of stage 1 (causal_sdpa_s1)"),
        "{text}"
    );
}

#[test]
fn import_repeated_layers_as_one_workload_run_at_each_stage() {
    let Some((stages, order, t)) = import_stages("mlp_repeated_layers") else {
        return;
    };
    // Five stages: in, three hidden layers alike, out; three distinct workloads.
    assert_eq!(
        order,
        [
            "mlp_repeated_layers_s1",
            "mlp_repeated_layers_s2",
            "mlp_repeated_layers_s2",
            "mlp_repeated_layers_s2",
            "mlp_repeated_layers_s5",
        ],
        "{t}"
    );
    assert_eq!(stages.len(), 3, "{t}");
    assert!(
        t.contains("runs as 5 stages") && t.contains("3 distinct workloads"),
        "{t}"
    );
    let (hidden, hidden_w, text) = &stages[1];
    assert_eq!(hidden.family, Family::GemmBiasAct);
    assert_eq!(hidden_w.params().activation, Activation::Relu);
    assert_gemm_shapes(hidden_w, 1024, 1024, 1024, 1);
    assert!(
        text.contains("# The same workload runs as stages 2, 3, 4 (one spec, written once)."),
        "{text}"
    );
    let (out, out_w, _) = &stages[2];
    assert_eq!(out.family, Family::GemmBiasAct);
    assert_eq!(out_w.params().activation, Activation::Identity);
    assert_gemm_shapes(out_w, 1024, 256, 1024, 1);
}

#[test]
fn import_a_loss_head_as_a_gemm_then_a_cross_entropy() {
    let Some((stages, order, t)) = import_stages("linear_cross_entropy") else {
        return;
    };
    assert_eq!(order.len(), 2, "{t}");
    // The bf16 GEMM writes fp32 logits (the cast at its output) ...
    let (gemm, gemm_w, _) = &stages[0];
    assert_eq!(gemm.family, Family::Gemm);
    assert_eq!(
        (gemm.dtype, gemm.out_dtype),
        (DType::BF16, Some(DType::F32))
    );
    assert_gemm_shapes(gemm_w, 4096, 32000, 2048, 1);
    // ... which the cross entropy reads as its rows of logits, in fp32.
    let (ce, _, text) = &stages[1];
    assert_eq!(ce.family, Family::Reduce);
    assert_eq!(ce.dtype, DType::F32);
    assert_eq!(
        ce.params.reduce,
        Some(cutesmith::spec::ReduceKind::CrossEntropy),
        "{text}"
    );
    assert!(text.contains("is the output of stage 1"), "{text}");
}

#[test]
fn import_a_llama_feed_forward_as_swiglu_then_the_down_projection() {
    let Some((stages, order, t)) = import_stages("llama_mlp") else {
        return;
    };
    assert_eq!(order.len(), 2, "{t}");
    let (glu, glu_w, _) = &stages[0];
    assert_eq!(glu.family, Family::GemmGlu);
    assert_eq!(glu.params.gate, Some(Activation::Silu));
    assert_eq!(glu.layout.as_ref().and_then(|l| l.b), Some(Layout::Col));
    let s = shapes(glu_w);
    assert_eq!((s[0].m, s[0].n, s[0].k), (256, 14336, 4096));
    // Its validation shapes keep 16-byte rows for the template's TMA, m odd.
    assert!(
        s[1..]
            .iter()
            .all(|x| x.n % 8 == 0 && x.k % 8 == 0 && x.m % 2 == 1),
        "{s:?}"
    );
    let (down, down_w, text) = &stages[1];
    assert_eq!(down.family, Family::Gemm);
    assert_gemm_shapes(down_w, 256, 4096, 14336, 1);
    assert!(
        text.contains("is the output of stage 1 (llama_mlp_s1)"),
        "{text}"
    );
}

/// The view a pack stage reads its input through.
fn view_of(spec: &WorkloadSpec) -> (Vec<u32>, Vec<(u32, u64, u64)>) {
    let v = spec.view.as_ref().expect("a [view]");
    (
        v.permute.clone(),
        v.select.iter().map(|s| (s.dim, s.size, s.index)).collect(),
    )
}

/// minGPT's attention as module code (KernelBench 3/43): the heads of the fused
/// projection, split, viewed and transposed, are copied out by stages of their own (views
/// of the projection's output, each its part of three), as is the output put back with
/// `.transpose(1, 2).contiguous()`; the scores run as one gemm_softmax with the mask.
#[test]
fn import_mingpt_attention_packs_its_heads() {
    let Some((stages, _, t)) = import_stages("mingpt_attention") else {
        return;
    };
    let families: Vec<Family> = stages.iter().map(|s| s.0.family).collect();
    assert_eq!(
        families,
        vec![
            Family::GemmBiasAct,
            Family::Activation,
            Family::Activation,
            Family::GemmSoftmax,
            Family::Activation,
            Family::Gemm,
            Family::Activation,
            Family::GemmBiasAct
        ],
        "{t}"
    );
    // q, k and v: parts 0, 1 and 2 of the projection's [B, T, 3, nh, hs], T and the heads
    // swapped.
    for (k, part) in [(1, 0), (2, 1), (4, 2)] {
        let (spec, w, text) = &stages[k];
        assert_eq!(
            view_of(spec),
            (vec![0, 2, 1, 3], vec![(2, 3, part)]),
            "{text}"
        );
        assert_eq!(w.headline().dims.as_slice(), &[8, 12, 512, 64], "{text}");
        assert!(
            text.contains("Its input `linear` is the output of stage 1"),
            "{text}"
        );
        assert!(!cutesmith::strategy::candidates(w).is_empty());
    }
    // The output heads back in order: a permute of the product's value, nothing held.
    let (spec, w, text) = &stages[6];
    assert_eq!(view_of(spec), (vec![0, 2, 1, 3], Vec::new()), "{text}");
    assert_eq!(w.headline().dims.as_slice(), &[8, 512, 12, 64], "{text}");
    // The scores read the packed q and k (k transposed: a column-major B).
    let (scores, sw, text) = &stages[3];
    assert_eq!(
        chain_ops(scores),
        vec![("mul", None), ("tril", None)],
        "{text}"
    );
    let h = sw.headline();
    assert_eq!((h.m, h.n, h.k, h.batch), (512, 512, 64, 96), "{text}");
}

/// `chunk` into q, k and v, and the heads put back with `.transpose(1, 2).reshape(B, T, C)`:
/// torch's reshape of the transposed heads copies them, and so does the import (it had
/// read the product's value as if it were the reshape's, the heads not put back).
#[test]
fn import_a_transposed_reshape_copies_the_heads_back() {
    let Some((stages, _, t)) = import_stages("attention_chunk_reshape") else {
        return;
    };
    assert_eq!(stages.len(), 8, "{t}");
    let (spec, w, text) = &stages[1];
    assert_eq!(view_of(spec), (vec![0, 2, 1, 3], vec![(2, 3, 0)]), "{text}");
    assert_eq!(w.headline().dims.as_slice(), &[4, 8, 256, 64], "{text}");
    let (spec, w, text) = &stages[6];
    assert_eq!(view_of(spec), (vec![0, 2, 1, 3], Vec::new()), "{text}");
    assert_eq!(w.headline().dims.as_slice(), &[4, 256, 8, 64], "{text}");
    assert!(t.contains("reads `reshape_packed`"), "{t}");
    assert_eq!(stages[7].0.family, Family::GemmBiasAct, "{t}");
}

/// NetVLAD (KernelBench 3/46 and 3/47): the ghost clusters dropped by a slice inside a dim
/// become a copy with `narrow`, read through a reshape that torch makes a view; the
/// computed [B, 1, K] times a [1, D, K] parameter, larger than either, becomes one
/// activation reading the mass through `expand` with the centres a broadcast operand; and
/// the difference of a transposed product, which torch leaves transposed in memory (so
/// that its reshape copies), is read as the stages write it, packed: a norm over the
/// middle dim, then a norm of the whole.
#[test]
fn import_netvlad_with_a_slice_a_broadcast_running_value_and_packed_layouts() {
    let Some((stages, _, t)) = import_stages("netvlad") else {
        return;
    };
    let families: Vec<Family> = stages.iter().map(|s| s.0.family).collect();
    assert_eq!(
        families,
        vec![
            Family::GemmSoftmax,
            Family::Activation,
            Family::Reduce,
            Family::Activation,
            Family::Gemm,
            Family::Activation,
            Family::Activation,
            Family::Norm,
            Family::Norm
        ],
        "{t}"
    );
    let (spec, w, text) = &stages[1];
    let v = spec.view.as_ref().expect("a [view]");
    let narrow: Vec<(u32, u64, u64)> = v.narrow.iter().map(|n| (n.dim, n.size, n.start)).collect();
    assert_eq!(narrow, vec![(2, 48, 0)], "{text}");
    assert!(
        v.permute.is_empty() && v.select.is_empty() && v.expand.is_empty(),
        "{text}"
    );
    assert_eq!(w.headline().dims.as_slice(), &[32, 100, 32], "{text}");
    // The sum and the product by the features read the packed clusters.
    assert!(
        t.contains("reads `reshape_1_packed`, the output of netvlad_s2"),
        "{t}"
    );
    // The mass broadcast and times the centres, in one stage.
    let (spec, w, text) = &stages[3];
    let v = spec.view.as_ref().expect("a [view]");
    assert_eq!(v.expand, vec![1], "{text}");
    assert_eq!(w.headline().dims.as_slice(), &[32, 512, 32], "{text}");
    assert_eq!(chain_ops(spec), vec![("mul", Some("broadcast"))], "{text}");
    // Its input is the sum's [32, 1, 32], read once an element.
    let s = w.view_on(w.headline()).unwrap();
    assert_eq!((s.input_len, s.reads), (32 * 32, 32 * 32), "{text}");
    assert_eq!(s.strides, vec![32, 0, 1], "{text}");
    assert!(t.contains("reads `sum_1`, the output of netvlad_s3"), "{t}");
    // The product's transpose copied, the difference of two packed values, then the norms
    // over D (rows side by side) and over each item's 16384 values.
    let (spec, _, text) = &stages[5];
    assert_eq!(view_of(spec), (vec![0, 2, 1], Vec::new()), "{text}");
    let (_, w, text) = &stages[7];
    assert_eq!(w.layouts().a, Layout::Col, "{text}");
    assert_gemm_like(w, 32, 512, 32, text);
    let (_, w, text) = &stages[8];
    assert_eq!(w.layouts().a, Layout::Row, "{text}");
    assert_gemm_like(w, 32, 16384, 1, text);
}

/// KernelBench 2/75's pattern: a row minimum ([B, 1], the values of `torch.min(x, dim=1,
/// keepdim=True)`, a getitem of the op's two results) plus a [1, C, 1, 1] bias is the
/// larger [1, C, B, 1]: one activation reads the minimum broadcast (the getitem is the
/// value the view starts from, not a view itself) and adds the bias, a broadcast operand.
#[test]
fn import_a_row_minimum_broadcast_against_a_channel_bias() {
    let Some((stages, _, t)) = import_stages("groupnorm_min_bias") else {
        return;
    };
    let families: Vec<Family> = stages.iter().map(|s| s.0.family).collect();
    assert_eq!(
        families,
        vec![Family::GemmNorm, Family::Reduce, Family::Activation],
        "{t}"
    );
    let (spec, w, text) = &stages[2];
    let v = spec.view.as_ref().expect("a [view]");
    assert_eq!(v.expand, vec![1], "{text}");
    assert!(
        v.permute.is_empty() && v.select.is_empty() && v.narrow.is_empty(),
        "{text}"
    );
    assert_eq!(w.headline().dims.as_slice(), &[1, 512, 256, 1], "{text}");
    let s = w.view_on(w.headline()).unwrap();
    assert_eq!((s.input_len, s.reads), (256, 256), "{text}");
    assert_eq!(chain_ops(spec), vec![("add", Some("broadcast"))], "{text}");
    assert_eq!(spec.epilogue[0].over.as_deref(), Some(&[1][..]), "{text}");
    assert!(
        t.contains("getitem_packed (a strided view, read in place) -> add broadcast"),
        "{t}"
    );
}

/// A product transposed and broadcast against a parameter into a larger result, whose
/// transpose a Linear reads: torch's result keeps permuted strides, and the Linear's input
/// is a view of them. The broadcast's copy makes the product's stage write it packed; the
/// view's strides must follow (or the import give up). Before, the Linear's A was read as
/// if it were row-major over the packed values: a wrong Model that no stage's validation
/// could catch. Refused now, naming the Linear.
#[test]
fn import_does_not_read_a_relaid_value_through_torchs_strides() {
    let Some(py) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("permuted_broadcast.py");
    std::fs::write(
        &p,
        "import torch\n\n\nclass Model(torch.nn.Module):\n    def __init__(self):\n        \
         super().__init__()\n        self.w = torch.nn.Parameter(torch.randn(1, 6, 1, 1))\n        \
         self.lin = torch.nn.Linear(32, 64, bias=False)\n\n    def forward(self, a, b):\n        \
         y = torch.bmm(a, b)\n        out = y.transpose(1, 2).unsqueeze(1) * self.w\n        \
         return self.lin(out.transpose(2, 3))\n\n\ndef get_inputs():\n    \
         return [torch.randn(4, 8, 16), torch.randn(4, 16, 32)]\n\n\n\
         def get_init_inputs():\n    return []\n",
    )
    .unwrap();
    let out = dir.path().join("permuted_broadcast.toml");
    let o = import_path(&py, &p, &out, &[]);
    let t = output_text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("node `linear`"), "{t}");
    assert!(!dir.path().join("suites").exists(), "{t}");
}

/// A norm stage's headline m x n, batch.
fn assert_gemm_like(w: &Workload, m: u64, n: u64, batch: u64, text: &str) {
    let h = w.headline();
    assert_eq!((h.m, h.n, h.batch.max(1)), (m, n, batch), "{text}");
}

/// A clone keeps a dense permuted view's strides (torch's `x.transpose(1, 2).clone()`), and
/// the views after it describe those: it stays what it was (one GEMM reading x
/// column-major), not a packed copy read as if row-major. A view as another dtype
/// (`x.view(torch.float32)`) is no permutation of elements and is not packed.
#[test]
fn import_keeps_a_strided_clone_and_does_not_pack_a_dtype_view() {
    let Some(py) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // A Model of `forward(x, w)` imported to NAME.toml: the exit code and the output.
    let import_model = |name: &str, forward: &str, inputs: &str| {
        let p = dir.path().join(format!("{name}.py"));
        std::fs::write(
            &p,
            format!(
                "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    \
                 def forward(self, x, w):\n        {forward}\n\n\ndef get_inputs():\n    \
                 return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
            ),
        )
        .unwrap();
        let out = dir.path().join(format!("{name}.toml"));
        let o = import_path(&py, &p, &out, &[]);
        (o.status.code(), output_text(&o), out)
    };
    let (code, t, out) = import_model(
        "clone_t",
        "y = x.transpose(1, 2).clone()\n        return torch.matmul(y.transpose(1, 2), w)",
        "torch.randn(8, 16, 32), torch.randn(32, 24)",
    );
    assert_eq!(code, Some(0), "{t}");
    let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}: {t}"));
    let spec: WorkloadSpec = toml::from_str(&text).unwrap();
    assert_eq!(spec.family, Family::Gemm, "{text}");
    assert!(spec.view.is_none(), "{text}");
    let (_, t, _) = import_model(
        "view_dtype",
        "return x.view(torch.float32).t().contiguous() * w",
        "torch.randn(64, 32, dtype=torch.float16), torch.randn(16, 64)",
    );
    // Refused, or imported without a view of the f16 storage.
    for f in std::fs::read_dir(dir.path()).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") && p.to_string_lossy().contains("view_dtype")
        {
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(!text.contains("[view]"), "{t}\n{text}");
        }
    }
}
