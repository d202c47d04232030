//! The compile stage against the real nvcc: CuTe Hopper kernels compile to shared objects
//! whose SASS uses WGMMA and TMA, broken kernels give parsed diagnostics at the right
//! line, and the content-addressed cache makes a repeat compile free.

use std::time::Instant;

use cutesmith::toolchain::cache::CompileCache;
use cutesmith::toolchain::compile::{
    self, CompileOptions, CompileRequest, CompileStatus, CONDENSED_MAX_BYTES,
};

use super::common::{fixture, line_of, root, toolchain};

fn request(path: &std::path::Path) -> CompileRequest {
    CompileRequest::from_file(path, CompileOptions::default()).unwrap()
}

/// Every template under cutlass-templates/ compiles with its default strategy, together
/// with the broken fixture, in parallel; then each repeat is a cache hit under a second.
#[test]
fn templates_compile_and_broken_kernel_gives_the_right_line() {
    let Some(tc) = toolchain() else { return };
    let cache = CompileCache::default_location();
    let mut templates: Vec<_> = std::fs::read_dir(root().join("cutlass-templates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    templates.sort();
    assert!(!templates.is_empty(), "no templates found");
    let broken = fixture("kernels/broken_cute.cu");
    let mut requests: Vec<CompileRequest> = templates.iter().map(|p| request(p)).collect();
    requests.push(request(&broken));

    let results =
        compile::compile_many(&tc, &cache, &requests, compile::default_jobs(), &|_, _| {});
    let outcomes: Vec<_> = results.into_iter().map(|r| r.unwrap()).collect();

    for (path, o) in templates.iter().zip(&outcomes) {
        assert_eq!(
            o.status,
            CompileStatus::Success,
            "{} failed:\n{}",
            path.display(),
            o.condensed
        );
        let so = o.shared_object.as_ref().unwrap();
        assert!(so.is_file(), "{} has no shared object", path.display());
        assert!(
            !o.resources.is_empty(),
            "{}: no ptxas report",
            path.display()
        );
        assert_eq!(o.spill_bytes(), 0, "{} spills", path.display());
        let sass = o.sass.as_ref().expect("SASS summary");
        assert!(sass.totals().instructions > 0);
        // The statically linked CUDA runtime imports dlopen/dlsym: that alone must not
        // trip the anti-cheating inspection.
        let inspected = cutesmith::eval::inspect::inspect(so).unwrap();
        assert!(
            inspected.ok(),
            "{}: {}",
            path.display(),
            inspected.summary()
        );
        assert!(inspected.dynamic_loading);
    }
    // The Hopper GEMM uses the Hopper paths.
    let gemm = templates
        .iter()
        .position(|p| p.ends_with("gemm_sm90_tma_wgmma.cu"))
        .expect("the raw CuTe Hopper GEMM template");
    let totals = outcomes[gemm].sass.as_ref().unwrap().totals();
    assert!(totals.hgmma > 0, "no HGMMA in the Hopper GEMM's SASS");
    assert!(totals.utmaldg > 0, "no TMA loads in the Hopper GEMM's SASS");

    let bad = outcomes.last().unwrap();
    assert_eq!(bad.status, CompileStatus::Failed);
    let want = line_of(&broken, "// BROKEN:");
    assert_eq!(
        bad.primary_location,
        Some(("broken_cute.cu".to_string(), want)),
        "condensed:\n{}",
        bad.condensed
    );
    assert!(
        bad.condensed.len() <= CONDENSED_MAX_BYTES,
        "{} bytes",
        bad.condensed.len()
    );
    assert!(
        bad.condensed.contains(&format!("broken_cute.cu:{want}")),
        "{}",
        bad.condensed
    );
    let full = std::fs::read_to_string(&bad.log_path).unwrap();
    assert!(
        full.len() > bad.condensed.len(),
        "the full log must be kept"
    );
    assert!(full.contains("error"));
    assert!(bad.shared_object.is_none());

    // Repeats: no nvcc run, well under a second each.
    for req in &requests {
        let t = Instant::now();
        let again = compile::compile(&tc, &cache, req).unwrap();
        assert!(again.cached, "{} was not a cache hit", req.file_name);
        assert!(
            t.elapsed().as_secs_f64() < 1.0,
            "cache hit took {:?}",
            t.elapsed()
        );
    }
}

const TINY: &str = r#"
#include <cutesmith_abi.h>
__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }
CS_EXPORT uint32_t cutesmith_abi_version(void) { return CS_ABI_VERSION; }
CS_EXPORT int32_t cutesmith_workspace_bytes(const cs_problem*, uint64_t* b) { *b = 0; return CS_OK; }
CS_EXPORT int32_t cutesmith_launch(const cs_problem* p, cs_stream_t s) {
  int n = (int)p->n; scale<<<(n + 255) / 256, 256, 0, s>>>((float*)p->d, n); return (int32_t)cudaGetLastError();
}
"#;

/// A fresh cache misses and runs nvcc; the same input hits; any change to the source or
/// the flags misses again.
#[test]
fn cache_is_keyed_by_content_and_flags() {
    let Some(tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::new(dir.path());
    let req = CompileRequest {
        source: TINY.to_string(),
        file_name: "tiny.cu".into(),
        options: CompileOptions::default(),
    };
    let first = compile::compile(&tc, &cache, &req).unwrap();
    assert!(first.ok(), "{}", first.condensed);
    assert!(!first.cached);
    assert!(first.nvcc_seconds > 0.0);
    assert_eq!(first.resources.len(), 1);
    assert!(first.resources[0].name.contains("scale"));
    assert!(first
        .shared_object
        .as_ref()
        .unwrap()
        .starts_with(dir.path()));

    let second = compile::compile(&tc, &cache, &req).unwrap();
    assert!(second.cached);
    assert_eq!(second.key, first.key);

    let mut changed = req.clone();
    changed.options.defines.push("CS_UNUSED=1".into());
    let third = compile::compile(&tc, &cache, &changed).unwrap();
    assert!(!third.cached);
    assert_ne!(third.key, first.key);

    let mut edited = req.clone();
    edited.source.push_str("\n// an edit\n");
    assert!(!compile::compile(&tc, &cache, &edited).unwrap().cached);

    // The leading comment (a built-in strategy's workload name) is not part of the key:
    // the same kernel instantiated for another workload is the same entry.
    let mut renamed = req.clone();
    renamed.source = format!("// workload another: its description{}", req.source);
    let fourth = compile::compile(&tc, &cache, &renamed).unwrap();
    assert!(
        fourth.cached,
        "a new leading comment must not cost a compile"
    );
    assert_eq!(fourth.key, first.key);
    // ... but a comment that ends in a backslash continues onto the next line, and is.
    let mut spliced = req.clone();
    spliced.source = format!("// continued \\{}", req.source);
    assert_ne!(
        compile::cache_key(&tc, &spliced),
        first.key,
        "a comment that swallows a line must change the key"
    );
}

/// A compile that runs past its limit is killed and reported as timed out, not cached.
#[test]
fn a_compile_past_its_limit_is_killed() {
    let Some(tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::new(dir.path());
    let mut req = request(&root().join("cutlass-templates/gemm_sm90_tma_wgmma.cu"));
    req.options.timeout_secs = 2;
    let t = Instant::now();
    let o = compile::compile(&tc, &cache, &req).unwrap();
    assert_eq!(o.status, CompileStatus::TimedOut);
    assert!(t.elapsed().as_secs() < 20, "took {:?}", t.elapsed());
    assert!(o.condensed.contains("killed"));
    assert!(
        cache.lookup(&o.key).is_none(),
        "a timeout must not be cached"
    );
}

/// A plain (non-CuTe) error is parsed to its file and line too.
#[test]
fn a_simple_error_points_at_its_line() {
    let Some(tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::new(dir.path());
    let path = fixture("kernels/simple_error.cu");
    let o = compile::compile(&tc, &cache, &request(&path)).unwrap();
    assert_eq!(o.status, CompileStatus::Failed);
    let want = line_of(&path, "// BROKEN:");
    assert_eq!(
        o.primary_location,
        Some(("simple_error.cu".to_string(), want))
    );
    let first = o.diagnostics.first().unwrap();
    assert_eq!(first.file, "simple_error.cu");
    assert_eq!(first.line, Some(want));
}

/// Every built-in template, instantiated the one way the built-in provider does it
/// (workload block, epilogue chain, parameters), compiles for sm_90a in each layout and
/// dtype it takes: the four A/B storage orders and a column-major D for the 16-bit and
/// fp32 GEMMs (the Hopper 3xTF32 mainloop among them), both GEMV orientations, fp8, epilogue chains with row, column and matrix
/// operands, the new activations, log-softmax, GEMM + softmax (16-bit and f32) and SwiGLU /
/// GEGLU (K-major and MN-major operands).
#[test]
fn every_template_instance_compiles_in_each_layout() {
    use cutesmith::spec::Workload;
    use cutesmith::strategy;
    let Some(tc) = toolchain() else { return };
    let dir = root().join("workloads");
    let cases: &[(&str, &str)] = &[
        ("gemm_bf16_rr", "gemm_sm90_cutlass3_ws"),
        ("gemm_bf16_rc", "gemm_sm90_cutlass3_ws"),
        ("gemm_bf16_cr", "gemm_sm90_cutlass3_ws"),
        ("gemm_bf16_cc", "gemm_sm90_cutlass3_ws"),
        ("gemm_bf16_rr_dcol", "gemm_sm90_cutlass3_ws"),
        ("gemm_bf16_rc", "gemm_sm90_tma_wgmma"),
        ("gemm_bf16_rr", "gemm_sm90_tma_wgmma"),
        ("gemm_bf16_cr", "gemm_sm90_tma_wgmma"),
        ("gemm_bf16_rr_dcol", "gemm_sm90_tma_wgmma"),
        ("gemm_f32_rc", "gemm_f32_3xtf32"),
        ("gemm_f32_rr", "gemm_f32_3xtf32"),
        ("gemm_f32_cc", "gemm_f32_3xtf32"),
        ("gemm_chain_div_tanh_f32", "gemm_f32_3xtf32"),
        // The Hopper fp32 mainloops: 3xF16 (cutesmith_sm90_3xf16.cuh, the first candidate
        // of a strict fp32 workload) on TN, B row-major and A.T @ B (the split pass reads
        // either order), an epilogue chain and bias + GELU; 3xTF32
        // (cutesmith_sm90_3xtf32.cuh; "+3xtf32" picks it) with B row-major (copied K-major
        // first), and TF32 allowed.
        ("gemm_f32_rc", "gemm_sm90_cutlass3_ws"),
        ("gemm_f32_rr", "gemm_sm90_cutlass3_ws+3xtf32"),
        ("gemm_f32_rr", "gemm_sm90_cutlass3_ws"),
        ("fp32_at_4096", "gemm_sm90_cutlass3_ws"),
        ("gemm_chain_div_tanh_f32", "gemm_sm90_cutlass3_ws"),
        ("fp32_bias_gelu_4096", "gemm_sm90_cutlass3_ws"),
        ("gemm_tf32_4096", "gemm_sm90_cutlass3_ws"),
        // The stream kernel (CS_STREAM=1, the first candidate for K = 2^20) and split-K.
        ("gemv_bf16_m8_k1m", "gemm_skinny_splitk"),
        ("llm_llama3_8b_o_m16", "gemm_skinny_splitk"),
        ("gemv_f32_n4_k1m", "gemm_skinny_splitk"),
        ("gemm_e4m3_4096", "gemm_sm90_cutlass3_ws"),
        // fp8 into an fp8 D: alpha / beta scaled by scale_d, and the chain then the scale.
        ("gemm_e4m3_fp8out_small", "gemm_sm90_cutlass3_ws"),
        ("gemm_e5m2_fp8out_chain_small", "gemm_sm90_cutlass3_ws"),
        // 16-bit operands, an f32 output (and bias, GELU).
        ("gemm_bf16_f32out_small", "gemm_sm90_cutlass3_ws"),
        ("gemm_bias_gelu_bf16", "gemm_sm90_cutlass3_ws"),
        // The fused bias epilogue with softplus (beta, threshold) and swish (beta).
        ("gemm_bias_softplus_f16_small", "gemm_sm90_cutlass3_ws"),
        ("gemm_bias_swish_beta_bf16_small", "gemm_sm90_cutlass3_ws"),
        (
            "gemm_chain_bias_relu_residual_bf16",
            "gemm_sm90_cutlass3_ws",
        ),
        ("gemm_chain_col_leaky_max_bf16", "gemm_sm90_cutlass3_ws"),
        ("gemm_chain_swish_scale_bf16", "gemm_sm90_cutlass3_ws"),
        ("act_softplus_f32", "elementwise_activation"),
        ("act_chain_broadcast_bf16", "elementwise_activation"),
        ("log_softmax_bf16_4096x32000", "softmax_rows"),
        ("gemm_softmax_bf16_head", "gemm_softmax"),
        // f32 GEMM + softmax on the 3xTF32 mainloop: K-major operands, and B row-major
        // (the split transposes it; a narrower tile so that two stages fit).
        ("gemm_softmax_f32_head", "gemm_softmax"),
        ("gemm_softmax_f32_rr_small", "gemm_softmax"),
        // An op chain before the softmax (a bias, GELU, a scale; a column operand and tanh
        // before an f32 log-softmax).
        ("gemm_softmax_chain_bf16_small", "gemm_softmax"),
        ("gemm_softmax_chain_f32_small", "gemm_softmax"),
        ("gemm_glu_swiglu_bf16", "gemm_glu"),
        // The dual GLU kernel with both operands MN-major (f16 GEGLU, A column-major, B
        // row-major): a GPU test fixture.
        ("glu_f16_cr_small", "gemm_glu"),
        // The norms: RMSNorm with its weight (bf16), LayerNorm with weight, bias and GELU,
        // rows side by side (f32, column-major A), and L1 into f32.
        ("norm_rms_bf16_llm", "norm_rows"),
        ("norm_layer_bf16_gelu", "norm_rows"),
        ("norm_rms_f32_dim1", "norm_rows"),
        ("norm_l1_bf16_small", "norm_rows"),
        // GroupNorm's per-channel weight and bias (channel operands, 4 a row).
        ("norm_group_affine_bf16_small", "norm_rows"),
        // Broadcast operands (four, of four masks) over 4-D dims.
        ("act_broadcast_bf16_small", "elementwise_activation"),
        // Inputs read through a view: an attention's heads out of a split (bf16), heads put
        // back with GELU and a broadcast operand (f32), a 2-D transpose (f16, the tiled path).
        ("act_view_attention_heads_bf16", "elementwise_activation"),
        (
            "act_view_transpose_gelu_f32_small",
            "elementwise_activation",
        ),
        ("act_view_transpose2d_f16_small", "elementwise_activation"),
        // Ops before a softmax: broadcast operands over 4-D dims; a causal tril with matrix,
        // row and column operands.
        ("softmax_ops_bf16_small", "softmax_rows"),
        ("softmax_ops_f32_small", "softmax_rows"),
        ("softmax_causal_dims_bf16_small", "softmax_rows"),
        // The reductions: a row-major f32 sum, bf16 max over rows side by side, logsumexp
        // with a chain after it, an f16 mean into f32 with a column operand.
        ("reduce_sum_f32_small", "reduce_rows"),
        ("reduce_max_col_bf16_small", "reduce_rows"),
        ("reduce_lse_chain_f32_small", "reduce_rows"),
        ("reduce_mean_col_f16_small", "reduce_rows"),
        // Ops before the reduction ([[before]]): an f32 mean squared error (a matrix
        // target), a bf16 Huber loss over rows side by side (an f32 target, a row weight).
        ("reduce_mse_f32_small", "reduce_rows"),
        ("reduce_huber_col_bf16_small", "reduce_rows"),
        // Index reductions into int64: an f16 argmin of rows, a bf16 argmax over rows side
        // by side.
        ("reduce_argmin_f16_small", "reduce_rows"),
        ("reduce_argmax_col_bf16_small", "reduce_rows"),
        // Cross entropies (int64 targets): bf16 with each row's loss, f16 summed a batch.
        ("reduce_cross_entropy_small", "reduce_rows"),
        ("reduce_cross_entropy_sum_f16", "reduce_rows"),
        // The scans: an f32 cumsum, a bf16 reverse cumprod into f32 with a scale after, an
        // f16 exclusive cumsum over rows side by side with a column operand.
        ("scan_sum_f32_small", "scan_rows"),
        ("scan_prod_rev_bf16_small", "scan_rows"),
        ("scan_sum_excl_col_f16_small", "scan_rows"),
        // A masked cumsum: a bool mask multiplied in before the scan ([[before]]).
        ("scan_masked_sum_f32_small", "scan_rows"),
        // GEMM + row reduction (gemm_softmax's GEMM, a reduction stage): bf16 with B
        // row-major, a chain and [[after]] ops; f32 on 3xF16 (KernelBench level 2, 22).
        ("gemm_reduce_lse_bf16_small", "gemm_softmax"),
        (
            "kb2_22_matmul_scale_residualadd_clamp_logsumexp_mish_f32",
            "gemm_softmax",
        ),
        // GEMM + norm (gemm_softmax's GEMM, a norm stage): bf16 GroupNorm with ops before
        // and after it, and f32 InstanceNorm rows (KernelBench level 2, 28) on 3xF16.
        ("gemm_groupnorm_bf16_small", "gemm_softmax"),
        // and the column path of a batch norm.
        ("gemm_batchnorm_bf16_small", "gemm_softmax"),
        // Index ops (triu, tril: the positional cs_chain::apply): a causal mask before a
        // batched softmax, an elementwise triu, KernelBench level 1's 14 (3xF16, the
        // visitor node) and 15 (the Ampere 3xTF32 template's pass over D), the swapped
        // visitor node and the split-K template of a skinny GEMM, the raw CuTe GEMM.
        ("gemm_causal_softmax_bf16", "gemm_softmax"),
        ("act_triu_relu_f32", "elementwise_activation"),
        (
            "kb1_14_matmul_upper_triangular_f32",
            "gemm_sm90_cutlass3_ws",
        ),
        ("kb1_15_matmul_lower_triangular_f32", "gemm_f32_3xtf32"),
        ("gemm_triu_bf16_skinny_small", "gemm_sm90_cutlass3_ws"),
        ("gemm_triu_bf16_skinny_small", "gemm_skinny_splitk"),
        ("gemm_tril_bf16_small", "gemm_sm90_tma_wgmma"),
        (
            "kb2_28_bmm_instancenorm_sum_residualadd_multiply_f32",
            "gemm_softmax",
        ),
    ];
    let mut requests = Vec::new();
    let mut not_taken = Vec::new();
    for (name, case) in cases {
        // "template+3xtf32": the fp32 template's 3xTF32 mainloop (CS_F32_MODE 0).
        let (template, tf32_split) = match case.split_once('+') {
            Some((t, _)) => (t, true),
            None => (*case, false),
        };
        let w = Workload::find(&dir, name)
            .or_else(|_| Workload::find(root().join("tests/fixtures/workloads"), name))
            .unwrap_or_else(|e| panic!("{e}"));
        let space = strategy::space(&w);
        let Some(s) = space
            .iter()
            .find(|(s, v)| {
                s.template == template
                    && v.is_ok()
                    && (!tf32_split || s.params.get("CS_F32_MODE").copied().unwrap_or(0) == 0)
            })
            .map(|(s, _)| s.clone())
        else {
            // A case the template's rules do not take yet: the rule must say why.
            let why: Vec<String> = space
                .iter()
                .filter(|(s, _)| s.template == template)
                .filter_map(|(_, v)| v.as_ref().err().cloned())
                .collect();
            assert!(
                why.first().is_some_and(|w| !w.is_empty()),
                "{template} has no strategy for {name} and no reason"
            );
            not_taken.push(format!("{name} on {template}: {}", why[0]));
            continue;
        };
        let src = s.instantiate(&w).unwrap();
        let mut req = CompileRequest::version(&src, "sm_90a");
        req.file_name = format!("{name}__{}.cu", case.replace('+', "_"));
        requests.push(req);
    }
    // Strategies no workload above takes first, named explicitly (each must pass the
    // rules): the other orientation (CS_SWAP_AB: a column-major kernel D, the library
    // bias per row) on the decode shape's GEMM + bias + SiLU, and a 64-row tile sized to
    // one wave (96 columns) with a set stage count.
    let explicit: &[(&str, &[(&str, i64)])] = &[
        (
            "gemm_bf16_decode_bias_silu",
            &[
                ("CS_SWAP_AB", 1),
                ("CS_TILE_M", 128),
                ("CS_TILE_N", 32),
                ("CS_CLUSTER_M", 1),
            ],
        ),
        (
            "llm_llama3_8b_o_m16",
            &[
                ("CS_TILE_M", 64),
                ("CS_TILE_N", 96),
                ("CS_SCHEDULE", 1),
                ("CS_CLUSTER_M", 1),
                ("CS_STAGES", 6),
            ],
        ),
    ];
    for (name, params) in explicit {
        let w = Workload::find(&dir, name).unwrap_or_else(|e| panic!("{e}"));
        let s = strategy::Strategy {
            template: "gemm_sm90_cutlass3_ws".into(),
            params: params.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            rationale: String::new(),
        };
        assert_eq!(strategy::check(&s, &w), Ok(()), "{name}: {}", s.label());
        let src = s.instantiate(&w).unwrap();
        let mut req = CompileRequest::version(&src, "sm_90a");
        req.file_name = format!(
            "{name}__explicit_{}__gemm_sm90_cutlass3_ws.cu",
            requests.len()
        );
        requests.push(req);
    }
    eprintln!("not taken by the rules yet:\n  {}", not_taken.join("\n  "));
    // Every template has at least one instance here.
    for t in [
        "gemm_sm90_cutlass3_ws",
        "gemm_sm90_tma_wgmma",
        "gemm_f32_3xtf32",
        "gemm_skinny_splitk",
        "elementwise_activation",
        "softmax_rows",
        "gemm_softmax",
        "gemm_glu",
        "norm_rows",
        "reduce_rows",
        "scan_rows",
    ] {
        assert!(
            requests
                .iter()
                .any(|r| r.file_name.ends_with(&format!("__{t}.cu"))),
            "no instance of {t} compiled"
        );
    }
    let cache = CompileCache::default_location();
    let results =
        compile::compile_many(&tc, &cache, &requests, compile::default_jobs(), &|_, _| {});
    let mut failed = Vec::new();
    for (req, r) in requests.iter().zip(results) {
        let o = r.unwrap();
        if !o.ok() {
            failed.push(format!("{}:\n{}", req.file_name, o.condensed));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// The harness's own generated code compiles with the real nvcc: the elementwise passes
/// of the unfused baseline (the same source NVRTC gets on the GPU machine) for a chain
/// touching every op and operand kind, in bf16 and f32; and a chain functor used the way
/// a kernel uses it (`cs_chain_at`), from `Chain::cpp`; and the L2 flush's read kernel.
#[test]
fn generated_passes_and_chain_functors_compile() {
    use cutesmith::spec::chain::{Chain, OpSpec};
    use cutesmith::spec::{Activation, DType};
    let Some(tc) = toolchain() else { return };
    let spec = |op: &str| OpSpec {
        op: op.into(),
        ..OpSpec::default()
    };
    let mut ops = vec![
        OpSpec {
            value: Some(0.5),
            save: Some("h".into()),
            ..spec("scale")
        },
        OpSpec {
            operand: Some("row".into()),
            ..spec("add")
        },
        OpSpec {
            operand: Some("col".into()),
            dtype: Some(DType::F32),
            ..spec("mul")
        },
        OpSpec {
            operand: Some("matrix".into()),
            ..spec("sub")
        },
        OpSpec {
            min: Some(-3.0),
            ..spec("clamp")
        },
        OpSpec {
            operand: Some("z".into()),
            ..spec("max")
        },
        OpSpec {
            operand: Some("h".into()),
            ..spec("div")
        },
        spec("neg"),
        spec("abs"),
        spec("exp"),
        // The index ops: the passes read each element's row and column.
        OpSpec {
            diagonal: Some(2),
            ..spec("triu")
        },
        OpSpec {
            value: Some(f64::NEG_INFINITY),
            ..spec("tril")
        },
    ];
    ops.extend(Activation::ALL.iter().map(|a| spec(a.name())));
    let mut chain = Chain::default();
    chain.extend_from_spec(&ops, DType::BF16).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::new(dir.path());
    let mut requests = Vec::new();
    for d in [DType::BF16, DType::F32] {
        let src = cutesmith::eval::gpu::kernels::pass_source(&chain, d, &[]).unwrap();
        assert!(
            src.contains("cs_pass0") && src.contains(&format!("cs_pass{}", chain.steps.len() - 1))
        );
        // A shared object needs the three entry points; the passes are the point here.
        let src = format!("{src}\n{}", TINY.replace("scale", "scale_tiny"));
        requests.push(CompileRequest {
            source: src,
            file_name: format!("passes_{}.cu", d.name()),
            options: CompileOptions::default(),
        });
    }
    // A cross entropy's NLL pass after the log-softmax: bf16 in, f32 out.
    {
        let src = cutesmith::eval::gpu::kernels::nll_source(DType::BF16, DType::F32).unwrap();
        requests.push(CompileRequest {
            source: format!("{src}\n{}", TINY.replace("scale", "scale_tiny")),
            file_name: "nll_bf16_f32.cu".into(),
            options: CompileOptions::default(),
        });
    }
    for (d, log) in [(DType::BF16, false), (DType::F32, true)] {
        let src = cutesmith::eval::gpu::kernels::row_softmax_source(d, log).unwrap();
        requests.push(CompileRequest {
            source: format!("{src}\n{}", TINY.replace("scale", "scale_tiny")),
            file_name: format!("row_softmax_{}.cu", d.name()),
            options: CompileOptions::default(),
        });
    }
    // gemm_norm's unfused group norm pass: layer with a bf16 weight and an f32 bias, rms
    // with neither; and its batch norm passes.
    {
        use cutesmith::eval::gpu::kernels::{row_norm_source, NormAffine};
        for (d, kind, affine) in [
            (
                DType::BF16,
                1,
                NormAffine {
                    weight: Some(DType::BF16),
                    bias: Some(DType::F32),
                },
            ),
            (DType::F32, 0, NormAffine::default()),
        ] {
            let src = row_norm_source(d, kind, 1e-5, affine).unwrap();
            requests.push(CompileRequest {
                source: format!("{src}\n{}", TINY.replace("scale", "scale_tiny")),
                file_name: format!("row_norm_{}.cu", d.name()),
                options: CompileOptions::default(),
            });
        }
        // The batch norm's column passes: bf16 with a weight and an f32 bias.
        let src = cutesmith::eval::gpu::kernels::col_norm_source(
            DType::BF16,
            1e-5,
            NormAffine {
                weight: Some(DType::BF16),
                bias: Some(DType::F32),
            },
        )
        .unwrap();
        assert!(src.contains("cs_col_part") && src.contains("cs_col_apply"));
        requests.push(CompileRequest {
            source: format!("{src}\n{}", TINY.replace("scale", "scale_tiny")),
            file_name: "col_norm_bf16.cu".into(),
            options: CompileOptions::default(),
        });
    }
    // The L2 flush's read kernel.
    requests.push(CompileRequest {
        source: format!(
            "{}\n{}",
            cutesmith::eval::gpu::session::EVICT_SOURCE,
            TINY.replace("scale", "scale_tiny")
        ),
        file_name: "l2_evict.cu".into(),
        options: CompileOptions::default(),
    });
    for d in [DType::BF16, DType::F32, DType::F16, DType::E4M3] {
        let src = cutesmith::eval::gpu::kernels::verify_source(d).unwrap();
        requests.push(CompileRequest {
            source: format!("{src}\n{}", TINY.replace("scale", "scale_tiny")),
            file_name: format!("verify_{}.cu", d.name()),
            options: CompileOptions::default(),
        });
    }
    // The device validation's comparison kernels for each reference kind, and the
    // harness's device operations (input generator, widening, race check).
    {
        use cutesmith::eval::gpu::check::{check_source, fill_source, CheckSpec, Reference};
        let specs = [
            (Reference::Chain, DType::BF16, DType::BF16, false),
            (
                Reference::Softmax { log: true },
                DType::F32,
                DType::F32,
                false,
            ),
            (Reference::Gemm, DType::BF16, DType::BF16, true),
            (Reference::Gemm, DType::E4M3, DType::E4M3, false),
            (
                Reference::Glu {
                    gate: Activation::Silu,
                },
                DType::F16,
                DType::F16,
                false,
            ),
            (
                Reference::GemmSoftmax { log: false },
                DType::F32,
                DType::BF16,
                true,
            ),
            // The norm's per-row statistics, rows side by side.
            (
                Reference::Norm {
                    kind: cutesmith::spec::NormKind::Layer,
                    eps: 1e-5,
                },
                DType::BF16,
                DType::F32,
                true,
            ),
            // A reduction's per-row value and bound (logsumexp, bf16 rows into f32).
            (
                Reference::Reduce {
                    kind: cutesmith::spec::ReduceKind::Logsumexp,
                },
                DType::F32,
                DType::BF16,
                false,
            ),
            // A scan's per-chunk prefixes, then the chunk's own elements: a reverse
            // exclusive cumprod of bf16 rows side by side into f32.
            (
                Reference::Scan {
                    kind: cutesmith::spec::ScanKind::Prod,
                    reverse: true,
                    exclusive: true,
                },
                DType::F32,
                DType::BF16,
                true,
            ),
        ];
        // A reduction whose [[before]] ops are the whole chain (with their error bounds),
        // the epilogue chain the identity.
        let before_case = specs.len();
        let mut specs = specs.to_vec();
        specs.push((
            Reference::Reduce {
                kind: cutesmith::spec::ReduceKind::Sum,
            },
            DType::F32,
            DType::BF16,
            false,
        ));
        // [[before]] ops take no index op (their elements have no place in D).
        let mut before_chain = Chain::default();
        let plain: Vec<OpSpec> = ops
            .iter()
            .filter(|o| o.op != "triu" && o.op != "tril")
            .cloned()
            .collect();
        before_chain.extend_from_spec(&plain, DType::BF16).unwrap();
        for (i, (reference, out, input, col_major)) in specs.into_iter().enumerate() {
            let (before, after) = if i == before_case {
                (before_chain.clone(), Chain::default())
            } else {
                (Chain::default(), chain.clone())
            };
            let src = check_source(&CheckSpec {
                reference,
                chain: after,
                before,
                out,
                input,
                col_major,
            });
            if i == before_case {
                assert!(src.contains("csd_before(double z, const double* t, double* err)"));
                assert!(src.contains(&format!("csd_bs{}", before_chain.steps.len() - 1)));
            }
            for entry in [
                "cs_check_main",
                "cs_check_count",
                "cs_dots",
                "cs_row_stats",
                "cs_norm_stats",
                "cs_reduce_stats",
                "cs_scan_stats",
            ] {
                assert!(src.contains(entry), "{entry} missing");
            }
            requests.push(CompileRequest {
                source: format!("{src}\n{}", TINY.replace("scale", "scale_tiny")),
                file_name: format!("check_{i}.cu"),
                options: CompileOptions::default(),
            });
        }
        requests.push(CompileRequest {
            source: format!("{}\n{}", fill_source(), TINY.replace("scale", "scale_tiny")),
            file_name: "device_ops.cu".into(),
            options: CompileOptions::default(),
        });
    }
    let functor = format!(
        "{}\n__global__ void apply_chain(cs_problem p, float* out) {{\n  out[threadIdx.x] = cs_chain_at<cs_chain>(p, 1.0f, 0, threadIdx.x, threadIdx.x);\n}}\n{}",
        chain.cpp(),
        TINY
    );
    requests.push(CompileRequest {
        source: functor,
        file_name: "chain_functor.cu".into(),
        options: CompileOptions::default(),
    });
    // A chain written before chains stated their operands' dtypes (no kDtype0..kDtype3):
    // cs_chain_at reads each dtype from the operand instead.
    let cpp = chain.cpp();
    let undated: Vec<&str> = cpp.lines().filter(|l| !l.contains("kDtype")).collect();
    assert!(undated.len() < cpp.lines().count());
    requests.push(CompileRequest {
        source: format!(
            "{}\n__global__ void apply_chain(cs_problem p, float* out) {{\n  out[threadIdx.x] = cs_chain_at<cs_chain>(p, 1.0f, 0, threadIdx.x, threadIdx.x);\n}}\n{}",
            undated.join("\n"),
            TINY
        ),
        file_name: "chain_functor_undated.cu".into(),
        options: CompileOptions::default(),
    });
    for (req, r) in
        requests
            .iter()
            .zip(compile::compile_many(&tc, &cache, &requests, 3, &|_, _| {}))
    {
        let o = r.unwrap();
        assert!(o.ok(), "{}:\n{}", req.file_name, o.condensed);
    }
}

/// An nvcc that dies of a signal (killed for memory, interrupted) says nothing about the
/// source: the outcome says so and is not cached, so the next compile runs again.
#[test]
fn a_compile_killed_by_a_signal_is_not_cached() {
    use std::os::unix::fs::PermissionsExt;
    let Some(mut tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("nvcc");
    std::fs::write(&fake, "#!/bin/sh\nkill -KILL $$\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    tc.nvcc.path = fake;
    let cache = CompileCache::new(dir.path().join("cache"));
    let req = CompileRequest {
        source: TINY.to_string(),
        file_name: "tiny.cu".into(),
        options: CompileOptions::default(),
    };
    let o = compile::compile(&tc, &cache, &req).unwrap();
    assert_eq!(o.status, CompileStatus::Failed);
    assert!(o.killed_by_signal);
    assert!(
        o.condensed.contains("killed by a signal"),
        "{}",
        o.condensed
    );
    assert!(
        cache.lookup(&o.key).is_none(),
        "a killed compile must not be cached"
    );
    let again = compile::compile(&tc, &cache, &req).unwrap();
    assert!(!again.cached);
}

/// The two mistakes a model typically makes in the raw CuTe Hopper template, made in our
/// own template and compiled for real: the debug prompt's header lookup quotes the
/// installed CUTLASS declarations each error points at.
#[test]
fn header_lookup_quotes_the_declarations_behind_two_typical_cute_mistakes() {
    use cutesmith::toolchain::headers::{lookup, HeaderIndex};
    let Some(tc) = toolchain() else { return };
    let template =
        std::fs::read_to_string(root().join("cutlass-templates/gemm_sm90_tma_wgmma.cu")).unwrap();
    // 1: a K-major operand tiled with an M/N-major swizzle atom.
    let k_atom = "    return GMMA::Layout_K_SW128_Atom<T>{};";
    assert_eq!(template.matches(k_atom).count(), 1);
    let wrong_atom = template.replace(k_atom, "    return GMMA::Layout_MN_SW128_Atom<T>{};");
    // 2: gemm() given the A fragment as the accumulator.
    let call = "gemm(tiled_mma, tCrA(_,_,_,stage), tCrB(_,_,_,stage), tCrAcc);";
    assert_eq!(template.matches(call).count(), 1);
    let wrong_acc = template.replace(
        call,
        "gemm(tiled_mma, tCrA(_,_,_,stage), tCrB(_,_,_,stage), tCrA(_,_,_,stage));",
    );
    let dir = tempfile::tempdir().unwrap();
    let requests: Vec<CompileRequest> =
        [("wrong_atom.cu", &wrong_atom), ("wrong_acc.cu", &wrong_acc)]
            .iter()
            .map(|(name, text)| {
                let p = dir.path().join(name);
                std::fs::write(&p, text).unwrap();
                request(&p)
            })
            .collect();
    let cache = CompileCache::default_location();
    let outcomes: Vec<_> =
        compile::compile_many(&tc, &cache, &requests, compile::default_jobs(), &|_, _| {})
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
    let index = HeaderIndex::build(&tc.cutlass.include, &tc.cutlass.version);

    let atom = &outcomes[0];
    assert_ne!(atom.status, CompileStatus::Success);
    let text = lookup(
        &index,
        &tc.cutlass.include,
        &atom.diagnostics,
        Some(&wrong_atom),
        4000,
    )
    .unwrap_or_else(|| panic!("nothing found for:\n{}", atom.condensed));
    // The user-code line that built the rejected layout, with its number.
    let bad_line = wrong_atom
        .lines()
        .position(|l| l == "    return GMMA::Layout_MN_SW128_Atom<T>{};")
        .unwrap()
        + 1;
    assert!(
        text.contains(&format!(
            "{bad_line:>5}|     return GMMA::Layout_MN_SW128_Atom<T>{{}};"
        )),
        "{text}"
    );
    assert!(
        text.contains("the assertion, cute/atom/mma_traits_sm90_gmma.hpp:"),
        "{text}\n--- from:\n{}",
        atom.condensed
    );
    assert!(text.contains("Not a canonical GMMA_K Layout"), "{text}");
    for a in [
        "Layout_K_SW128_Atom",
        "Layout_K_SW64_Atom",
        "Layout_MN_SW128_Atom",
    ] {
        assert!(text.contains(a), "{a} missing:\n{text}");
    }

    let acc = &outcomes[1];
    assert_ne!(acc.status, CompileStatus::Success);
    let text = lookup(&index, &tc.cutlass.include, &acc.diagnostics, None, 4000)
        .unwrap_or_else(|| panic!("nothing found for:\n{}", acc.condensed));
    assert!(
        text.contains("cute/algorithm/gemm.hpp:") && text.contains("gemm(MMA_Atom<MMA>"),
        "{text}\n--- from:\n{}",
        acc.condensed
    );
}

/// The llm suite's workloads share their kernels: two projection shapes plan the same
/// first kernel under one cache key, and once the cache holds a key, the bench's
/// lookahead asks for nothing more for it.
#[test]
fn workloads_of_one_class_share_their_planned_kernels() {
    let Some(tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::new(dir.path().join("compile"));
    let load =
        |name: &str| cutesmith::spec::Workload::find(root().join("workloads"), name).unwrap();
    let (a, b) = (
        load("llm_llama3_8b_o_m4096"),
        load("llm_qwen2_7b_down_m1024"),
    );
    let db = dir.path().join("none.sqlite");
    let (pa, _) = cutesmith::cli::bench::plan_requests(&tc, &a, 4, Some(&db), "sm_90a");
    let (pb, _) = cutesmith::cli::bench::plan_requests(&tc, &b, 4, Some(&db), "sm_90a");
    assert_eq!(pa.len(), 4);
    // The keys of the kernels both plan are equal, though the sources differ (each
    // names its workload).
    let shared: Vec<(&CompileRequest, &CompileRequest)> = pa
        .iter()
        .filter_map(|(k, ra)| Some((ra, &pb.iter().find(|(kb, _)| kb == k)?.1)))
        .collect();
    assert!(!shared.is_empty(), "no shared kernel");
    for (ra, rb) in &shared {
        assert_ne!(ra.source, rb.source);
        assert_eq!(ra.source.lines().nth(2), rb.source.lines().nth(2));
    }
    let missing =
        |w| cutesmith::cli::bench::missing_requests(&tc, &cache, w, 4, Some(&db), "sm_90a");
    assert_eq!(missing(&a).len(), 4);
    // A complete entry for every key of a: nothing missing for a, and b misses only
    // what it does not share with a.
    for (key, _) in &pa {
        let entry = cache.entry_dir(key);
        std::fs::create_dir_all(&entry).unwrap();
        std::fs::write(entry.join(cutesmith::toolchain::cache::OUTCOME_FILE), "{}").unwrap();
    }
    assert!(missing(&a).is_empty());
    assert_eq!(missing(&b).len(), pb.len() - shared.len());
}
