//! The toolchain: finding (or installing) nvcc, the CUTLASS/CuTe headers and the CUDA
//! tools, and the compile stage that turns a kernel source into a shared object.
//!
//! Discovery order, for every tool: flags, the environment (`CUTESMITH_NVCC`,
//! `CUDA_HOME`/`CUDA_PATH`, `CUTLASS_DIR`), the config file's `[toolchain]` pins, the
//! system (`PATH`, `/usr/local/cuda`), then the per-user cache that `cutesmith setup`
//! fills. Tool processes are spawned through [`process`] (the interactive session's
//! `$EDITOR` is the one exception).

/// A recorded tool output under `tests/fixtures/parsers/`, as a `&'static str` (the
/// parsers' unit tests).
#[cfg(test)]
macro_rules! parser_fixture {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/parsers/",
            $name
        ))
    };
}

pub mod cache;
pub mod compile;
pub mod diagnostics;
pub mod headers;
pub mod ptxas;
pub mod sass;
pub mod setup;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::process;

/// Where a tool was found, in discovery order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A command-line flag named it.
    Flag,
    /// An environment variable named it (the variable's name).
    Env(String),
    /// The config file's `[toolchain]` section named it.
    Config,
    /// Found on the system: `PATH`, `/usr/local/cuda`, a system include directory.
    System(String),
    /// Installed by `cutesmith setup` into the per-user cache.
    Cache,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Flag => write!(f, "flag"),
            Source::Env(var) => write!(f, "${var}"),
            Source::Config => write!(f, "config file"),
            Source::System(how) => write!(f, "system, {how}"),
            Source::Cache => write!(f, "cutesmith cache"),
        }
    }
}

/// One executable found on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct Tool {
    pub path: PathBuf,
    pub source: Source,
    /// The version the tool printed, or "unknown".
    pub version: String,
}

/// The CUTLASS headers: `include/` (cute, cutlass) and `tools/util/include`.
#[derive(Debug, Clone, Serialize)]
pub struct Cutlass {
    pub include: PathBuf,
    pub util_include: Option<PathBuf>,
    pub source: Source,
    /// `MAJOR.MINOR.PATCH` from `cutlass/version.h`.
    pub version: String,
}

/// What the user said explicitly, before any search.
#[derive(Debug, Clone, Default)]
pub struct ToolchainOptions {
    /// `--nvcc PATH`
    pub nvcc: Option<PathBuf>,
    /// `--cuda-home DIR`
    pub cuda_home: Option<PathBuf>,
    /// `--cutlass-dir DIR`
    pub cutlass_dir: Option<PathBuf>,
    /// The config file's `[toolchain]` pins: below flags and the environment, above
    /// the system search.
    pub config: crate::config::ToolchainSpec,
}

/// Everything the compile stage needs, found.
#[derive(Debug, Clone, Serialize)]
pub struct Toolchain {
    pub nvcc: Tool,
    pub cutlass: Cutlass,
    /// Disassembler for the SASS summary; compiling works without it.
    pub cuobjdump: Option<Tool>,
    /// `cutlass-templates/include`, holding the kernel ABI header.
    pub abi_include: PathBuf,
}

/// The optional tools a report mentions but no compile needs.
#[derive(Debug, Clone, Serialize)]
pub struct ExtraTools {
    pub ncu: Option<Tool>,
    pub compute_sanitizer: Option<Tool>,
    pub cuobjdump: Option<Tool>,
}

/// The command that fixes a missing toolchain, for error messages.
pub const SETUP_HINT: &str =
    "run `cutesmith setup` (installs CUDA 13.0 nvcc and CUTLASS 4.2 headers into the user cache), \
     or point CUTESMITH_NVCC / CUDA_HOME and CUTLASS_DIR at existing installs";

/// The per-user cache directory: `$CUTESMITH_CACHE_DIR`, else `$XDG_CACHE_HOME/cutesmith`,
/// else `~/.cache/cutesmith`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = non_empty_env("CUTESMITH_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = non_empty_env("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("cutesmith");
    }
    match non_empty_env("HOME") {
        Some(home) => PathBuf::from(home).join(".cache").join("cutesmith"),
        None => std::env::temp_dir().join("cutesmith-cache"),
    }
}

