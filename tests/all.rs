//! cutesmith's integration tests, one binary: each file under `suite/` owns one concern.
//!
//! Tests that need nvcc find it the way the CLI does (flags aside). When it is missing
//! they print why and return, except under CI (`CI` set), where a missing tool fails the
//! test: CI installs the toolkit first, so a missing one there is a defect.

mod suite;

/// Returns whether a needed tool is available; panics under CI when it is not.
pub fn require_tool(what: &str, available: bool) -> bool {
    if available {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{what} is required under CI but was not found (.ci/run installs it)");
    }
    eprintln!("skipping: {what} not found (CI would fail here; run `cutesmith setup`)");
    false
}
