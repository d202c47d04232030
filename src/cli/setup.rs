//! `cutesmith setup`: the pinned toolkit installed into the cache, unless a usable one is
//! found.

use super::EXIT_OK;
use crate::error::Result;
use crate::toolchain::{self, setup, Toolchain, ToolchainOptions};

pub fn cmd_setup(opts: &ToolchainOptions, force: bool) -> Result<i32> {
    if !force {
        if let Ok(tc) = Toolchain::discover(opts) {
            if tc.nvcc.source != toolchain::Source::Cache {
                println!(
                    "toolchain already present: nvcc {} ({}), CUTLASS {} ({}); nothing to install \
                     (use --force to install the pinned one into the cache anyway)",
                    tc.nvcc.version, tc.nvcc.source, tc.cutlass.version, tc.cutlass.source
                );
                return Ok(EXIT_OK);
            }
        }
    }
    let dir = toolchain::cache_toolkit_dir();
    match setup::install(&dir, force, &mut |m| println!("{m}"))? {
        setup::SetupOutcome::AlreadyPresent { nvcc, cutlass } => println!(
            "already installed: {} and {}",
            nvcc.display(),
            cutlass.display()
        ),
        setup::SetupOutcome::Installed { dir, seconds } => {
            println!("installed into {} in {seconds:.0} s", dir.display())
        }
    }
    let tc = Toolchain::discover(opts)?;
    println!(
        "nvcc {} ({}), CUTLASS {} ({})",
        tc.nvcc.version,
        tc.nvcc.path.display(),
        tc.cutlass.version,
        tc.cutlass.include.display()
    );
    Ok(EXIT_OK)
}
