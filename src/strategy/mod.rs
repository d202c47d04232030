//! Strategies as data: which template a kernel instance comes from and the values of its
//! parameters (tile shape, stages, cluster, schedule, vector width, ...). The validity
//! rules checked before anything is compiled (shared-memory budget, divisibility,
//! alignment, what the template supports) are in [`rules`]; the candidates for a
//! workload, most promising first, in [`space`]. `cutesmith strategies W` lists the space.
//!
//! A strategy becomes a kernel in one way only, [`Strategy::instantiate`]: its
//! parameters as `#define`s above the template's text, one self-contained source, so a
//! candidate has one compile-cache entry whichever command compiled it.

mod rules;
mod space;
pub mod tuner;

pub use rules::check;
pub use space::{candidates, coverage, shape_regime, space};

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::spec::Workload;

/// What a template needs to know of the workload, as the defines and the chain functor
/// described in `cutlass-templates/include/cutesmith_chain.cuh`.
pub fn workload_block(w: &Workload) -> String {
    let lay = w.layouts();
    let mut s = format!("// workload {}: {}\n", w.name(), w.description());
    for (k, v, what) in [
        ("CS_WL_FAMILY", w.family().abi_value(), "cs_family"),
        (
            "CS_WL_DTYPE_AB",
            w.dtype().abi_value(),
            "cs_dtype of A and B",
        ),
        (
            "CS_WL_DTYPE_CD",
            w.out_dtype().abi_value(),
            "cs_dtype of C and D",
        ),
        ("CS_WL_LAYOUT_A", lay.a.abi_value(), "cs_layout of A"),
        ("CS_WL_LAYOUT_B", lay.b.abi_value(), "cs_layout of B"),
        ("CS_WL_LAYOUT_CD", lay.c.abi_value(), "cs_layout of C and D"),
    ] {
        s.push_str(&format!("#define {k} {v} // {what}\n"));
    }
    if w.allow_tf32() {
        s.push_str("#define CS_WL_ALLOW_TF32 1 // fp32 operands may be rounded to TF32\n");
    }
    if matches!(
        w.family(),
        crate::spec::Family::Reduce | crate::spec::Family::GemmReduce
    ) {
        s.push_str(&format!(
            "#define CS_WL_REDUCE {} // cs_reduce: {}\n",
            w.params().reduce.abi_value(),
            w.params().reduce
        ));
    }
    if w.family() == crate::spec::Family::Scan {
        let p = w.params();
        s.push_str(&format!(
            "#define CS_WL_SCAN {} // cs_scan: {}\n#define CS_WL_SCAN_FLAGS {} // reverse {}, exclusive {}\n",
            p.scan.abi_value(),
            p.scan,
            crate::spec::ScanKind::flags(p.reverse, p.exclusive),
            p.reverse,
            p.exclusive
        ));
    }
    // An activation workload that is one activation runs it from `cs_problem` (the
    // templates' tuned forms); anything longer is the chain functor.
    let plain_activation =
        w.family() == crate::spec::Family::Activation && w.chain().single_activation().is_some();
    if w.family().has_chain() && !w.chain().is_identity() && !plain_activation {
        // A GEMM chain that is a per-column bias then one activation, stated plainly too,
        // for templates whose library epilogue does exactly that.
        // (gemm_norm's chain runs after its norm: neither shorthand applies.)
        if w.family().is_gemm() && w.family() != crate::spec::Family::GemmNorm {
            match w.chain().bias_then_activation() {
                Some((act, p0, p1, dt))
                    if dt == w.out_dtype() && lay.c == crate::spec::Layout::Row =>
                {
                    s.push_str(&format!(
                        "#define CS_WL_BIAS_ACT {} // the chain is x + bias[col], then this cs_activation\n#define CS_WL_BIAS_ACT_P0 {p0:?}f // its first parameter\n#define CS_WL_BIAS_ACT_P1 {p1:?}f // its second\n",
                        act.abi_value()
                    ));
                }
                _ => {
                    if !w.chain().reads_tensors() {
                        s.push_str(
                            "#define CS_WL_CHAIN_FREE 1 // the chain reads no tensor operand\n",
                        );
                    }
                    s.push_str("#define CS_WL_CHAIN 1 // any other chain: the cs_chain functor\n");
                    // A matrix operand of D's type can be read in C's place (no C: beta 0).
                    let c_operand = w.chain().tensors.iter().position(|t| {
                        t.kind == crate::spec::chain::TensorKind::Matrix && t.dtype == w.out_dtype()
                    });
                    if let Some(j) = c_operand.filter(|_| w.params().beta == 0.0) {
                        s.push_str(&format!(
                            "#define CS_WL_CHAIN_C_OPERAND {j} // t[{j}], a matrix of D's type, read in C's place\n"
                        ));
                    }
                }
            }
        }
        if !w.before_chain().is_identity() {
            s.push_str("#define CS_WL_CHAIN_ACCURATE 1 // [[before]] values are summed: fp32-accurate math\n");
        } else if matches!(
            w.family(),
            crate::spec::Family::Softmax | crate::spec::Family::LogSoftmax
        ) {
            s.push_str("#define CS_WL_CHAIN_ACCURATE 1 // a softmax exponentiates the ops' values: fp32-accurate math\n");
        }
        s.push_str(&w.chain().cpp_from(w.before_chain().tensors.len()));
    }
    if !w.before_chain().is_identity() {
        if w.chain().is_identity() {
            s.push_str("#define CS_WL_CHAIN_ACCURATE 1 // [[before]] values are summed: fp32-accurate math\n#include \"cutesmith_chain.cuh\"\n");
        }
        s.push_str(&w.before_chain().cpp_before());
    }
    if w.family() == crate::spec::Family::GemmReduce {
        if w.chain().is_identity() {
            s.push_str("#include \"cutesmith_chain.cuh\"\n");
        }
        s.push_str(&w.after_chain().cpp_after());
    }
    s
}

