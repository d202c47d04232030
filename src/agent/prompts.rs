//! The prompts: template files in `prompts/` (built into the binary; a directory named by
//! `CUTESMITH_PROMPTS` overrides them), rendered with minijinja from a context that
//! carries what each prompt needs and nothing else.

use std::path::PathBuf;

use minijinja::Environment;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::eval::Evaluation;
use crate::spec::{DType, Family, NormKind, RooflineClass, Workload};

/// (name, built-in text) of every prompt template.
const BUILT_IN: &[(&str, &str)] = &[
    ("system", include_str!("../../prompts/system.j2")),
    ("generate", include_str!("../../prompts/generate.j2")),
    ("debug", include_str!("../../prompts/debug.j2")),
    ("optimize", include_str!("../../prompts/optimize.j2")),
    ("repair", include_str!("../../prompts/repair.j2")),
    ("population", include_str!("../../prompts/population.j2")),
    (
        "population_member",
        include_str!("../../prompts/population_member.j2"),
    ),
];

/// The prompt templates, loaded once per session.
pub struct Prompts {
    env: Environment<'static>,
}

impl Prompts {
    /// The built-in templates, or those in `$CUTESMITH_PROMPTS` where that directory has
    /// a file of the same name (`system.j2`, ...).
    pub fn load() -> Result<Prompts> {
        let dir = std::env::var_os("CUTESMITH_PROMPTS").map(PathBuf::from);
        let mut env = Environment::new();
        env.set_trim_blocks(false);
        env.set_keep_trailing_newline(true);
        for (name, text) in BUILT_IN {
            let text = match dir.as_ref().map(|d| d.join(format!("{name}.j2"))) {
                Some(p) if p.is_file() => {
                    std::fs::read_to_string(&p).map_err(|e| Error::io(&p, e))?
                }
                _ => (*text).to_string(),
            };
            env.add_template_owned(name.to_string(), text)
                .map_err(|e| Error::Format {
                    context: format!("prompt template {name}"),
                    message: e.to_string(),
                })?;
        }
        Ok(Prompts { env })
    }

    /// Renders template `name` with `ctx`.
    pub fn render(&self, name: &str, ctx: &impl Serialize) -> Result<String> {
        let t = self.env.get_template(name).map_err(|e| Error::Format {
            context: format!("prompt template {name}"),
            message: e.to_string(),
        })?;
        t.render(ctx).map_err(|e| Error::Format {
            context: format!("rendering prompt {name}"),
            message: format!("{e:#}"),
        })
    }
}

/// The GPU as the system prompt describes it.
#[derive(Debug, Clone, Serialize, Default)]
pub struct GpuFacts {
    pub name: String,
    pub sm_count: i32,
    pub smem_kib: u64,
    pub l2_mib: u64,
    pub clock_ghz: String,
    pub copy_tb_s: String,
    pub peak: String,
    /// Copy bandwidth and peak, for the roofline lines.
    #[serde(skip)]
    pub copy_bytes_per_s: f64,
    #[serde(skip)]
    pub peak_flops_per_s: f64,
}

impl GpuFacts {
    /// From the session's probe (device facts and ceilings measured by a worker).
    pub fn from_probe(p: &Evaluation) -> GpuFacts {
        let mut g = GpuFacts {
            name: "unknown GPU".into(),
            ..GpuFacts::default()
        };
        if let Some(r) = &p.report {
            if let Some(d) = &r.device {
                g.name = d.name.clone();
                g.sm_count = d.sm_count;
                g.smem_kib = d.smem_per_block_optin / 1024;
                g.l2_mib = d.l2_bytes >> 20;
                g.clock_ghz = format!("{:.2}", d.clock_khz as f64 / 1e6);
            }
            if let Some(c) = &r.ceilings {
                g.copy_tb_s = format!("{:.2}", c.copy_bytes_per_s / 1e12);
                g.peak = c.peak_note.clone();
                g.copy_bytes_per_s = c.copy_bytes_per_s;
                g.peak_flops_per_s = c.peak_flops_per_s;
            }
        }
        g
    }
}

