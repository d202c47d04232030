//! GPU tests: run on a machine with an NVIDIA GPU with `cargo test -- --ignored`.
//! A correct kernel passes and is timed against cuBLAS; every planted fault under
//! `tests/fixtures/faults/` is classified as its header says, and this process survives
//! all of them; the baselines come out near the anchors.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cutesmith::eval::job::{FaultKind, Mode};
use cutesmith::eval::{self, Evaluation};
use cutesmith::spec::Workload;
use cutesmith::toolchain::cache::CompileCache;
use cutesmith::toolchain::compile::{self, CompileOptions, CompileRequest};

use super::common::{fixture, root, toolchain};

fn use_this_binary_as_worker() {
    if std::env::var_os("CUTESMITH_WORKER_EXE").is_none() {
        std::env::set_var("CUTESMITH_WORKER_EXE", env!("CARGO_BIN_EXE_cutesmith"));
    }
}

fn workload(name: &str) -> Workload {
    let small = fixture(&format!("workloads/{name}.toml"));
    if small.is_file() {
        return Workload::load(small).unwrap();
    }
    Workload::find(root().join("workloads"), name).unwrap()
}

/// The `// FAULT:` and `// WORKLOAD:` header of a fixture.
fn header(path: &Path, key: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        l.trim()
            .strip_prefix(&format!("// {key}:"))
            .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
    })
}

