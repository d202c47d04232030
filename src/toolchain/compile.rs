//! The compile stage: a kernel source in, a shared object (or parsed diagnostics) out.
//!
//! The source is written into a fresh temporary directory and nvcc runs there, in its own
//! process group with a timeout, against the CUTLASS headers and the kernel ABI header.
//! Success carries the ptxas resource report per kernel and a SASS summary; failure
//! carries diagnostics parsed into (file, line, severity, message) and a condensed text
//! under 4 KB, while the full log is kept in the cache entry. Outcomes are cached by
//! content hash, and many sources compile in parallel.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::process;
use crate::toolchain::cache::{self, CompileCache, OUTCOME_FILE};
use crate::toolchain::diagnostics::{self, Diagnostic};
use crate::toolchain::ptxas::{self, KernelResources};
use crate::toolchain::sass::{self, SassSummary};
use crate::toolchain::Toolchain;

/// The most a condensed diagnostic text may take: what a prompt can carry.
pub const CONDENSED_MAX_BYTES: usize = 4096;

/// How to compile.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompileOptions {
    /// Target, e.g. `sm_90a`: becomes `-gencode=arch=compute_90a,code=sm_90a`.
    pub arch: String,
    /// `-D` definitions, each `NAME` or `NAME=VALUE` (strategy parameters).
    pub defines: Vec<String>,
    /// Further nvcc flags, appended last.
    pub extra_flags: Vec<String>,
    /// Wall-clock limit for nvcc; the whole process group is killed past it.
    pub timeout_secs: u64,
    /// Look up and store outcomes in the compile cache.
    pub use_cache: bool,
    /// Disassemble the result with cuobjdump for the SASS summary.
    pub sass: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            arch: "sm_90a".into(),
            defines: Vec::new(),
            extra_flags: Vec::new(),
            timeout_secs: 900,
            use_cache: true,
            sass: true,
        }
    }
}

/// One source to compile.
#[derive(Debug, Clone)]
pub struct CompileRequest {
    /// The CUDA C++ source text.
    pub source: String,
    /// The name diagnostics use for it (the user's file name, e.g. `gemm.cu`).
    pub file_name: String,
    pub options: CompileOptions,
}

impl CompileRequest {
    /// A request for a file on disk, named in diagnostics by its file name.
    pub fn from_file(path: &Path, options: CompileOptions) -> Result<Self> {
        let source = std::fs::read_to_string(path).at(path)?;
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "kernel.cu".into());
        Ok(CompileRequest {
            source,
            file_name,
            options,
        })
    }

    /// The request for a kernel version's source (as a session keeps it in
    /// `versions/vNNN/kernel.cu`), for `arch`: the same for the engine's compile stage and
    /// the built-in provider's parallel pre-compile, so the two meet in the compile cache.
    pub fn version(source: &str, arch: &str) -> Self {
        CompileRequest {
            source: source.to_string(),
            file_name: "kernel.cu".into(),
            options: CompileOptions {
                arch: arch.to_string(),
                ..CompileOptions::default()
            },
        }
    }
}

/// How a compile ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompileStatus {
    Success,
    Failed,
    TimedOut,
}

/// The structured result of the compile stage. A failed compile is an outcome, not an
/// error: it feeds the debug stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompileOutcome {
    pub status: CompileStatus,
    /// The cache key (content hash of the inputs).
    pub key: String,
    /// The shared object, on success.
    pub shared_object: Option<PathBuf>,
    /// The full nvcc log (command line, stdout, stderr).
    pub log_path: PathBuf,
    /// The disassembly, when cuobjdump ran.
    pub sass_path: Option<PathBuf>,
    /// ptxas resource report, one entry per kernel.
    pub resources: Vec<KernelResources>,
    /// SASS instruction counts; `None` with `sass_note` saying why.
    pub sass: Option<SassSummary>,
    pub sass_note: Option<String>,
    /// Every diagnostic nvcc, the host compiler or ptxas printed.
    pub diagnostics: Vec<Diagnostic>,
    /// Errors (or, on success, warnings) condensed to at most [`CONDENSED_MAX_BYTES`].
    pub condensed: String,
    /// The user-file location most likely to need the fix, on failure.
    pub primary_location: Option<(String, u32)>,
    /// The nvcc command line as run.
    pub command: Vec<String>,
    /// Seconds nvcc ran (when the outcome was produced, not when it was read back).
    pub nvcc_seconds: f64,
    /// nvcc died of a signal (killed for memory, interrupted): says nothing about the
    /// source, so the outcome is not cached.
    #[serde(default)]
    pub killed_by_signal: bool,
    /// True when this outcome came from the cache without running nvcc.
    #[serde(skip)]
    pub cached: bool,
}

