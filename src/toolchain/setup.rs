//! `cutesmith setup`: installing the pinned CUDA 13.0 compiler and CUTLASS 4.2 headers
//! from PyPI into the per-user cache, with pip, when the system has none.
//!
//! The install goes into a fresh directory next to the cache and is renamed into place
//! only when pip succeeded and nvcc answered, so a killed setup never leaves a half
//! toolkit that discovery would pick up.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::{Error, IoContext, Result};
use crate::process;

/// The pinned packages. CUDA 13.0.x for the compiler; cuobjdump has no 13.0 wheel on
/// PyPI, so the oldest 13.x one is taken with the nvdisasm it runs (they disassemble
/// sm_90a like any newer one).
pub const PINNED_PACKAGES: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-cuobjdump==13.2.51",
    "nvidia-cuda-nvdisasm==13.2.51",
    "nvidia-cutlass==4.2.0.0",
];

/// Where nvcc lies inside an installed toolkit tree.
pub fn cache_nvcc(toolkit: &Path) -> PathBuf {
    toolkit.join("nvidia/cu13/bin/nvcc")
}

/// What setup did.
#[derive(Debug, Clone)]
pub enum SetupOutcome {
    /// Everything was already there; nothing was installed.
    AlreadyPresent { nvcc: PathBuf, cutlass: PathBuf },
    /// The pinned set was installed into `dir`.
    Installed { dir: PathBuf, seconds: f64 },
}

/// Installs the pinned toolkit into `toolkit_dir` unless it is already complete there
/// (or `force`). `say` receives progress lines for the user.
pub fn install(toolkit_dir: &Path, force: bool, say: &mut dyn FnMut(&str)) -> Result<SetupOutcome> {
    let nvcc = cache_nvcc(toolkit_dir);
    let cutlass = toolkit_dir.join("cutlass_library/source/include");
    if !force && is_complete(toolkit_dir) {
        return Ok(SetupOutcome::AlreadyPresent { nvcc, cutlass });
    }
    let python = find_python().ok_or_else(|| {
        Error::Setup(
            "no python3 with pip found; install it (Debian: `apt-get install python3-pip`) \
             or set CUTESMITH_PYTHON to a Python that has pip"
                .into(),
        )
    })?;
    let parent = toolkit_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&parent).at(&parent)?;
    let staging = parent.join(format!("toolkit.partial-{}", std::process::id()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).at(&staging)?;
    }
    say(&format!(
        "installing CUDA 13.0 nvcc and CUTLASS 4.2 headers from PyPI into {} (about 320 MB unpacked, a minute or two)",
        toolkit_dir.display()
    ));
    let mut cmd = Command::new(&python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--disable-pip-version-check",
        "--quiet",
        "--target",
    ])
    .arg(&staging)
    .args(PINNED_PACKAGES);
    let out = process::run(cmd, Duration::from_secs(1800), 1 << 20)?;
    if !out.success() {
        let _ = std::fs::remove_dir_all(&staging);
        let tail: String = tail_lines(&out.combined(), 20);
        return Err(Error::Setup(format!(
            "pip install failed{}:\n{tail}\ncheck network access to PyPI, or install CUDA 13.0 and CUTLASS 4.2 yourself and set CUDA_HOME and CUTLASS_DIR",
            if out.timed_out { " (timed out after 30 min)" } else { "" }
        )));
    }
    let staged_nvcc = cache_nvcc(&staging);
    let version = crate::toolchain::tool_version(&staged_nvcc);
    if !version.starts_with("13.") {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(Error::Setup(format!(
            "the installed nvcc at {} did not report a 13.x version (got {version})",
            staged_nvcc.display()
        )));
    }
    if toolkit_dir.exists() {
        std::fs::remove_dir_all(toolkit_dir).at(toolkit_dir)?;
    }
    std::fs::rename(&staging, toolkit_dir).at(toolkit_dir)?;
    say(&format!("installed nvcc {version} and CUTLASS headers"));
    Ok(SetupOutcome::Installed {
        dir: toolkit_dir.to_path_buf(),
        seconds: out.elapsed.as_secs_f64(),
    })
}

/// True when the cache holds an nvcc and the CUTLASS headers.
pub fn is_complete(toolkit_dir: &Path) -> bool {
    cache_nvcc(toolkit_dir).is_file()
        && toolkit_dir
            .join("cutlass_library/source/include/cute/tensor.hpp")
            .is_file()
}

fn find_python() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(p) = std::env::var("CUTESMITH_PYTHON") {
        candidates.push(PathBuf::from(p));
    }
    candidates.push(PathBuf::from("python3"));
    candidates.push(PathBuf::from("python"));
    candidates.into_iter().find(|py| {
        let mut cmd = Command::new(py);
        cmd.args(["-m", "pip", "--version"]);
        process::run(cmd, Duration::from_secs(60), 4096).is_ok_and(|o| o.success())
    })
}

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_exact_and_cuda_13_0() {
        for p in PINNED_PACKAGES {
            assert!(p.contains("=="), "{p} is not pinned");
        }
        for name in ["nvcc", "nvvm", "crt", "runtime", "cccl"] {
            let pin = PINNED_PACKAGES
                .iter()
                .find(|p| p.starts_with("nvidia-") && p.contains(name))
                .unwrap();
            assert!(pin.contains("==13.0."), "{pin}");
        }
        assert!(PINNED_PACKAGES.contains(&"nvidia-cutlass==4.2.0.0"));
    }

    #[test]
    fn an_empty_dir_is_not_complete() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_complete(dir.path()));
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(tail_lines("a", 5), "a");
    }
}