fn compile_all(paths: &[PathBuf]) -> Vec<compile::CompileOutcome> {
    let tc = toolchain().expect("toolchain");
    let reqs: Vec<_> = paths
        .iter()
        .map(|p| CompileRequest::from_file(p, CompileOptions::default()).unwrap())
        .collect();
    compile::compile_many(
        &tc,
        &CompileCache::default_location(),
        &reqs,
        16,
        &|_, _| {},
    )
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

fn evaluate(so: Option<PathBuf>, w: &Workload, mode: Mode, timeout: u64) -> Evaluation {
    use_this_binary_as_worker();
    let mut job = eval::job_for(w, mode, so, 2, 20).unwrap();
    job.fp64_samples = 128;
    eval::evaluate(&job, Duration::from_secs(timeout)).unwrap()
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn correct_kernels_pass_and_are_timed_against_cublas() {
    let kernels = [
        fixture("faults/good_gemm.cu"),
        root().join("cutlass-templates/gemm_sm90_tma_wgmma.cu"),
    ];
    let outcomes = compile_all(&kernels);
    let w = workload("gemm_bf16_small");
    for (path, o) in kernels.iter().zip(outcomes) {
        assert!(o.ok(), "{}: {}", path.display(), o.condensed);
        let e = evaluate(o.shared_object.clone(), &w, Mode::Check, 300);
        let text = e.render();
        eprintln!("== {}\n{text}", path.display());
        assert!(e.passed(), "{}:\n{text}", path.display());
        let t = e.report.as_ref().unwrap().timing.as_ref().unwrap();
        let cand = t.candidate.as_ref().unwrap();
        assert!(cand.runs >= 20);
        let cublas = t
            .baselines
            .iter()
            .find(|b| b.name == "cublas")
            .expect("cublas timed");
        let speedup = cublas.speedup.unwrap();
        assert!(speedup > 0.0 && speedup.is_finite());
        assert!(
            e.report
                .as_ref()
                .unwrap()
                .revalidation
                .as_ref()
                .unwrap()
                .passed
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn planted_faults_are_classified_and_the_agent_survives() {
    let dir = fixture("faults");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cu") && header(p, "FAULT").is_some())
        .collect();
    paths.sort();
    assert!(paths.len() >= 9, "only {} fault fixtures", paths.len());
    let outcomes = compile_all(&paths);
    let mut wrong = Vec::new();
    for (path, o) in paths.iter().zip(outcomes) {
        let want = header(path, "FAULT").unwrap();
        let got = if !o.ok() {
            FaultKind::CompileError.name()
        } else {
            let w = workload(&header(path, "WORKLOAD").unwrap());
            let mode = match header(path, "MODE").as_deref() {
                Some("check") => Mode::Check,
                _ => Mode::Validate,
            };
            let e = evaluate(o.shared_object.clone(), &w, mode, 120);
            let text = e.render();
            eprintln!("== {}\n{text}", path.display());
            e.fault
                .map(|f| f.kind.name())
                .unwrap_or_else(|| "none".into())
        };
        eprintln!("{}: expected {want}, got {got}", path.display());
        if got != want {
            wrong.push(format!("{}: expected {want}, got {got}", path.display()));
        }
    }
    assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn baselines_are_measured_with_the_roofline() {
    for name in [
        "gemm_bf16_4096",
        "gemm_bf16_skinny",
        "act_relu_bf16",
        "softmax_bf16_4096x65536",
    ] {
        let w = workload(name);
        let e = evaluate(None, &w, Mode::Baseline, 600);
        let text = e.render();
        eprintln!("== {name}\n{text}");
        let r = e.report.expect("report");
        let t = r.timing.expect("timing");
        assert!(!t.baselines.is_empty());
        assert!(t.floor_s > 0.0);
        for b in &t.baselines {
            // Nothing can beat the roofline floor.
            assert!(
                b.stats.median_us * 1e-6 >= 0.9 * t.floor_s,
                "{}: {:?}",
                b.name,
                b.stats
            );
        }
    }
}

/// A tiny problem is timed by replaying CUDA graphs, for the candidate and for every
/// library baseline alike (cuBLAS and cuBLASLt included), and cuBLAS's graph time agrees
/// with its per-launch time (the L2 flush before each timed launch keeps the host's launch
/// latency out of both: 17.31 and 17.66 us on an H100).
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn tiny_problems_time_every_contender_in_cuda_graphs() {
    let o = compile_all(&[fixture("faults/good_gemm.cu")]).remove(0);
    assert!(o.ok(), "{}", o.condensed);
    let w = workload("gemm_bf16_skinny");
    use_this_binary_as_worker();
    let mut per_launch = None;
    for below_us in [0.0, 1e6] {
        let mut job = eval::job_for(&w, Mode::Check, o.shared_object.clone(), 1, 20).unwrap();
        job.fp64_samples = 128;
        // 0: never a graph; 1e6: every problem counts as tiny.
        job.timing.graph_below_us = below_us;
        let e = eval::evaluate(&job, Duration::from_secs(300)).unwrap();
        let text = e.render();
        eprintln!("== graph below {below_us} us\n{text}");
        assert!(e.passed(), "{text}");
        let r = e.report.as_ref().unwrap();
        let t = r.timing.as_ref().unwrap();
        let cublas = t.baselines.iter().find(|b| b.name == "cublas").unwrap();
        assert!(t.baselines.len() >= 2, "{text}");
        for b in &t.baselines {
            assert!(
                b.note
                    .as_deref()
                    .is_none_or(|n| !n.contains("capture failed")),
                "{text}"
            );
        }
        let graphed = r.notes.iter().any(|n| n.contains("replays a CUDA graph"));
        if below_us == 0.0 {
            assert!(!graphed, "{text}");
            per_launch = Some(cublas.stats.median_us);
        } else {
            assert!(graphed, "every contender in graphs:\n{text}");
            let launch = per_launch.unwrap();
            let ratio = cublas.stats.median_us / launch;
            assert!(
                (0.9..1.1).contains(&ratio),
                "cuBLAS in a graph {} us, per launch {launch} us",
                cublas.stats.median_us
            );
        }
    }
}

/// Every template, with the first strategy the built-in provider would try (and the raw
/// CuTe GEMM as well), is correct on every shape of small workloads of its family,
/// ragged shapes and the fallback path (K not a multiple of 8) included.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_template_validates_on_its_workloads() {
    use cutesmith::strategy;
    let tc = toolchain().expect("toolchain");
    let names = [
        "gemm_bf16_small",
        "gemm_f16_small",
        "gemm_bias_gelu_small",
        // GELU's tanh form into f16 and tanh into f32: the template's own functors (CUTLASS's
        // tanh.approx-based ones failed the fp64 check in the negative tail).
        "gemm_bias_gelu_tanh_f16_small",
        "gemm_bias_tanh_f32_small",
        // Activations past the first eight, and swish with a beta, in the fused bias
        // epilogue (their parameters from the workload block).
        "gemm_bias_softplus_f16_small",
        "gemm_bias_swish_beta_bf16_small",
        // A C term (beta != 0) read through a column-major C, ragged and batched.
        "gemm_bf16_beta_small",
        "gemm_bf16_skinny_small",
        // 16-bit operands into an f32 D (bias and GELU in f32).
        "gemm_bf16_f32out_small",
        // fp8 operands into an fp8 D (scale_d): alpha and beta with a C term, and a bf16
        // bias + GELU chain before the scale; ragged and batched.
        "gemm_e4m3_fp8out_small",
        "gemm_e5m2_fp8out_chain_small",
        // The skinny template's stream kernel (its first candidate where K >= 2^16), with
        // the small operand K-major and M-major.
        "gemv_bf16_stream_small",
        "gemv_bf16_stream_rr_small",
        // The fallback's GEMV with the long side contiguous (16-byte vectors of rows).
        "gemv_f16_mn_small",
        // The GLU template's dual kernel: K-major and MN-major operands, ragged, batched.
        "glu_bf16_small",
        "glu_f16_cr_small",
        // Weights shared by the batch: the rows stack into one GEMM.
        "glu_bf16_shared_small",
        // GEMM + softmax: the exponentiated f16 intermediate (one and several column
        // tiles, batched, MN-major operands) and the fp32 one (n off 8, log-softmax).
        "gemm_softmax_bf16_small",
        "gemm_softmax_f16_cr_small",
        "gemm_log_softmax_bf16_small",
        // f32 through the 3xTF32 GEMM: K-major, and B row-major (transposed by the split).
        "gemm_softmax_f32_small",
        "gemm_softmax_f32_rr_small",
        // Op chains before the softmax; K too short for TMA rows (the edge kernel computes
        // the products), f32 K below 32 (fp32 FMAs).
        "gemm_softmax_chain_bf16_small",
        "gemm_softmax_chain_f32_small",
        "gemm_f32_small",
        // f32 with a long K: stream-K, and the fallback's blocked sums on an odd K (one
        // running fp32 sum over 2^17 products was 13.7x cuBLAS's RMS error).
        "gemm_f32_long_k_small",
        "relu_bf16_small",
        "softmax_f32_small",
        // The norms: short, medium and split rows, a chain after, rows side by side
        // (column-major A), an f32 output of bf16 rows.
        "norm_bf16_small",
        "norm_layer_f32_small",
        "norm_col_f32_small",
        "norm_l1_bf16_small",
        // GroupNorm's per-channel weight and bias (channel operands, runs that cross a
        // channel, split rows), and a batch norm of row i of every item (short and split
        // rows, col operands).
        "norm_group_affine_bf16_small",
        "norm_batch_bf16_small",
        // Broadcast operands over 4-D dims: a per-channel bias, a per-sample gate, a map
        // shared by the batch and one of two separate runs of dims, on ragged shapes.
        "act_broadcast_bf16_small",
        // Trailing dims merged into the rows, two operands of one mask, a dim of 1.
        "act_broadcast_f32_merged_small",
        // Ops before a softmax: broadcast masks and biases on 4-D dims (warp, CTA and
        // streamed rows); a matrix, a row, a column, GELU and a causal tril; a clamped
        // temperature before an f16 log-softmax.
        "softmax_ops_bf16_small",
        "softmax_ops_f32_small",
        "log_softmax_ops_f16_small",
        // A causal tril over (B, H, T, T) dims beside a broadcast padding mask.
        "softmax_causal_dims_bf16_small",
        // masked_fill / where by bool masks: a broadcast padding mask before a softmax, a
        // matrix and a column mask in an elementwise chain.
        "softmax_bool_mask_bf16_small",
        "act_where_bool_f32_small",
        // Inputs read through a view: a split's part with its heads transposed (vector
        // and scalar paths), heads put back in order with a chain and a broadcast operand,
        // a 2-D transpose (the last dim strided), a slice inside the last dim, a broadcast
        // dim (stride 0) with a broadcast operand.
        "act_view_heads_bf16_small",
        "act_view_transpose_gelu_f32_small",
        "act_view_transpose2d_f16_small",
        "act_view_slice_bf16_small",
        "act_view_expand_f32_small",
        // The reductions: row-major rows (short, ragged, split over CTAs), rows side by
        // side (vectors, elements, split), logsumexp with a chain after, mean into f32.
        "reduce_sum_f32_small",
        "reduce_max_col_bf16_small",
        "reduce_lse_chain_f32_small",
        "reduce_mean_col_f16_small",
        // Ops before the reduction: a squared error against an f32 matrix (row-major, split
        // rows), a Huber loss against an f32 target with a bf16 row weight (rows side by side).
        "reduce_mse_f32_small",
        "reduce_huber_col_bf16_small",
        // Index reductions into int64 (ties to the first index, as torch's): an f16 argmin of
        // rows split over CTAs, a bf16 argmax over rows side by side.
        "reduce_argmin_f16_small",
        "reduce_argmax_col_bf16_small",
        // Cross entropies against int64 targets, some the ignore index: each row's loss
        // (bf16, rows split over CTAs), the sum of each batch's rows (f16 into f32).
        "reduce_cross_entropy_small",
        "reduce_cross_entropy_sum_f16",
        // Totals of every element of each item: a bf16 hinge-loss mean (a row operand before
        // it), an f32 sum of rows side by side.
        "reduce_total_mean_bf16_small",
        "reduce_total_sum_col_f32_small",
        // The scans: row-major rows (many, ragged, split over CTAs), forward and reverse,
        // inclusive and exclusive, sum and product, rows side by side, chains after.
        "scan_sum_f32_small",
        "scan_prod_rev_bf16_small",
        "scan_sum_excl_col_f16_small",
        "scan_sum_rev_excl_bf16_small",
        // Ops before the scan reading a bool mask: an f32 masked cumsum (row-major rows,
        // split over CTAs), a bf16 reverse cumprod of rows side by side (a mask read twice,
        // a row operand), a bf16 reverse exclusive cumsum of row-major rows into f32 (the
        // 16-bit operands' prefetch, unaligned runs, the reverse totals kernel).
        "scan_masked_sum_f32_small",
        "scan_masked_prod_rev_col_bf16_small",
        "scan_masked_rev_excl_bf16_small",
        // GEMM + row reduction: bf16 (MN-major B, a bias and clamp before a logsumexp, ops
        // after it, batched and ragged) and f32 (both fp32 mainloops, a sum).
        "gemm_reduce_lse_bf16_small",
        "gemm_reduce_f32_small",
        // GEMM + norm: GroupNorm in 16 groups with a bias before and a per-channel weight,
        // bias and hardtanh after (bf16, MN-major B, batched, ragged); whole rows up to
        // 20000 values with a C term, swish before and a residual after (f32, both fp32
        // mainloops); RMS in 4 groups of an A column-major product (f16).
        "gemm_groupnorm_bf16_small",
        "gemm_instnorm_f32_small",
        "gemm_rmsnorm_f16_small",
        // GEMM + batch norm (each column over its rows): bf16 with ops before and a
        // per-feature weight, bias and swish after (MN-major B, batched, ragged, one
        // slice); f32 with a C term over 33 slices of rows and a ragged last one.
        "gemm_batchnorm_bf16_small",
        "gemm_batchnorm_f32_small",
        // Index ops: a causal mask (-inf) before a batched softmax, ragged; tril then a
        // bias (A and B row-major, the raw CuTe GEMM too); triu filled with -1 on the
        // swapped (D^T) visitor node; an elementwise triu.
        "gemm_causal_softmax_bf16",
        "gemm_tril_bf16_small",
        "gemm_triu_bf16_skinny_small",
        "act_triu_relu_f32",
        // A causal mask on batches that share B: not stacked into one matrix.
        "gemm_tril_shared_b_bf16_small",
    ];
    let mut cases = Vec::new();
    for name in names {
        let w = workload(name);
        let cands = strategy::candidates(&w);
        assert!(!cands.is_empty(), "no template for {name}");
        let mut picked = vec![cands[0].clone()];
        if let Some(raw) = cands.iter().find(|s| s.template == "gemm_sm90_tma_wgmma") {
            picked.push(raw.clone());
        }
        // fp32: both Hopper mainloops (3xF16, 3xTF32), whichever leads.
        let mode = |s: &cutesmith::strategy::Strategy| s.params.get("CS_F32_MODE").copied();
        if let Some(f16) = cands.iter().find(|s| mode(s) == Some(1)) {
            if mode(&cands[0]) != Some(1) {
                picked.push(f16.clone());
            }
        }
        for s in picked {
            // The one way a strategy becomes a kernel, as the built-in provider does it.
            let req = CompileRequest::version(&s.instantiate(&w).unwrap(), "sm_90a");
            cases.push((w.clone(), s, req));
        }
    }
    let reqs: Vec<_> = cases.iter().map(|c| c.2.clone()).collect();
    let outcomes = compile::compile_many(
        &tc,
        &CompileCache::default_location(),
        &reqs,
        16,
        &|_, _| {},
    );
    let mut failed = Vec::new();
    for ((w, s, _), o) in cases.iter().zip(outcomes) {
        let o = o.unwrap();
        assert!(o.ok(), "{}: {}", s.label(), o.condensed);
        let e = evaluate(o.shared_object.clone(), w, Mode::Validate, 300);
        let text = e.render();
        eprintln!("== {} on {}\n{text}", s.label(), w.name());
        if !e.passed() {
            failed.push(format!("{} on {}", s.label(), w.name()));
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}

/// The Hopper fp32 template's 3xF16 candidate passes an fp32 workload with its error
/// within twice cuBLAS fp32's on every shape; built as 3xTF32 with CS_F32_TERMS=1
/// (plain TF32, the operands' low parts dropped) it is rejected as a precision downgrade,
/// saying so.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_planted_tf32_template_is_rejected_as_a_precision_downgrade() {
    use cutesmith::strategy;
    let tc = toolchain().expect("toolchain");
    let w = workload("gemm_f32_small");
    let good = strategy::candidates(&w)
        .into_iter()
        .find(|s| s.template == "gemm_sm90_cutlass3_ws" && s.params.get("CS_F32_MODE") == Some(&1))
        .expect("the Hopper fp32 template takes gemm_f32_small as 3xF16");
    let mut planted = good.clone();
    planted.params.insert("CS_F32_MODE".into(), 0);
    planted.params.insert("CS_F32_TERMS".into(), 1);
    let reqs: Vec<_> = [&good, &planted]
        .iter()
        .map(|s| CompileRequest::version(&s.instantiate(&w).unwrap(), "sm_90a"))
        .collect();
    let outcomes =
        compile::compile_many(&tc, &CompileCache::default_location(), &reqs, 2, &|_, _| {});
    let mut evals = Vec::new();
    for (s, o) in [&good, &planted].into_iter().zip(outcomes) {
        let o = o.unwrap();
        assert!(o.ok(), "{}: {}", s.label(), o.condensed);
        let e = evaluate(o.shared_object.clone(), &w, Mode::Validate, 300);
        eprintln!("== {}\n{}", s.label(), e.render());
        evals.push(e);
    }
    let good_report = evals[0].report.as_ref().expect("report");
    assert!(evals[0].passed(), "{} failed", good.label());
    for v in &good_report.validations {
        let a = v.fp64.as_ref().and_then(|f| f.accuracy).expect("accuracy");
        assert!(a.rms_ratio() <= 2.0, "{}: {a:?}", v.shape);
    }
    let fault = evals[1].fault.as_ref().expect("the TF32 build passed");
    assert_eq!(fault.kind, FaultKind::Precision, "{}", fault.message);
    assert!(
        fault.message.starts_with("precision downgrade"),
        "{}",
        fault.message
    );
}

/// Validation on the device and on the host reach the same verdicts, counts and fault
/// classes: correct kernels of every reference kind pass both ways, and the planted
/// faults that validation classifies (wrong values, unwritten tiles, lowered precision,
/// a replayed result, a race) are classified alike.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn device_and_host_validation_agree() {
    use cutesmith::strategy;
    let mut cases: Vec<(Workload, CompileRequest)> = Vec::new();
    for f in [
        "good_gemm",
        "wrong_k_tile",
        "skip_last_tile",
        "tf32_gemm",
        "cached_result",
        "race",
    ] {
        let path = fixture(&format!("faults/{f}.cu"));
        let w = workload(&header(&path, "WORKLOAD").unwrap());
        cases.push((
            w,
            CompileRequest::from_file(&path, CompileOptions::default()).unwrap(),
        ));
    }
    for name in [
        "gemm_bias_gelu_small",
        "relu_bf16_small",
        "softmax_f32_small",
        "gemm_f32_small",
        // The device references of channel operands, a batch norm's statistics over the
        // items, and a total of rows.
        "norm_group_affine_bf16_small",
        "norm_batch_bf16_small",
        "reduce_total_mean_bf16_small",
        "act_broadcast_bf16_small",
        "act_broadcast_f32_merged_small",
        // The references of ops before a softmax, their bounds carried through the row.
        "softmax_ops_bf16_small",
        "softmax_ops_f32_small",
        "softmax_causal_dims_bf16_small",
        "log_softmax_ops_f16_small",
        // masked_fill / where by bool masks: a broadcast padding mask before a softmax,
        // a matrix and a column mask in an elementwise chain.
        "softmax_bool_mask_bf16_small",
        "act_where_bool_f32_small",
        // The input a view reads, gathered for the device reference.
        "act_view_heads_bf16_small",
        "act_view_transpose_gelu_f32_small",
        "act_view_slice_bf16_small",
        "act_view_expand_f32_small",
        // Ops before a scan reading a bool mask, their bounds carried along the row.
        "scan_masked_sum_f32_small",
        "scan_masked_prod_rev_col_bf16_small",
    ] {
        let w = workload(name);
        let s = strategy::candidates(&w).remove(0);
        let req = CompileRequest::version(&s.instantiate(&w).unwrap(), "sm_90a");
        cases.push((w, req));
    }
    let tc = toolchain().expect("toolchain");
    let reqs: Vec<_> = cases.iter().map(|c| c.1.clone()).collect();
    let outcomes = compile::compile_many(
        &tc,
        &CompileCache::default_location(),
        &reqs,
        16,
        &|_, _| {},
    );
    use_this_binary_as_worker();
    let mut disagree = Vec::new();
    for ((w, req), o) in cases.iter().zip(outcomes) {
        let o = o.unwrap();
        assert!(o.ok(), "{}: {}", req.file_name, o.condensed);
        let run = |host: bool| {
            let mut job = eval::job_for(w, Mode::Validate, o.shared_object.clone(), 2, 20).unwrap();
            job.fp64_samples = 128;
            job.host_validation = host;
            let e = eval::evaluate(&job, Duration::from_secs(300)).unwrap();
            eprintln!(
                "== {} on {} ({}):\n{}",
                req.file_name,
                w.name(),
                if host { "host" } else { "device" },
                e.render()
            );
            let r = e.report.clone().expect("report");
            let counts: Vec<(u64, u64)> = r
                .validations
                .iter()
                .filter_map(|v| v.comparison.as_ref().map(|c| (c.wrong, c.unwritten)))
                .collect();
            (e.fault.map(|f| f.kind.name()), counts, r.notes)
        };
        let (dev, host) = (run(false), run(true));
        assert!(
            !dev.2.iter().any(|n| n.contains("on the host")),
            "device validation did not run: {:?}",
            dev.2
        );
        // A race's counts move from run to run; only its class must agree. Otherwise the
        // counts agree up to the elements that sit on the tolerance's edge: the two
        // references sum their fp64 dot products in different orders, so an element whose
        // error equals its bound to the last bits may fall on either side (one in 262144
        // was seen on a stale output, where thousands of errors are spread over the bound).
        let racy = dev.0.as_deref() == Some("race");
        let close = |a: &[(u64, u64)], b: &[(u64, u64)]| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    let slack = 2 + (x.0 + x.1) / 100_000;
                    x.0.abs_diff(y.0) <= slack && x.1.abs_diff(y.1) <= slack
                })
        };
        if dev.0 != host.0 || (!racy && !close(&dev.1, &host.1)) {
            disagree.push(format!(
                "{} on {}: device {:?} {:?}, host {:?} {:?}",
                req.file_name,
                w.name(),
                dev.0,
                dev.1,
                host.0,
                host.1
            ));
        }
    }
    assert!(disagree.is_empty(), "{}", disagree.join("\n"));
}

/// The unfused baseline computes what it claims: the elementwise passes of a chain with a
/// saved value, a row vector (bf16), a column vector (f32), a residual matrix and a z
/// operand, over a batch of 2 ragged matrices (no multiple of the 16-byte vector) in both
/// layouts, against the chain in fp64 with each pass's bf16 rounding; and the row softmax
/// pass on rows of 1000 (16-byte vectors) and 1001 (element by element) columns.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn unfused_passes_compute_their_chain() {
    use cutesmith::eval::gpu::kernels::{Passes, RowSoftmax};
    use cutesmith::eval::gpu::session::Session;
    use cutesmith::spec::chain::{Chain, OpSpec};
    use cutesmith::spec::{DType, Layout};
    use half::bf16;
    let s = Session::open().unwrap();
    let spec = |op: &str| OpSpec {
        op: op.into(),
        ..OpSpec::default()
    };
    let ops = vec![
        OpSpec {
            operand: Some("row".into()),
            save: Some("y".into()),
            ..spec("add")
        },
        spec("silu"),
        OpSpec {
            operand: Some("y".into()),
            ..spec("mul")
        },
        OpSpec {
            operand: Some("col".into()),
            dtype: Some(DType::F32),
            ..spec("add")
        },
        OpSpec {
            operand: Some("matrix".into()),
            ..spec("sub")
        },
        OpSpec {
            operand: Some("z".into()),
            ..spec("max")
        },
    ];
    let mut chain = Chain::default();
    chain.extend_from_spec(&ops, DType::BF16).unwrap();
    let (m, n, batch) = (37usize, 45usize, 2usize);
    let total = m * n * batch;
    let val =
        |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 997) as f64 / 997.0 * 6.0 - 3.0;
    let q = |v: f64| bf16::from_f64(v).to_f64();
    let z: Vec<bf16> = (0..total).map(|i| bf16::from_f64(val(i, 1))).collect();
    let row: Vec<bf16> = (0..n).map(|i| bf16::from_f64(val(i, 2))).collect();
    let col: Vec<f32> = (0..m).map(|i| val(i, 3) as f32).collect();
    let mat: Vec<bf16> = (0..total).map(|i| bf16::from_f64(val(i, 4))).collect();
    for layout in [Layout::Row, Layout::Col] {
        let passes = Passes::compile(&s, &chain, DType::BF16, (m, n, batch), layout, &[]).unwrap();
        assert_eq!(passes.len(), ops.len());
        let zd = s.upload(&z).unwrap();
        let t = [s.upload(&row).unwrap(), s.upload(&mat).unwrap()];
        let cd = s.upload(&col).unwrap();
        // Tensor operands in the chain's order: row, col, matrix.
        let tensors = [t[0].ptr, cd.ptr, t[1].ptr];
        let scratch = (
            s.zeros::<bf16>(total).unwrap(),
            s.zeros::<bf16>(total).unwrap(),
        );
        let saved = s.zeros::<bf16>(total).unwrap();
        let out = passes
            .run(
                &s,
                zd.ptr,
                &tensors,
                (scratch.0.ptr, scratch.1.ptr),
                &[saved.ptr],
            )
            .unwrap();
        s.sync().unwrap();
        let got: Vec<bf16> = s.read(out, total).unwrap();
        for i in 0..total {
            let within = i % (m * n);
            let (r, c) = match layout {
                Layout::Row => (within / n, within % n),
                Layout::Col => (within % m, within / m),
            };
            let zi = z[i].to_f64();
            let y = q(zi + row[c].to_f64());
            let x = q(y / (1.0 + (-y).exp()));
            let x = q(x * y);
            let x = q(x + col[r] as f64);
            let x = q(x - mat[i].to_f64());
            let want = q(x.max(zi));
            let g = got[i].to_f64();
            assert!(
                (g - want).abs() <= 0.02 * want.abs() + 0.02,
                "{layout:?} element {i} (row {r}, col {c}): got {g}, want {want}"
            );
        }
    }
    for (log, cols) in [
        (false, 1000usize),
        (false, 1001),
        (true, 1000),
        (true, 1001),
    ] {
        let rows = 3usize;
        let x: Vec<bf16> = (0..rows * cols)
            .map(|i| bf16::from_f64(val(i, 5)))
            .collect();
        let sm = RowSoftmax::compile(&s, DType::BF16, log).unwrap();
        let xd = s.upload(&x).unwrap();
        let yd = s.zeros::<bf16>(rows * cols).unwrap();
        sm.run(&s, xd.ptr, yd.ptr, rows, cols).unwrap();
        let got = s.download(&yd).unwrap();
        for r in 0..rows {
            let v: Vec<f64> = (0..cols).map(|c| x[r * cols + c].to_f64()).collect();
            let mx = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = v.iter().map(|a| (a - mx).exp()).sum();
            for c in 0..cols {
                let want = if log {
                    (v[c] - mx) - sum.ln()
                } else {
                    (v[c] - mx).exp() / sum
                };
                let g = got[r * cols + c].to_f64();
                assert!(
                    (g - want).abs() <= 0.01 * want.abs() + 1e-6,
                    "softmax (log {log}) {cols} columns, row {r} col {c}: got {g}, want {want}"
                );
            }
        }
    }
}