impl CompileOutcome {
    /// True when a shared object was produced.
    pub fn ok(&self) -> bool {
        self.status == CompileStatus::Success
    }

    /// Spilled bytes (stores + loads) over all kernels.
    pub fn spill_bytes(&self) -> u64 {
        crate::toolchain::ptxas::total_spill_bytes(&self.resources)
    }
}

/// The nvcc argument list (without the source and output paths).
pub fn nvcc_args(tc: &Toolchain, opts: &CompileOptions) -> Vec<String> {
    let compute = opts.arch.replacen("sm_", "compute_", 1);
    let mut args = vec![
        format!("-gencode=arch={compute},code={}", opts.arch),
        "-std=c++17".into(),
        "-O3".into(),
        "--expt-relaxed-constexpr".into(),
        "-Xcompiler".into(),
        "-fPIC".into(),
        "-shared".into(),
        "-lineinfo".into(),
        "-Xptxas".into(),
        "-v".into(),
        format!("-I{}", tc.cutlass.include.display()),
    ];
    if let Some(util) = &tc.cutlass.util_include {
        args.push(format!("-I{}", util.display()));
    }
    args.push(format!("-I{}", tc.abi_include.display()));
    args.extend(opts.defines.iter().map(|d| format!("-D{d}")));
    args.extend(opts.extra_flags.iter().cloned());
    args
}

/// The text of a source that its cache key hashes: the source with its leading `//`
/// comment lines and blank lines emptied. The lines stay (empty), so every line keeps
/// its number and a cached diagnostic points where a fresh one would. The built-in
/// strategies open with the workload's name and description, so the one kernel that
/// several workloads of the same dtypes, layouts and chain instantiate (a suite's
/// projection shapes) is compiled once. A comment line ending in a backslash continues
/// onto the next line: it and everything after it are kept whole, as is everything from
/// the first line that is not a `//` comment or blank.
pub fn key_source(source: &str) -> std::borrow::Cow<'_, str> {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while !rest.is_empty() {
        let (line, tail) = match rest.find('\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let body = line.trim_end_matches('\r');
        let trimmed = body.trim_start();
        let comment = trimmed.starts_with("//") && !body.ends_with('\\');
        if !(comment || trimmed.is_empty()) {
            break;
        }
        if line.len() == rest.len() {
            // The last line, a comment: the source was comments only.
            return std::borrow::Cow::Owned(out);
        }
        out.push('\n');
        rest = tail;
    }
    if rest.len() == source.len() {
        return std::borrow::Cow::Borrowed(source);
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// The cache key of a request under a toolchain.
pub fn cache_key(tc: &Toolchain, req: &CompileRequest) -> String {
    // Every header beside the ABI header can be included by a kernel: hash them all.
    let mut abi = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&tc.abi_include) {
        let mut files: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for f in files {
            abi.extend_from_slice(f.to_string_lossy().as_bytes());
            abi.extend(std::fs::read(&f).unwrap_or_default());
        }
    }
    let args = nvcc_args(tc, &req.options).join("\u{1f}");
    let sass = if req.options.sass { "sass" } else { "nosass" };
    cache::key(&[
        key_source(&req.source).as_bytes(),
        req.file_name.as_bytes(),
        args.as_bytes(),
        tc.fingerprint().as_bytes(),
        &abi,
        sass.as_bytes(),
        // A source refused a file by the sandbox may compile without it.
        if crate::sandbox::disabled() {
            b"unsandboxed"
        } else {
            b"sandboxed"
        },
    ])
}

