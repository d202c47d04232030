//! Static inspection of a candidate kernel's shared object before it is ever loaded: the
//! anti-cheating gate. Owns reading the ELF (DT_NEEDED, dynamic symbols, raw bytes) and
//! the rules that reject a kernel that links or dynamically loads a vendor GEMM/DNN
//! library (cuBLAS, cuBLASLt, cuDNN, cuSPARSELt, libtorch) or that lacks the cutesmith
//! ABI entry points.
//!
//! The rules, and why they are shaped this way:
//! - a DT_NEEDED entry naming a forbidden library is forbidden on its own;
//! - importing or defining a cuBLAS/cuDNN/cuSPARSELt API symbol (`cublas*`, `cudnn*`,
//!   `cusparseLt*`) is forbidden on its own (resolving it from the host process, or
//!   linking the vendor library statically, is the same cheat);
//! - a forbidden name among the file's bytes (`libcublas`, `cublasGemmEx`, ...) is
//!   forbidden only together with a dynamic-loading import (`dlopen`, `dlmopen`, `dlsym`,
//!   `dlvsym`) or a forbidden DT_NEEDED entry. Importing `dlopen`/`dlsym` alone is normal:
//!   the CUDA runtime that nvcc links statically into every shared object
//!   (`libcudart_static`) imports `dlopen`, `dlmopen`, `dlsym` and `dlvsym` to find
//!   `libcuda.so.1`. That runtime names none of the forbidden strings (checked on an
//!   nvcc 13 build of the project's CuTe GEMM), so in practice any forbidden string in an
//!   nvcc-built object is rejected.
//!
//! This is a heuristic against honest mistakes and casual cheating; a name assembled at
//! run time evades the string scan.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use object::{Object, ObjectKind, ObjectSection, ObjectSymbol, SymbolKind};
use serde::{Deserialize, Serialize};

/// The C ABI every kernel must export; the loader resolves exactly these, so a missing one
/// is caught here with a clear message instead of as a `dlsym` failure after loading.
pub const ENTRY_POINTS: [&str; 3] = [
    "cutesmith_abi_version",
    "cutesmith_workspace_bytes",
    "cutesmith_launch",
];

/// Prefixes of DT_NEEDED names (matched on the file name, after any `/`) that a kernel may
/// not link: vendor GEMM/DNN libraries would make the benchmark measure the vendor's code.
pub const FORBIDDEN_LIBRARY_PREFIXES: [&str; 4] =
    ["libcublas", "libcudnn", "libcusparseLt", "libtorch"];

/// Prefixes of C API symbols of the forbidden libraries; importing or defining one means
/// the kernel calls (or contains) vendor code.
pub const FORBIDDEN_SYMBOL_PREFIXES: [&str; 3] = ["cublas", "cudnn", "cusparseLt"];

/// Case-sensitive byte strings that name a forbidden library or its GEMM/convolution entry
/// points; with a dynamic-loading import they are how a kernel would `dlopen` a vendor
/// library behind the linker's back.
pub const FORBIDDEN_STRINGS: [&str; 11] = [
    "libcublas",
    "libcublasLt",
    "libcudnn",
    "libcusparseLt",
    "libtorch",
    "cublasGemmEx",
    "cublasLtMatmul",
    "cudnnConvolution",
    "cublasCreate",
    "cublasLtCreate",
    "cudnnCreate",
];

/// Imports that let code load a library or resolve a symbol at run time, behind DT_NEEDED.
pub const DYNAMIC_LOADING_IMPORTS: [&str; 4] = ["dlopen", "dlmopen", "dlsym", "dlvsym"];