/// Shared memory one block may use on Hopper (227 KiB).
pub const SMEM_BUDGET: i64 = 227 * 1024;

/// One kernel instance: a template and its parameters (passed as `-D NAME=VALUE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Strategy {
    /// The template's file stem in `cutlass-templates/`.
    pub template: String,
    /// Parameter values; absent parameters take the template's defaults.
    pub params: BTreeMap<String, i64>,
    /// Why this instance is worth trying, in a sentence.
    pub rationale: String,
}

impl Strategy {
    /// The `-D` definitions that instantiate it.
    pub fn defines(&self) -> Vec<String> {
        self.params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    }

    /// The cost model's time for this instance on `w`'s headline shape, in microseconds,
    /// where the model covers it (a CUTLASS 3 GEMM configuration of [`tuner::Config`]);
    /// `None` for every other template or parameter set.
    pub fn estimate_us(&self, w: &Workload) -> Option<f64> {
        if self.template != "gemm_sm90_cutlass3_ws" || !w.family().is_gemm() {
            return None;
        }
        let c = tuner::Config::from_params(&self.params)?;
        Some(tuner::estimate(&c, w.headline(), w.dtype(), w.out_dtype()).us)
    }

    /// A short label: `template K=V K=V`.
    pub fn label(&self) -> String {
        let mut s = self.template.clone();
        for (k, v) in &self.params {
            s.push_str(&format!(" {}={v}", k.trim_start_matches("CS_")));
        }
        s
    }