/// Compiles one source, from the cache when it can.
pub fn compile(
    tc: &Toolchain,
    cache: &CompileCache,
    req: &CompileRequest,
) -> Result<CompileOutcome> {
    let key = cache_key(tc, req);
    if req.options.use_cache {
        if let Some(dir) = cache.lookup(&key) {
            if let Some(mut outcome) = read_outcome(&dir) {
                outcome.cached = true;
                return Ok(outcome);
            }
        }
    }
    let staging = cache.stage(&key)?;
    let outcome = run_nvcc(tc, req, &key, &staging, &cache.entry_dir(&key));
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    // A timeout or a kill depends on the machine, not only on the inputs: never cache it.
    if outcome.status == CompileStatus::TimedOut
        || outcome.killed_by_signal
        || !req.options.use_cache
    {
        let keep = cache.keep_uncached(&key, &staging)?;
        return Ok(relocate(outcome, &cache.entry_dir(&key), &keep));
    }
    let dir = cache.commit(&key, &staging)?;
    Ok(read_outcome(&dir).unwrap_or(outcome))
}

/// Compiles several sources at once, `jobs` nvcc processes at a time, reporting each
/// outcome to `on_done` as it lands. Results come back in request order.
pub fn compile_many(
    tc: &Toolchain,
    cache: &CompileCache,
    requests: &[CompileRequest],
    jobs: usize,
    on_done: &(dyn Fn(usize, &Result<CompileOutcome>) + Sync),
) -> Vec<Result<CompileOutcome>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<CompileOutcome>>>> =
        Mutex::new((0..requests.len()).map(|_| None).collect());
    let workers = jobs.clamp(1, requests.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(req) = requests.get(i) else { break };
                let result = compile(tc, cache, req);
                on_done(i, &result);
                if let Ok(mut slots) = results.lock() {
                    slots[i] = Some(result);
                }
            });
        }
    });
    let slots = results.into_inner().unwrap_or_else(|p| p.into_inner());
    slots
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::Usage("a compile worker panicked".into()))))
        .collect()
}