/// What inspecting one shared object found; kept whole (serialisable) so a rejected
/// candidate's record says exactly why it was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InspectReport {
    /// DT_NEEDED entries, in file order: the libraries the loader will pull in.
    pub needed: Vec<String>,
    /// Defined global dynamic symbols of interest (the `cutesmith_*` ABI and any forbidden
    /// vendor API symbol), sorted.
    pub exports: Vec<String>,
    /// Entry points of [`ENTRY_POINTS`] not exported as defined global functions.
    pub missing_entry_points: Vec<String>,
    /// Undefined dynamic symbols (without version suffix), sorted and deduplicated.
    pub imports: Vec<String>,
    /// Whether it imports any of [`DYNAMIC_LOADING_IMPORTS`].
    pub dynamic_loading: bool,
    /// Reasons to refuse loading it.
    pub forbidden: Vec<Finding>,
}

/// One reason to refuse a shared object, with what in the file shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// What the object does, e.g. `links libcublas.so.13`.
    pub what: String,
    /// Where that was seen: the string and its place, the imports.
    pub evidence: String,
}

impl InspectReport {
    /// Whether the object may be loaded: nothing forbidden and every entry point present.
    pub fn ok(&self) -> bool {
        self.forbidden.is_empty() && self.missing_entry_points.is_empty()
    }

    /// One paragraph for logs and for the agent's feedback: the verdict first, then why.
    pub fn summary(&self) -> String {
        let mut s = String::from(if self.ok() { "ok" } else { "rejected" });
        for f in &self.forbidden {
            let _ = write!(s, "; forbidden: {} ({})", f.what, f.evidence);
        }
        if !self.missing_entry_points.is_empty() {
            let _ = write!(
                s,
                "; missing entry points: {}",
                self.missing_entry_points.join(", ")
            );
        }
        let _ = write!(s, "; needs [{}]", self.needed.join(", "));
        let dl = self.dynamic_loading_imports();
        if !dl.is_empty() {
            let _ = write!(s, "; dynamic loading via {}", dl.join(", "));
        }
        let _ = write!(s, "; {} imports", self.imports.len());
        s
    }

    /// The imports of [`DYNAMIC_LOADING_IMPORTS`] present, in that list's order.
    fn dynamic_loading_imports(&self) -> Vec<&'static str> {
        DYNAMIC_LOADING_IMPORTS
            .iter()
            .copied()
            .filter(|d| self.imports.iter().any(|i| i == d))
            .collect()
    }
}

/// Inspects the shared object at `path` without loading it, so a kernel that would pull in
/// a vendor library is refused before any of its code (constructors included) runs.
/// Errors when the file cannot be read or is not an ELF shared object with a dynamic
/// section and dynamic symbol table (a stripped-headers file is refused, not trusted).
pub fn inspect(path: &Path) -> Result<InspectReport, String> {
    let data = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    inspect_bytes(&data).map_err(|e| format!("inspecting {}: {e}", path.display()))
}

