//! The Python the PyTorch bridge runs: `CUTESMITH_PYTHON`, else `python3` on `PATH`, and
//! what torch it has.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::process;

/// What to tell a user whose Python has no torch.
pub fn install_hint(python: &Path) -> String {
    format!(
        "install PyTorch for it (`{} -m pip install torch`, or in a venv: `python3 -m venv \
         VENV && VENV/bin/pip install torch`), or point CUTESMITH_PYTHON at a Python that has it",
        python.display()
    )
}

/// The Python named by `CUTESMITH_PYTHON`, else `python3` (looked up on `PATH` when run).
pub fn python() -> PathBuf {
    match std::env::var_os("CUTESMITH_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("python3"),
    }
}

/// A Python with torch, as `doctor` reports it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TorchInfo {
    /// The interpreter (`sys.executable`).
    pub python: String,
    /// `sys.version`, first word.
    pub python_version: String,
    /// `torch.__version__`.
    pub torch: String,
    /// `torch.version.cuda` (None for a CPU build).
    pub cuda: Option<String>,
}

const PROBE: &str = r#"
import json, sys, warnings
warnings.filterwarnings("ignore")
out = {"python": sys.executable, "python_version": sys.version.split()[0]}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"#;

/// Runs `python` and asks for torch; an error says which Python was tried and what to
/// install.
pub fn probe(python: &Path) -> Result<TorchInfo> {
    let mut cmd = Command::new(python);
    cmd.args(["-c", PROBE]).env("PYTHONDONTWRITEBYTECODE", "1");
    let out =
        process::run(cmd, Duration::from_secs(120), 1 << 16).map_err(|e| Error::ToolMissing {
            what: format!("Python ({})", python.display()),
            hint: format!(
                "{e}; install python3, or set CUTESMITH_PYTHON to a Python that has torch"
            ),
        })?;
    let line = out.stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(line).map_err(|_| Error::ToolMissing {
        what: format!("a working Python ({})", python.display()),
        hint: format!(
            "it did not answer (exit {:?}): {}; set CUTESMITH_PYTHON to a Python 3 with torch",
            out.status.and_then(|s| s.code()),
            out.combined().trim()
        ),
    })?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    let exe = s("python").unwrap_or_else(|| python.display().to_string());
    if let Some(e) = s("error") {
        return Err(Error::ToolMissing {
            what: format!("torch (in {exe})"),
            hint: format!(
                "`import torch` failed ({e}); {}",
                install_hint(Path::new(&exe))
            ),
        });
    }
    Ok(TorchInfo {
        python: exe,
        python_version: s("python_version").unwrap_or_default(),
        torch: s("torch").unwrap_or_default(),
        cuda: s("cuda"),
    })
}

impl TorchInfo {
    /// One line: `torch 2.15.0+cu132 (CUDA 13.2), Python 3.11.7 at /venv/bin/python`.
    pub fn summary(&self) -> String {
        format!(
            "torch {}{}, Python {} at {}",
            self.torch,
            self.cuda
                .as_ref()
                .map(|c| format!(" (CUDA {c})"))
                .unwrap_or_else(|| " (CPU build)".into()),
            self.python_version,
            self.python
        )
    }
}