/// The default number of parallel compiles: one per core.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn read_outcome(dir: &Path) -> Option<CompileOutcome> {
    let text = std::fs::read_to_string(dir.join(OUTCOME_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Rewrites the paths of an outcome produced in `from` to point into `to`.
fn relocate(mut o: CompileOutcome, from: &Path, to: &Path) -> CompileOutcome {
    let fix = |p: &PathBuf| match p.strip_prefix(from) {
        Ok(rest) => to.join(rest),
        Err(_) => p.clone(),
    };
    o.shared_object = o.shared_object.as_ref().map(fix);
    o.log_path = fix(&o.log_path);
    o.sass_path = o.sass_path.as_ref().map(fix);
    o
}

/// A file name safe to write into the temp dir, keeping the user's stem and extension.
fn sanitized_name(name: &str) -> String {
    let base = Path::new(name)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() || clean.starts_with('.') {
        return "kernel.cu".into();
    }
    if clean.ends_with(".cu") {
        clean
    } else {
        format!("{clean}.cu")
    }
}

/// Runs nvcc (and cuobjdump) and writes the entry's files into `staging`; paths in the
/// returned outcome point into `final_dir`, where the entry will live once committed.
fn run_nvcc(
    tc: &Toolchain,
    req: &CompileRequest,
    key: &str,
    staging: &Path,
    final_dir: &Path,
) -> Result<CompileOutcome> {
    let work = tempfile::Builder::new()
        .prefix("cutesmith-nvcc-")
        .tempdir()
        .map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let src_name = sanitized_name(&req.file_name);
    let src_path = work.path().join(&src_name);
    std::fs::write(&src_path, &req.source).at(&src_path)?;
    std::fs::write(staging.join(&src_name), &req.source).at(staging)?;

    let args = nvcc_args(tc, &req.options);
    let mut cmd = Command::new(&tc.nvcc.path);
    cmd.current_dir(work.path())
        .env_clear()
        .envs(nvcc_env(work.path()))
        .env("LIBRARY_PATH", library_path(&tc.nvcc.path))
        .args(&args)
        .arg(&src_name)
        .arg("-o")
        .arg("kernel.so");
    crate::sandbox::apply(&mut cmd, &nvcc_policy(tc, &args, work.path()))?;
    let sandboxed = !crate::sandbox::disabled();
    let mut command: Vec<String> = vec![tc.nvcc.path.display().to_string()];
    command.extend(args.iter().cloned());
    command.extend([src_name.clone(), "-o".into(), "kernel.so".into()]);

    let started = Instant::now();
    let out = process::run(
        cmd,
        Duration::from_secs(req.options.timeout_secs.max(1)),
        process::DEFAULT_OUTPUT_CAP,
    )?;
    let nvcc_seconds = started.elapsed().as_secs_f64();
    let log_text = out.combined();
    let mut full_log = format!("$ {}\n(cwd {})\n", command.join(" "), work.path().display());
    full_log.push_str(&log_text);
    if out.truncated {
        full_log.push_str("\n[cutesmith: output cut at the capture limit]\n");
    }
    if out.timed_out {
        full_log.push_str(&format!(
            "\n[cutesmith: nvcc killed after {} s]\n",
            req.options.timeout_secs
        ));
    }
    std::fs::write(staging.join("nvcc.log"), &full_log).at(staging)?;

    // Diagnostics name the file as given on the command line; map the bare name back
    // to what the user called it.
    let user_name = req.file_name.clone();
    let diags: Vec<Diagnostic> = diagnostics::parse(&log_text)
        .into_iter()
        .map(|mut d| {
            if d.file == src_name || d.file.ends_with(&format!("/{src_name}")) {
                d.file = user_name.clone();
            }
            for f in &mut d.instantiation {
                if f.file == src_name || f.file.ends_with(&format!("/{src_name}")) {
                    f.file = user_name.clone();
                }
            }
            d
        })
        .collect();
    let user_files = [user_name.as_str()];
    let resources = ptxas::parse(&log_text);
    let so = work.path().join("kernel.so");
    let status = if out.timed_out {
        CompileStatus::TimedOut
    } else if out.success() && so.is_file() {
        CompileStatus::Success
    } else {
        CompileStatus::Failed
    };

    let mut outcome = CompileOutcome {
        status,
        key: key.to_string(),
        shared_object: None,
        log_path: final_dir.join("nvcc.log"),
        sass_path: None,
        resources,
        sass: None,
        sass_note: None,
        condensed: String::new(),
        primary_location: None,
        diagnostics: Vec::new(),
        command,
        nvcc_seconds,
        killed_by_signal: false,
        cached: false,
    };
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = out.status.and_then(|st| st.signal()) {
            outcome.killed_by_signal = !out.timed_out;
            full_log_note(staging, sig)?;
        }
    }
    match status {
        CompileStatus::Success => {
            let dest = staging.join("kernel.so");
            std::fs::copy(&so, &dest).at(&dest)?;
            outcome.shared_object = Some(final_dir.join("kernel.so"));
            if req.options.sass {
                match disassemble(tc, &dest) {
                    Ok(text) => {
                        let path = staging.join("kernel.sass");
                        std::fs::write(&path, &text).at(&path)?;
                        outcome.sass = Some(sass::parse(&text));
                        outcome.sass_path = Some(final_dir.join("kernel.sass"));
                    }
                    Err(note) => outcome.sass_note = Some(note),
                }
            } else {
                outcome.sass_note = Some("SASS summary not requested".into());
            }
            let warnings: Vec<Diagnostic> = diags.clone();
            if !warnings.is_empty() {
                outcome.condensed =
                    diagnostics::condense(&warnings, &user_files, CONDENSED_MAX_BYTES);
            }
        }
        CompileStatus::Failed if outcome.killed_by_signal => {
            outcome.condensed = "nvcc was killed by a signal (out of memory, or interrupted): \
                                 not a verdict on the source; it was not cached, compile again"
                .into();
        }
        CompileStatus::Failed => {
            outcome.condensed = if diags.is_empty() {
                condensed_tail(&log_text)
            } else {
                diagnostics::condense(&diags, &user_files, CONDENSED_MAX_BYTES)
            };
            outcome.primary_location = diagnostics::primary_location(&diags, &user_files);
            if sandboxed && log_text.contains("Permission denied") {
                outcome.condensed.push_str(SANDBOX_NOTE);
            }
        }
        CompileStatus::TimedOut => {
            outcome.condensed = format!(
                "nvcc ran past its {} s limit and was killed: the kernel's templates may \
                 instantiate without end, or the machine is overloaded",
                req.options.timeout_secs
            );
        }
    }
    outcome.diagnostics = diags;
    let json = serde_json::to_string_pretty(&outcome).map_err(|e| Error::Format {
        context: "compile outcome".into(),
        message: e.to_string(),
    })?;
    let path = staging.join(OUTCOME_FILE);
    std::fs::write(&path, json).at(&path)?;
    Ok(outcome)
}

/// Appends the signal that ended nvcc to the kept log.
fn full_log_note(staging: &Path, sig: i32) -> Result<()> {
    use std::io::Write as _;
    let path = staging.join("nvcc.log");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .at(&path)?;
    writeln!(f, "\n[cutesmith: nvcc died of signal {sig}]").at(&path)?;
    Ok(())
}

/// `LIBRARY_PATH` for nvcc's link step: the toolkit's own `lib`/`lib64` first. The pip
/// wheels keep `libcudart_static.a` in `lib/`, where their `nvcc.profile` does not look.
/// Added to a failed compile's summary when nvcc was refused a file.
const SANDBOX_NOTE: &str = "\n(the cutesmith sandbox refused a file: nvcc reads only the system's \
     compiler and headers, the CUDA toolkit, the CUTLASS headers and cutlass-templates/include; \
     include nothing else)";

/// Environment variables nvcc and its host compiler may see; the rest (API keys,
/// tokens) stays out of reach of a source that includes `/proc/self/environ`.
const NVCC_ENV_ALLOWED: &[&str] = &["PATH", "LANG", "LC_ALL", "NVCC_CCBIN"];

fn nvcc_env(work: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| NVCC_ENV_ALLOWED.contains(&k.as_str()))
        .collect();
    let work = work.display().to_string();
    env.push(("HOME".into(), work.clone()));
    env.push(("TMPDIR".into(), work));
    env
}