/// [`inspect`] on bytes already in memory.
pub fn inspect_bytes(data: &[u8]) -> Result<InspectReport, String> {
    let file = object::File::parse(data).map_err(|e| format!("not a readable ELF file: {e}"))?;
    if file.kind() != ObjectKind::Dynamic {
        return Err(format!("not a shared object (ELF kind {:?})", file.kind()));
    }
    if file.section_by_name(".dynamic").is_none() || file.section_by_name(".dynsym").is_none() {
        return Err("no .dynamic or .dynsym section (section headers stripped?)".to_string());
    }

    let mut needed = Vec::new();
    for lib in file
        .import_libraries()
        .map_err(|e| format!("reading DT_NEEDED: {e}"))?
    {
        let lib = lib.map_err(|e| format!("reading DT_NEEDED: {e}"))?;
        needed.push(String::from_utf8_lossy(lib.name()).into_owned());
    }

    let mut imports = BTreeSet::new();
    let mut exports = BTreeSet::new();
    let mut defined_functions = BTreeSet::new();
    let mut defined_forbidden = BTreeSet::new();
    for sym in file.dynamic_symbols() {
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() {
            continue;
        }
        if sym.is_undefined() {
            imports.insert(name.to_string());
        } else if sym.is_global() {
            if sym.kind() == SymbolKind::Text {
                defined_functions.insert(name);
            }
            if name.starts_with("cutesmith_") {
                exports.insert(name.to_string());
            }
            if is_forbidden_symbol(name) {
                exports.insert(name.to_string());
                defined_forbidden.insert(name.to_string());
            }
        }
    }
    // A static link of a vendor library may hide its symbols from .dynsym but not from
    // .symtab (unless stripped).
    for sym in file.symbols() {
        if sym.is_definition() {
            if let Ok(name) = sym.name() {
                if is_forbidden_symbol(name) {
                    defined_forbidden.insert(name.to_string());
                }
            }
        }
    }

    let missing_entry_points = ENTRY_POINTS
        .iter()
        .filter(|e| !defined_functions.contains(**e))
        .map(|e| e.to_string())
        .collect();
    let dynamic_loading = DYNAMIC_LOADING_IMPORTS.iter().any(|d| imports.contains(*d));

    let mut forbidden = Vec::new();
    // Names the structural rules already flagged; a string hit on the same name (it sits
    // in .dynstr) adds nothing.
    let mut flagged = BTreeSet::new();
    let forbidden_needed: Vec<&String> =
        needed.iter().filter(|n| is_forbidden_library(n)).collect();
    for lib in &forbidden_needed {
        forbidden.push(Finding {
            what: format!("links {lib}"),
            evidence: format!("DT_NEEDED {lib}"),
        });
        flagged.insert(lib.to_string());
    }
    let forbidden_imports: Vec<&String> =
        imports.iter().filter(|i| is_forbidden_symbol(i)).collect();
    if !forbidden_imports.is_empty() {
        forbidden.push(Finding {
            what: format!("imports vendor library API {}", forbidden_imports[0]),
            evidence: format!("undefined dynamic symbols: {}", list(&forbidden_imports)),
        });
        flagged.extend(forbidden_imports.iter().map(|s| s.to_string()));
    }
    if !defined_forbidden.is_empty() {
        let names: Vec<&String> = defined_forbidden.iter().collect();
        forbidden.push(Finding {
            what: format!("contains vendor library code ({})", names[0]),
            evidence: format!("defined symbols: {}", list(&names)),
        });
        flagged.extend(defined_forbidden.iter().cloned());
    }

    if dynamic_loading || !forbidden_needed.is_empty() {
        let dl: Vec<&str> = DYNAMIC_LOADING_IMPORTS
            .iter()
            .copied()
            .filter(|d| imports.contains(*d))
            .collect();
        let because = if dl.is_empty() {
            format!("links {}", forbidden_needed[0])
        } else {
            format!("imports {}", dl.join(", "))
        };
        for hit in string_hits(data) {
            if flagged.contains(&hit.text) {
                continue;
            }
            let place = section_of(&file, hit.offset)
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            let more = if hit.count > 1 {
                format!(", {} occurrences", hit.count)
            } else {
                String::new()
            };
            forbidden.push(Finding {
                what: format!("names {} in its strings and {because}", hit.text),
                evidence: format!(
                    "string {:?} at file offset {:#x}{place}{more}; {because}",
                    hit.text, hit.offset
                ),
            });
        }
    }

    Ok(InspectReport {
        needed,
        exports: exports.into_iter().collect(),
        missing_entry_points,
        imports: imports.into_iter().collect(),
        dynamic_loading,
        forbidden,
    })
}

/// Whether a DT_NEEDED name (possibly a path) is a forbidden library.
fn is_forbidden_library(name: &str) -> bool {
    let file = name.rsplit('/').next().unwrap_or(name);
    FORBIDDEN_LIBRARY_PREFIXES
        .iter()
        .any(|p| file.starts_with(p))
}

