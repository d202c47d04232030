//! The CuTe/CUTLASS headers as a lookup table for the model: where each class, alias and
//! function is declared, so that a compile failure's debug prompt can quote the real
//! declarations (with their template parameters and the comment above) instead of leaving
//! the model to remember a niche library's signatures.
//!
//! The index is built once per CUTLASS version by scanning `cute/` and `cutlass/` under the
//! include directory (a line scan: `struct`/`class` names, `using` aliases, and functions
//! whose name starts a line, CuTe's style, or follows its return type) and kept as JSON in
//! the cache directory. [`lookup`] takes a failed compile's diagnostics: the names the error
//! messages qualify with `cute::`, `cutlass::` or `GMMA::` (or quote as the overloaded
//! function), the header lines of a static assertion, and, when the assertion is about a
//! GMMA layout, the family of valid `GMMA::Layout_*_Atom` choices.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::diagnostics::{Diagnostic, Severity};

/// Where one name is declared: a header under the include directory and a 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decl {
    pub file: String,
    pub line: u32,
}

/// Names to their declarations, for one CUTLASS version.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HeaderIndex {
    pub version: String,
    pub names: BTreeMap<String, Vec<Decl>>,
}

static TYPE_DECL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:template\s*<.*>\s*)?(?:struct|class|union)\s+(?:alignas\([^)]*\)\s+)?([A-Za-z_]\w*)\s*(?:[:{<]|final|$)").ok()
});
static ALIAS: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^\s*using\s+([A-Za-z_]\w*)\s*=").ok());
// A function whose name starts the line (the return type on the line above), or follows
// its return type on the same line.
static FN_START: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^([A-Za-z_]\w*)\s*\(").ok());
static FN_INLINE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:CUTE_HOST_DEVICE|CUTLASS_HOST_DEVICE|CUTE_DEVICE|CUTLASS_DEVICE)?\s*(?:static\s+)?(?:constexpr\s+)?(?:inline\s+)?(?:auto|void|bool|int)\s+([A-Za-z_]\w*)\s*\(").ok()
});
const NOT_FUNCTIONS: &[&str] = &[
    "if",
    "for",
    "while",
    "switch",
    "return",
    "sizeof",
    "static_assert",
    "decltype",
    "CUTE_STATIC_ASSERT",
    "CUTE_STATIC_ASSERT_V",
    "alignas",
    "defined",
];

/// A file of the CuTe/CUTLASS headers as the index names it (`cute/...` or `cutlass/...`),
/// or `None` for any other file.
fn library_path(file: &str) -> Option<String> {
    ["cute/", "cutlass/"].iter().find_map(|dir| {
        file.match_indices(dir)
            .map(|(i, _)| i)
            .find(|&i| i == 0 || file.as_bytes()[i - 1] == b'/')
            .map(|i| file[i..].to_string())
    })
}

/// The names a header text declares, with their lines.
fn scan(text: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let (Some(ty), Some(alias), Some(start), Some(inline)) = (
        TYPE_DECL.as_ref(),
        ALIAS.as_ref(),
        FN_START.as_ref(),
        FN_INLINE.as_ref(),
    ) else {
        return out;
    };
    for (i, line) in text.lines().enumerate() {
        let n = i as u32 + 1;
        let name = ty
            .captures(line)
            .or_else(|| alias.captures(line))
            .or_else(|| start.captures(line))
            .or_else(|| inline.captures(line))
            .map(|c| c[1].to_string());
        if let Some(name) = name.filter(|x| !NOT_FUNCTIONS.contains(&x.as_str())) {
            out.push((name, n));
        }
    }
    out
}

impl HeaderIndex {
    /// Scans `cute/` and `cutlass/` under `include`.
    pub fn build(include: &Path, version: &str) -> HeaderIndex {
        let mut names: BTreeMap<String, Vec<Decl>> = BTreeMap::new();
        let mut stack: Vec<PathBuf> = vec![include.join("cute"), include.join("cutlass")];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            files.sort();
            for p in files {
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
                if !matches!(ext, "hpp" | "h" | "inl" | "cuh") {
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&p) else {
                    continue;
                };
                let rel = p
                    .strip_prefix(include)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .into_owned();
                for (name, line) in scan(&text) {
                    names.entry(name).or_default().push(Decl {
                        file: rel.clone(),
                        line,
                    });
                }
            }
        }
        HeaderIndex {
            version: version.to_string(),
            names,
        }
    }

    /// The index of `include` for `version`, from `cache` (a JSON file per version) or
    /// built and saved there; a cache that cannot be written costs only the rebuild.
    pub fn load_or_build(include: &Path, version: &str, cache: &Path) -> HeaderIndex {
        let file = cache.join(format!("cutlass-{version}.json"));
        if let Some(ix) = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<HeaderIndex>(&b).ok())
            .filter(|ix| ix.version == version && !ix.names.is_empty())
        {
            return ix;
        }
        let ix = HeaderIndex::build(include, version);
        if std::fs::create_dir_all(cache).is_ok() {
            if let Ok(json) = serde_json::to_vec(&ix) {
                let tmp = file.with_extension("json.tmp");
                if std::fs::write(&tmp, json).is_ok() {
                    let _ = std::fs::rename(&tmp, &file);
                }
            }
        }
        ix
    }
}