/// The root of the toolkit that `cutesmith setup` installs (a pip `--target` tree).
pub fn cache_toolkit_dir() -> PathBuf {
    cache_dir().join("toolkit")
}

/// The directory holding the kernel ABI header, `cutlass-templates/include`.
///
/// `CUTESMITH_TEMPLATES` overrides it; otherwise the copy next to the crate's sources
/// (where `cargo` built the binary), else one next to the executable.
pub fn abi_include_dir() -> PathBuf {
    if let Some(dir) = non_empty_env("CUTESMITH_TEMPLATES") {
        return PathBuf::from(dir).join("include");
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("cutlass-templates/include");
    if built.join("cutesmith_abi.h").is_file() {
        return built;
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(4) {
            let candidate = dir.join("cutlass-templates/include");
            if candidate.join("cutesmith_abi.h").is_file() {
                return candidate;
            }
        }
    }
    built
}

impl Toolchain {
    /// Finds nvcc and CUTLASS in discovery order; the error names the command that
    /// fixes what is missing.
    pub fn discover(opts: &ToolchainOptions) -> Result<Toolchain> {
        let nvcc = find_nvcc(opts).ok_or_else(|| Error::ToolMissing {
            what: "nvcc (CUDA compiler)".into(),
            hint: SETUP_HINT.into(),
        })?;
        if !is_executable(&nvcc.path) {
            return Err(Error::ToolMissing {
                what: format!("nvcc at {} (named by {})", nvcc.path.display(), nvcc.source),
                hint: format!("that path is not an executable file; fix it, or {SETUP_HINT}"),
            });
        }
        let cutlass = find_cutlass(opts, &nvcc.path).ok_or_else(|| Error::ToolMissing {
            what: "CUTLASS headers (cute/tensor.hpp, cutlass/version.h)".into(),
            hint: SETUP_HINT.into(),
        })?;
        let cuobjdump = find_beside_nvcc(&nvcc, "cuobjdump");
        Ok(Toolchain {
            nvcc,
            cutlass,
            cuobjdump,
            abi_include: abi_include_dir(),
        })
    }

    /// A string that changes whenever the compiler or the headers do: part of the
    /// compile cache key.
    pub fn fingerprint(&self) -> String {
        format!(
            "nvcc {} at {}; cutlass {} at {}",
            self.nvcc.version,
            self.nvcc.path.display(),
            self.cutlass.version,
            self.cutlass.include.display()
        )
    }
}

/// Finds ncu, compute-sanitizer and cuobjdump for reports.
pub fn find_extra_tools(opts: &ToolchainOptions) -> ExtraTools {
    let nvcc = find_nvcc(opts);
    let beside = |name: &str| match &nvcc {
        Some(n) => find_beside_nvcc(n, name),
        None => find_on_system(name),
    };
    ExtraTools {
        ncu: beside("ncu"),
        compute_sanitizer: beside("compute-sanitizer"),
        cuobjdump: beside("cuobjdump"),
    }
}

pub(crate) fn non_empty_env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

fn search_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

/// The nvcc version line, e.g. "13.0.88" from "Cuda compilation tools, release 13.0, V13.0.88".
pub fn tool_version(path: &Path) -> String {
    let mut cmd = Command::new(path);
    cmd.arg("--version");
    let Ok(out) = process::run(cmd, Duration::from_secs(30), 64 * 1024) else {
        return "unknown (did not run)".into();
    };
    parse_version(&out.combined()).unwrap_or_else(|| "unknown".into())
}

fn parse_version(text: &str) -> Option<String> {
    let re = regex::Regex::new(r"\bV(\d+\.\d+\.\d+)").ok()?;
    if let Some(c) = re.captures(text) {
        return Some(c[1].to_string());
    }
    let re = regex::Regex::new(r"(?i)version\s+(\d+\.\d+(?:\.\d+)*)").ok()?;
    re.captures(text).map(|c| c[1].to_string())
}

fn tool(path: PathBuf, source: Source) -> Tool {
    let version = tool_version(&path);
    Tool {
        path,
        source,
        version,
    }
}

fn cuda_home_env() -> Option<(PathBuf, String)> {
    ["CUDA_HOME", "CUDA_PATH"]
        .into_iter()
        .find_map(|var| non_empty_env(var).map(|v| (PathBuf::from(v), var.to_string())))
}

fn find_nvcc(opts: &ToolchainOptions) -> Option<Tool> {
    if let Some(p) = &opts.nvcc {
        return Some(tool(p.clone(), Source::Flag));
    }
    if let Some(home) = &opts.cuda_home {
        return Some(tool(home.join("bin/nvcc"), Source::Flag));
    }
    if let Some(p) = non_empty_env("CUTESMITH_NVCC") {
        return Some(tool(PathBuf::from(p), Source::Env("CUTESMITH_NVCC".into())));
    }
    if let Some((home, var)) = cuda_home_env() {
        let p = home.join("bin/nvcc");
        if is_executable(&p) {
            return Some(tool(p, Source::Env(var)));
        }
    }
    if let Some(p) = &opts.config.nvcc {
        return Some(tool(p.clone(), Source::Config));
    }
    if let Some(home) = &opts.config.cuda_home {
        return Some(tool(home.join("bin/nvcc"), Source::Config));
    }
    if let Some(p) = search_path("nvcc") {
        return Some(tool(p, Source::System("PATH".into())));
    }
    let local = PathBuf::from("/usr/local/cuda/bin/nvcc");
    if is_executable(&local) {
        return Some(tool(local, Source::System("/usr/local/cuda".into())));
    }
    let cached = setup::cache_nvcc(&cache_toolkit_dir());
    if is_executable(&cached) {
        return Some(tool(cached, Source::Cache));
    }
    None
}

fn find_on_system(name: &str) -> Option<Tool> {
    if let Some((home, var)) = cuda_home_env() {
        let p = home.join("bin").join(name);
        if is_executable(&p) {
            return Some(tool(p, Source::Env(var)));
        }
    }
    if let Some(p) = search_path(name) {
        return Some(tool(p, Source::System("PATH".into())));
    }
    let local = PathBuf::from("/usr/local/cuda/bin").join(name);
    if is_executable(&local) {
        return Some(tool(local, Source::System("/usr/local/cuda".into())));
    }
    let cached = cache_toolkit_dir().join("nvidia/cu13/bin").join(name);
    if is_executable(&cached) {
        return Some(tool(cached, Source::Cache));
    }
    None
}

/// A tool from the same installation as nvcc first (found the way nvcc was), then
/// anywhere else.
fn find_beside_nvcc(nvcc: &Tool, name: &str) -> Option<Tool> {
    if let Some(dir) = nvcc.path.parent() {
        let p = dir.join(name);
        if is_executable(&p) {
            return Some(tool(p, nvcc.source.clone()));
        }
    }
    find_on_system(name)
}

/// Reads `MAJOR.MINOR.PATCH` from `<include>/cutlass/version.h`.
pub fn cutlass_version(include: &Path) -> Option<String> {
    let text = std::fs::read_to_string(include.join("cutlass/version.h")).ok()?;
    let grab = |name: &str| -> Option<String> {
        let re = regex::Regex::new(&format!(r"#define\s+CUTLASS_{name}\s+(\d+)")).ok()?;
        re.captures(&text).map(|c| c[1].to_string())
    };
    Some(format!(
        "{}.{}.{}",
        grab("MAJOR")?,
        grab("MINOR")?,
        grab("PATCH")?
    ))
}

/// Given a directory a user named, finds the include dir (holding `cute/` and
/// `cutlass/`) and `tools/util/include`. Accepts a CUTLASS checkout root, its `include/`,
/// or the pip wheel's `cutlass_library/source` tree.
fn cutlass_at(dir: &Path, source: Source) -> Option<Cutlass> {
    let candidates = [
        dir.to_path_buf(),
        dir.join("include"),
        dir.join("source/include"),
        dir.join("cutlass_library/source/include"),
    ];
    let include = candidates
        .into_iter()
        .find(|c| c.join("cutlass/version.h").is_file() && c.join("cute/tensor.hpp").is_file())?;
    let root = include.parent().map(Path::to_path_buf).unwrap_or_default();
    let util = root.join("tools/util/include");
    let version = cutlass_version(&include).unwrap_or_else(|| "unknown".into());
    Some(Cutlass {
        util_include: util.is_dir().then_some(util),
        include,
        source,
        version,
    })
}

fn find_cutlass(opts: &ToolchainOptions, nvcc: &Path) -> Option<Cutlass> {
    if let Some(dir) = &opts.cutlass_dir {
        return cutlass_at(dir, Source::Flag);
    }
    if let Some(dir) = non_empty_env("CUTLASS_DIR") {
        return cutlass_at(Path::new(&dir), Source::Env("CUTLASS_DIR".into()));
    }
    if let Some(dir) = &opts.config.cutlass_dir {
        return cutlass_at(dir, Source::Config);
    }
    let mut system = vec![
        PathBuf::from("/usr/local/cutlass"),
        PathBuf::from("/opt/cutlass"),
        PathBuf::from("/usr/local"),
        PathBuf::from("/usr"),
    ];
    // Headers installed into the CUDA tree that provides nvcc.
    if let Some(root) = nvcc.parent().and_then(Path::parent) {
        system.insert(0, root.to_path_buf());
    }
    for dir in system {
        let how = dir.display().to_string();
        if let Some(c) = cutlass_at(&dir, Source::System(how)) {
            return Some(c);
        }
    }
    cutlass_at(&cache_toolkit_dir(), Source::Cache)
}

/// Finds the toolchain; when none is found and installing is allowed, installs the
/// pinned one into the cache first, saying so through `say`.
pub fn ensure(
    opts: &ToolchainOptions,
    no_install: bool,
    say: &mut dyn FnMut(&str),
) -> Result<Toolchain> {
    match Toolchain::discover(opts) {
        Ok(tc) => Ok(tc),
        Err(Error::ToolMissing { what, hint }) if !no_install && !explicitly_named(opts) => {
            say(&format!(
                "{what} not found; installing the pinned toolkit (as `cutesmith setup` does)"
            ));
            setup::install(&cache_toolkit_dir(), false, say).map_err(|e| {
                Error::Setup(format!(
                    "{e}\n(before installing: {what} not found: {hint})"
                ))
            })?;
            Toolchain::discover(opts)
        }
        Err(e) => Err(e),
    }
}

/// When the user named a path, a missing tool there is their mistake: do not paper over
/// it with an install.
fn explicitly_named(opts: &ToolchainOptions) -> bool {
    let pinned = &opts.config;
    opts.nvcc.is_some()
        || opts.cuda_home.is_some()
        || opts.cutlass_dir.is_some()
        || pinned.nvcc.is_some()
        || pinned.cuda_home.is_some()
        || pinned.cutlass_dir.is_some()
        || non_empty_env("CUTESMITH_NVCC").is_some()
        || non_empty_env("CUTLASS_DIR").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvcc_version() {
        let text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0";
        assert_eq!(parse_version(text).as_deref(), Some("13.0.88"));
        assert_eq!(
            parse_version("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0")
                .as_deref(),
            Some("2025.3.1.0")
        );
        assert_eq!(parse_version("no numbers"), None);
    }

    #[test]
    fn reads_cutlass_version_and_layouts() {
        let dir = tempfile::tempdir().unwrap();
        let inc = dir.path().join("include");
        std::fs::create_dir_all(inc.join("cutlass")).unwrap();
        std::fs::create_dir_all(inc.join("cute")).unwrap();
        std::fs::create_dir_all(dir.path().join("tools/util/include")).unwrap();
        std::fs::write(inc.join("cute/tensor.hpp"), "").unwrap();
        std::fs::write(
            inc.join("cutlass/version.h"),
            "#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 2\n#define CUTLASS_PATCH 0 \n",
        )
        .unwrap();
        for named in [dir.path().to_path_buf(), inc.clone()] {
            let c = cutlass_at(&named, Source::Flag).unwrap();
            assert_eq!(c.version, "4.2.0");
            assert_eq!(c.include, inc);
            assert_eq!(c.util_include, Some(dir.path().join("tools/util/include")));
        }
        assert!(cutlass_at(&dir.path().join("nothing"), Source::Flag).is_none());
    }

    #[test]
    fn abi_header_is_found() {
        assert!(abi_include_dir().join("cutesmith_abi.h").is_file());
    }
}