/// Whether a (C, unmangled) symbol name belongs to a forbidden library's API.
fn is_forbidden_symbol(name: &str) -> bool {
    FORBIDDEN_SYMBOL_PREFIXES
        .iter()
        .any(|p| name.starts_with(p))
}

/// Up to eight names, then how many more.
fn list(names: &[&String]) -> String {
    let mut s = names
        .iter()
        .take(8)
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > 8 {
        let _ = write!(s, " and {} more", names.len() - 8);
    }
    s
}

/// One distinct printable string around a forbidden needle.
struct StringHit {
    /// The printable run of bytes containing the needle, e.g. `libcublas.so.13`.
    text: String,
    /// File offset of its first occurrence.
    offset: usize,
    count: usize,
}

/// Longest printable run kept around a hit; the evidence stays readable.
const MAX_HIT_LEN: usize = 120;

/// Every distinct printable string in `data` that contains a [`FORBIDDEN_STRINGS`] needle,
/// in order of first occurrence. Scans the whole file (nvcc places strings in .rodata,
/// .data, .nv_fatbin and elsewhere) in one pass.
fn string_hits(data: &[u8]) -> Vec<StringHit> {
    let mut hits: Vec<StringHit> = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        let matched = FORBIDDEN_STRINGS
            .iter()
            .any(|n| n.as_bytes()[0] == b && data[i..].starts_with(n.as_bytes()));
        if !matched {
            i += 1;
            continue;
        }
        let mut start = i;
        while start > 0 && i - start < MAX_HIT_LEN && is_printable(data[start - 1]) {
            start -= 1;
        }
        let mut end = i;
        while end < data.len() && end - start < MAX_HIT_LEN && is_printable(data[end]) {
            end += 1;
        }
        let text = String::from_utf8_lossy(&data[start..end]).into_owned();
        match hits.iter_mut().find(|h| h.text == text) {
            Some(h) => h.count += 1,
            None => hits.push(StringHit {
                text,
                offset: start,
                count: 1,
            }),
        }
        // One hit per printable run: skip past it.
        i = end.max(i + 1);
    }
    hits
}

fn is_printable(b: u8) -> bool {
    (0x20..0x7f).contains(&b)
}