/// The workload as the prompts describe it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadFacts {
    pub name: String,
    pub description: String,
    pub family: String,
    pub dtype: String,
    pub out_dtype: String,
    pub params: String,
    pub layouts: String,
    pub shapes: String,
    pub shapes_count: usize,
    pub headline: String,
    pub flops: String,
    pub min_mb: String,
    pub intensity: String,
    pub bound: String,
    pub floor_us: String,
    /// The `cs_chain` functor the kernel must compute (empty for no chain).
    pub chain_cpp: String,
}

impl WorkloadFacts {
    pub fn new(w: &Workload, gpu: &GpuFacts) -> WorkloadFacts {
        let h = w.headline();
        let fam = w.family();
        let pr = w.params();
        let chain = w.chain();
        let params = match fam {
            Family::Activation => {
                let mut s = format!("D = chain(A), the chain: {}", chain.describe());
                if !h.dims.is_empty() {
                    s.push_str(&format!(
                        "; the output has dims {:?} (row-major; m x n = {} x {} as the kernel \
                         sees it). A broadcast operand (CS_OPERAND_BROADCAST) spans some of \
                         those dims: element (i, j) reads index sum over t of ((i / \
                         row_div[t]) % row_mod[t]) * row_stride[t] + j * ld, from its \
                         cs_operand (cs_chain's kBcastCol<k> says whether it spans the last \
                         dim: a run of values along a row, or one value a row)",
                        h.dims.as_slice(),
                        h.m,
                        h.n
                    ));
                }
                if let (Some(v), Some(st)) = (w.view(), w.view_on(h)) {
                    s.push_str(&format!(
                        "; A is read through a view: {}. cs_problem gives it as view_rank, \
                         view_extent (D's dims), view_stride and view_offset: D's element at \
                         coordinates c reads A[view_offset + sum_t c_t * view_stride[t]] \
                         (on the headline shape: strides {:?}, offset {}); lda is unused",
                        v.describe(h.dims.as_slice()),
                        st.strides,
                        st.offset
                    ));
                }
                s
            }
            Family::GemmBiasAct | Family::Gemm => {
                let mut s = format!(
                    "z = alpha*A*B + beta*C with alpha {}, beta {}",
                    pr.alpha, pr.beta
                );
                if !chain.is_identity() {
                    s.push_str(&format!(", then D = chain(z): {}", chain.describe()));
                }
                if w.dtype().is_fp8() {
                    s.push_str(&format!(
                        "; fp8 per-tensor scales scale_a {}, scale_b {} multiply the product",
                        pr.scale_a, pr.scale_b
                    ));
                }
                s
            }
            Family::GemmGlu => format!(
                "D = {}(A*B) * (A*B2): two GEMMs sharing A (B2 has B's shape and layout)",
                pr.gate
            ),
            Family::GemmSoftmax => {
                let row_op = if pr.log_softmax {
                    "log_softmax"
                } else {
                    "softmax"
                };
                if chain.is_identity() {
                    format!(
                        "D = {row_op} over each row (length n) of alpha*A*B + beta*C, alpha {}",
                        pr.alpha
                    )
                } else {
                    format!(
                        "z = alpha*A*B + beta*C with alpha {}, x = chain(z): {}; D = {row_op} over each row (length n) of x",
                        pr.alpha,
                        chain.describe()
                    )
                }
            }
            Family::GemmReduce => {
                let after = w.after_chain();
                let mut s = format!("z = alpha*A*B with alpha {}", pr.alpha);
                if !chain.is_identity() {
                    s.push_str(&format!(", x = chain(z): {}", chain.describe()));
                }
                s.push_str(&format!(
                    "; y = {} over each row (n values) of {}; D (m x 1, one value a row) = ",
                    pr.reduce.formula(),
                    if chain.is_identity() { "z" } else { "x" }
                ));
                if after.is_identity() {
                    s.push('y');
                } else {
                    s.push_str(&format!("after(y): {} (struct cs_after)", after.describe()));
                }
                s
            }
            Family::GemmNorm => {
                let before = w.before_chain();
                let mut s = format!(
                    "z = alpha*A*B + beta*C with alpha {}, beta {}",
                    pr.alpha, pr.beta
                );
                if !before.is_identity() {
                    s.push_str(&format!(
                        ", x = before(z): {} (struct cs_before, its operands indexed like D from \
                         slot 0)",
                        before.describe()
                    ));
                }
                let x = if before.is_identity() { "z" } else { "x" };
                if pr.norm == NormKind::Batch {
                    s.push_str(&format!(
                        "; each column of {x} (D row-major) normalized over its batch item's m \
                         rows (BatchNorm's training-mode statistics), y = {}, eps {:e}",
                        pr.norm.formula(),
                        pr.eps
                    ));
                } else {
                    s.push_str(&format!(
                        "; each row of {x} (n values, D row-major) split into {} group(s) of \
                         n/{} adjacent values, y = {} over each group, eps {:e}",
                        pr.groups,
                        pr.groups,
                        pr.norm.formula(),
                        pr.eps
                    ));
                }
                if chain.is_identity() {
                    s.push_str("; D = y");
                } else {
                    s.push_str(&format!(
                        "; D = chain(y): {} (struct cs_chain, its operands from slot kFirst; a \
                         norm's per-channel (per-feature) weight and bias are its `mul row` / \
                         `add row`)",
                        chain.describe()
                    ));
                }
                s
            }
            Family::Softmax | Family::LogSoftmax => {
                let f = if fam == Family::Softmax {
                    "softmax"
                } else {
                    "log_softmax"
                };
                if chain.is_identity() {
                    format!("{f} over each row (length n)")
                } else {
                    format!(
                        "x = chain(A) on each element first ([[before]] ops: {}; struct \
                         cs_chain, its operands indexed like A and D, m x n row-major, a \
                         broadcast operand by its row terms over the whole output's rows; an \
                         index op (triu / tril) sees the row modulo p.k when p.k > 0 (the \
                         rows of each matrix of the last two dims), the row itself \
                         otherwise), then {f} over each row of x (length n); x stays fp32 \
                         between the ops and the softmax",
                        chain.describe()
                    )
                }
            }
            Family::Norm => {
                let mut s = format!(
                    "{} over each row (n elements; A {}: {}), eps {:e}{}",
                    pr.norm.formula(),
                    w.layouts().a.name(),
                    if w.layouts().a == crate::spec::Layout::Col {
                        "element j of row i at j*lda + i, rows side by side"
                    } else {
                        "rows contiguous"
                    },
                    pr.eps,
                    if pr.norm == crate::spec::NormKind::Batch {
                        "; batch norm: the statistics of row i are over row i of every batch \
                         item together (batch * n values), one (mean, variance) for them all"
                    } else {
                        ""
                    }
                );
                if !chain.is_identity() {
                    s.push_str(&format!(", then D = chain(y): {}", chain.describe()));
                }
                s
            }
            Family::Scan => {
                let mut s = format!(
                    "y_j = {} over each row (n elements x_0 .. x_(n-1); A {}: {}){}{}; D has A's \
                     layout and shape",
                    match pr.scan {
                        crate::spec::ScanKind::Sum => "x_0 + ... + x_j (cumulative sum)",
                        crate::spec::ScanKind::Prod => "x_0 * ... * x_j (cumulative product)",
                    },
                    w.layouts().a.name(),
                    if w.layouts().a == crate::spec::Layout::Col {
                        "element j of row i at j*lda + i, rows side by side"
                    } else {
                        "element j of row i at i*lda + j"
                    },
                    if pr.reverse {
                        ", reversed: scanned from the row's end (y_j over x_j .. x_(n-1))"
                    } else {
                        ""
                    },
                    if pr.exclusive {
                        ", exclusive: x_j left out of y_j (the first output is the identity)"
                    } else {
                        ""
                    },
                );
                let before = w.before_chain();
                if !before.is_identity() {
                    s.push_str(&format!(
                        "; each element x of A at (b, i, j) is first before(x) = {} (struct \
                         cs_before; cs_before_in<cs_before>(p, x, b, i, j, p.layout_cd) loads \
                         its operands from slots 0..{}, indexed like D: matrix m x n in D's \
                         layout, row n values, col m values; a bool operand reads 0 or 1), and \
                         the scan runs over those",
                        before.describe(),
                        before.tensors.len()
                    ));
                }
                if !chain.is_identity() {
                    s.push_str(&format!(", then D = chain(y): {}", chain.describe()));
                }
                s
            }
            Family::Reduce => {
                let mut s = format!(
                    "y = {} over each row (k elements; A {}: {}); D is m x 1 (one value a row, \
                     batch stride m)",
                    pr.reduce.formula(),
                    w.layouts().a.name(),
                    if w.layouts().a == crate::spec::Layout::Col {
                        "element j of row i at j*lda + i, rows side by side"
                    } else {
                        "element j of row i at i*lda + j"
                    },
                );
                if pr.reduce.reads_targets() {
                    s.push_str(&format!(
                        "; the targets are p.targets (int64, m a batch: row i of batch b reads \
                         targets[b * m + i]), ignore_index = {} (p.ignore_index); D holds {}",
                        pr.ignore_index,
                        match pr.total {
                            crate::spec::TotalKind::None => {
                                "each row's loss (total none: m x 1, a left-out row 0)".to_string()
                            }
                            t => format!(
                                "one value a batch (p.total = {}: D[b], batch stride 1), the {} \
                                 of its rows' losses{}",
                                t.name(),
                                t.name(),
                                if t == crate::spec::TotalKind::Mean {
                                    " over the rows not left out (none: NaN)"
                                } else {
                                    ""
                                }
                            ),
                        }
                    ));
                }
                let before = w.before_chain();
                if !before.is_identity() {
                    s.push_str(&format!(
                        "; each element x of A at (b, i, j) is first before(x) = {} (struct \
                         cs_before; cs_before_at<cs_before>(p, x, b, i, j) loads its operands \
                         from slots 0..{}, indexed like A: matrix m x k in A's layout, row k \
                         values, col m values), and y reduces those",
                        before.describe(),
                        before.tensors.len()
                    ));
                }
                if !chain.is_identity() {
                    s.push_str(&format!(", then D = chain(y): {}", chain.describe()));
                }
                if !pr.reduce.reads_targets() && pr.total != crate::spec::TotalKind::None {
                    s.push_str(&format!(
                        "; D holds one value a batch (p.total = {t}: D[b], batch stride 1), \
                         the {t} of its m rows' values y (the workspace may hold them first)",
                        t = pr.total.name()
                    ));
                }
                s
            }
        };
        let layouts = if fam.is_gemm() {
            let l = w.layouts();
            format!(
                "A {} (m x k), B {} (k x n), C/D {} ({})",
                l.a.name(),
                l.b.name(),
                l.c.name(),
                l.blas_name()
            )
        } else {
            String::new()
        };
        let ridge = if gpu.copy_bytes_per_s > 0.0 {
            gpu.peak_flops_per_s / gpu.copy_bytes_per_s
        } else {
            1.0
        };
        let bound = match w.roofline_class(h, ridge) {
            RooflineClass::MemoryBound => "memory bound (bytes set the floor)",
            RooflineClass::ComputeBound => "compute bound (FLOPs set the floor)",
        };
        let floor = if gpu.copy_bytes_per_s > 0.0 {
            format!(
                "{:.2}",
                w.roofline_floor_s(h, gpu.copy_bytes_per_s, gpu.peak_flops_per_s) * 1e6
            )
        } else {
            "unknown".into()
        };
        WorkloadFacts {
            name: w.name().to_string(),
            description: w.description().to_string(),
            family: fam.name().to_string(),
            dtype: w.dtype().name().to_string(),
            out_dtype: w.out_dtype().name().to_string(),
            params,
            layouts,
            shapes: w.shape_list(),
            shapes_count: w.shapes().len(),
            headline: h.to_string(),
            flops: format!("{:.3}", w.flops(h) / 1e9),
            min_mb: format!("{:.1}", w.min_bytes(h) / 1e6),
            intensity: format!("{:.1}", w.arithmetic_intensity(h)),
            bound: bound.to_string(),
            floor_us: floor,
            chain_cpp: {
                let mut c = if fam.has_chain() && !chain.is_identity() {
                    chain.cpp_from(w.before_chain().tensors.len())
                } else {
                    String::new()
                };
                // reduce and gemm_norm: the ops before the row op (`cs_before::apply(x, t)`).
                if !w.before_chain().is_identity() {
                    c.push_str(&w.before_chain().cpp_before());
                }
                // gemm_reduce: the ops after the reduction too (`cs_after::apply(y)`).
                if fam == Family::GemmReduce && !w.after_chain().is_identity() {
                    c.push_str(&w.after_chain().cpp_after());
                }
                c
            },
        }
    }
}

