//! `cutesmith cache [--clear]`: where the compile cache is, how much it holds.

use super::EXIT_OK;
use crate::error::Result;
use crate::toolchain::cache::CompileCache;

pub fn cmd_cache(clear: bool) -> Result<i32> {
    let cache = CompileCache::default_location();
    let (entries, bytes) = cache.usage();
    println!(
        "compile cache {}: {entries} entries, {:.1} MB",
        cache.root().display(),
        bytes as f64 / 1e6
    );
    if clear {
        let n = cache.clear()?;
        println!("removed {n} directories");
    }
    Ok(EXIT_OK)
}
