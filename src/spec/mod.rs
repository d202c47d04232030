//! Workload specs (`workloads/*.toml`): what a kernel must compute, on which shapes,
//! with which tolerance, and its roofline floor (FLOPs and minimum bytes).
//!
//! A spec file is parsed into a [`WorkloadSpec`] (the TOML as written, every field
//! checked by serde with `deny_unknown_fields`) and then validated into a [`Workload`]
//! (defaults filled, cross-field rules checked, shapes resolved). The enums mirror the
//! kernel ABI in `cutlass-templates/include/cutesmith_abi.h` through `abi_value()`.
//!
//! Here: [`Workload`] and its loaders. The schema types are in `schema.rs`, the
//! cross-field rules in `rules.rs`, the error locations in `location.rs`, tolerances in
//! `tolerance.rs`, the roofline arithmetic in `roofline.rs`, goals in `goal.rs`, the
//! listing in `listing.rs`; suite files in [`suite`].
//!
//! Schema (one workload per file; the file stem is the workload's name):
//!
//! ```toml
//! name = "gemm_bf16_4096"     # optional; must equal the file stem
//! description = "bf16 GEMM, TN, the square headline shape"
//! family = "gemm"             # gemm | gemm_bias_act | gemm_softmax | gemm_glu |
//!                             # activation | softmax | log_softmax | norm
//! dtype = "bf16"              # operands: f32 | f16 | bf16
//! out_dtype = "bf16"          # optional: C and D; default = dtype
//! acc_dtype = "f32"           # optional: accumulation; default f32 (f16 allowed for f16 gemm)
//! allow_tf32 = false          # f32 gemm only: may the kernel round operands to tf32
//! [layout]                    # gemm families only; defaults a = row, b = col, c = row (TN)
//! a = "row"
//! b = "col"
//! c = "row"                   # C and D
//! [[shapes]]                  # the first is the headline shape, then ragged/small ones
//! m = 4096                    # gemm: m, n, k [, batch]; activation: n [, m rows];
//! n = 4096                    # softmax: m rows, n columns
//! k = 4096
//! [params]                    # activation, leaky_slope, alpha, beta, bias (per family)
//! [tolerance]                 # optional: rtol, atol, atol_scale = none | sqrt_k | inv_n |
//!                             #           inv_sqrt_n
//! [target]                    # optional: baselines, speedup_vs, min_speedup,
//!                             #           min_roofline_fraction
//! ```

pub mod chain;
mod error;
pub mod float_serde;
mod goal;
mod listing;
mod location;
mod roofline;
mod rules;
mod schema;
pub mod suite;
mod tolerance;
pub mod view;

use std::path::{Path, PathBuf};

pub use chain::Chain;
use error::Result;
pub use error::WorkloadError;
use location::parse_error;
use rules::Validator;
pub use rules::{human_bytes, is_workload_name};
pub use schema::*;
pub use tolerance::{gemm_roundoff, ElementTolerance, Summation, Tolerance};

/// A validated workload: a spec with its name, file, defaults and shapes resolved.
/// Construct with [`Workload::load`], [`Workload::parse`], [`Workload::load_dir`] or
/// [`Workload::find`].
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    name: String,
    path: PathBuf,
    description: String,
    family: Family,
    dtype: DType,
    out_dtype: DType,
    acc_dtype: DType,
    allow_tf32: bool,
    layouts: Layouts,
    shapes: Vec<Shape>,
    params: Params,
    chain: Chain,
    /// gemm_reduce: the ops after the reduction (`[[after]]`); empty elsewhere.
    after: Chain,
    /// reduce: the ops on each element of A before the reduction (`[[before]]`); empty
    /// elsewhere. Its tensors are shaped like A and come first in the operand slots.
    before: Chain,
    tolerance: Tolerance,
    target: Target,
    /// activation: A read through a view of a packed input; None elsewhere.
    view: Option<view::View>,
}

impl Workload {
    /// Reads and validates one spec file; its stem is the workload's name.
    pub fn load(path: impl AsRef<Path>) -> Result<Workload> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Workload::parse(path, &text)
    }

    /// Validates spec text as if read from `path` (whose stem is the name); the file
    /// itself is not touched, so tests and tools can check text in memory.
    pub fn parse(path: impl AsRef<Path>, text: &str) -> Result<Workload> {
        let path = path.as_ref();
        let spec: WorkloadSpec = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;
        Validator {
            path,
            text: Some(text),
        }
        .run(spec)
    }

    /// Validates a parsed spec that came from `path`.
    pub fn from_spec(path: impl AsRef<Path>, spec: WorkloadSpec) -> Result<Workload> {
        Validator {
            path: path.as_ref(),
            text: None,
        }
        .run(spec)
    }

    /// Reads every `*.toml` in `dir`, sorted by name. Every broken spec is reported (as
    /// [`WorkloadError::Many`] when more than one), not just the first.
    pub fn load_dir(dir: impl AsRef<Path>) -> Result<Vec<Workload>> {
        let dir = dir.as_ref();
        let mut ok = Vec::new();
        let mut errors = Vec::new();
        for path in spec_files(dir)? {
            match Workload::load(&path) {
                Ok(w) => ok.push(w),
                Err(e) => errors.push(e),
            }
        }
        match errors.len() {
            0 => {
                ok.sort_by(|a, b| a.name.cmp(&b.name));
                Ok(ok)
            }
            1 => Err(errors.remove(0)),
            _ => Err(WorkloadError::Many(errors)),
        }
    }

    /// Loads the workload called `name` from `dir` (`dir/name.toml`). A `name` that ends
    /// in `.toml` or contains a path separator is taken as a path, so the CLI accepts both
    /// `gemm_bf16_4096` and `workloads/gemm_bf16_4096.toml`. When nothing matches, the
    /// error lists the names that exist.
    pub fn find(dir: impl AsRef<Path>, name: &str) -> Result<Workload> {
        let dir = dir.as_ref();
        if name.ends_with(".toml") || name.contains('/') || name.contains('\\') {
            return Workload::load(name);
        }
        let path = dir.join(format!("{name}.toml"));
        if path.is_file() {
            return Workload::load(path);
        }
        let available = spec_files(dir)?
            .iter()
            .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_string))
            .collect();
        Err(WorkloadError::NotFound {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            available,
        })
    }

    /// The file stem; the key for `find`, run directories and reports.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The spec file this came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One line a person understands.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The computation.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Operand type (A, B; the input of activation/softmax): `cs_problem.dtype_ab`.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Result type (C, D, bias): `cs_problem.dtype_cd`.
    pub fn out_dtype(&self) -> DType {
        self.out_dtype
    }

    /// Accumulation type: `cs_problem.dtype_acc`.
    pub fn acc_dtype(&self) -> DType {
        self.acc_dtype
    }

    /// Whether an f32 GEMM may round its operands to tf32 (and its baselines with it).
    pub fn allow_tf32(&self) -> bool {
        self.allow_tf32
    }

    /// Operand storage orders; all row-major outside the GEMM families.
    pub fn layouts(&self) -> Layouts {
        self.layouts
    }

    /// Whether D is stored column-major: a GEMM's `c = "col"`, or a norm's rows side by
    /// side (`a = "col"`). Every other family writes row-major D (its layouts are fixed).
    pub fn d_col_major(&self) -> bool {
        self.layouts.c == Layout::Col
    }

    /// Every shape, headline first; never empty.
    pub fn shapes(&self) -> &[Shape] {
        &self.shapes
    }

    /// Every shape, as `4096x4096x4096, 77x50257, ...` (for prompts, READMEs, notes).
    pub fn shape_list(&self) -> String {
        self.shapes
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The shape that goals and the summary refer to.
    pub fn headline(&self) -> &Shape {
        // `shapes` is never empty: validation rejects a spec without shapes.
        &self.shapes[0]
    }

    /// Op parameters for `cs_problem`.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The epilogue chain (empty for the families without one).
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// gemm_reduce: the ops on each reduced value (`[[after]]`; no tensors); the empty
    /// chain for every other family.
    pub fn after_chain(&self) -> &Chain {
        &self.after
    }

    /// reduce: the ops on each element of A before the reduction (`[[before]]`); the empty
    /// chain for every other family. Its tensors are indexed like A (`matrix`: m x k in A's
    /// layout, `row`: k values, `col`: m values) and take the first operand slots, before
    /// the epilogue chain's.
    pub fn before_chain(&self) -> &Chain {
        &self.before
    }

    /// activation: the view A is read through (a permute, a split's part), if any.
    pub fn view(&self) -> Option<&view::View> {
        self.view.as_ref()
    }

    /// The strided read of A on `shape` when A is read through a view (its dims are the
    /// output's).
    pub fn view_on(&self, shape: &Shape) -> Option<view::Strided> {
        self.view.as_ref().map(|v| v.strided(shape.dims.as_slice()))
    }

    /// Elements of A on `shape` for a family whose A is shaped like D: the view's input
    /// when there is one, else `elements`.
    pub fn a_elements(&self, shape: &Shape, elements: u64) -> u64 {
        self.view_on(shape).map_or(elements, |s| s.input_len)
    }

    /// The rows of each matrix an index op (triu, tril) sees on `shape`: a softmax's shape
    /// given as dims keeps its rows the last dim, and torch applies triu / tril to the last
    /// two dims, so a row's index there is its row modulo the next-to-last dim; 0 where the
    /// matrix is the m x n (or batch of) itself, or without an index op.
    pub fn tri_rows(&self, shape: &Shape) -> u64 {
        let dims = shape.dims.as_slice();
        if matches!(self.family, Family::Softmax | Family::LogSoftmax)
            && self.chain.positional()
            && dims.len() >= 2
        {
            dims[dims.len() - 2]
        } else {
            0
        }
    }

    /// Columns of D on `shape`: n, except for gemm_reduce, whose GEMM's n columns are
    /// reduced to one (the reduce family's shapes already say n = 1).
    pub fn d_cols(&self, shape: &Shape) -> u64 {
        if self.family == Family::GemmReduce {
            1
        } else {
            shape.n
        }
    }

    /// Rows of D on `shape`: m, except for a reduction with a total (a cross entropy's
    /// sum or mean), which writes one value a batch.
    pub fn d_rows(&self, shape: &Shape) -> u64 {
        if self.params.total == TotalKind::None {
            shape.m
        } else {
            1
        }
    }

    /// Elements of D on `shape`, across the batch.
    pub fn d_elements(&self, shape: &Shape) -> u64 {
        self.d_rows(shape) * self.d_cols(shape) * shape.batch
    }

    /// When results are accepted.
    pub fn tolerance(&self) -> &Tolerance {
        &self.tolerance
    }

    /// Baselines and goals.
    pub fn target(&self) -> &Target {
        &self.target
    }
}