    /// The instance for `w` as one self-contained source: a comment naming it, the
    /// workload block (the workload's family, dtypes and layouts as `CS_WL_*` defines,
    /// and its epilogue chain as the `cs_chain` functor), the strategy's parameters as
    /// `#define`s, then the template's text.
    ///
    /// A parameter the template's text never names is an error: its `#define` would be
    /// read by nothing, and the instance would silently be the template's default.
    pub fn instantiate(&self, w: &Workload) -> Result<String> {
        let path = self.source_path();
        let template = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let unread = self.unread_params(&template);
        if !unread.is_empty() {
            return Err(Error::Usage(format!(
                "strategy {}: {} {} not read by {} (a misspelt or retired parameter would leave the template's default in its place)",
                self.label(),
                unread.join(", "),
                if unread.len() == 1 { "is" } else { "are" },
                path.display()
            )));
        }
        let mut src = format!("// cutesmith built-in strategy: {}\n", self.label());
        src.push_str(&workload_block(w));
        for (k, v) in &self.params {
            src.push_str(&format!("#define {k} {v}\n"));
        }
        src.push_str(&template);
        Ok(src)
    }

    /// The compile request of this strategy's instance for `w` on `arch`: the one a session
    /// makes for it (`CompileRequest::version`), so compiling it ahead fills the cache
    /// entry the session will find.
    pub fn compile_request(
        &self,
        w: &Workload,
        arch: &str,
    ) -> Result<crate::toolchain::compile::CompileRequest> {
        Ok(crate::toolchain::compile::CompileRequest::version(
            &self.instantiate(w)?,
            arch,
        ))
    }

    /// The parameters that `template` (a template's text) never names as a whole word.
    pub fn unread_params(&self, template: &str) -> Vec<&str> {
        self.params
            .keys()
            .map(String::as_str)
            .filter(|k| !names_word(template, k))
            .collect()
    }

    /// The template source file.
    pub fn source_path(&self) -> PathBuf {
        crate::toolchain::abi_include_dir()
            .parent()
            .map(|p| p.join(format!("{}.cu", self.template)))
            .unwrap_or_default()
    }

    pub(crate) fn get(&self, name: &str, default: i64) -> i64 {
        self.params.get(name).copied().unwrap_or(default)
    }
}