/// The name of the section whose file bytes hold `offset`, if any.
fn section_of(file: &object::File<'_>, offset: usize) -> Option<String> {
    let offset = offset as u64;
    file.sections().find_map(|s| {
        let (start, len) = s.file_range()?;
        if offset >= start && offset < start + len {
            s.name().ok().map(str::to_string)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::Command;

    const ENTRY_POINTS_C: &str = r#"
        #include <stddef.h>
        unsigned cutesmith_abi_version(void) { return 1; }
        size_t cutesmith_workspace_bytes(const void *p) { (void)p; return 0; }
        int cutesmith_launch(const void *p, void *ws, void *stream) {
            (void)p; (void)ws; (void)stream; return 0;
        }
    "#;

    /// A C compiler, or None (after saying so) where there is none and CI is unset.
    fn c_compiler() -> Option<&'static str> {
        for cc in ["cc", "gcc"] {
            let found = Command::new(cc)
                .arg("--version")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if found {
                return Some(cc);
            }
        }
        if std::env::var_os("CI").is_some() {
            panic!("no C compiler (cc/gcc) found, and CI is set");
        }
        eprintln!("skipping: no C compiler (cc/gcc) found");
        None
    }

    /// Compiles `source` into `dir/name` as a shared object, with extra arguments after the
    /// source (libraries).
    fn build_so(cc: &str, dir: &Path, name: &str, source: &str, extra: &[&str]) -> PathBuf {
        let src = dir.join(format!("{name}.c"));
        std::fs::write(&src, source).unwrap();
        let out = dir.join(name);
        let o = Command::new(cc)
            .args(["-shared", "-fPIC", "-O0", "-o"])
            .arg(&out)
            .arg(&src)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{cc} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    }

    #[test]
    fn entry_points_only_is_ok() {
        let Some(cc) = c_compiler() else { return };
        let dir = tempfile::tempdir().unwrap();
        let so = build_so(cc, dir.path(), "ok.so", ENTRY_POINTS_C, &[]);
        let r = inspect(&so).unwrap();
        assert!(r.ok(), "{}", r.summary());
        assert!(r.missing_entry_points.is_empty());
        assert!(r.forbidden.is_empty());
        assert_eq!(r.exports, {
            let mut e: Vec<String> = ENTRY_POINTS.iter().map(|s| s.to_string()).collect();
            e.sort();
            e
        });
        assert!(r.summary().starts_with("ok"));
    }

    #[test]
    fn missing_launch_is_reported() {
        let Some(cc) = c_compiler() else { return };
        let dir = tempfile::tempdir().unwrap();
        let src = r#"
            #include <stddef.h>
            unsigned cutesmith_abi_version(void) { return 1; }
            size_t cutesmith_workspace_bytes(const void *p) { (void)p; return 0; }
            /* A hidden launch is not exported, so it does not count. */
            __attribute__((visibility("hidden"))) int cutesmith_launch(void) { return 0; }
        "#;
        let so = build_so(cc, dir.path(), "nolaunch.so", src, &[]);
        let r = inspect(&so).unwrap();
        assert!(!r.ok());
        assert_eq!(r.missing_entry_points, vec!["cutesmith_launch".to_string()]);
        assert!(r.forbidden.is_empty(), "{r:?}");
        assert!(r
            .summary()
            .contains("missing entry points: cutesmith_launch"));
    }

    #[test]
    fn dlopen_of_cublas_by_name_is_forbidden() {
        let Some(cc) = c_compiler() else { return };
        let dir = tempfile::tempdir().unwrap();
        let src = format!(
            r#"
            #include <dlfcn.h>
            #include <math.h>
            {ENTRY_POINTS_C}
            void *sneaky(void) {{ return dlopen("libcublas.so.13", RTLD_NOW); }}
            double root(double x) {{ return sqrt(x); }}
            "#
        );
        let so = build_so(cc, dir.path(), "dl.so", &src, &["-lm", "-ldl"]);
        let r = inspect(&so).unwrap();
        assert!(r.dynamic_loading);
        assert!(r.imports.iter().any(|i| i == "dlopen"), "{r:?}");
        assert!(!r.ok());
        let f = r
            .forbidden
            .iter()
            .find(|f| f.what.contains("libcublas.so.13"))
            .unwrap_or_else(|| panic!("{r:?}"));
        assert!(f.what.contains("dlopen"), "{f:?}");
        assert!(f.evidence.contains("\"libcublas.so.13\""), "{f:?}");
        assert!(f.evidence.contains(".rodata"), "{f:?}");
        assert!(r.missing_entry_points.is_empty());
    }

    #[test]
    fn dlopen_of_libcuda_is_allowed() {
        // What libcudart_static does in every nvcc-built object.
        let Some(cc) = c_compiler() else { return };
        let dir = tempfile::tempdir().unwrap();
        let src = format!(
            r#"
            #include <dlfcn.h>
            {ENTRY_POINTS_C}
            void *driver(void) {{
                void *h = dlopen("libcuda.so.1", RTLD_NOW);
                return h ? dlsym(h, "cuGetProcAddress") : 0;
            }}
            "#
        );
        let so = build_so(cc, dir.path(), "cuda.so", &src, &["-ldl"]);
        let r = inspect(&so).unwrap();
        assert!(r.dynamic_loading);
        assert!(r.ok(), "{}", r.summary());
    }

    #[test]
    fn forbidden_string_without_dynamic_loading_is_not_flagged() {
        let Some(cc) = c_compiler() else { return };
        let dir = tempfile::tempdir().unwrap();
        let src = format!(
            r#"
            {ENTRY_POINTS_C}
            const char *note(void) {{ return "faster than libcublas.so.13"; }}
            "#
        );
        let so = build_so(cc, dir.path(), "note.so", &src, &[]);
        let r = inspect(&so).unwrap();
        assert!(!r.dynamic_loading, "{r:?}");
        assert!(r.ok(), "{}", r.summary());
    }

    #[test]
    fn needed_cublas_is_forbidden() {
        let Some(cc) = c_compiler() else { return };
        let dir = tempfile::tempdir().unwrap();
        let stub = dir.path().join("stub.c");
        std::fs::write(
            &stub,
            "int cublasCreate_v2(void **h) { *h = 0; return 0; }\n",
        )
        .unwrap();
        let o = Command::new(cc)
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.path().join("libcublas.so.13"))
            .args(["-Wl,-soname,libcublas.so.13"])
            .arg(&stub)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let src = format!(
            r#"
            {ENTRY_POINTS_C}
            int cublasCreate_v2(void **h);
            int make(void) {{ void *h; return cublasCreate_v2(&h); }}
            "#
        );
        let libdir = format!("-L{}", dir.path().display());
        let so = build_so(
            cc,
            dir.path(),
            "linked.so",
            &src,
            &["-Wl,--no-as-needed", &libdir, "-l:libcublas.so.13"],
        );
        let r = inspect(&so).unwrap();
        assert!(r.needed.iter().any(|n| n == "libcublas.so.13"), "{r:?}");
        assert!(!r.ok());
        assert!(
            r.forbidden
                .iter()
                .any(|f| f.what == "links libcublas.so.13"),
            "{r:?}"
        );
        assert!(
            r.forbidden.iter().any(|f| f
                .what
                .contains("imports vendor library API cublasCreate_v2")),
            "{r:?}"
        );
        // The .dynstr copies of those names are not reported a second time.
        assert_eq!(r.forbidden.len(), 2, "{r:?}");
    }

    #[test]
    fn statically_contained_cublas_symbol_is_forbidden() {
        let Some(cc) = c_compiler() else { return };
        let dir = tempfile::tempdir().unwrap();
        let src = format!(
            r#"
            {ENTRY_POINTS_C}
            __attribute__((visibility("hidden"))) int cublasGemmEx(void) {{ return 0; }}
            int use(void) {{ return cublasGemmEx(); }}
            "#
        );
        let so = build_so(cc, dir.path(), "static.so", &src, &[]);
        let r = inspect(&so).unwrap();
        assert!(!r.ok());
        assert!(
            r.forbidden
                .iter()
                .any(|f| f.what.contains("contains vendor library code")),
            "{r:?}"
        );
    }

    #[test]
    fn not_a_shared_object_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("junk.so");
        std::fs::write(&p, b"not an ELF file at all").unwrap();
        let e = inspect(&p).unwrap_err();
        assert!(e.contains("junk.so"), "{e}");
        assert!(inspect(&dir.path().join("absent.so")).is_err());
    }

    #[test]
    fn string_hits_are_whole_printable_runs() {
        let data = b"\0\x01libcublasLt.so.13\0xx cublasGemmEx\0libcublasLt.so.13\0libcuda.so.1\0";
        let hits = string_hits(data);
        let texts: Vec<&str> = hits.iter().map(|h| h.text.as_str()).collect();
        assert_eq!(texts, ["libcublasLt.so.13", "xx cublasGemmEx"]);
        assert_eq!(hits[0].offset, 2);
        assert_eq!(hits[0].count, 2);
        assert!(is_forbidden_library("/opt/cuda/lib64/libcublasLt.so.13"));
        assert!(is_forbidden_library("libtorch_cuda.so"));
        assert!(!is_forbidden_library("libnvrtc.so.13"));
        assert!(!is_forbidden_library("libcudart.so.13"));
        assert!(!is_forbidden_library("libcuda.so.1"));
    }
}