/// The precision rule the system prompt states for a workload.
pub fn precision_rule(w: &Workload) -> String {
    match (w.family().is_gemm(), w.dtype(), w.allow_tf32()) {
        (true, DType::F32, false) => "this is an fp32 workload: no TF32, fp16 or bf16 arithmetic \
            (an fp64 check catches it, and an RMS error above 4x cuBLAS fp32's is rejected as a \
            precision downgrade); tensor cores only with error compensation: operands split into \
            a high and a low part, three products (Hopper: include/cutesmith_sm90_3xf16.cuh, fp16 \
            parts scaled per K-vector, the faster; include/cutesmith_sm90_3xtf32.cuh, TF32 parts)"
            .into(),
        (true, DType::F32, true) => "fp32 operands; TF32 tensor-core arithmetic is allowed".into(),
        (true, d, _) => format!(
            "{} operands, fp32 accumulation (an fp64 check of sampled entries catches lower precision)",
            d.name()
        ),
        (false, d, _) => format!(
            "{} in and out; compute in fp32 (accurate math: erf, expf, not a lower-precision approximation)",
            d.name()
        ),
    }
}

/// Advice on what a first kernel should look like, by workload class.
pub fn class_advice(w: &Workload) -> &'static str {
    match w.family() {
        Family::Gemm
        | Family::GemmBiasAct
        | Family::GemmSoftmax
        | Family::GemmGlu
        | Family::GemmReduce
        | Family::GemmNorm => {
            "Start from a correct Hopper GEMM: TMA loads of A and B tiles into swizzled shared \
             memory, a multi-stage mbarrier pipeline, WGMMA (64xNx16) from shared memory with fp32 \
             accumulators, and a predicated epilogue for ragged M and N. Correctness first: every \
             listed shape must pass."
        }
        Family::Activation => {
            "This is memory bound: aim at the copy bandwidth. 16-byte vectorized loads and stores, \
             several vectors in flight per thread, a grid sized to the SM count, a scalar tail for \
             sizes that are not a multiple of the vector width, fp32 math. An input read through \
             a view (view_rank > 0): merge the view's dims that are contiguous in A first; when \
             its last dim has stride 1, vectors along it; otherwise a tile through shared memory \
             so that both the reads and the writes are coalesced."
        }
        Family::Softmax | Family::LogSoftmax => {
            "This is memory bound: read each row once (online max and sum), a row per warp for short \
             rows or per CTA for long ones, 16-byte vectors, fp32 accumulation."
        }
        Family::Norm => {
            "This is memory bound: read each row once and keep it in registers for the write, a row \
             per warp for short rows or per CTA for long ones (split over CTAs through the \
             workspace when one CTA cannot hold it), 16-byte vectors, fp32 tree reductions, the \
             variance about the mean (two passes over the registers), not E[x^2] - E[x]^2."
        }
        Family::Reduce => {
            "This is memory bound and reads only: stream A once at the read bandwidth. Row-major \
             rows: a warp (or part of one) a row with 16-byte vectors, several in flight; \
             rows side by side (column-major A): each thread owns adjacent rows and walks k, \
             coalesced across the warp. Too few rows for the SMs: split k over CTAs through the \
             workspace and combine. fp32 accumulation; max/min keep NaN."
        }
        Family::Scan => {
            "This is memory bound: read and write each element once. Row-major rows: a CTA walks \
             its row in tiles (16-byte vectors, each thread a few adjacent elements scanned in \
             registers, then a warp scan by shuffles and the warps through shared memory), the \
             tile's total carried to the next tile (compensated for sums). Rows side by side: a \
             thread a row, coalesced across the warp. Too few rows for the SMs: split rows into \
             parts, first each part's total, then each part scanned from the totals before it. \
             fp32 accumulation; keep the adds behind any output a shallow tree, not one long \
             serial chain."
        }
    }
}

