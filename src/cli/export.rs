//! `cutesmith export runs/<id>`: the best kernel of a session as a standalone drop-in
//! ([`crate::agent::export`]).

use std::path::Path;

use super::EXIT_OK;
use crate::agent::session::SessionDir;
use crate::error::Result;

pub fn cmd_export(session: &Path, out: &Path) -> Result<i32> {
    let dir = SessionDir::open(session)?;
    let include = crate::toolchain::abi_include_dir();
    for f in crate::agent::export::export(&dir, &include, out)? {
        println!("wrote {}", f.display());
    }
    Ok(EXIT_OK)
}
