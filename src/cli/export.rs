//! `cutesmith export runs/<id>`: the best kernel of a session as a standalone drop-in
//! ([`crate::agent::export`]).

use std::path::Path;

use super::EXIT_OK;
use crate::agent::session::SessionDir;
use crate::error::Result;
use crate::toolchain::ToolchainOptions;

pub fn cmd_export(session: &Path, out: &Path) -> Result<i32> {
    let dir = SessionDir::open(session)?;
    let include = crate::toolchain::abi_include_dir();
    for f in crate::agent::export::export(&dir, &include, out)? {
        println!("wrote {}", f.display());
    }
    Ok(EXIT_OK)
}

/// `cutesmith export runs/<id> --torch DIR`: the best kernel as a PyTorch package
/// ([`crate::agent::export::export_torch`]). The CUTLASS include directory found here (if
/// any) is recorded in it; the package's build prefers `CUTLASS_DIR` at build time.
pub fn cmd_export_torch(opts: &ToolchainOptions, session: &Path, dir: &Path) -> Result<i32> {
    let dir_ = SessionDir::open(session)?;
    let include = crate::toolchain::abi_include_dir();
    let cutlass = crate::toolchain::Toolchain::discover(opts)
        .ok()
        .map(|tc| tc.cutlass.include);
    let written = crate::agent::export::export_torch(&dir_, &include, cutlass.as_deref(), dir)?;
    for f in &written {
        println!("wrote {}", f.display());
    }
    println!(
        "build and check on a GPU machine: cd {} && CUTLASS_DIR=<cutlass> python test_kernel.py",
        dir.display()
    );
    Ok(EXIT_OK)
}