/// Condensed failure evidence for the debug prompt: the validation report without the
/// timing table, at most `max` bytes.
pub fn failure_report(e: &Evaluation, max: usize) -> String {
    let full = e.render();
    let mut s: String = full
        .lines()
        .filter(|l| !l.trim_start().starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n");
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("\n[... cut]");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_template_renders() {
        let p = Prompts::load().unwrap();
        let w = Workload::parse(
            "relu_f32.toml",
            "description = \"relu\"\nfamily = \"activation\"\ndtype = \"f32\"\n[[shapes]]\nn = 1024\n[params]\nactivation = \"relu\"\n",
        )
        .unwrap();
        let gpu = GpuFacts {
            name: "H100".into(),
            copy_bytes_per_s: 3e12,
            peak_flops_per_s: 60e12,
            ..GpuFacts::default()
        };
        let wf = WorkloadFacts::new(&w, &gpu);
        let ctx = minijinja::context! {
            cutlass_version => "4.2.0", nvcc_version => "13.0", arch => "sm_90a",
            precision_rule => precision_rule(&w), gpu => gpu, abi_header => "/* abi */",
            w => wf, vendor => "cudnn 10 us", class_advice => class_advice(&w),
            version => 3, failure_kind => "compile error", failure => "x.cu(3): error",
            source => "int main;", profile => "12 us", history => "- v1 ...",
            missing => "no code", hint => "try vectors",
            tuning => "on H100:\n- 1024: best x at 1.00 us",
            headers => "cute/algorithm/gemm.hpp:70\ngemm(...)",
        };
        for (name, _) in BUILT_IN {
            let text = p.render(name, &ctx).unwrap();
            assert!(!text.trim().is_empty(), "{name} rendered empty");
            assert!(!text.contains("{{"), "{name} left a placeholder");
        }
        let g = p.render("generate", &ctx).unwrap();
        assert!(g.contains("relu_f32") && g.contains("try vectors") && g.contains("memory bound"));
        let d = p.render("debug", &ctx).unwrap();
        assert!(
            d.contains("x.cu(3): error\n\nFrom the CUTLASS 4.2.0 headers on this machine")
                && d.contains("```cpp\ncute/algorithm/gemm.hpp:70\ngemm(...)\n```\n\nFix it."),
            "{d}"
        );
        let o = p.render("optimize", &ctx).unwrap();
        assert!(o.contains("tuning database measured") && o.contains("- 1024: best x at 1.00 us"));
        assert!(o.contains("```cuda\nint main;") && !o.contains("<<<<<<< SEARCH"));
        // Inviting edits: the numbered source instead, and the edit format.
        for name in ["optimize", "debug"] {
            let with_edits =
                minijinja::context! { edits => true, numbered => "1| int main;\n", ..ctx.clone() };
            let t = p.render(name, &with_edits).unwrap();
            assert!(
                t.contains("<<<<<<< SEARCH") && t.contains("1| int main;"),
                "{name}: {t}"
            );
            assert!(!t.contains("```cuda\nint main;"), "{name}");
        }
        let sys = p.render("system", &ctx).unwrap();
        assert!(sys.contains("```strategy") && sys.contains("/* abi */"));
    }

    /// gemm_norm's statement names what is normalized: each group of a row, or (a batch
    /// norm) each column over its rows.
    #[test]
    fn a_gemm_norm_states_rows_or_columns() {
        let gpu = GpuFacts::default();
        let spec = |norm: &str| {
            format!(
                "description = \"g\"\nfamily = \"gemm_norm\"\ndtype = \"bf16\"\n[params]\nnorm = \"{norm}\"\n[[shapes]]\nm = 64\nn = 512\nk = 128\n[[epilogue]]\nop = \"mul\"\noperand = \"row\"\n"
            )
        };
        let w = Workload::parse("g.toml", &spec("batch")).unwrap();
        let p = WorkloadFacts::new(&w, &gpu).params;
        assert!(
            p.contains("each column of z") && p.contains("m rows") && !p.contains("group(s)"),
            "{p}"
        );
        assert!(p.contains("per-feature) weight and bias"), "{p}");
        let w = Workload::parse("g.toml", &spec("layer")).unwrap();
        let p = WorkloadFacts::new(&w, &gpu).params;
        assert!(
            p.contains("each row of z") && p.contains("1 group(s)"),
            "{p}"
        );
    }
}
