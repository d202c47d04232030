//! The ptxas resource report (`-Xptxas -v`): registers, shared memory, stack and spills
//! per kernel.
//!
//! CUDA 13.0 prints, per entry function:
//!
//! ```text
//! ptxas info    : Compiling entry function '_Z6spillyILi40EEvPKfPfi' for 'sm_90a'
//! ptxas info    : Function properties for _Z6spillyILi40EEvPKfPfi
//!     416 bytes stack frame, 436 bytes spill stores, 480 bytes spill loads
//! ptxas info    : Used 32 registers, used 0 barriers, 416 bytes cumulative stack size
//! ```
//!
//! with `, N bytes smem` added for static shared memory (dynamic shared memory is not
//! reported) and, in older releases, `, N bytes cmem[0]`. Non-inlined device functions
//! get "Function properties" too but no "Compiling entry function": they are not
//! kernels. Pure text processing: nothing here spawns a process.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

use cpp_demangle::{DemangleOptions, Symbol};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::toolchain::diagnostics::shorten_cpp;

/// What one kernel costs the SM, as ptxas reported it: the numbers that decide
/// occupancy and whether the kernel spills.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KernelResources {
    /// The entry function's symbol, as in the log (joins with SASS `Function :` names).
    pub mangled: String,
    /// Demangled and shortened for display (template arguments collapsed past ~120 chars).
    pub name: String,
    /// Target, e.g. `sm_90a`.
    pub arch: String,
    pub registers: u32,
    /// Static shared memory only; dynamic shared memory is set at launch.
    pub shared_bytes: u64,
    pub stack_frame_bytes: u64,
    pub spill_store_bytes: u64,
    pub spill_load_bytes: u64,
    /// Named barriers the kernel uses.
    pub barriers: u32,
    /// Constant bank 0 (kernel parameters); 0 when ptxas no longer reports it (CUDA 13).
    pub cmem_bytes: u64,
}

impl KernelResources {
    /// Spill stores plus spill loads: nonzero means local-memory traffic in the hot loop.
    pub fn spill_bytes(&self) -> u64 {
        self.spill_store_bytes + self.spill_load_bytes
    }

    /// One line for a report, e.g.
    /// `gemm_kernel<…>: 168 regs, 0 B stack, 0 B spill, 197632 B smem, 1 barrier`.
    pub fn report_line(&self) -> String {
        let spill = if self.spill_bytes() == 0 {
            "0 B spill".to_string()
        } else {
            format!(
                "{} B spill ({} B stores, {} B loads)",
                self.spill_bytes(),
                self.spill_store_bytes,
                self.spill_load_bytes
            )
        };
        let barriers = if self.barriers == 1 {
            "1 barrier".to_string()
        } else {
            format!("{} barriers", self.barriers)
        };
        let cmem = if self.cmem_bytes > 0 {
            format!(", {} B cmem", self.cmem_bytes)
        } else {
            String::new()
        };
        format!(
            "{}: {} regs, {} B stack, {spill}, {} B smem, {barriers}{cmem}",
            self.name, self.registers, self.stack_frame_bytes, self.shared_bytes
        )
    }
}

impl fmt::Display for KernelResources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.report_line())
    }
}

/// Spill stores plus loads over all kernels: the one number a tuning loop minimises first.
pub fn total_spill_bytes(kernels: &[KernelResources]) -> u64 {
    kernels.iter().map(KernelResources::spill_bytes).sum()
}

fn regex(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

static ENTRY: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(r"^ptxas info\s*: Compiling entry function '([^']+)' for '([^']+)'"));
static PROPERTIES: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(r"^ptxas info\s*: Function properties for (\S+)"));
static FRAME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    regex(r"^\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
});
static USED: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(r"^ptxas info\s*: Used (\d+) registers(.*)$"));
static BARRIERS: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"used (\d+) barriers?"));
static SMEM: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"(\d+) bytes smem"));
static CMEM0: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"(\d+) bytes cmem\[0\]"));

fn caps<'t>(re: &LazyLock<Option<Regex>>, text: &'t str) -> Option<regex::Captures<'t>> {
    re.as_ref().and_then(|r| r.captures(text))
}