/// The `*.toml` files directly in `dir`, sorted.
fn spec_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let io = |source| WorkloadError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shapes given as dims with broadcast operands: the rows the kernels see are the
    /// trailing dims every operand treats alike; the rules refuse what the kernels cannot
    /// index, each naming its field.
    #[test]
    fn broadcast_operands_view_dims_as_rows_and_are_refused_where_unsupported() {
        let head = "description = \"x\"\nfamily = \"activation\"\ndtype = \"bf16\"\n";
        let bc = |over: &str| {
            format!("[[epilogue]]\nop = \"add\"\noperand = \"broadcast\"\nover = {over}\n")
        };
        // A per-channel bias of [N, C, H, W]: N * C rows of H * W.
        let w = parse(
            "bn",
            &format!(
                "{head}[[shapes]]\ndims = [2, 3, 4, 5]\n[[shapes]]\ndims = [3, 7, 1, 9]\n{}",
                bc("[1]")
            ),
        )
        .unwrap();
        let s = w.shapes();
        assert_eq!((s[0].m, s[0].n), (6, 20));
        assert_eq!((s[1].m, s[1].n), (21, 9));
        assert_eq!(s[0].to_string(), "2x3x4x5");
        assert_eq!(w.chain().rank, 4);
        assert!(w.chain().cpp().contains("kBcastCol0 = 0;"));
        // An operand spanning the last dim and another not: rows of the last dim only.
        let w = parse(
            "two",
            &format!(
                "{head}[[shapes]]\ndims = [2, 3, 4, 5]\n{}{}",
                bc("[1]"),
                bc("[1, 3]")
            ),
        )
        .unwrap();
        assert_eq!((w.shapes()[0].m, w.shapes()[0].n), (24, 5));
        assert!(w.chain().cpp().contains("kBcastCol1 = 1;"));
        // Without a broadcast operand: rows of the last dim.
        let w = parse(
            "plain",
            &format!("{head}[[shapes]]\ndims = [2, 3, 4, 5]\n[[epilogue]]\nop = \"relu\"\n"),
        )
        .unwrap();
        assert_eq!((w.shapes()[0].m, w.shapes()[0].n), (24, 5));
        for (text, field, why) in [
            (
                format!("{head}[[shapes]]\nm = 4\nn = 8\n{}", bc("[1]")),
                "shapes[0].dims",
                "missing",
            ),
            (
                format!(
                    "{head}[[shapes]]\ndims = [2, 3, 4]\n[[shapes]]\ndims = [2, 3]\n{}",
                    bc("[1]")
                ),
                "shapes[1].dims",
                "same rank",
            ),
            (
                format!(
                    "{head}[[shapes]]\ndims = [2, 3, 4]\n[[epilogue]]\nop = \"add\"\noperand = \"row\"\n"
                ),
                "epilogue",
                "every tensor operand is",
            ),
            (
                format!("{head}[[shapes]]\ndims = [2, 3, 4, 5, 6, 7]\n{}", bc("[0, 2, 4]")),
                "epilogue",
                "separate runs",
            ),
            (
                format!("{head}[[shapes]]\ndims = [4]\n{}", bc("[0]")),
                "shapes[0].dims",
                "2 to 6",
            ),
            (
                format!("{head}[[shapes]]\nm = 2\ndims = [4, 2]\n"),
                "shapes[0].m",
                "not both",
            ),
            (
                format!("{head}[[shapes]]\ndims = [2, 3, 4]\n[[shapes]]\nm = 4\nn = 8\n"),
                "shapes[1].dims",
                "do not mix",
            ),
            (
                format!(
                    "{head}[[shapes]]\ndims = [2, 3, 4]\n{}[[epilogue]]\nop = \"triu\"\n",
                    bc("[1]")
                ),
                "epilogue",
                "triu / tril",
            ),
            (
                format!("{head}[[shapes]]\ndims = [2, 65536, 65536]\n{}", bc("[0]")),
                "shapes[0].dims",
                "at most 2^31 - 1",
            ),
            (
                "description = \"x\"\nfamily = \"gemm\"\ndtype = \"bf16\"\n[[shapes]]\nm = 4\nn = 8\nk = 8\ndims = [4, 8]\n".to_string(),
                "shapes[0].dims",
                "only families activation, softmax and log_softmax take dims",
            ),
            (
                "description = \"x\"\nfamily = \"norm\"\ndtype = \"bf16\"\n[params]\nnorm = \"rms\"\n[[shapes]]\nm = 4\nn = 8\n[[epilogue]]\nop = \"add\"\noperand = \"broadcast\"\nover = [1]\n".to_string(),
                "epilogue",
                "activation, softmax and log_softmax only",
            ),
        ] {
            let e = err("bad", &text);
            assert!(e.contains(field), "{field}: {e}");
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn a_view_is_an_activation_of_dims_and_holds_its_whole_input() {
        let base = "description = \"x\"\nfamily = \"activation\"\ndtype = \"bf16\"\n\n\
                    [[shapes]]\ndims = [2, 12, 64, 32]\n\n\
                    [view]\npermute = [0, 2, 1, 3]\nselect = [{ dim = 2, size = 3, index = 1 }]\n";
        let w = parse("heads", base).unwrap();
        let sh = w.shapes()[0];
        let v = w.view_on(&sh).unwrap();
        // [2, 64, 3, 12, 32] packed; the heads' part 1, T and the heads swapped.
        assert_eq!(v.input_len, 2 * 64 * 3 * 12 * 32);
        assert_eq!(v.strides, vec![64 * 3 * 12 * 32, 32, 3 * 12 * 32, 1]);
        assert_eq!(v.offset, 12 * 32);
        assert_eq!(w.a_elements(&sh, 1), v.input_len);
        // The output is the view's elements: a copy's bytes, not the input's; the device
        // holds the input too.
        assert_eq!(w.min_bytes(&sh), (2 * 12 * 64 * 32 * 4) as f64);
        assert!(w.device_bytes(&sh) > 2.0 * (v.input_len * 2) as f64);
        // Not timed against cuDNN's activation (it reads a packed input).
        assert_eq!(w.target().baselines, vec![Baseline::Copy]);
        // Another family, shapes as m and n, a bad permutation or index: refused by field.
        let gemm = base
            .replace("\"activation\"", "\"gemm\"")
            .replace("dims = [2, 12, 64, 32]", "m = 64\nn = 64\nk = 64");
        assert!(
            err("heads", &gemm).contains("view"),
            "{}",
            err("heads", &gemm)
        );
        let mn = base.replace("dims = [2, 12, 64, 32]", "m = 64\nn = 64");
        assert!(
            err("heads", &mn).contains("shapes[0].dims"),
            "{}",
            err("heads", &mn)
        );
        let perm = base.replace("permute = [0, 2, 1, 3]", "permute = [0, 2, 2, 3]");
        assert!(err("heads", &perm).contains("view.permute"));
        let index = base.replace("index = 1", "index = 3");
        assert!(err("heads", &index).contains("view.select[0].index"));
        // cuDNN and the unfused passes read the input packed: refused as its baselines.
        for b in ["cudnn", "unfused"] {
            let t = format!("{base}\n[target]\nbaselines = [\"{b}\"]\n");
            assert!(
                err("heads", &t).contains("target.baselines"),
                "{}",
                err("heads", &t)
            );
        }
        // A chain on a view is timed against the copy too: the unfused passes the chain
        // would add read the input packed.
        let chained = format!("{base}\n[[epilogue]]\nop = \"gelu_erf\"\n");
        let w = parse("heads", &chained).unwrap();
        assert_eq!(w.target().baselines, vec![Baseline::Copy]);
        // It round-trips through the TOML writer.
        let spec: WorkloadSpec = toml::from_str(base).unwrap();
        let again: WorkloadSpec = toml::from_str(&spec.to_toml().unwrap()).unwrap();
        assert_eq!(again.view, spec.view);
    }

    #[test]
    fn a_shape_no_gpu_holds_is_refused_at_load_with_its_size() {
        let text = "description = \"x\"\nfamily = \"gemm\"\ndtype = \"bf16\"\n\n\
                    [[shapes]]\nm = 4096\nn = 4096\nk = 4096\n\n\
                    [[shapes]]\nm = 2147483648\nn = 4096\nk = 4096\n";
        let start = std::time::Instant::now();
        let e = err("huge", text);
        assert!(start.elapsed().as_secs_f64() < 1.0);
        assert!(e.contains("shapes[1]"), "{e}");
        assert!(e.contains("2147483648x4096x4096"), "{e}");
        // A (2^31 x 4096) and D (2^31 x 4096) in bf16: 35.2 TB before any reference.
        assert!(e.contains("35.2 TB of operands and output alone"), "{e}");
        assert!(e.contains("more than any GPU holds"), "{e}");
        // The same spec without the huge shape loads.
        let ok = text.split("\n\n[[shapes]]\nm = 2147483648").next().unwrap();
        assert!(parse("huge", ok).is_ok());
    }

    #[test]
    fn device_footprints_per_family() {
        let gib = |w: &Workload| w.device_bytes(&w.shapes()[0]);
        let g = |extra: &str| {
            parse(
                "g",
                &format!(
                    "description = \"x\"\nfamily = \"gemm\"\ndtype = \"bf16\"\n{extra}\n\
                     [[shapes]]\nm = 1000\nn = 2000\nk = 3000\nbatch = 2\n"
                ),
            )
            .unwrap()
        };
        // Two problems (A and B, D), the library's D, two fp32 reference planes.
        let (a, b, out) = (
            1000.0 * 3000.0 * 2.0,
            3000.0 * 2000.0 * 2.0,
            1000.0 * 2000.0 * 2.0,
        );
        let two_problems = |inputs: f64| 2.0 * (inputs + out * 2.0);
        assert_eq!(
            gib(&g("")),
            two_problems(2.0 * (a + b)) + out * 2.0 + 8.0 * out
        );
        // beta != 0 adds C to each problem; a shared B counts once per problem.
        assert_eq!(
            gib(&g("[params]\nbeta = 1.0\n")),
            two_problems(2.0 * (a + b) + out * 2.0) + out * 2.0 + 8.0 * out
        );
        assert_eq!(
            gib(&g("[layout]\nshared = [\"b\"]\n")),
            two_problems(2.0 * a + b) + out * 2.0 + 8.0 * out
        );
        // An epilogue chain: the unfused sequence's two scratch buffers too.
        assert_eq!(
            gib(&g("[[epilogue]]\nop = \"relu\"\n")),
            two_problems(2.0 * (a + b)) + 3.0 * out * 2.0 + 8.0 * out
        );
        // One activation (cuDNN's output and the copy's destination; no unfused passes).
        let act = parse(
            "a",
            "description = \"x\"\nfamily = \"activation\"\ndtype = \"f32\"\n\
             [[shapes]]\nm = 10\nn = 100\n[params]\nactivation = \"relu\"\n",
        )
        .unwrap();
        assert_eq!(gib(&act), 2.0 * (4000.0 + 4000.0) + 4000.0 + 4000.0);
        let sm = parse(
            "s",
            "description = \"x\"\nfamily = \"softmax\"\ndtype = \"bf16\"\n\
             [[shapes]]\nm = 10\nn = 100\n",
        )
        .unwrap();
        assert_eq!(gib(&sm), 2.0 * (2000.0 + 2000.0) + 2000.0 + 2000.0);
        // A norm: only the copy's destination beside the two problems.
        let norm = parse(
            "n",
            "description = \"x\"\nfamily = \"norm\"\ndtype = \"f32\"\n\
             [[shapes]]\nm = 10\nn = 100\n[params]\nnorm = \"rms\"\n",
        )
        .unwrap();
        assert_eq!(gib(&norm), 2.0 * (4000.0 + 4000.0) + 4000.0);
        // gemm_glu: both library GEMMs' outputs and the scratch, 16 reference planes.
        let glu = parse(
            "u",
            "description = \"x\"\nfamily = \"gemm_glu\"\ndtype = \"bf16\"\n\
             [[shapes]]\nm = 10\nn = 20\nk = 30\n",
        )
        .unwrap();
        assert_eq!(
            gib(&glu),
            2.0 * ((10.0 * 30.0 + 2.0 * 30.0 * 20.0) * 2.0 + 400.0) + 4.0 * 400.0 + 16.0 * 200.0
        );
    }

    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads")
    }

    fn parse(name: &str, text: &str) -> Result<Workload> {
        Workload::parse(format!("workloads/{name}.toml"), text)
    }

    fn err(name: &str, text: &str) -> String {
        match parse(name, text) {
            Ok(w) => panic!("expected an error, got {w:?}"),
            Err(e) => e.to_string(),
        }
    }

    const GEMM: &str = r#"
description = "bf16 GEMM"
family = "gemm"
dtype = "bf16"
[[shapes]]
m = 4096
n = 4096
k = 4096
"#;

    #[test]
    fn epilogue_chains_parse_field_by_field() {
        let w = parse(
            "c",
            &format!(
                "{GEMM}[layout]\na = \"row\"\nb = \"row\"\nshared = [\"b\"]\n\
                 [[epilogue]]\nop = \"scale\"\nvalue = 0.5\n\
                 [[epilogue]]\nop = \"add\"\noperand = \"matrix\"\ndtype = \"f32\"\n\
                 [[epilogue]]\nop = \"softplus\"\nbeta = 2.0\nthreshold = 5.0\nsave = \"sp\"\n\
                 [[epilogue]]\nop = \"mul\"\noperand = \"sp\"\n"
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let l = w.layouts();
        assert_eq!((l.a, l.b, l.c), (Layout::Row, Layout::Row, Layout::Row));
        assert!(l.shared_b && !l.shared_a);
        let c = w.chain();
        assert_eq!(c.steps.len(), 4);
        assert_eq!(c.tensors.len(), 1);
        assert_eq!(c.tensors[0].kind, chain::TensorKind::Matrix);
        assert_eq!(c.tensors[0].dtype, DType::F32);
        assert_eq!(c.saved, vec!["sp".to_string()]);
        assert_eq!(
            c.steps[2].op,
            chain::Op::Act(Activation::Softplus, 2.0, 5.0)
        );
        // z = 1, matrix operand 0.25: x = 0.75; softplus(1.5)/2 with threshold 5.
        let sp = (1.5f64.exp()).ln_1p() / 2.0;
        assert!((c.eval(1.0, &[0.25]) - sp * sp).abs() < 1e-15);
        // The chain adds its FLOPs and the matrix's bytes to the roofline figures.
        let h = w.headline();
        let plain = parse("p", GEMM).unwrap();
        assert!(w.flops(h) > plain.flops(h));
        assert_eq!(
            w.min_bytes(h) - plain.min_bytes(h),
            4096.0 * 4096.0 * 4.0,
            "the f32 matrix operand is read once"
        );
    }

    #[test]
    fn gemm_bias_act_and_activation_start_their_chains() {
        let w = Workload::find(dir(), "gemm_bias_gelu_bf16").unwrap();
        let c = w.chain();
        assert_eq!(c.tensors[0].name, "bias");
        assert_eq!(c.steps.len(), 2);
        assert_eq!(c.describe(), "z -> x + bias -> gelu_erf(x)");
        let a = Workload::find(dir(), "act_leaky_relu_f32").unwrap();
        assert_eq!(a.chain().steps.len(), 1);
        assert!(matches!(
            a.chain().steps[0].op,
            chain::Op::Act(Activation::LeakyRelu, s, _) if s > 0.0
        ));
    }

    #[test]
    fn chain_errors_name_the_entry() {
        let e = err(
            "c",
            &format!("{GEMM}[[epilogue]]\nop = \"relu\"\n[[epilogue]]\nop = \"mul\"\n"),
        );
        assert!(e.contains("field \"epilogue[1].value\""), "{e}");
        assert!(e.contains("needs value"), "{e}");
        let e = err("c", &format!("{GEMM}[[epilogue]]\nop = \"nope\"\n"));
        assert!(
            e.contains("epilogue[0].op") && e.contains("allowed:"),
            "{e}"
        );
        let glu = "description = \"g\"\nfamily = \"gemm_glu\"\ndtype = \"bf16\"\n[[shapes]]\nm = 8\nn = 8\nk = 8\n";
        let e = err("g", &format!("{glu}[[epilogue]]\nop = \"relu\"\n"));
        assert!(
            e.contains(
                "only for families gemm, gemm_bias_act, gemm_softmax (before the softmax), gemm_norm (after the norm), activation, norm, reduce and scan"
            ),
            "{e}"
        );
        // A softmax's ops run before it: [[epilogue]] is refused, saying where they go.
        let sm = "description = \"s\"\nfamily = \"softmax\"\ndtype = \"f32\"\n[[shapes]]\nm = 2\nn = 3\n";
        let e = err("s", &format!("{sm}[[epilogue]]\nop = \"relu\"\n"));
        assert!(
            e.contains("field \"epilogue\"") && e.contains("write them as [[before]]"),
            "{e}"
        );
    }

    /// PyTorch's spellings of the dtypes and of GELU are accepted as the canonical names.
    #[test]
    fn pytorch_spellings_of_dtypes_and_gelu() {
        let w = parse(
            "g",
            "description = \"s\"\nfamily = \"gemm\"\ndtype = \"bfloat16\"\nout_dtype = \"float32\"\n[[shapes]]\nm = 4\nn = 4\nk = 4\n[[epilogue]]\nop = \"gelu\"\n",
        )
        .unwrap();
        assert_eq!((w.dtype(), w.out_dtype()), (DType::BF16, DType::F32));
        assert!(matches!(
            w.chain().steps[0].op,
            chain::Op::Act(Activation::GeluErf, _, _)
        ));
        let w = parse(
            "h",
            "description = \"s\"\nfamily = \"activation\"\ndtype = \"half\"\n[[shapes]]\nm = 4\nn = 4\n[params]\nactivation = \"gelu\"\n",
        )
        .unwrap();
        assert_eq!(w.dtype(), DType::F16);
        assert_eq!(w.params().activation, Activation::GeluErf);
        // alpha beside an elu would be read as the GEMM's scale: refused, with the way out.
        let e = err(
            "e",
            "description = \"s\"\nfamily = \"gemm_bias_act\"\ndtype = \"bf16\"\n[[shapes]]\nm = 4\nn = 4\nk = 4\n[params]\nactivation = \"elu\"\nalpha = 0.5\n",
        );
        assert!(
            e.contains("params.alpha") && e.contains("GEMM's scale") && e.contains("[[epilogue]]"),
            "{e}"
        );
    }

    /// softmax and log_softmax take [[before]] ops: their chain, run on each input element
    /// before the row op, with row / col / matrix operands on m x n shapes (and a causal
    /// tril), or broadcast operands over dims whose rows stay the last dim; they make the
    /// workload fused (the unfused sequence its baseline, not cuDNN's softmax alone).
    #[test]
    fn softmax_takes_ops_before_it() {
        let w = parse(
            "s",
            "description = \"s\"\nfamily = \"softmax\"\ndtype = \"bf16\"\n[[shapes]]\ndims = [2, 3, 5, 7]\n[[before]]\nop = \"mul\"\nvalue = 0.125\n[[before]]\nop = \"add\"\noperand = \"broadcast\"\nover = [0, 3]\ndtype = \"f32\"\n[[before]]\nop = \"mul\"\noperand = \"broadcast\"\nover = [1]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(w.family().chain_before_row_op() && w.before_chain().is_identity());
        let c = w.chain();
        assert_eq!(c.steps.len(), 3);
        assert_eq!(c.tensors.len(), 2);
        // Rows of the last dim, though the second operand treats dims 2 and 3 alike (an
        // activation would merge them into the row).
        assert_eq!(c.broadcast_tail(), 1);
        let h = w.headline();
        assert_eq!((h.m, h.n), (2 * 3 * 5, 7));
        assert!(w.target().baselines.contains(&Baseline::Unfused));
        assert!(!w.target().baselines.contains(&Baseline::Cudnn));
        // The ops' FLOPs and their operands' bytes count: a [2, 1, 1, 7] f32 mask and a
        // [1, 3, 1, 1] bf16 scale beside the bf16 input and output.
        let plain = parse(
            "p",
            "description = \"p\"\nfamily = \"softmax\"\ndtype = \"bf16\"\n[[shapes]]\ndims = [2, 3, 5, 7]\n",
        )
        .unwrap();
        assert_eq!(
            w.min_bytes(h) - plain.min_bytes(h),
            2.0 * 7.0 * 4.0 + 3.0 * 2.0
        );
        assert!(w.flops(h) > plain.flops(h));
        assert!(plain.target().baselines.contains(&Baseline::Cudnn));
        // m x n shapes: a matrix, a row and a column operand and a causal tril.
        let w = parse(
            "t",
            "description = \"t\"\nfamily = \"log_softmax\"\ndtype = \"f32\"\n[[shapes]]\nm = 4\nn = 6\n[[before]]\nop = \"add\"\noperand = \"matrix\"\n[[before]]\nop = \"mul\"\noperand = \"col\"\n[[before]]\nop = \"tril\"\nvalue = -inf\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(w.chain().positional());
        assert_eq!(
            w.chain().eval_at(1.0, &[0.5, 2.0], (0, 1)),
            f64::NEG_INFINITY
        );
        assert_eq!(w.chain().eval_at(1.0, &[0.5, 2.0], (1, 1)), 3.0);
        // Over dims, an index op sees each row within the matrix of the last two dims.
        let w = parse(
            "d",
            "description = \"d\"\nfamily = \"softmax\"\ndtype = \"bf16\"\n[[shapes]]\ndims = [2, 3, 5, 7]\n[[before]]\nop = \"tril\"\nvalue = -inf\n[[before]]\nop = \"add\"\noperand = \"broadcast\"\nover = [0, 3]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.tri_rows(w.headline()), 5);
        // Without an index op, no matrix rows: k stays 0.
        assert_eq!(plain.tri_rows(plain.headline()), 0);
        // Refusals, each naming its field.
        for (text, field, why) in [
            (
                "[[shapes]]\nm = 4\nn = 8\n[[before]]\nop = \"mul\"\noperand = \"channel\"\nchannels = 2\n",
                "before",
                "channel operand",
            ),
            (
                "[[shapes]]\ndims = [2, 3, 4]\n[[before]]\nop = \"add\"\noperand = \"row\"\n",
                "before",
                "with shapes given as dims every tensor operand is",
            ),
        ] {
            let e = err(
                "bad",
                &format!("description = \"x\"\nfamily = \"softmax\"\ndtype = \"f32\"\n{text}"),
            );
            assert!(e.contains(&format!("field \"{field}")), "{field}: {e}");
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    /// gemm_softmax takes a chain, run on the GEMM's result before the softmax: a bias
    /// (row operand) and an activation, named in the listing, counted in the flops.
    #[test]
    fn gemm_softmax_takes_a_chain_before_the_softmax() {
        let text = "description = \"s\"\nfamily = \"gemm_softmax\"\ndtype = \"bf16\"\n[[shapes]]\nm = 64\nn = 100\nk = 32\n";
        let plain = parse("g", text).unwrap();
        let w = parse(
            "g",
            &format!("{text}[[epilogue]]\nop = \"add\"\noperand = \"row\"\n[[epilogue]]\nop = \"gelu_erf\"\n"),
        )
        .unwrap();
        assert_eq!(w.chain().steps.len(), 2);
        assert_eq!(w.chain().tensors.len(), 1);
        assert!(w.family().chain_before_row_op());
        assert!(w.summary_line().contains("+2 ops"), "{}", w.summary_line());
        let sh = w.headline();
        assert!(w.flops(sh) > plain.flops(sh));
    }

    #[test]
    fn fp8_rules() {
        let f8 = GEMM.replace("\"bf16\"", "\"e4m3\"");
        let w = parse(
            "f",
            &format!("{f8}[params]\nscale_a = 0.5\nscale_b = 4.0\n"),
        )
        .unwrap();
        assert_eq!(w.out_dtype(), DType::BF16, "fp8 defaults to a bf16 output");
        assert_eq!((w.params().scale_a, w.params().scale_b), (0.5, 4.0));
        assert_eq!(w.compute_pipe(), ComputePipe::TensorFp8);
        assert_eq!(
            w.min_bytes(w.headline()),
            3.0 * 4096.0 * 4096.0 * 2.0 - 2.0 * 4096.0 * 4096.0
        );
        let e = err("f", &format!("{GEMM}[params]\nscale_a = 0.5\n"));
        assert!(e.contains("params.scale_a") && e.contains("fp8"), "{e}");
        let e = err("f", &format!("{f8}out_dtype_x = 1\n"));
        assert!(e.contains("out_dtype_x"), "{e}");
        let e = err(
            "f",
            "description = \"a\"\nfamily = \"activation\"\ndtype = \"e4m3\"\n[[shapes]]\nn = 4\n[params]\nactivation = \"relu\"\n",
        );
        assert!(e.contains("fp8") && e.contains("activation"), "{e}");
        let e = err(
            "f",
            &GEMM.replace("dtype = \"bf16\"", "dtype = \"bf16\"\nout_dtype = \"e4m3\""),
        );
        assert!(e.contains("an fp8 output needs fp8 operands"), "{e}");
        // An fp8 D: its tensor operands (the bias, a residual) default to bf16, as
        // cuBLASLt's fp8 epilogue takes them; `dtype` still overrides.
        let w = parse(
            "f",
            &(f8.replace("dtype = \"e4m3\"", "dtype = \"e4m3\"\nout_dtype = \"e4m3\"")
                .replace("family = \"gemm\"", "family = \"gemm_bias_act\"")
                + "[params]\nactivation = \"relu\"\nscale_d = 2.0\n[[epilogue]]\nop = \"add\"\noperand = \"matrix\"\n[[epilogue]]\nop = \"mul\"\noperand = \"col\"\ndtype = \"f32\"\n"),
        )
        .unwrap();
        assert_eq!(w.out_dtype(), DType::E4M3);
        assert_eq!(w.params().scale_d, 2.0);
        let dtypes: Vec<_> = w.chain().tensors.iter().map(|t| t.dtype).collect();
        assert_eq!(dtypes, [DType::BF16, DType::BF16, DType::F32]);
    }

    const NORM: &str = "description = \"n\"\nfamily = \"norm\"\ndtype = \"bf16\"\n";

    /// A scan's [[before]] ops (a masked cumsum): a bool mask operand, indexed like D,
    /// counted at one byte an element; bool is refused as A's or D's type, and an
    /// operand of another integer type is refused naming the entry.
    #[test]
    fn scans_take_ops_before_them_and_bool_masks() {
        const S: &str =
            "description = \"s\"\nfamily = \"scan\"\ndtype = \"f32\"\n[params]\nscan = \"sum\"\n";
        let shapes = "[[shapes]]\nm = 4\nn = 100\n";
        let w = parse(
            "masked",
            &format!("{S}[[before]]\nop = \"mul\"\noperand = \"matrix\"\ndtype = \"bool\"\n[[epilogue]]\nop = \"add\"\noperand = \"col\"\n{shapes}"),
        )
        .unwrap();
        let b = w.before_chain();
        assert_eq!(
            (b.tensors[0].kind, b.tensors[0].dtype),
            (chain::TensorKind::Matrix, DType::Bool)
        );
        assert_eq!(b.eval(-0.75, &[1.0]), -0.75);
        assert_eq!(b.eval(-0.75, &[0.0]), 0.0);
        // Indexed like D (4 x 100 bytes), beside A, D (f32) and the column (4 f32).
        assert_eq!(
            w.min_bytes(w.headline()),
            400.0 * 4.0 + 400.0 + 4.0 * 4.0 + 400.0 * 4.0
        );
        assert!(
            b.cpp_before().contains("kDtype0 = 7;"),
            "{}",
            b.cpp_before()
        );
        for (text, field) in [
            (
                "description = \"s\"\nfamily = \"scan\"\ndtype = \"bool\"\n[params]\nscan = \"sum\"\n",
                "dtype",
            ),
            (
                "description = \"s\"\nfamily = \"scan\"\ndtype = \"f32\"\nout_dtype = \"bool\"\n[params]\nscan = \"sum\"\n",
                "out_dtype",
            ),
        ] {
            let e = err("x", &format!("{text}{shapes}"));
            assert!(e.contains(field) && e.contains("mask operand"), "{e}");
        }
        let e = err(
            "x",
            &format!(
                "{S}[[before]]\nop = \"mul\"\noperand = \"matrix\"\ndtype = \"i64\"\n{shapes}"
            ),
        );
        assert!(e.contains("before[0]") && e.contains("bool"), "{e}");
    }

    /// reduce's [[before]] ops: on each element of A, their tensors indexed like A in the
    /// first slots (the epilogue chain's after them), only for reduce, at most four
    /// tensors in all; an earlier tensor may be read again by its name.
    #[test]
    fn reduce_specs_take_ops_before_the_reduction() {
        const R: &str = "description = \"r\"\nfamily = \"reduce\"\ndtype = \"bf16\"\nout_dtype = \"f32\"\n[params]\nreduce = \"sum\"\n";
        let shapes = "[[shapes]]\nm = 4\nk = 100\n";
        let w = parse(
            "loss",
            &format!("{R}[[before]]\nop = \"div\"\noperand = \"matrix\"\ndtype = \"f32\"\n[[before]]\nop = \"log\"\n[[before]]\nop = \"mul\"\noperand = \"matrix0\"\n[[before]]\nop = \"mul\"\noperand = \"row\"\n[[epilogue]]\nop = \"mul\"\noperand = \"col\"\n{shapes}"),
        )
        .unwrap();
        let b = w.before_chain();
        assert_eq!(b.steps.len(), 4);
        // matrix0 read twice is one tensor; the row is the second.
        assert_eq!(b.tensors.len(), 2);
        assert_eq!(
            (b.tensors[0].kind, b.tensors[0].dtype),
            (chain::TensorKind::Matrix, DType::F32)
        );
        assert_eq!(
            (b.tensors[1].kind, b.tensors[1].dtype),
            (chain::TensorKind::Row, DType::BF16)
        );
        assert!((b.eval(2.0, &[0.5, 3.0]) - 0.5 * 4f64.ln() * 3.0).abs() < 1e-12);
        // The epilogue chain's operands follow the before ops' in the slots.
        assert!(w
            .chain()
            .cpp_from(2)
            .contains("static constexpr int kFirst = 2;"));
        assert!(b.cpp_before().contains("struct cs_before"));
        // The before tensors count in the bytes moved: A, an f32 matrix, a bf16 row, D.
        let h = w.headline();
        assert_eq!(
            w.min_bytes(h),
            (4.0 * 100.0 * 2.0) + (4.0 * 100.0 * 4.0) + 100.0 * 2.0 + 4.0 * 4.0 + 4.0 * 4.0
        );
        // Only for reduce.
        let e = err(
            "x",
            "description = \"a\"\nfamily = \"activation\"\ndtype = \"f32\"\n[params]\nactivation = \"relu\"\n[[before]]\nop = \"abs\"\n[[shapes]]\nm = 4\nn = 4\n",
        );
        assert!(
            e.contains("before") && e.contains("only for families reduce"),
            "{e}"
        );
        // Four tensor slots in all.
        let many = "[[before]]\nop = \"add\"\noperand = \"matrix\"\n".repeat(3);
        let e = err(
            "x",
            &format!("{R}{many}[[epilogue]]\nop = \"mul\"\noperand = \"col\"\n[[epilogue]]\nop = \"add\"\noperand = \"col\"\n{shapes}"),
        );
        assert!(e.contains("5 tensors together"), "{e}");
        // A tensor read again keeps its type.
        let e = err(
            "x",
            &format!("{R}[[before]]\nop = \"sub\"\noperand = \"matrix\"\n[[before]]\nop = \"mul\"\noperand = \"matrix0\"\ndtype = \"f16\"\n{shapes}"),
        );
        assert!(e.contains("keeps its type"), "{e}");
        // A name that is neither a tensor nor saved.
        let e = err(
            "x",
            &format!("{R}[[before]]\nop = \"mul\"\noperand = \"matrix3\"\n{shapes}"),
        );
        assert!(
            e.contains("before[0].operand") && e.contains("matrix0"),
            "{e}"
        );
    }

    /// triu and tril parse with their diagonal and fill (TOML's -inf) for the families
    /// whose chain runs over whole matrices, and are refused, naming the table, elsewhere.
    #[test]
    fn index_ops_are_taken_where_elements_have_positions() {
        let gemm = "description = \"t\"\nfamily = \"gemm_softmax\"\ndtype = \"bf16\"\n[[shapes]]\nm = 64\nn = 64\nk = 32\nbatch = 2\n[[epilogue]]\nop = \"scale\"\nvalue = 0.125\n[[epilogue]]\nop = \"tril\"\nvalue = -inf\n";
        let w = parse("t", gemm).unwrap();
        assert!(w.chain().positional());
        assert_eq!(
            w.chain().steps[1].op,
            chain::Op::Tri {
                upper: false,
                diag: 0,
                fill: f64::NEG_INFINITY
            }
        );
        for family in ["gemm", "gemm_bias_act"] {
            let text = gemm.replace("gemm_softmax", family).replace(
                "[[shapes]]",
                if family == "gemm" {
                    "[[shapes]]"
                } else {
                    "[params]\nactivation = \"relu\"\n[[shapes]]"
                },
            );
            assert!(parse("t", &text).unwrap().chain().positional(), "{family}");
        }
        let act = "description = \"t\"\nfamily = \"activation\"\ndtype = \"f32\"\n[[shapes]]\nm = 8\nn = 8\n[[epilogue]]\nop = \"triu\"\ndiagonal = -1\n";
        assert!(parse("t", act).unwrap().chain().positional());
        // Elsewhere: the family named, or the table.
        for (family, params) in [
            ("norm", "norm = \"rms\""),
            ("scan", "scan = \"sum\""),
            ("gemm_norm", "norm = \"layer\""),
        ] {
            let text = act.replace("activation", family).replace(
                "[[shapes]]\nm = 8\nn = 8\n",
                &format!("[params]\n{params}\n[[shapes]]\nm = 8\nn = 8\nk = 8\n"),
            );
            let text = if family == "gemm_norm" {
                text
            } else {
                text.replace("k = 8\n", "")
            };
            let e = err("t", &text);
            assert!(
                e.contains("epilogue[0].op") && e.contains("triu and tril"),
                "{family}: {e}"
            );
        }
        let e = err(
            "t",
            "description = \"t\"\nfamily = \"reduce\"\ndtype = \"f32\"\n[params]\nreduce = \"sum\"\n[[shapes]]\nm = 8\nk = 8\n[[before]]\nop = \"abs\"\n[[before]]\nop = \"tril\"\n",
        );
        assert!(
            e.contains("before[1].op") && e.contains("[[epilogue]] ops"),
            "{e}"
        );
        let e = err("t", &act.replace("diagonal = -1", "diagonal = 1.5"));
        assert!(e.contains("diagonal"), "{e}");
    }

    /// gemm_norm: a GEMM's shape; a norm (required) of each row or of `groups` groups of
    /// adjacent values (dividing every shape's n); [[before]] ops on the product, their
    /// tensors indexed like D in D's type in the first slots; the epilogue after the norm.
    #[test]
    fn gemm_norm_specs_take_groups_and_ops_on_both_sides() {
        const GN: &str = "description = \"g\"\nfamily = \"gemm_norm\"\ndtype = \"bf16\"\n";
        let shapes =
            "[[shapes]]\nm = 64\nn = 512\nk = 128\n[[shapes]]\nbatch = 2\nm = 7\nn = 48\nk = 40\n";
        let ok = format!(
            "{GN}[params]\nnorm = \"layer\"\ngroups = 16\n[[before]]\nop = \"add\"\noperand = \"row\"\n[[before]]\nop = \"mish\"\n[[epilogue]]\nop = \"mul\"\noperand = \"row\"\n[[epilogue]]\nop = \"add\"\noperand = \"matrix\"\ndtype = \"f32\"\n{shapes}"
        );
        let w = parse("g", &ok).unwrap();
        assert_eq!(w.family(), Family::GemmNorm);
        assert_eq!(w.params().groups, 16);
        assert_eq!(w.params().norm, NormKind::Layer);
        assert_eq!(w.params().eps, 1e-5, "the kind's default eps");
        let b = w.before_chain();
        assert_eq!((b.steps.len(), b.tensors.len()), (2, 1));
        assert_eq!(
            (b.tensors[0].kind, b.tensors[0].dtype),
            (chain::TensorKind::Row, DType::BF16)
        );
        // The epilogue's operands follow the before ops' in the slots.
        assert_eq!(w.chain().tensors.len(), 2);
        // Bytes: A, B, D, the before row (n), the weight row and the f32 residual (m x n).
        let h = w.headline();
        let (m, n, k) = (64.0, 512.0, 128.0);
        assert_eq!(
            w.min_bytes(h),
            (m * k + k * n) * 2.0 + m * n * 2.0 + n * 2.0 + n * 2.0 + m * n * 4.0
        );
        assert_eq!(w.before_elements(h), n);
        // The unfused sequence is its goal's baseline, at 1.2x.
        assert_eq!(w.target().speedup_vs, Baseline::Unfused);
        // Groups that do not divide a shape's n, zero groups, groups of an l2 norm, groups
        // elsewhere, no norm, a column-major D.
        let e = err("g", &ok.replace("n = 48", "n = 50"));
        assert!(e.contains("shapes[1].n") && e.contains("16 groups"), "{e}");
        let e = err("g", &ok.replace("groups = 16", "groups = 0"));
        assert!(e.contains("params.groups"), "{e}");
        let e = err("g", &ok.replace("norm = \"layer\"", "norm = \"l2\""));
        assert!(e.contains("params.groups") && e.contains("l2"), "{e}");
        let e = err(
            "g",
            &format!("{NORM}[params]\nnorm = \"rms\"\ngroups = 2\n[[shapes]]\nn = 8\n"),
        );
        assert!(
            e.contains("params.groups") && e.contains("gemm_norm"),
            "{e}"
        );
        let e = err("g", &ok.replace("norm = \"layer\"\n", ""));
        assert!(e.contains("params.norm") && e.contains("gemm_norm"), "{e}");
        let e = err(
            "g",
            &ok.replace("[params]", "[layout]\nc = \"col\"\n[params]"),
        );
        assert!(e.contains("layout.c"), "{e}");
        // A batch norm: each column over its rows (no groups), gemm_norm only; LayerNorm's
        // default eps; its listing names it.
        let bn = ok.replace("norm = \"layer\"\ngroups = 16\n", "norm = \"batch\"\n");
        let w = parse("g", &bn).unwrap();
        assert_eq!(w.params().norm, NormKind::Batch);
        assert_eq!((w.params().groups, w.params().eps), (1, 1e-5));
        assert_eq!(NormKind::Batch.abi_value(), 4);
        let e = err("g", &ok.replace("norm = \"layer\"", "norm = \"batch\""));
        assert!(
            e.contains("params.groups") && e.contains("whole columns"),
            "{e}"
        );
        // family norm's batch norm: row i of every item together, row-major rows only.
        let w = parse(
            "g",
            &format!("{NORM}[params]\nnorm = \"batch\"\n[[shapes]]\nbatch = 4\nm = 3\nn = 8\n"),
        )
        .unwrap();
        assert_eq!(w.params().norm, NormKind::Batch);
        let e = err(
            "g",
            &format!(
                "{NORM}[layout]\na = \"col\"\n[params]\nnorm = \"batch\"\n[[shapes]]\nn = 8\n"
            ),
        );
        assert!(
            e.contains("layout.a") && e.contains("every batch item"),
            "{e}"
        );
    }

    /// gemm_reduce: a GEMM's shape, D one value a row; a reduction, the chain before it
    /// (row and column operands), `[[after]]` ops (no tensors); no C.
    #[test]
    fn gemm_reduce_specs_split_their_chain_at_the_reduction() {
        const GR: &str = "description = \"g\"\nfamily = \"gemm_reduce\"\ndtype = \"bf16\"\nout_dtype = \"f32\"\n";
        let shapes = "[[shapes]]\nbatch = 2\nm = 64\nn = 300\nk = 128\n";
        let ok = format!(
            "{GR}[params]\nreduce = \"logsumexp\"\n[[epilogue]]\nop = \"add\"\noperand = \"row\"\n[[epilogue]]\nop = \"clamp\"\nmin = -10.0\nmax = 10.0\n[[after]]\nop = \"mish\"\n[[after]]\nop = \"mul\"\noperand = \"z\"\n{shapes}"
        );
        let w = parse("g", &ok).unwrap();
        let sh = w.shapes()[0];
        assert_eq!((sh.m, sh.n, sh.k, sh.batch), (64, 300, 128, 2));
        assert_eq!(w.d_cols(&sh), 1);
        assert_eq!(w.d_elements(&sh), 128);
        assert_eq!(w.chain().steps.len(), 2);
        assert_eq!(w.after_chain().steps.len(), 2);
        // The after chain is its own functor; at y = 1: mish(1) * 1.
        let mish1 = 1.0 * (1.0f64 + 1.0f64.exp()).ln().tanh();
        assert!((w.after_chain().eval(1.0, &[]) - mish1).abs() < 1e-12);
        assert!(w.after_chain().cpp_after().contains("struct cs_after"));
        // Bytes: A and B once, the bias row (in D's type, f32), D one f32 a row.
        let want = (2.0 * 64.0 * 128.0 + 2.0 * 128.0 * 300.0) * 2.0 + 300.0 * 4.0 + 128.0 * 4.0;
        assert_eq!(w.min_bytes(&sh), want);
        // Fused work: measured against the unfused sequence first.
        assert_eq!(w.target().speedup_vs, Baseline::Unfused);
        let bad = |extra: &str| {
            err(
                "g",
                &format!("{GR}[params]\nreduce = \"sum\"\n{extra}{shapes}"),
            )
        };
        let e = err("g", &format!("{GR}{shapes}"));
        assert!(
            e.contains("params.reduce") && e.contains("gemm_reduce needs one"),
            "{e}"
        );
        let e = bad("beta = 1.0\n");
        assert!(e.contains("params.beta") && e.contains("no C"), "{e}");
        let e = bad("[[epilogue]]\nop = \"add\"\noperand = \"matrix\"\n");
        assert!(e.contains("not a matrix"), "{e}");
        let e = bad("[[after]]\nop = \"mul\"\noperand = \"col\"\n");
        assert!(e.contains("[[after]] ops read no tensor"), "{e}");
        let e = bad("[layout]\nc = \"col\"\n");
        assert!(e.contains("layout.c") && e.contains("m x 1"), "{e}");
        let e = err("g", &format!("{GEMM}[[after]]\nop = \"relu\"\n"));
        assert!(
            e.contains("after") && e.contains("only for family gemm_reduce"),
            "{e}"
        );
    }

    const REDUCE: &str = "description = \"r\"\nfamily = \"reduce\"\ndtype = \"f32\"\n";

    #[test]
    fn reduce_specs_take_a_kind_k_a_layout_and_a_column_chain() {
        let shapes = "[[shapes]]\nbatch = 4\nm = 5\nk = 600\n";
        let e = err("r", &format!("{REDUCE}{shapes}"));
        assert!(
            e.contains("params.reduce") && e.contains("sum, mean, max, min, logsumexp, l2"),
            "{e}"
        );
        let w = parse(
            "r",
            &format!("{REDUCE}[layout]\na = \"col\"\n[params]\nreduce = \"mean\"\n{shapes}"),
        )
        .unwrap();
        // D is one value a row: n = 1, k the reduced length; the mean's atol shrinks with k.
        assert_eq!(
            w.shapes()[0],
            Shape {
                m: 5,
                n: 1,
                k: 600,
                batch: 4,
                dims: Default::default(),
            }
        );
        assert_eq!(w.layouts().a, Layout::Col);
        assert_eq!(w.tolerance().atol_scale, AtolScale::InvSqrtK);
        assert!((w.tolerance().atol_at(&w.shapes()[0]) - 1e-5 / 600f64.sqrt()).abs() < 1e-15);
        // Bytes: A once (4 x 5 x 600 f32) and D (20 f32).
        assert_eq!(
            w.min_bytes(&w.shapes()[0]),
            (4.0 * 5.0 * 600.0 + 20.0) * 4.0
        );
        // n is not a reduction's, nor a reduction another family's; b is not an operand.
        let e = err(
            "r",
            &format!("{REDUCE}[params]\nreduce = \"sum\"\n[[shapes]]\nm = 5\nn = 3\nk = 7\n"),
        );
        assert!(
            e.contains("shapes[0].n") && e.contains("not used by reduce"),
            "{e}"
        );
        let e = err("g", &format!("{GEMM}[params]\nreduce = \"sum\"\n"));
        assert!(
            e.contains("params.reduce") && e.contains("only for reduce"),
            "{e}"
        );
        let e = err(
            "r",
            &format!("{REDUCE}[layout]\nb = \"col\"\n[params]\nreduce = \"sum\"\n{shapes}"),
        );
        assert!(e.contains("only `a` may be set"), "{e}");
        // A chain after it may read a column operand (one value a row), not a row one.
        let ok = parse(
            "r",
            &format!("{REDUCE}[params]\nreduce = \"max\"\n[[epilogue]]\nop = \"mul\"\noperand = \"col\"\n[[epilogue]]\nop = \"gelu_erf\"\n{shapes}"),
        )
        .unwrap();
        assert_eq!(ok.chain().steps.len(), 2);
        let e = err(
            "r",
            &format!("{REDUCE}[params]\nreduce = \"max\"\n[[epilogue]]\nop = \"add\"\noperand = \"row\"\n{shapes}"),
        );
        assert!(e.contains("must be operand = \"col\""), "{e}");
    }

    const SCAN: &str = "description = \"s\"\nfamily = \"scan\"\ndtype = \"bf16\"\n";

    #[test]
    fn scan_specs_take_a_kind_flags_a_layout_and_a_chain() {
        let shapes = "[[shapes]]\nbatch = 2\nm = 5\nn = 600\n";
        let e = err("s", &format!("{SCAN}{shapes}"));
        assert!(e.contains("params.scan") && e.contains("sum, prod"), "{e}");
        let w = parse(
            "s",
            &format!(
                "{SCAN}out_dtype = \"f32\"\n[layout]\na = \"col\"\n[params]\nscan = \"prod\"\nreverse = true\nexclusive = true\n[[epilogue]]\nop = \"add\"\noperand = \"row\"\n{shapes}"
            ),
        )
        .unwrap();
        assert_eq!(
            w.shapes()[0],
            Shape {
                m: 5,
                n: 600,
                k: 0,
                batch: 2,
                dims: Default::default(),
            }
        );
        let p = w.params();
        assert_eq!(
            (p.scan, p.reverse, p.exclusive),
            (ScanKind::Prod, true, true)
        );
        assert_eq!(ScanKind::flags(p.reverse, p.exclusive), 3);
        // D has A's layout; the bytes are A once (bf16) and D once (f32), plus the row operand.
        assert_eq!((w.layouts().a, w.layouts().c), (Layout::Col, Layout::Col));
        assert_eq!(
            w.min_bytes(&w.shapes()[0]),
            2.0 * 5.0 * 600.0 * (2.0 + 4.0) + 600.0 * 4.0
        );
        assert_eq!(w.goal_baseline(), "copy");
        // Defaults: forward, inclusive.
        let w = parse("s", &format!("{SCAN}[params]\nscan = \"sum\"\n{shapes}")).unwrap();
        assert_eq!((w.params().reverse, w.params().exclusive), (false, false));
        // k is not a scan's; the flags are not another family's; D keeps A's layout; the
        // output is the input's type or f32.
        let e = err(
            "s",
            &format!("{SCAN}[params]\nscan = \"sum\"\n[[shapes]]\nm = 5\nn = 3\nk = 7\n"),
        );
        assert!(
            e.contains("shapes[0].k") && e.contains("not used by scan"),
            "{e}"
        );
        let e = err(
            "n",
            &format!("{NORM}[params]\nnorm = \"rms\"\nreverse = true\n{shapes}"),
        );
        assert!(
            e.contains("params.reverse") && e.contains("only for scan"),
            "{e}"
        );
        let e = err(
            "s",
            &format!(
                "{SCAN}[layout]\na = \"col\"\nc = \"row\"\n[params]\nscan = \"sum\"\n{shapes}"
            ),
        );
        assert!(e.contains("a scan writes D in A's layout"), "{e}");
        let e = err(
            "s",
            &format!("{SCAN}out_dtype = \"f16\"\n[params]\nscan = \"sum\"\n{shapes}"),
        );
        assert!(e.contains("a scan writes bf16 or f32"), "{e}");
    }

    #[test]
    fn scan_references_and_their_bounds() {
        let u = 1e-6;
        let row = [1.0, -2.0, 3.5, 0.5];
        // Inclusive: each prefix, bounded by u times the sum of |x| it adds.
        assert_eq!(
            ScanKind::Sum.eval(&row, false, u),
            vec![(1.0, u), (-1.0, 3.0 * u), (2.5, 6.5 * u), (3.0, 7.0 * u)]
        );
        // Exclusive: the identity first, each element left out of its own output.
        assert_eq!(
            ScanKind::Sum.eval(&row, true, u),
            vec![(0.0, 0.0), (1.0, u), (-1.0, 3.0 * u), (2.5, 6.5 * u)]
        );
        // The product: (terms + 1) u / 2 relative to each output.
        let p = ScanKind::Prod.eval(&row, false, u);
        assert_eq!(
            p.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![1.0, -2.0, -7.0, -3.5]
        );
        assert!((p[2].1 - 4.0 * u / 2.0 * 7.0).abs() < 1e-18, "{p:?}");
        assert_eq!(ScanKind::Prod.eval(&row, true, u)[0], (1.0, u / 2.0));
        // A NaN spreads to every later output (with no bound, which NaN would not hold);
        // inf - inf is NaN; a zero stops a product.
        let nan = ScanKind::Sum.eval(&[1.0, f64::NAN, 2.0], false, u);
        assert!(!nan[0].0.is_nan() && nan[1].0.is_nan() && nan[2].0.is_nan());
        assert!(nan.iter().all(|x| !x.1.is_nan()));
        let inf = ScanKind::Sum.eval(&[f64::INFINITY, 1.0, f64::NEG_INFINITY], false, u);
        assert_eq!(inf[1].0, f64::INFINITY);
        assert!(inf[2].0.is_nan());
        let zero = ScanKind::Prod.eval(&[3.0, 0.0, 5.0], false, u);
        assert_eq!((zero[1].0, zero[2].0), (0.0, 0.0));
    }

    #[test]
    fn reduce_references_and_their_bounds() {
        let u = 1e-6;
        let row = [1.0, -2.0, 3.5, 0.5];
        let it = || row.iter().copied();
        assert_eq!(ReduceKind::Sum.eval(it(), u), (3.0, 7.0 * u));
        assert_eq!(ReduceKind::Mean.eval(it(), u), (0.75, 7.0 * u / 4.0));
        assert_eq!(ReduceKind::Max.eval(it(), u), (3.5, 0.0));
        assert_eq!(ReduceKind::Min.eval(it(), u), (-2.0, 0.0));
        let (l2, e) = ReduceKind::L2.eval(it(), u);
        assert!((l2 - 17.5f64.sqrt()).abs() < 1e-15 && (e - u * l2).abs() < 1e-18);
        let (lse, _) = ReduceKind::Logsumexp.eval(it(), u);
        let direct = row.iter().map(|x: &f64| x.exp()).sum::<f64>().ln();
        assert!((lse - direct).abs() < 1e-14);
        // Large values do not overflow (the max is taken out first).
        let (big, _) = ReduceKind::Logsumexp.eval([1000.0, 1000.0].into_iter(), u);
        assert!((big - (1000.0 + 2f64.ln())).abs() < 1e-12);
        // A NaN anywhere makes every value kind NaN (an index kind points at it); -inf rows
        // keep logsumexp at -inf.
        let nan = [1.0, f64::NAN, 2.0];
        for kind in ReduceKind::ALL.into_iter().filter(|k| !k.is_index()) {
            assert!(kind.eval(nan.iter().copied(), u).0.is_nan(), "{kind}");
        }
        let (neg, _) = ReduceKind::Logsumexp.eval([f64::NEG_INFINITY; 3].into_iter(), u);
        assert_eq!(neg, f64::NEG_INFINITY);
        assert_eq!(
            ReduceKind::Max.eval([f64::INFINITY, 1.0].into_iter(), u).0,
            f64::INFINITY
        );
    }

    /// argmax / argmin as torch's: the first extreme's index, the first NaN's if any, exact.
    #[test]
    fn index_reductions_take_the_first_extreme_or_nan() {
        let (u, nan, inf) = (1e-6, f64::NAN, f64::INFINITY);
        let at = |k: ReduceKind, row: &[f64]| k.eval(row.iter().copied(), u);
        let (amax, amin) = (ReduceKind::Argmax, ReduceKind::Argmin);
        assert_eq!(at(amax, &[1.0, -2.0, 3.5, 0.5]), (2.0, 0.0));
        assert_eq!(at(amin, &[1.0, -2.0, 3.5, 0.5]), (1.0, 0.0));
        // Ties go to the first.
        assert_eq!(at(amax, &[1.0, 3.0, 0.0, 3.0]).0, 1.0);
        assert_eq!(at(amin, &[0.0, -1.0, -1.0]).0, 1.0);
        // A NaN wins over everything, the first NaN over a later one.
        assert_eq!(at(amax, &[inf, nan, 2.0, nan]).0, 1.0);
        assert_eq!(at(amin, &[-inf, 0.0, nan]).0, 2.0);
        // A row of one infinity (or of one value) points at its first element.
        assert_eq!(at(amax, &[-inf, -inf]).0, 0.0);
        assert_eq!(at(amin, &[inf, inf, inf]).0, 0.0);
        assert_eq!(at(amax, &[7.0]).0, 0.0);
        assert!(amax.is_index() && !ReduceKind::Max.is_index());
    }

    /// An index reduction writes i64 (the default, and the only type it takes); i64 is an
    /// output of nothing else and never an operand; no op comes before or after it, it is
    /// not gemm_reduce's, and its rows fit 2^24.
    #[test]
    fn index_reductions_write_i64_alone() {
        const R: &str = "description = \"r\"\nfamily = \"reduce\"\ndtype = \"bf16\"\n";
        let shapes = "[[shapes]]\nm = 4\nk = 100\n";
        let w = parse("a", &format!("{R}[params]\nreduce = \"argmax\"\n{shapes}")).unwrap();
        assert_eq!(w.out_dtype(), DType::I64);
        assert_eq!(w.params().reduce, ReduceKind::Argmax);
        let w = parse(
            "a",
            &format!("{R}out_dtype = \"int64\"\n[params]\nreduce = \"argmin\"\n{shapes}"),
        )
        .unwrap();
        assert_eq!(
            (w.out_dtype(), w.params().reduce),
            (DType::I64, ReduceKind::Argmin)
        );
        // Each refused spec's error names its field and says why.
        let refused = |text: String, words: &[&str]| {
            let e = err("a", &text);
            assert!(words.iter().all(|w| e.contains(w)), "{e}");
        };
        refused(
            format!("{R}out_dtype = \"f32\"\n[params]\nreduce = \"argmax\"\n{shapes}"),
            &["out_dtype", "i64 indices"],
        );
        refused(
            format!("{R}out_dtype = \"i64\"\n[params]\nreduce = \"sum\"\n{shapes}"),
            &["out_dtype", "argmax"],
        );
        refused(
            format!(
                "{}[params]\nreduce = \"argmax\"\n{shapes}",
                R.replace("bf16", "i64")
            ),
            &["dtype", "only an output"],
        );
        for (table, op) in [("epilogue", "relu"), ("before", "abs")] {
            refused(
                format!("{R}[params]\nreduce = \"argmax\"\n[[{table}]]\nop = \"{op}\"\n{shapes}"),
                &[table, "compared exactly"],
            );
        }
        refused(
            format!("{R}[params]\nreduce = \"argmin\"\n[[shapes]]\nm = 2\nk = 16777217\n"),
            &["shapes[0].k", "2^24"],
        );
        refused(
            format!("{R}[params]\nreduce = \"argmax\"\n[tolerance]\natol = 1.0\n{shapes}"),
            &["tolerance", "exactly"],
        );
        let e = err(
            "g",
            "description = \"g\"\nfamily = \"gemm_reduce\"\ndtype = \"bf16\"\n[params]\nreduce = \"argmax\"\n[[shapes]]\nm = 4\nn = 4\nk = 4\n",
        );
        assert!(
            e.contains("params.reduce") && e.contains("gemm_reduce"),
            "{e}"
        );
    }

    /// A cross entropy is a row's logsumexp less its target's logit; a row with the ignore
    /// index is left out (0 with total none, not counted by a mean); a target outside the
    /// row is NaN; the total's bound adds the rows' bounds to the sum's own.
    #[test]
    fn cross_entropy_picks_the_target_and_totals_the_rows_kept() {
        let u = 1e-6;
        let row = [1.0, 2.0, 3.0];
        let lse = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        let ce = |t: i64| ReduceKind::cross_entropy(row.iter().copied(), t, -100, u);
        let (v, e) = ce(0).unwrap();
        assert!(
            (v - (lse - 1.0)).abs() < 1e-12 && e > 0.0 && e < 1e-4,
            "{v} {e}"
        );
        assert!((ce(2).unwrap().0 - (lse - 3.0)).abs() < 1e-12);
        assert_eq!(ce(-100), None);
        assert!(ce(3).unwrap().0.is_nan() && ce(-1).unwrap().0.is_nan());
        // The ignore index may be any value, a class's too.
        assert_eq!(
            ReduceKind::cross_entropy(row.iter().copied(), 1, 1, u),
            None
        );
        // A large logit does not overflow (logsumexp about its max).
        let big = [1000.0, 0.0];
        let (v, _) = ReduceKind::cross_entropy(big.iter().copied(), 1, -100, u).unwrap();
        assert!((v - 1000.0).abs() < 1e-9, "{v}");
        let rows = [Some((2.0, 0.1)), None, Some((4.0, 0.3))];
        assert_eq!(TotalKind::Sum.eval(&rows, 0.0), (6.0, 0.4f64 + 0.0));
        let (mean, me) = TotalKind::Mean.eval(&rows, u);
        assert!((mean - 3.0).abs() < 1e-12 && (me - (0.4 + u * 6.0) / 2.0).abs() < 1e-15);
        assert!(TotalKind::Mean.eval(&[None, None], u).0.is_nan());
        assert_eq!(TotalKind::Sum.eval(&[None], u), (0.0, 0.0));
    }

    /// A cross entropy takes a total (default mean, as torch's) and an ignore index
    /// (default -100); D is one value a batch with a total; nothing else takes either, and
    /// it takes no ops, no rows side by side and no gemm_reduce.
    #[test]
    fn cross_entropy_specs_take_a_total_and_an_ignore_index_alone() {
        const R: &str = "description = \"r\"\nfamily = \"reduce\"\ndtype = \"bf16\"\n";
        let shapes = "[[shapes]]\nbatch = 3\nm = 4\nk = 100\n";
        let ce = "[params]\nreduce = \"cross_entropy\"\n";
        let w = parse("c", &format!("{R}{ce}{shapes}")).unwrap();
        let (p, sh) = (w.params(), *w.headline());
        assert_eq!((p.total, p.ignore_index), (TotalKind::Mean, -100));
        assert_eq!(
            (w.d_rows(&sh), w.d_elements(&sh), w.out_dtype()),
            (1, 3, DType::BF16)
        );
        // 3 x 4 x 100 bf16 logits and 12 int64 targets in, 3 bf16 values out.
        assert_eq!(w.min_bytes(&sh), 1200.0 * 2.0 + 12.0 * 8.0 + 3.0 * 2.0);
        let w = parse(
            "c",
            &format!("{R}{ce}total = \"none\"\nignore_index = 0\n{shapes}"),
        )
        .unwrap();
        assert_eq!(
            (w.params().total, w.params().ignore_index),
            (TotalKind::None, 0)
        );
        assert_eq!(w.d_elements(w.headline()), 12);
        let refused = |text: String, words: &[&str]| {
            let e = err("c", &text);
            assert!(words.iter().all(|w| e.contains(w)), "{e}");
        };
        // A total of a sum or mean's rows (a whole item's sum or mean), no op after it; not
        // of the other reductions.
        let t = parse(
            "c",
            &format!("{R}[params]\nreduce = \"sum\"\ntotal = \"mean\"\n{shapes}"),
        )
        .unwrap();
        assert_eq!(t.params().total, TotalKind::Mean);
        assert_eq!(t.d_elements(t.headline()), 3);
        refused(
            format!("{R}[params]\nreduce = \"max\"\ntotal = \"mean\"\n{shapes}"),
            &["params.total", "\"sum\", \"mean\" or \"cross_entropy\""],
        );
        refused(
            format!("{R}[params]\nreduce = \"mean\"\ntotal = \"mean\"\n{shapes}[[epilogue]]\nop = \"relu\"\n"),
            &["epilogue", "no [[epilogue]] ops"],
        );
        refused(
            format!("{R}[params]\nreduce = \"sum\"\ntotal = \"sum\"\n{shapes}")
                .replace("dtype = \"bf16\"", "dtype = \"f16\""),
            &["out_dtype", "65504"],
        );
        refused(
            format!("{R}[params]\nreduce = \"logsumexp\"\nignore_index = 3\n{shapes}"),
            &["params.ignore_index", "cross_entropy"],
        );
        refused(format!("{R}{ce}total = \"max\"\n{shapes}"), &["total"]);
        // A total needs a shape of a few rows a batch; an f16 sum of many rows overflows.
        refused(
            format!("{R}{ce}[[shapes]]\nm = 1000\nk = 100\n"),
            &["shapes", "at most 4 rows", "batch = 64, m = 3"],
        );
        refused(
            format!(
                "{}{ce}total = \"sum\"\n{shapes}[[shapes]]\nm = 10000\nk = 100\n",
                R.replace("bf16", "f16")
            ),
            &["shapes[1]", "65504", "out_dtype = \"f32\""],
        );
        refused(
            format!("{R}[layout]\na = \"col\"\n{ce}{shapes}"),
            &["layout.a", "contiguous"],
        );
        for (table, op) in [("epilogue", "relu"), ("before", "abs")] {
            refused(
                format!("{R}{ce}[[{table}]]\nop = \"{op}\"\n{shapes}"),
                &[table, "cross_entropy"],
            );
        }
        let e = err(
            "g",
            "description = \"g\"\nfamily = \"gemm_reduce\"\ndtype = \"bf16\"\n[params]\nreduce = \"cross_entropy\"\n[[shapes]]\nm = 4\nn = 4\nk = 4\n",
        );
        assert!(e.contains("params.reduce") && e.contains("target"), "{e}");
    }

    #[test]
    fn norm_specs_take_a_kind_an_eps_a_layout_and_a_chain() {
        let shapes = "[[shapes]]\nm = 8\nn = 100\n";
        // The kind is required, with the allowed ones named.
        let e = err("n", &format!("{NORM}{shapes}"));
        assert!(
            e.contains("params.norm") && e.contains("rms, layer, l2, l1"),
            "{e}"
        );
        // Defaults: eps per kind; atol shrinking with the row for l2 and l1.
        let w = parse("n", &format!("{NORM}[params]\nnorm = \"layer\"\n{shapes}")).unwrap();
        assert_eq!(
            (w.params().norm, w.params().eps, w.tolerance().atol_scale),
            (NormKind::Layer, 1e-5, AtolScale::None)
        );
        let l2 = parse("n", &format!("{NORM}[params]\nnorm = \"l2\"\n{shapes}")).unwrap();
        assert_eq!(
            (l2.params().eps, l2.tolerance().atol_scale),
            (1e-12, AtolScale::InvSqrtN)
        );
        let sh = Shape::rows(8, 100);
        assert!((l2.tolerance().atol_at(&sh) - 1e-2 / 10.0).abs() < 1e-12);
        let l1 = parse(
            "n",
            &format!("{NORM}[params]\nnorm = \"l1\"\neps = 0.0\n{shapes}"),
        )
        .unwrap();
        assert_eq!(
            (l1.params().eps, l1.tolerance().atol_scale),
            (0.0, AtolScale::InvN)
        );
        // A negative eps, an eps or a kind on another family, an activation param.
        let e = err(
            "n",
            &format!("{NORM}[params]\nnorm = \"rms\"\neps = -1.0\n{shapes}"),
        );
        assert!(e.contains("params.eps") && e.contains(">= 0"), "{e}");
        let e = err("g", &format!("{GEMM}[params]\neps = 1e-5\n"));
        assert!(
            e.contains("params.eps") && e.contains("only for norm"),
            "{e}"
        );
        let e = err("g", &format!("{GEMM}[params]\nnorm = \"rms\"\n"));
        assert!(e.contains("params.norm"), "{e}");
        let e = err(
            "n",
            &format!("{NORM}[params]\nnorm = \"rms\"\nactivation = \"relu\"\n{shapes}"),
        );
        assert!(
            e.contains("params.activation") && e.contains("[[epilogue]]"),
            "{e}"
        );
        // Batch and a column-major A (rows side by side); D follows A; no B.
        let col = parse(
            "n",
            &format!("{NORM}[layout]\na = \"col\"\n[params]\nnorm = \"rms\"\n[[shapes]]\nbatch = 3\nm = 10\nn = 7\n"),
        )
        .unwrap();
        assert_eq!(
            (col.layouts().a, col.layouts().c),
            (Layout::Col, Layout::Col)
        );
        assert_eq!(col.headline().to_string(), "3x(10x7)");
        assert_eq!(col.min_bytes(col.headline()), 2.0 * 210.0 * 2.0);
        let e = err(
            "n",
            &format!(
                "{NORM}[layout]\na = \"col\"\nc = \"row\"\n[params]\nnorm = \"rms\"\n{shapes}"
            ),
        );
        assert!(e.contains("layout.c"), "{e}");
        let e = err(
            "n",
            &format!("{NORM}[layout]\nb = \"col\"\n[params]\nnorm = \"rms\"\n{shapes}"),
        );
        assert!(e.contains("layout") && e.contains("one operand"), "{e}");
        let e = err(
            "n",
            &format!("{NORM}[params]\nnorm = \"rms\"\n[[shapes]]\nn = 4\nk = 2\n"),
        );
        assert!(e.contains("shapes[0].k"), "{e}");
        let e = err(
            "n",
            &format!("{NORM}out_dtype = \"f16\"\n[params]\nnorm = \"rms\"\n{shapes}"),
        );
        assert!(e.contains("out_dtype") && e.contains("bf16 or f32"), "{e}");
        // The chain runs after the norm: LayerNorm's weight and bias.
        let ln = Workload::find(dir(), "norm_layer_f32_kernelbench").unwrap();
        assert_eq!(ln.chain().tensors.len(), 2);
        assert_eq!(ln.target().baselines, vec![Baseline::Copy]);
        assert_eq!(ln.goal_baseline(), "copy");
        let copy = vec![("copy".to_string(), 100.0, Some(0.85))];
        assert_eq!(
            ln.goal(Some(118.0), &copy, None),
            ("80% of copy".to_string(), true)
        );
        // A baseline that cannot run a norm is refused by name.
        let e = err(
            "n",
            &format!("{NORM}[params]\nnorm = \"rms\"\n{shapes}[target]\nbaselines = [\"cudnn\"]\n"),
        );
        assert!(
            e.contains("cannot run norm") && e.contains("allowed for norm: torch, copy"),
            "{e}"
        );
    }

    #[test]
    fn norm_shift_and_scale_follow_their_formulas() {
        let row = [1.0, -2.0, 3.0, 6.0];
        let s = RowStats::of(row.iter().copied());
        assert_eq!((s.sum, s.sumsq, s.abs_sum), (8.0, 50.0, 12.0));
        // mean 2: (1, 16, 1, 16) about it.
        assert_eq!(s.centered, 34.0);
        let close = |a: (f64, f64), b: (f64, f64)| {
            assert!(
                (a.0 - b.0).abs() < 1e-15 && (a.1 - b.1).abs() < 1e-15,
                "{a:?} vs {b:?}"
            )
        };
        close(
            NormKind::Rms.shift_scale(4.0, s, 0.5),
            (0.0, 1.0 / 13.0f64.sqrt()),
        );
        close(
            NormKind::Layer.shift_scale(4.0, s, 0.0),
            (2.0, 1.0 / 8.5f64.sqrt()),
        );
        close(
            NormKind::L2.shift_scale(4.0, s, 0.0),
            (0.0, 1.0 / 50.0f64.sqrt()),
        );
        close(NormKind::L1.shift_scale(4.0, s, 0.0), (0.0, 1.0 / 12.0));
        // eps bounds the divisor of an all-zero row (F.normalize); rms adds it.
        let z = RowStats::of([0.0; 3].into_iter());
        close(NormKind::L2.shift_scale(3.0, z, 1e-12), (0.0, 1e12));
        close(NormKind::L1.shift_scale(3.0, z, 0.25), (0.0, 4.0));
        close(NormKind::Rms.shift_scale(3.0, z, 0.25), (0.0, 2.0));
        // A constant row: LayerNorm gives 0 (x - mean) with 1/sqrt(eps) as the scale.
        let c = RowStats::of([5.0; 4].into_iter());
        close(NormKind::Layer.shift_scale(4.0, c, 0.25), (5.0, 2.0));
        // NaN and infinity propagate into the statistics.
        assert!(RowStats::of([1.0, f64::NAN].into_iter()).sum.is_nan());
        let inf = RowStats::of([1.0, f64::INFINITY].into_iter());
        assert!(NormKind::Rms.shift_scale(2.0, inf, 0.0).1 == 0.0);
    }

    #[test]
    fn new_families() {
        let glu = Workload::find(dir(), "gemm_glu_swiglu_bf16").unwrap();
        assert_eq!(glu.params().gate, Activation::Silu);
        let h = glu.headline();
        assert_eq!(
            glu.flops(h),
            2.0 * 2.0 * 4096.0 * 14336.0 * 4096.0 + 4096.0 * 14336.0 * 5.0
        );
        let sm = Workload::find(dir(), "gemm_softmax_bf16_head").unwrap();
        assert!(!sm.params().log_softmax);
        assert_eq!(sm.tolerance().atol_scale, AtolScale::InvN);
        let ls = Workload::find(dir(), "log_softmax_bf16_4096x32000").unwrap();
        assert_eq!(ls.flops(ls.headline()), 6.0 * 4096.0 * 32000.0);
        let e = err("g", &format!("{GEMM}[params]\ngate = \"silu\"\n"));
        assert!(e.contains("params.gate") && e.contains("gemm_glu"), "{e}");
    }

    #[test]
    fn every_shipped_spec_loads() {
        let all = Workload::load_dir(dir()).unwrap_or_else(|e| panic!("{e}"));
        assert!(all.len() >= 34, "only {} workloads", all.len());
        let names: Vec<_> = all.iter().map(|w| w.name().to_string()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        for w in &all {
            assert!(!w.shapes().is_empty());
            assert!(w.flops(w.headline()) >= 0.0);
            assert!(w.min_bytes(w.headline()) > 0.0);
            assert!(!w.summary_line().is_empty());
            assert!(w.summary_line().starts_with(w.name()));
        }
        for name in [
            "gemm_bf16_4096",
            "gemm_f16_4096",
            "gemm_f32_4096",
            "gemm_tf32_4096",
            "gemm_bias_relu_bf16",
            "gemm_bias_gelu_bf16",
            "act_relu_bf16",
            "act_tanh_f32",
            "softmax_bf16_4096x65536",
            "softmax_f32_4096x65536",
        ] {
            assert!(names.iter().any(|n| n == name), "missing {name}");
        }
    }

    #[test]
    fn headline_gemm_flops_and_bytes() {
        let w = Workload::find(dir(), "gemm_bf16_4096").unwrap_or_else(|e| panic!("{e}"));
        let h = *w.headline();
        assert_eq!(h, Shape::gemm(4096, 4096, 4096));
        assert_eq!(w.flops(&h), 137_438_953_472.0);
        assert!((w.flops(&h) / 1.374e11 - 1.0).abs() < 1e-3);
        assert_eq!(w.min_bytes(&h), 100_663_296.0);
        assert_eq!(w.layouts(), Layouts::default());
        assert_eq!(w.layouts().blas_name(), "TN");
        assert_eq!(w.compute_pipe(), ComputePipe::TensorBf16);
        assert_eq!(
            w.target().baselines,
            vec![Baseline::Cublas, Baseline::Cublaslt]
        );
        assert_eq!(w.target().speedup_vs, Baseline::Cublas);
        // 1e15 FLOP/s and 3.35e12 B/s: the math takes 137 us, the bytes 30 us.
        let floor = w.roofline_floor_s(&h, 3.35e12, 1e15);
        assert!((floor - 137_438_953_472.0 / 1e15).abs() < 1e-12);
        assert_eq!(
            w.roofline_class(&h, 1e15 / 3.35e12),
            RooflineClass::ComputeBound
        );
        let line = w.summary_line();
        assert!(line.contains("137.4 GFLOP"), "{line}");
        assert!(line.contains("100.7 MB"), "{line}");
        assert!(line.contains("4096x4096x4096"), "{line}");
    }

    #[test]
    fn gemm_epilogue_beta_bias_and_batch() {
        let w = parse(
            "g",
            r#"
description = "x"
family = "gemm_bias_act"
dtype = "f16"
out_dtype = "f32"
[[shapes]]
m = 2
n = 3
k = 5
batch = 7
[params]
activation = "gelu_tanh"
beta = 0.5
"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let s = *w.headline();
        let out = 2.0 * 3.0 * 7.0;
        // 2mnk*batch + beta (2/out) + bias (1/out) + gelu_tanh (9/out).
        assert_eq!(
            w.flops(&s),
            2.0 * 2.0 * 3.0 * 5.0 * 7.0 + out * (2.0 + 1.0 + 9.0)
        );
        // A, B in f16; C read and D written in f32; bias (n) in f32 once.
        let bytes = (2.0 * 5.0 + 5.0 * 3.0) * 7.0 * 2.0 + 2.0 * out * 4.0 + 3.0 * 4.0;
        assert_eq!(w.min_bytes(&s), bytes);
        assert_eq!(w.params().activation.abi_value(), 4);
        assert!(w.params().bias);
    }

    #[test]
    fn activation_and_softmax_arithmetic() {
        let w = Workload::find(dir(), "act_relu_bf16").unwrap_or_else(|e| panic!("{e}"));
        let h = *w.headline();
        assert_eq!(h, Shape::rows(1, 1 << 28));
        assert_eq!(w.flops(&h), (1u64 << 28) as f64);
        assert_eq!(w.min_bytes(&h), (1u64 << 28) as f64 * 4.0);
        assert_eq!(w.roofline_class(&h, 295.0), RooflineClass::MemoryBound);
        assert_eq!(w.target().baselines, vec![Baseline::Cudnn, Baseline::Copy]);
        let floor = w.roofline_floor_s(&h, 3.35e12, 6.7e13);
        assert!((floor - (1u64 << 30) as f64 / 3.35e12).abs() < 1e-12);

        let s = Workload::find(dir(), "softmax_f32_4096x65536").unwrap_or_else(|e| panic!("{e}"));
        let h = *s.headline();
        assert_eq!(h, Shape::rows(4096, 65536));
        assert_eq!(s.flops(&h), 5.0 * 4096.0 * 65536.0);
        assert_eq!(s.min_bytes(&h), 2.0 * 4.0 * 4096.0 * 65536.0);
        assert_eq!(s.tolerance().atol_at(&h), 1e-5 / 65536.0);

        let l = Workload::find(dir(), "act_leaky_relu_f32").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.params().activation, Activation::LeakyRelu);
        assert!(l.params().act_alpha > 0.0);
    }

    #[test]
    fn tolerance_defaults_and_scaling() {
        let w = parse("g", GEMM).unwrap_or_else(|e| panic!("{e}"));
        let t = w.tolerance();
        // A GEMM's atol no longer grows with k: the validator bounds each element's
        // rounding error from its own dot product instead.
        assert_eq!(
            (t.rtol, t.atol, t.atol_scale),
            (1.6e-2, 1e-2, AtolScale::None)
        );
        let s = Shape::gemm(1, 1, 4096);
        assert!((t.atol_at(&s) - 0.01).abs() < 1e-12);
        assert!(t.accepts(100.0, 100.5, &s));
        assert!(!t.accepts(100.0, 105.0, &s));
        assert!(!t.accepts(f64::NAN, 1.0, &s));
        assert!(t.accepts(f64::NAN, f64::NAN, &s));
        let tf = Workload::find(dir(), "gemm_tf32_4096").unwrap_or_else(|e| panic!("{e}"));
        let f = Workload::find(dir(), "gemm_f32_4096").unwrap_or_else(|e| panic!("{e}"));
        assert!(tf.allow_tf32() && !f.allow_tf32());
        assert!(tf.tolerance().rtol > 100.0 * f.tolerance().rtol);
        assert_eq!(tf.compute_pipe(), ComputePipe::TensorTf32);
        assert_eq!(f.compute_pipe(), ComputePipe::SimtF32);
        // A scaled atol stops at half the output type's subnormal step: an f16 L1 norm of
        // 65536 (elements near 1.5e-5, f16 subnormals) keeps 2^-25, not 1e-3 / 65536.
        let l1 = parse(
            "n",
            "description = \"n\"\nfamily = \"norm\"\ndtype = \"f16\"\n[params]\nnorm = \"l1\"\n[[shapes]]\nm = 4\nn = 65536\n",
        )
        .unwrap();
        let sh = Shape::rows(4, 65536);
        assert_eq!(l1.tolerance().atol_at(&sh), 2f64.powi(-25));
        assert!(l1.tolerance().accepts(2f64.powi(-25), 0.0, &sh));
        assert!(!l1.tolerance().accepts(2f64.powi(-24), 0.0, &sh));
        // ... and a short row keeps its scaled atol.
        assert_eq!(l1.tolerance().atol_at(&Shape::rows(4, 100)), 1e-3 / 100.0);
    }

    #[test]
    fn abi_values_match_the_header() {
        let header = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("cutlass-templates/include/cutesmith_abi.h"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let has = |name: &str, v: i32| {
            assert!(
                header.contains(&format!("{name} = {v}")),
                "{name} = {v} not in the header"
            );
        };
        for (n, d) in [
            ("F32", DType::F32),
            ("F16", DType::F16),
            ("BF16", DType::BF16),
            ("F64", DType::F64),
        ] {
            has(&format!("CS_DTYPE_{n}"), d.abi_value());
        }
        for f in Family::ALL {
            has(
                &format!("CS_FAMILY_{}", f.name().to_uppercase()),
                f.abi_value(),
            );
        }
        for k in NormKind::ALL {
            has(
                &format!("CS_NORM_{}", k.name().to_uppercase()),
                k.abi_value(),
            );
        }
        has("CS_LAYOUT_ROW", Layout::Row.abi_value());
        has("CS_LAYOUT_COL", Layout::Col.abi_value());
        for a in Activation::ALL {
            let n = a.name().to_uppercase();
            has(&format!("CS_ACT_{n}"), a.abi_value());
        }
        assert_eq!(DType::BF16.bytes(), 2);
        assert_eq!(DType::F32.bytes(), 4);
    }

    #[test]
    fn unknown_value_names_field_allowed_values_and_line() {
        let e = err("foo", &GEMM.replace("\"bf16\"", "\"bf17\""));
        assert_eq!(
            e,
            "workloads/foo.toml: field \"dtype\": unknown value \"bf17\"; allowed: f32, float32, fp32, f16, float16, fp16, half, bf16, bfloat16, e4m3, float8_e4m3fn, e5m2, float8_e5m2, i64, int64, long, bool (line 4)"
        );
        let e = err("foo", &format!("{GEMM}[layout]\nb = \"diag\"\n"));
        assert!(
            e.contains("field \"layout.b\": unknown value \"diag\"; allowed: row, col"),
            "{e}"
        );
        let e = err(
            "foo",
            &format!("{GEMM}[target]\nbaselines = [\n  \"cublas\",\n  \"cutlass\",\n]\n"),
        );
        assert!(
            e.contains("field \"target.baselines\": unknown value \"cutlass\""),
            "{e}"
        );
        assert!(
            e.contains("allowed: cublas, cublaslt, cudnn, torch, copy"),
            "{e}"
        );
        let e = err("foo", &GEMM.replace("\"gemm\"", "\"conv\""));
        assert!(
            e.contains("field \"family\"") && e.contains("gemm_bias_act"),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let e = err("foo", &format!("flavour = 1\n{GEMM}"));
        assert!(
            e.contains("field \"flavour\": unknown field; allowed: name, description"),
            "{e}"
        );
        assert!(e.contains("(line 1)"), "{e}");
        let e = err("foo", &format!("{GEMM}[[shapes]]\nm = 1\nn = 1\nkk = 3\n"));
        assert!(
            e.contains("field \"shapes[1].kk\": unknown field; allowed: m, n, k, batch"),
            "{e}"
        );
        let e = err("foo", &format!("{GEMM}[params]\nslope = 0.1\n"));
        assert!(
            e.contains("field \"params.slope\"") && e.contains("leaky_slope"),
            "{e}"
        );
        let e = err("foo", "description = \"x\"\nfamily = \"gemm\"\ndtype = \"f32\"\nshapes = [{m = 1, n = 2, k = 3}, {m = 1, q = 2}]\n");
        assert!(e.contains("field \"shapes[1].q\""), "{e}");
    }

    #[test]
    fn type_missing_and_syntax_errors() {
        let e = err("foo", &GEMM.replace("k = 4096", "k = \"big\""));
        assert!(
            e.contains("field \"shapes[0].k\": invalid type") && e.contains("integer"),
            "{e}"
        );
        let e = err("foo", &GEMM.replace("family = \"gemm\"\n", ""));
        assert!(
            e.contains("field \"family\": missing (required); allowed: gemm, gemm_bias_act"),
            "{e}"
        );
        let e = err("foo", &format!("{GEMM}dtype = \"f16\"\n"));
        assert!(
            e.contains("workloads/foo.toml") && e.contains("line"),
            "{e}"
        );
        let e = err("foo", "description = \"x\ndtype = 1\n");
        assert!(e.starts_with("workloads/foo.toml: invalid TOML"), "{e}");
    }

    #[test]
    fn semantic_rules() {
        let cases: &[(&str, &str, &str)] = &[
            ("shapes = []", "\"shapes\"", "at least one"),
            ("k = 4096", "\"shapes[0].k\"", "missing"),
            ("k = -4", "\"shapes[0].k\"", "positive"),
            ("k = 0", "\"shapes[0].k\"", "positive"),
        ];
        for (edit, field, what) in cases {
            let text = if edit.starts_with("shapes") {
                "description = \"x\"\nfamily = \"gemm\"\ndtype = \"bf16\"\nshapes = []\n"
                    .to_string()
            } else if *edit == "k = 4096" {
                GEMM.replace("k = 4096\n", "")
            } else {
                GEMM.replace("k = 4096", edit)
            };
            let e = err("foo", &text);
            assert!(e.contains(field) && e.contains(what), "{edit}: {e}");
        }
        let e = err("foo", &format!("{GEMM}[params]\nactivation = \"relu\"\n"));
        assert!(
            e.contains("\"params.activation\"") && e.contains("gemm_bias_act"),
            "{e}"
        );
        let e = err(
            "foo",
            &GEMM.replace("dtype = \"bf16\"", "dtype = \"bf16\"\nallow_tf32 = true"),
        );
        assert!(e.contains("\"allow_tf32\"") && e.contains("f32"), "{e}");
        let e = err("foo", "description = \"x\"\nfamily = \"activation\"\ndtype = \"f32\"\n[[shapes]]\nn = 5\n[params]\nactivation = \"relu\"\nleaky_slope = 0.2\n");
        assert!(
            e.contains("\"params.leaky_slope\"") && e.contains("leaky_relu"),
            "{e}"
        );
        let e = err("foo", "description = \"x\"\nfamily = \"activation\"\ndtype = \"f32\"\n[[shapes]]\nn = 5\nk = 2\n[params]\nactivation = \"relu\"\n");
        assert!(
            e.contains("\"shapes[0].k\"") && e.contains("not used by activation"),
            "{e}"
        );
        let e = err("foo", "description = \"x\"\nfamily = \"softmax\"\ndtype = \"f32\"\n[layout]\na = \"row\"\n[[shapes]]\nm = 5\nn = 5\n");
        assert!(e.contains("\"layout\""), "{e}");
        let e = err("foo", &format!("{GEMM}[target]\nspeedup_vs = \"cudnn\"\n"));
        assert!(
            e.contains("\"target.speedup_vs\"") && e.contains("cublas, cublaslt"),
            "{e}"
        );
        let e = err("foo", &format!("{GEMM}[target]\nbaselines = [\"copy\"]\n"));
        assert!(
            e.contains("\"target.baselines\"")
                && e.contains("allowed for gemm: cublas, cublaslt, torch"),
            "{e}"
        );
        let e = err(
            "foo",
            &GEMM.replace("dtype = \"bf16\"", "dtype = \"bf16\"\nacc_dtype = \"bf16\""),
        );
        assert!(
            e.contains("\"acc_dtype\"") && e.contains("allowed: f32"),
            "{e}"
        );
        let e = err("foo", &GEMM.replace("k = 4096", "k = -4"));
        assert!(e.ends_with("(line 8)"), "{e}");
        let e = err("foo", &GEMM.replace("k = 4096\n", ""));
        assert!(e.ends_with("(line 5)"), "{e}");
        let e = err(
            "foo",
            &format!("{GEMM}[[shapes]]\nm = 4096\nn = 4096\nk = 4096\n"),
        );
        assert!(
            e.contains("\"shapes[1]\"") && e.contains("repeats shapes[0]"),
            "{e}"
        );
    }

    #[test]
    fn name_must_match_the_file_stem() {
        let e = err("foo", &format!("name = \"bar\"\n{GEMM}"));
        assert!(
            e.contains("workloads/foo.toml: field \"name\"") && e.contains("\"foo\""),
            "{e}"
        );
        assert!(parse("foo", &format!("name = \"foo\"\n{GEMM}")).is_ok());
        assert_eq!(
            parse("foo", GEMM)
                .map(|w| w.name().to_string())
                .ok()
                .as_deref(),
            Some("foo")
        );
    }

    #[test]
    fn find_lists_available_names() {
        match Workload::find(dir(), "gemm_bf16_9999") {
            Err(WorkloadError::NotFound { available, .. }) => {
                assert!(available.iter().any(|n| n == "gemm_bf16_4096"));
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
        let e = Workload::find(dir(), "nope")
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no workload named \"nope\"") && e.contains("gemm_bf16_4096"),
            "{e}"
        );
        let by_path = dir().join("gemm_bf16_4096.toml");
        let w = Workload::find(dir(), &by_path.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.name(), "gemm_bf16_4096");
    }

    #[test]
    fn shape_display() {
        assert_eq!(Shape::gemm(4096, 4095, 64).to_string(), "4096x4095x64");
        assert_eq!(
            Shape {
                m: 2,
                n: 3,
                k: 4,
                batch: 16,
                dims: Default::default(),
            }
            .to_string(),
            "16x(2x3x4)"
        );
        assert_eq!(Shape::rows(1, 33).to_string(), "33");
        assert_eq!(Shape::rows(1000, 1023).to_string(), "1000x1023");
        assert_eq!(listing::si(1.0e9, "B"), "1.000 GB");
    }

    /// A `channel` operand (a GroupNorm's per-channel weight): m * channels values a batch
    /// item's rows share, for family norm's row-major rows only, every shape's rows split
    /// into whole channels; `channels` only beside operand = "channel".
    #[test]
    fn channel_operands_are_norm_rows_of_whole_channels() {
        let ops = "[[epilogue]]\nop = \"mul\"\noperand = \"channel\"\nchannels = 4\n[[epilogue]]\nop = \"add\"\noperand = \"channel\"\nchannels = 4\ndtype = \"f32\"\n";
        let shapes = "[[shapes]]\nbatch = 2\nm = 8\nn = 4096\n[[shapes]]\nm = 3\nn = 132\n";
        let w = parse(
            "n",
            &format!("{NORM}[params]\nnorm = \"layer\"\n{shapes}{ops}"),
        )
        .unwrap();
        let c = w.chain();
        assert_eq!(c.tensors.len(), 2);
        assert_eq!(c.tensors[0].kind, chain::TensorKind::Channel(4));
        assert_eq!(c.tensors[0].kind.abi_value(), 4);
        assert_eq!(
            (c.tensors[0].dtype, c.tensors[1].dtype),
            (DType::BF16, DType::F32)
        );
        assert_eq!(c.tensors[0].name, "channel0");
        assert!(c.cpp().contains("CS_OPERAND_CHANNEL"), "{}", c.cpp());
        assert!(c.cpp().contains("of 4 a row"), "{}", c.cpp());
        // A row that does not split into the channels, named by its shape.
        let e = err(
            "n",
            &format!("{NORM}[params]\nnorm = \"layer\"\n[[shapes]]\nm = 8\nn = 4098\n{ops}"),
        );
        assert!(
            e.contains("shapes[0].n") && e.contains("multiple of 4"),
            "{e}"
        );
        // Every channel operand's channels must split every row (not only the first's).
        let two = ops.replace("channels = 4\ndtype", "channels = 3\ndtype");
        let e = err(
            "n",
            &format!("{NORM}[params]\nnorm = \"layer\"\n[[shapes]]\nm = 8\nn = 4096\n{two}"),
        );
        assert!(e.contains("shapes[0].n") && e.contains("channel1"), "{e}");
        // Rows side by side, and other families.
        let e = err(
            "n",
            &format!("{NORM}[layout]\na = \"col\"\n[params]\nnorm = \"layer\"\n{shapes}{ops}"),
        );
        assert!(e.contains("epilogue") && e.contains("layout.a"), "{e}");
        let e = err("a", &format!("description = \"a\"\nfamily = \"activation\"\ndtype = \"bf16\"\n[[shapes]]\nm = 8\nn = 64\n{ops}"));
        assert!(
            e.contains("family norm") && e.contains("not activation"),
            "{e}"
        );
        let e = err("g", &format!("{GEMM}{ops}"));
        assert!(e.contains("operand \"channel\""), "{e}");
        // `channels` needs a channel operand, and at least one channel.
        let e = err(
            "n",
            &format!("{NORM}[params]\nnorm = \"layer\"\n{shapes}[[epilogue]]\nop = \"mul\"\noperand = \"col\"\nchannels = 2\n"),
        );
        assert!(
            e.contains("epilogue[0].channels") && e.contains("not used"),
            "{e}"
        );
        let e = err(
            "n",
            &format!("{NORM}[params]\nnorm = \"layer\"\n{shapes}[[epilogue]]\nop = \"mul\"\noperand = \"channel\"\nchannels = 0\n"),
        );
        assert!(
            e.contains("epilogue[0].channels") && e.contains("at least 1"),
            "{e}"
        );
        // Never in a reduction's [[before]] ops.
        let e = err(
            "r",
            "description = \"r\"\nfamily = \"reduce\"\ndtype = \"bf16\"\nout_dtype = \"f32\"\n[params]\nreduce = \"sum\"\n[[shapes]]\nm = 4\nk = 100\n[[before]]\nop = \"mul\"\noperand = \"channel\"\n",
        );
        assert!(e.contains("before") && e.contains("channel operand"), "{e}");
        // The bytes it adds: m * channels values of its type.
        let one = w.headline();
        let plain = parse("n", &format!("{NORM}[params]\nnorm = \"layer\"\n{shapes}")).unwrap();
        assert_eq!(
            w.min_bytes(one) - plain.min_bytes(one),
            8.0 * 4.0 * (2.0 + 4.0)
        );
    }
}