/// A cross entropy's unfused sequence computes the loss: the log-softmax pass, then the NLL
/// pass with each total (none, sum, mean), rows whose target is the ignore index left out,
/// over 2 batches of 5 rows of 1001 f32 logits, against the loss in fp64.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn unfused_cross_entropy_is_the_loss() {
    use cutesmith::eval::gpu::kernels::{NllPass, RowSoftmax};
    use cutesmith::eval::gpu::session::Session;
    use cutesmith::spec::DType;
    let s = Session::open().unwrap();
    let (batch, m, k, ignore) = (2usize, 5usize, 1001usize, -100i64);
    let x: Vec<f32> = (0..batch * m * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 13.0)
        .collect();
    let t: Vec<i64> = (0..batch * m)
        .map(|r| {
            if r % 4 == 1 {
                ignore
            } else {
                (r * 211 % k) as i64
            }
        })
        .collect();
    let loss = |r: usize| -> Option<f64> {
        if t[r] == ignore {
            return None;
        }
        let row: Vec<f64> = x[r * k..(r + 1) * k]
            .iter()
            .map(|v| f64::from(*v))
            .collect();
        let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = mx + row.iter().map(|v| (v - mx).exp()).sum::<f64>().ln();
        Some(lse - row[t[r] as usize])
    };
    let lsm = RowSoftmax::compile(&s, DType::F32, true).unwrap();
    let nll = NllPass::compile(&s, DType::F32, DType::F32).unwrap();
    let (xd, td) = (s.upload(&x).unwrap(), s.upload(&t).unwrap());
    let logp = s.zeros::<f32>(batch * m * k).unwrap();
    lsm.run(&s, xd.ptr, logp.ptr, batch * m, k).unwrap();
    for total in 0..3 {
        let len = if total == 0 { batch * m } else { batch };
        let d = s.zeros::<f32>(len).unwrap();
        nll.run(&s, logp.ptr, td.ptr, d.ptr, (batch, m, k), ignore, total)
            .unwrap();
        let got = s.download(&d).unwrap();
        let want: Vec<f64> = if total == 0 {
            (0..batch * m).map(|r| loss(r).unwrap_or(0.0)).collect()
        } else {
            (0..batch)
                .map(|b| {
                    let kept: Vec<f64> = (b * m..(b + 1) * m).filter_map(loss).collect();
                    let sum: f64 = kept.iter().sum();
                    if total == 2 {
                        sum / kept.len() as f64
                    } else {
                        sum
                    }
                })
                .collect()
        };
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (f64::from(*g) - w).abs() <= 1e-4 * w.abs() + 1e-5,
                "total {total}, output {i}: got {g}, want {w}"
            );
        }
    }
}