fn int<T: std::str::FromStr + Default>(c: &regex::Captures<'_>, i: usize) -> T {
    c.get(i)
        .and_then(|m| m.as_str().parse().ok())
        .unwrap_or_default()
}

/// One entry per "Compiling entry function" in the log (one per kernel and arch), in
/// log order. Device functions' properties are read but never become kernels.
pub fn parse(log: &str) -> Vec<KernelResources> {
    let mut kernels: Vec<KernelResources> = Vec::new();
    // The entry being compiled: "Used N registers" belongs to it.
    let mut current: Option<usize> = None;
    // The function whose properties the next "bytes stack frame" line describes.
    let mut props_for: Option<String> = None;
    let mut props: HashMap<String, (u64, u64, u64)> = HashMap::new();

    for raw in log.lines() {
        let line = raw.trim_end();
        if let Some(c) = caps(&ENTRY, line) {
            let mangled = c[1].to_string();
            kernels.push(KernelResources {
                name: short_name(&mangled),
                mangled,
                arch: c[2].to_string(),
                ..KernelResources::default()
            });
            current = Some(kernels.len() - 1);
            props_for = None;
        } else if let Some(c) = caps(&PROPERTIES, line) {
            props_for = Some(c[1].to_string());
        } else if let Some(c) = caps(&FRAME, line) {
            if let Some(name) = props_for.take() {
                props.insert(name, (int(&c, 1), int(&c, 2), int(&c, 3)));
            }
        } else if let Some(c) = caps(&USED, line) {
            props_for = None;
            let Some(k) = current.and_then(|i| kernels.get_mut(i)) else {
                continue;
            };
            k.registers = int(&c, 1);
            let rest = &c[2];
            if let Some(b) = caps(&BARRIERS, rest) {
                k.barriers = int(&b, 1);
            }
            if let Some(s) = caps(&SMEM, rest) {
                k.shared_bytes = int(&s, 1);
            }
            if let Some(m) = caps(&CMEM0, rest) {
                k.cmem_bytes = int(&m, 1);
            }
        }
    }
    for k in &mut kernels {
        if let Some(&(stack, stores, loads)) = props.get(&k.mangled) {
            k.stack_frame_bytes = stack;
            k.spill_store_bytes = stores;
            k.spill_load_bytes = loads;
        }
    }
    kernels
}

/// Demangles a C++ symbol without its return type; `with_params` keeps the parameter
/// list (needed to tell overloads apart in linker messages). `None` if not a valid
/// Itanium-mangled name.
pub fn demangle(mangled: &str, with_params: bool) -> Option<String> {
    let sym = Symbol::new(mangled.as_bytes()).ok()?;
    let mut opts = DemangleOptions::new().no_return_type();
    if !with_params {
        opts = opts.no_params();
    }
    sym.demangle_with_options(&opts).ok()
}