/// The declaration at `d`: the comment lines right above it, its `template <...>` lines
/// and the declaration itself up to its `{` or `;` (at most `max` lines in all).
pub fn excerpt(include: &Path, d: &Decl, max: usize) -> Option<String> {
    let text = std::fs::read_to_string(include.join(&d.file)).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let at = (d.line as usize).checked_sub(1)?;
    if at >= lines.len() {
        return None;
    }
    // Upwards: the template head, attribute macros and return type, then the comment.
    let mut first = at;
    while first > 0 {
        let l = lines[first - 1].trim();
        let part_of_head = l.starts_with("template")
            || l.starts_with("class ")
            || l.starts_with("typename ")
            || l.ends_with(',')
            || l.starts_with("CUTE_")
            || l.starts_with("CUTLASS_")
            || l == "void"
            || l == "auto"
            || l.starts_with("constexpr")
            || l.starts_with("//")
            || l.starts_with("/*")
            || l.starts_with('*');
        if !part_of_head || at - first >= max / 2 {
            break;
        }
        first -= 1;
    }
    let mut last = at;
    while last + 1 < lines.len() && last - first + 1 < max {
        let l = lines[last].trim_end();
        if l.ends_with('{') || l.ends_with(';') || l.ends_with('}') {
            break;
        }
        last += 1;
    }
    let body: Vec<String> = lines[first..=last]
        .iter()
        .map(|l| l.trim_end().to_string())
        .collect();
    Some(format!("{}:{}\n{}", d.file, d.line, body.join("\n")))
}

static QUALIFIED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\b(?:cute|cutlass|GMMA|SM90|gemm|arch)::(?:[A-Za-z_]\w*::)*([A-Za-z_]\w*)").ok()
});
static OVERLOAD: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r#"(?:overloaded function|function template|function) "(?:[A-Za-z_]\w*::)*([A-Za-z_]\w*)""#,
    )
    .ok()
});

// The function an instantiation frame names: `void cute::gemm<...>(args)` -> `gemm`.
static FRAME_FN: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?:^|[\s:*&])([A-Za-z_]\w*)\s*(?:<[^()]*>)?\s*\(").ok());

/// The names a failed compile's errors point at, most telling first: the overloaded
/// function no candidate matched, then the names the messages qualify with a CuTe or
/// CUTLASS namespace, then the library functions in whose instantiation an error fired
/// (the innermost frame in the headers of each error; never more than `max`).
pub fn names_in(diags: &[Diagnostic], max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |n: &str| {
        if out.len() < max && !out.iter().any(|x| x == n) {
            out.push(n.to_string());
        }
    };
    for d in diags.iter().filter(|d| d.severity == Severity::Error) {
        if let Some(c) = OVERLOAD.as_ref().and_then(|r| r.captures(&d.message)) {
            push(&c[1]);
        }
    }
    for d in diags.iter().filter(|d| d.severity == Severity::Error) {
        if let Some(r) = QUALIFIED.as_ref() {
            for c in r.captures_iter(&d.message) {
                push(&c[1]);
            }
        }
    }
    for d in diags.iter().filter(|d| d.severity == Severity::Error) {
        if library_path(&d.file).is_none() {
            continue;
        }
        let name = d
            .instantiation
            .iter()
            .filter(|f| library_path(&f.file).is_some() || f.file.is_empty())
            .find_map(|f| {
                let what = f.what.split(" [with ").next().unwrap_or(&f.what);
                let what = what
                    .trim_start_matches("instantiation of ")
                    .trim_matches('"');
                FRAME_FN.as_ref()?.captures(what).map(|c| c[1].to_string())
            });
        if let Some(n) = name.filter(|n| !NOT_FUNCTIONS.contains(&n.as_str())) {
            push(&n);
        }
    }
    out
}

static SMEM_LAYOUT_LINE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"Layout_\w*Atom|tile_to_shape|SmemLayout|ss_smem_selector").ok());