/// What nvcc may read: the system (host compiler, its headers), the toolkit, the CUTLASS
/// headers, `cutlass-templates/include` and the include directories named on its
/// command line (the user's configuration, not the model's); it writes only its temp
/// directory. A source that includes anything else fails to compile.
pub fn nvcc_policy(tc: &Toolchain, args: &[String], work: &Path) -> crate::sandbox::Policy {
    let mut p = crate::sandbox::Policy::new()
        .write(work)
        .read(&tc.cutlass.include)
        .read(&tc.abi_include)
        .read(crate::toolchain::cache_toolkit_dir());
    if let Some(root) = tc.nvcc.path.parent().and_then(Path::parent) {
        p = p.read(root);
    }
    if let Some(util) = &tc.cutlass.util_include {
        p = p.read(util);
    }
    for a in args {
        if let Some(dir) = a.strip_prefix("-I").filter(|d| !d.is_empty()) {
            p = p.read(dir);
        }
    }
    if let Some(v) = std::env::var_os("LIBRARY_PATH") {
        for d in std::env::split_paths(&v).filter(|d| d.is_absolute()) {
            p = p.read(d);
        }
    }
    p
}

fn library_path(nvcc: &Path) -> std::ffi::OsString {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(root) = nvcc.parent().and_then(Path::parent) {
        for sub in ["lib", "lib64"] {
            let d = root.join(sub);
            if d.is_dir() {
                dirs.push(d);
            }
        }
    }
    if let Some(existing) = std::env::var_os("LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&existing));
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// The last lines of a log that had no parsable diagnostic, capped like `condense`.
fn condensed_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let mut text = lines[lines.len().saturating_sub(30)..].join("\n");
    if text.len() > CONDENSED_MAX_BYTES {
        let mut cut = text.len() - CONDENSED_MAX_BYTES + 3;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text = format!("...{}", &text[cut..]);
    }
    text
}

fn disassemble(tc: &Toolchain, so: &Path) -> std::result::Result<String, String> {
    let Some(tool) = &tc.cuobjdump else {
        return Err("cuobjdump not found: no SASS summary (run `cutesmith setup`)".into());
    };
    let mut cmd = Command::new(&tool.path);
    cmd.arg("-sass").arg(so);
    // cuobjdump runs nvdisasm, which the pip wheels put beside it.
    if let Some(dir) = tool.path.parent() {
        let mut path = vec![dir.to_path_buf()];
        if let Some(existing) = std::env::var_os("PATH") {
            path.extend(std::env::split_paths(&existing));
        }
        cmd.env("PATH", std::env::join_paths(path).unwrap_or_default());
    }
    match process::run(cmd, Duration::from_secs(300), 64 << 20) {
        Ok(out) if out.success() => Ok(out.stdout),
        Ok(out) => Err(format!(
            "cuobjdump failed: {}",
            out.stderr.lines().take(3).collect::<Vec<_>>().join(" ")
        )),
        Err(e) => Err(e.to_string()),
    }
}

impl CompileOutcome {
    /// The text `cutesmith compile` (and every command that compiles a file) prints for
    /// this outcome of compiling `file`.
    pub fn render(&self, file: &str) -> String {
        let o = self;
        let mut s = String::new();
        let how = if o.cached {
            "cache hit, no nvcc run".to_string()
        } else {
            format!("nvcc {:.1} s", o.nvcc_seconds)
        };
        match o.status {
            CompileStatus::Success => {
                s.push_str(&format!("{file}: compiled ({how})\n"));
                if let Some(so) = &o.shared_object {
                    s.push_str(&format!("  shared object: {}\n", so.display()));
                }
                s.push_str("  resources:\n");
                if o.resources.is_empty() {
                    s.push_str("    (no kernel entry in the ptxas report)\n");
                }
                for r in &o.resources {
                    s.push_str(&format!("    {}\n", r.report_line()));
                }
                match (&o.sass, &o.sass_note) {
                    (Some(sass), _) => s.push_str(&format!("  SASS: {}\n", sass.summary_line())),
                    (None, Some(note)) => s.push_str(&format!("  SASS: {note}\n")),
                    (None, None) => {}
                }
                if !o.condensed.is_empty() {
                    s.push_str("  warnings:\n");
                    for l in o.condensed.lines() {
                        s.push_str(&format!("    {l}\n"));
                    }
                }
            }
            CompileStatus::Failed | CompileStatus::TimedOut => {
                let what = if o.status == CompileStatus::TimedOut {
                    "timed out"
                } else {
                    "FAILED"
                };
                s.push_str(&format!("{file}: {what} ({how})\n"));
                if let Some((f, l)) = &o.primary_location {
                    s.push_str(&format!("  fix here: {f}:{l}\n"));
                }
                for l in o.condensed.lines() {
                    s.push_str(&format!("  {l}\n"));
                }
            }
        }
        s.push_str(&format!("  full log: {}\n", o.log_path.display()));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized() {
        assert_eq!(sanitized_name("dir/my kernel.cu"), "my_kernel.cu");
        assert_eq!(sanitized_name("gemm"), "gemm.cu");
        assert_eq!(sanitized_name(""), "kernel.cu");
        assert_eq!(sanitized_name(".hidden"), "kernel.cu");
    }

    #[test]
    fn key_source_blanks_only_the_leading_comments() {
        let a = "// built-in: x\n// workload a: one\n\n#define X 1 // a\n// later\nint x;\n";
        let b = "// built-in: x\n// workload b: another\n\n#define X 1 // a\n// later\nint x;\n";
        assert_eq!(key_source(a), "\n\n\n#define X 1 // a\n// later\nint x;\n");
        assert_eq!(key_source(a), key_source(b));
        // Line numbers are kept, and so is everything after the first code line.
        assert_eq!(key_source(a).lines().count(), a.lines().count());
        let c = a.replace("#define X 1 // a", "#define X 1 // b");
        assert_ne!(key_source(a), key_source(&c));
        let d = a.replace("// later", "// sooner");
        assert_ne!(key_source(a), key_source(&d));
        // Code first: nothing to blank.
        assert!(matches!(
            key_source("int x; // y\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        // A comment ending in a backslash swallows the next line: kept whole from there.
        let e = "// one\n// two \\\n#define X 1\n";
        let f = "// one\n// two\n#define X 1\n";
        assert_eq!(key_source(e), "\n// two \\\n#define X 1\n");
        assert_ne!(key_source(e), key_source(f));
        assert_eq!(key_source("// a \\\r\nint x;"), "// a \\\r\nint x;");
        // A block comment is code for this purpose, and a source of comments only is
        // blanked to the same lines.
        assert_eq!(key_source("/* a */\n"), "/* a */\n");
        assert_eq!(key_source("// a\r\n  // b"), "\n");
        assert_eq!(key_source("\n  \nint x;"), "\n\nint x;");
        assert_eq!(key_source(""), "");
    }

    #[test]
    fn condensed_tail_is_capped() {
        let long = "x".repeat(10_000);
        assert!(condensed_tail(&long).len() <= CONDENSED_MAX_BYTES);
        assert_eq!(condensed_tail("a\nb"), "a\nb");
    }
}