/// Display name of a kernel: demangled without return type and parameters; past ~120
/// characters, namespaces and nested template arguments are collapsed
/// ([`shorten_cpp`]) and the result capped. Falls back to the mangled name.
pub fn short_name(mangled: &str) -> String {
    let Some(mut name) = demangle(mangled, false) else {
        return mangled.to_string();
    };
    // cpp_demangle writes `C<64> >`; C++11 readers expect `C<64>>`.
    while name.contains("> >") {
        name = name.replace("> >", ">>");
    }
    if name.chars().count() <= 120 {
        return name;
    }
    let short = shorten_cpp(&name, usize::MAX);
    if short.chars().count() <= 120 {
        return short;
    }
    // Keep the function name, cut the template arguments.
    let head: String = short.chars().take(116).collect();
    format!("{head}…>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_kernels_with_spills_and_a_device_function() {
        let k = parse(parser_fixture!("plain_kernels.log"));
        let names: Vec<&str> = k.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["spilly<40>", "with_smem", "vec_copy"]);
        let spilly = &k[0];
        assert_eq!(spilly.mangled, "_Z6spillyILi40EEvPKfPfi");
        assert_eq!(spilly.arch, "sm_90a");
        assert_eq!(spilly.registers, 32);
        assert_eq!(
            (
                spilly.stack_frame_bytes,
                spilly.spill_store_bytes,
                spilly.spill_load_bytes
            ),
            (416, 436, 480)
        );
        assert_eq!((spilly.barriers, spilly.shared_bytes), (0, 0));
        assert_eq!(
            (
                k[1].registers,
                k[1].barriers,
                k[1].shared_bytes,
                k[1].spill_bytes()
            ),
            (12, 1, 4224, 0)
        );
        assert_eq!((k[2].registers, k[2].barriers, k[2].cmem_bytes), (14, 0, 0));
        // helper(float const*, int) has properties but is no kernel.
        assert!(k.iter().all(|k| !k.mangled.contains("helper")));
        assert_eq!(total_spill_bytes(&k), 916);
        assert_eq!(
            spilly.report_line(),
            "spilly<40>: 32 regs, 416 B stack, 916 B spill (436 B stores, 480 B loads), 0 B smem, 0 barriers"
        );
        assert_eq!(
            k[1].to_string(),
            "with_smem: 12 regs, 0 B stack, 0 B spill, 4224 B smem, 1 barrier"
        );
    }

    #[test]
    fn cute_gemm_names_are_shortened() {
        let k = parse(parser_fixture!("wgmma_tma_sm90_full.log"));
        assert_eq!(k.len(), 3);
        assert_eq!(
            k[0].name,
            "cub::CUB_300001_SM_900::detail::EmptyKernel<void>"
        );
        for g in &k[1..] {
            assert_eq!(g.registers, 105);
            assert_eq!(g.barriers, 1);
            assert_eq!(g.shared_bytes, 0);
            assert!(
                g.name
                    .starts_with("gemm_device<tuple<int, int, int>, tuple<C<128>, C<128>, C<64>>"),
                "{}",
                g.name
            );
            assert!(g.name.chars().count() <= 120);
            assert!(g
                .mangled
                .starts_with("_Z11gemm_deviceIN4cute5tupleIJiiiEEE"));
        }
        assert_ne!(k[1].mangled, k[2].mangled);

        let small = parse(parser_fixture!("wgmma_tma_small.log"));
        assert_eq!(small.len(), 2);
        assert_eq!(small[1].registers, 42);
    }

    #[test]
    fn failed_and_warning_logs() {
        let k = parse(parser_fixture!("ptxas_smem.log"));
        assert_eq!(k.len(), 1);
        assert_eq!(
            (k[0].name.as_str(), k[0].shared_bytes, k[0].barriers),
            ("too_much_smem", 262144, 1)
        );
        let k = parse(parser_fixture!("ptxas_warn.log"));
        let regs: Vec<(&str, u32)> = k.iter().map(|k| (k.name.as_str(), k.registers)).collect();
        assert_eq!(regs, [("normal", 8), ("greedy_bounds", 8)]);
        assert!(parse(parser_fixture!("ptxas_asm.log")).is_empty());
        assert!(parse(parser_fixture!("cute_err.log")).is_empty());
    }

    #[test]
    fn older_format_with_cmem() {
        let log = "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'\n\
                   ptxas info    : Function properties for _Z1kPf\n    \
                   8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n\
                   ptxas info    : Used 40 registers, 16384 bytes smem, 360 bytes cmem[0]\n";
        let k = parse(log);
        assert_eq!(k.len(), 1);
        assert_eq!(
            (
                k[0].registers,
                k[0].shared_bytes,
                k[0].cmem_bytes,
                k[0].spill_bytes()
            ),
            (40, 16384, 360, 8)
        );
        assert_eq!(k[0].name, "k");
        assert!(k[0].report_line().ends_with(", 360 B cmem"));
    }

    /// The Hopper GEMM fixture of `tests/fixtures/nvcc` (a real CuTe Hopper GEMM).
    #[test]
    fn hopper_gemm_fixture() {
        let log = include_str!("../../tests/fixtures/nvcc/gemm_ok.log");
        let k = parse(log);
        assert!(!k.is_empty());
        assert!(k
            .iter()
            .all(|k| k.registers > 0 && k.arch.starts_with("sm_")));
        assert!(k.iter().all(|k| k.name.chars().count() <= 120));
    }

    #[test]
    fn demangles() {
        assert_eq!(
            demangle("_Z12scale_factori", true).as_deref(),
            Some("scale_factor(int)")
        );
        assert_eq!(demangle("not_mangled", true), None);
        assert_eq!(short_name("plain_c_name"), "plain_c_name");
    }
}