/// For the debug prompt: the declarations of the names the errors point at (at most 4
/// declarations each), the lines around a static assertion that fired in a header, and for
/// an assertion about a GMMA layout the family of valid layout atoms and the lines of
/// `user_source` (the failing kernel) that build shared-memory layouts; `None` when none of
/// it is found. At most `budget` bytes.
pub fn lookup(
    index: &HeaderIndex,
    include: &Path,
    diags: &[Diagnostic],
    user_source: Option<&str>,
    budget: usize,
) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for d in diags.iter().filter(|d| d.severity == Severity::Error) {
        let rel = library_path(&d.file);
        if rel.is_none() || !d.message.contains("static assertion") {
            continue;
        }
        if let (Some(rel), Some(line)) = (rel, d.line) {
            let decl = Decl {
                file: rel.clone(),
                line: line.saturating_sub(4).max(1),
            };
            if let Ok(text) = std::fs::read_to_string(include.join(&rel)) {
                let lines: Vec<&str> = text.lines().collect();
                let from = decl.line as usize - 1;
                let to = (line as usize + 1).min(lines.len());
                if from < to {
                    parts.push(format!(
                        "the assertion, {rel}:{line}:\n{}",
                        lines[from..to].join("\n")
                    ));
                }
            }
        }
        if d.message.contains("GMMA") {
            let family: Vec<&String> = index
                .names
                .keys()
                .filter(|k| k.starts_with("Layout_") && k.ends_with("_Atom"))
                .filter(|k| !k.contains("_Bits"))
                .collect();
            if !family.is_empty() {
                parts.push(format!(
                    "the GMMA shared-memory layout atoms (cute::GMMA::, in units of the element type; a K-major operand needs a Layout_K_* atom, an M/N-major one a Layout_MN_* atom): {}",
                    family
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            // The assertion fires deep inside the MMA; the type it rejects was built
            // where the kernel lays out its shared memory.
            if let (Some(src), Some(re)) = (user_source, SMEM_LAYOUT_LINE.as_ref()) {
                let lines: Vec<String> = src
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| re.is_match(l))
                    .take(10)
                    .map(|(i, l)| format!("{:>5}| {}", i + 1, l.trim_end()))
                    .collect();
                if !lines.is_empty() {
                    parts.push(format!(
                        "the lines of your kernel that build shared-memory layouts (the layout the assertion rejects comes from one of them):\n{}",
                        lines.join("\n")
                    ));
                }
            }
        }
        break;
    }
    // Headers the errors passed through: their declarations come first.
    let mentioned: Vec<String> = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .flat_map(|d| {
            std::iter::once(d.file.as_str()).chain(d.instantiation.iter().map(|f| f.file.as_str()))
        })
        .filter_map(library_path)
        .collect();
    for name in names_in(diags, 6) {
        let Some(decls) = index.names.get(&name) else {
            continue;
        };
        let mut decls: Vec<&Decl> = decls.iter().collect();
        decls.sort_by_key(|d| (!mentioned.contains(&d.file), !d.file.starts_with("cute/")));
        for d in decls.into_iter().take(4) {
            if let Some(x) = excerpt(include, d, 14) {
                parts.push(x);
            }
        }
    }
    if parts.is_empty() {
        return None;
    }
    let mut out = String::new();
    for p in parts {
        if out.len() + p.len() + 2 > budget {
            out.push_str("[... more omitted]\n");
            break;
        }
        out.push_str(&p);
        out.push_str("\n\n");
    }
    Some(out.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolchain::diagnostics::Origin;

    const GEMM_HPP: &str = "// cute gemm\n\n// Dispatch: three arguments to four\ntemplate <class TA, class ALayout,\n          class TC, class CLayout>\nCUTE_HOST_DEVICE\nvoid\ngemm(Tensor<TA, ALayout> const& A,\n     Tensor<TC, CLayout>      & C)\n{\n  return gemm(C, A, C);\n}\n\ntemplate <class MMA, class TA>\nCUTE_HOST_DEVICE\nvoid\ngemm(MMA_Atom<MMA> const& mma,\n     Tensor<TA> const& A)\n{\n}\n";
    const GMMA_HPP: &str = "namespace GMMA {\ntemplate <class Type>\nusing Layout_K_SW128_Atom = decltype(x);\ntemplate <class Type>\nusing Layout_MN_SW128_Atom = decltype(x);\nusing Layout_K_SW128_Atom_Bits = int;\ntemplate <class L>\nCUTE_HOST_DEVICE constexpr auto\nmake_gmma_desc(L const&)\n{\n  static_assert(is_k, \"Not a canonical GMMA_K Layout: Expected K-size 2\");\n  return 0;\n}\nstruct DescriptorIterator {\n};\n}\n";

    fn include() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (rel, text) in [
            ("cute/algorithm/gemm.hpp", GEMM_HPP),
            ("cute/atom/mma_traits_sm90_gmma.hpp", GMMA_HPP),
        ] {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        }
        dir
    }

    fn error(file: &str, line: u32, message: &str) -> Diagnostic {
        Diagnostic {
            file: file.into(),
            line: Some(line),
            column: None,
            severity: Severity::Error,
            message: message.into(),
            instantiation: Vec::new(),
            origin: Origin::Frontend,
            snippet: None,
            code: None,
        }
    }

    #[test]
    fn library_paths_are_the_header_trees_only() {
        assert_eq!(
            library_path("/opt/x/include/cute/atom/a.hpp").as_deref(),
            Some("cute/atom/a.hpp")
        );
        assert_eq!(
            library_path("cutlass/gemm/g.h").as_deref(),
            Some("cutlass/gemm/g.h")
        );
        assert_eq!(library_path("/home/u/execute/k.cu"), None);
        assert_eq!(library_path("kernel.cu"), None);
    }

    #[test]
    fn the_scan_finds_types_aliases_and_cute_style_functions() {
        let dir = include();
        let ix = HeaderIndex::build(dir.path(), "4.2.0");
        let gemm = &ix.names["gemm"];
        assert_eq!(gemm.len(), 2, "{gemm:?}");
        assert_eq!(gemm[0].line, 8);
        assert!(ix.names.contains_key("Layout_K_SW128_Atom"));
        assert!(ix.names.contains_key("make_gmma_desc"));
        assert!(ix.names.contains_key("DescriptorIterator"));
        assert!(!ix.names.contains_key("return") && !ix.names.contains_key("static_assert"));
        // Cached as JSON and read back.
        let cache = dir.path().join("cache");
        let a = HeaderIndex::load_or_build(dir.path(), "4.2.0", &cache);
        assert!(cache.join("cutlass-4.2.0.json").is_file());
        let b = HeaderIndex::load_or_build(dir.path(), "4.2.0", &cache);
        assert_eq!(a.names, b.names);
    }

    #[test]
    fn an_overload_failure_quotes_every_overload_with_its_template_head() {
        let dir = include();
        let ix = HeaderIndex::build(dir.path(), "4.2.0");
        let d = error(
            "kernel.cu",
            120,
            "no instance of overloaded function \"cute::gemm\" matches the argument list; argument types are: (cute::TiledMMA<...>, ...)",
        );
        assert_eq!(names_in(std::slice::from_ref(&d), 6)[0], "gemm");
        let text = lookup(&ix, dir.path(), &[d], None, 4000).expect("found");
        assert!(text.contains("cute/algorithm/gemm.hpp:8\n// Dispatch: three arguments to four\ntemplate <class TA, class ALayout,"), "{text}");
        assert!(text.contains("gemm(MMA_Atom<MMA> const& mma,"), "{text}");
    }

    #[test]
    fn a_gmma_layout_assertion_quotes_its_lines_and_the_valid_atoms() {
        let dir = include();
        let ix = HeaderIndex::build(dir.path(), "4.2.0");
        let d = error(
            "/opt/cutlass/include/cute/atom/mma_traits_sm90_gmma.hpp",
            11,
            "static assertion failed with \"Not a canonical GMMA_K Layout: Expected K-size 2\"",
        );
        let kernel = "#include <cute/tensor.hpp>\nusing namespace cute;\nauto sB = tile_to_shape(GMMA::Layout_MN_SW128_Atom<half_t>{}, Shape<_128,_64>{});\n";
        let text = lookup(&ix, dir.path(), &[d], Some(kernel), 4000).expect("found");
        assert!(
            text.contains("the assertion, cute/atom/mma_traits_sm90_gmma.hpp:11"),
            "{text}"
        );
        assert!(
            text.contains("    3| auto sB = tile_to_shape(GMMA::Layout_MN_SW128_Atom<half_t>{}"),
            "{text}"
        );
        assert!(text.contains("static_assert(is_k"), "{text}");
        assert!(
            text.contains("Layout_K_SW128_Atom, Layout_MN_SW128_Atom") && !text.contains("_Bits"),
            "{text}"
        );
        // Nothing to say about an error outside the headers with no library names.
        let plain = error("kernel.cu", 3, "identifier \"x\" is undefined");
        assert_eq!(lookup(&ix, dir.path(), &[plain], Some(kernel), 4000), None);
    }
}
