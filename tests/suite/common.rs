//! Shared helpers of the integration suites: the toolchain (installed on first use,
//! like the CLI does) and paths.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cutesmith::toolchain::Toolchain;

use crate::require_tool;

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(rel: &str) -> PathBuf {
    root().join("tests/fixtures").join(rel)
}

/// The toolchain, found or installed once per test run (as `cutesmith compile` would).
/// `None` (outside CI) when it can be neither found nor installed.
pub fn toolchain() -> Option<Toolchain> {
    static TC: OnceLock<Result<Toolchain, String>> = OnceLock::new();
    let found = TC.get_or_init(|| {
        cutesmith::cli::ensure_toolchain(&Default::default(), false).map_err(|e| e.to_string())
    });
    match found {
        Ok(tc) => Some(tc.clone()),
        Err(e) => {
            require_tool(&format!("nvcc and CUTLASS ({e})"), false);
            None
        }
    }
}

/// The 1-based line of `path` that contains `marker`.
pub fn line_of(path: &Path, marker: &str) -> u32 {
    let text = std::fs::read_to_string(path).unwrap();
    let idx = text
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("{} has no line with {marker:?}", path.display()));
    idx as u32 + 1
}

/// A finished command's stdout and stderr, one after the other.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
