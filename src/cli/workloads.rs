//! `cutesmith workloads`: the workload specs of a directory, one line each, with what the
//! built-in provider has for each (its number of candidates, or the feature no template
//! has yet: the model provider may still write a kernel for it).

use std::path::Path;

use super::EXIT_OK;
use crate::error::Result;
use crate::spec::Workload;

pub fn cmd_workloads(dir: &Path) -> Result<i32> {
    let workloads = Workload::load_dir(dir)?;
    println!("{}  BUILT-IN", Workload::summary_header());
    let mut missing = 0;
    for w in &workloads {
        let cov = match crate::strategy::coverage(w) {
            Ok(n) => format!("{n} candidates"),
            Err(why) => {
                missing += 1;
                format!("none ({why})")
            }
        };
        println!("{}  {cov}", w.summary_line());
    }
    if missing > 0 {
        eprintln!(
            "{missing} workloads have no built-in candidate yet; `cutesmith strategies W` \
             shows every template's rule, and a model session can still write one"
        );
    }
    eprintln!("{} workloads in {}", workloads.len(), dir.display());
    Ok(EXIT_OK)
}
