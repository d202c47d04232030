//! `cutesmith workloads`: the workload specs of a directory, one line each.

use std::path::Path;

use super::EXIT_OK;
use crate::error::Result;
use crate::spec::Workload;

pub fn cmd_workloads(dir: &Path) -> Result<i32> {
    let workloads = Workload::load_dir(dir)?;
    println!("{}", Workload::summary_header());
    for w in &workloads {
        println!("{}", w.summary_line());
    }
    eprintln!("{} workloads in {}", workloads.len(), dir.display());
    Ok(EXIT_OK)
}