/// Whether `word` occurs in `text` with no identifier character on either side.
fn names_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Workload;

    #[test]
    fn whole_words_only() {
        assert!(names_word("#ifndef CS_TILE_M\n", "CS_TILE_M"));
        assert!(names_word("x=CS_TILE_M;", "CS_TILE_M"));
        assert!(!names_word("#ifndef CS_TILE_MN\n", "CS_TILE_M"));
        assert!(!names_word("XCS_TILE_M", "CS_TILE_M"));
        assert!(names_word("CS_TILE_MN CS_TILE_M", "CS_TILE_M"));
    }

    #[test]
    fn a_parameter_no_template_reads_is_refused() {
        let w = wl("gemm_bf16_4096");
        let s = strategy(
            "gemm_sm90_cutlass3_ws",
            &[("CS_TILE_M", 128), ("CS_TILE_MM", 64)],
            "a typo",
        );
        let e = s.instantiate(&w).unwrap_err().to_string();
        assert!(e.contains("CS_TILE_MM is not read by"), "{e}");
        assert!(e.contains("gemm_sm90_cutlass3_ws.cu"), "{e}");
        let ok = strategy("gemm_sm90_cutlass3_ws", &[("CS_TILE_M", 128)], "");
        assert!(ok
            .instantiate(&w)
            .unwrap()
            .contains("#define CS_TILE_M 128"));
    }

    /// Every candidate the built-in space offers, for every workload in the repository,
    /// names only parameters its template reads.
    #[test]
    fn every_offered_parameter_is_read_by_its_template() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/workloads");
        let mut checked = 0;
        for w in Workload::load_dir(dir).unwrap() {
            for s in space::candidates(&w) {
                let text = std::fs::read_to_string(s.source_path()).unwrap();
                let unread = s.unread_params(&text);
                assert!(
                    unread.is_empty(),
                    "{}: {} offers {unread:?}",
                    w.name(),
                    s.label()
                );
                checked += 1;
            }
        }
        assert!(checked > 100, "only {checked} candidates checked");
    }

    fn strategy(template: &str, params: &[(&str, i64)], rationale: &str) -> Strategy {
        Strategy {
            template: template.to_string(),
            params: params.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            rationale: rationale.to_string(),
        }
    }

    fn wl(name: &str) -> Workload {
        Workload::find(concat!(env!("CARGO_MANIFEST_DIR"), "/workloads"), name).unwrap()
    }

    #[test]
    fn defines_and_labels() {
        let s = strategy(
            "gemm_sm90_tma_wgmma",
            &[("CS_TILE_M", 128), ("CS_STAGES", 3)],
            "x",
        );
        assert_eq!(s.defines(), vec!["CS_STAGES=3", "CS_TILE_M=128"]);
        assert_eq!(s.label(), "gemm_sm90_tma_wgmma STAGES=3 TILE_M=128");
    }

    #[test]
    fn shared_memory_budget_is_enforced() {
        let w = wl("gemm_bf16_4096");
        let ok = strategy(
            "gemm_sm90_tma_wgmma",
            &[("CS_TILE_M", 128), ("CS_TILE_N", 128), ("CS_STAGES", 4)],
            "",
        );
        assert!(check(&ok, &w).is_ok());
        let big = strategy(
            "gemm_sm90_tma_wgmma",
            &[("CS_TILE_M", 256), ("CS_TILE_N", 256), ("CS_STAGES", 4)],
            "",
        );
        let e = check(&big, &w).unwrap_err();
        assert!(e.contains("shared memory"), "{e}");
    }

    #[test]
    fn odd_n_needs_the_align1_epilogue() {
        let w = wl("gemm_bf16_odd");
        let plain = strategy(
            "gemm_sm90_cutlass3_ws",
            &[("CS_TILE_M", 128), ("CS_TILE_N", 256)],
            "",
        );
        assert!(check(&plain, &w).unwrap_err().contains("EPI_ALIGN1"));
        let a1 = strategy(
            "gemm_sm90_cutlass3_ws",
            &[("CS_TILE_M", 128), ("CS_TILE_N", 256), ("CS_EPI_ALIGN1", 1)],
            "",
        );
        assert!(check(&a1, &w).is_ok());
    }

    #[test]
    fn fp32_output_lines_are_judged_in_16_byte_units() {
        // KernelBench's irregular fp32 GEMM (N = 5921): every Hopper candidate carries the
        // alignment-1 epilogue, and the first one is the Hopper template, not the
        // Ampere-style one.
        let w = wl("fp32_irregular");
        let c = space::candidates(&w);
        assert_eq!(c[0].template, "gemm_sm90_cutlass3_ws");
        assert!(c
            .iter()
            .filter(|s| s.template == "gemm_sm90_cutlass3_ws")
            .all(|s| s.params.get("CS_EPI_ALIGN1") == Some(&1)));
        assert!(c.iter().all(|s| check(s, &w).is_ok()));
        // 4 fp32 elements are 16 bytes: N = 4100 needs no alignment-1 epilogue, N = 4098 does.
        let f32w = wl("fp32_4096");
        let plain = strategy(
            "gemm_sm90_cutlass3_ws",
            &[("CS_TILE_M", 128), ("CS_TILE_N", 128)],
            "",
        );
        assert!(check(&plain, &f32w).is_ok());
        let text = std::fs::read_to_string(f32w.path()).unwrap();
        for (n, needs) in [(4100, false), (4098, true)] {
            let odd = Workload::parse(
                "fp32_4096.toml",
                &text.replacen("n = 4096", &format!("n = {n}"), 1),
            )
            .unwrap();
            assert_eq!(odd.headline().n, n);
            let verdict = check(&plain, &odd);
            assert_eq!(verdict.is_err(), needs, "N = {n}: {verdict:?}");
        }
    }

    #[test]
    fn families_and_dtypes_are_matched() {
        let relu = wl("act_relu_bf16");
        let gemm = strategy("gemm_sm90_tma_wgmma", &[], "");
        assert!(check(&gemm, &relu).is_err());
        let f32 = wl("gemm_f32_4096");
        let e = check(&gemm, &f32).unwrap_err();
        assert!(e.contains("dtype f32") && e.contains("bf16, f16"), "{e}");
        // gemm_bias_act runs through the epilogue chain: no special build needed.
        let fused = wl("gemm_bias_gelu_bf16");
        let cutlass = strategy("gemm_sm90_cutlass3_ws", &[], "");
        assert!(check(&cutlass, &fused).is_ok());
        let softmax = strategy("softmax_rows", &[], "");
        let e = check(&softmax, &fused).unwrap_err();
        assert!(
            e.contains("family gemm_bias_act") && e.contains("softmax, log_softmax"),
            "{e}"
        );
    }

    #[test]
    fn every_workload_has_a_space_and_gemms_put_cutlass_first() {
        let w = wl("gemm_bf16_4096");
        let space = space(&w);
        assert!(space.len() >= 5);
        assert_eq!(space[0].0.template, "gemm_sm90_cutlass3_ws");
        let f16 = wl("gemm_f16_4096");
        assert!(space_of(&f16)
            .iter()
            .all(|s| s.params.get("CS_GEMM_FP16") == Some(&1)));
    }

    /// What the coverage sweep found without a kernel now has one: 16-bit operands into
    /// an f32 D on the CUTLASS 3 template (and an fp8 D from fp8 operands), gemm_softmax
    /// with a chain before it and a K too short for TMA rows; and the skinny template no
    /// longer claims a batch its grid cannot hold.
    #[test]
    fn mixed_outputs_softmax_chains_and_batch_limits() {
        let spec = |text: &str| Workload::parse("x.toml", text).unwrap();
        let gemm = "description = \"x\"\nfamily = \"gemm\"\ndtype = \"bf16\"\n";
        let f32_out = spec(&format!(
            "{gemm}out_dtype = \"f32\"\n[[shapes]]\nm = 512\nn = 512\nk = 131072\n"
        ));
        let cutlass = strategy("gemm_sm90_cutlass3_ws", &[], "");
        assert!(
            check(&cutlass, &f32_out).is_ok(),
            "{:?}",
            check(&cutlass, &f32_out)
        );
        assert!(space_of(&f32_out)
            .iter()
            .any(|s| s.template == "gemm_sm90_cutlass3_ws"));
        let fp8_out = spec(
            "description = \"x\"\nfamily = \"gemm\"\ndtype = \"e4m3\"\nout_dtype = \"e4m3\"\n[[shapes]]\nm = 256\nn = 256\nk = 256\n",
        );
        // An fp8 D from fp8 operands (scale_d in the epilogue): a tile the accurate fp8
        // mainloop holds takes it, and the space has a valid candidate.
        let fp8_tile = strategy("gemm_sm90_cutlass3_ws", &[("CS_TILE_N", 128)], "");
        assert!(
            check(&fp8_tile, &fp8_out).is_ok(),
            "{:?}",
            check(&fp8_tile, &fp8_out)
        );
        assert!(space(&fp8_out)
            .iter()
            .any(|(s, v)| s.template == "gemm_sm90_cutlass3_ws" && v.is_ok()));
        // The raw CuTe template takes 16-bit operands only, and names why.
        let e = check(&strategy("gemm_sm90_tma_wgmma", &[], ""), &fp8_out).unwrap_err();
        assert!(e.contains("dtype e4m3"), "{e}");

        let sm = spec(
            "description = \"x\"\nfamily = \"gemm_softmax\"\ndtype = \"bf16\"\n[[shapes]]\nm = 128\nn = 5\nk = 10\n[[epilogue]]\nop = \"add\"\noperand = \"row\"\n",
        );
        assert!(check(&strategy("gemm_softmax", &[], ""), &sm).is_ok());

        let batched = spec(&format!(
            "{gemm}[[shapes]]\nm = 16\nn = 16\nk = 16\nbatch = 70000\n"
        ));
        let e = check(&strategy("gemm_skinny_splitk", &[], ""), &batched).unwrap_err();
        assert!(e.contains("batch above 65535"), "{e}");
    }

    fn space_of(w: &Workload) -> Vec<Strategy> {
        space(w).into_iter().map(|(s, _)| s).collect()
    }
}
