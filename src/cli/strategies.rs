//! `cutesmith strategies W [--emit DIR]`: the built-in provider's candidate strategies for
//! a workload, the rule that rejects each invalid one, and optionally the valid ones'
//! kernel sources.

use std::path::Path;

use super::{EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::error::{IoContext, Result};
use crate::spec::Workload;

pub fn cmd_strategies(workloads_dir: &Path, workload: &str, emit: Option<&Path>) -> Result<i32> {
    let w = Workload::find(workloads_dir, workload)?;
    println!(
        "{} ({}, {}, headline {}):",
        w.name(),
        w.family().name(),
        w.dtype().name(),
        w.headline()
    );
    let space = crate::strategy::space(&w);
    for (i, (s, v)) in space.iter().enumerate() {
        match v {
            Ok(()) => {
                println!("  {:>2}. {}\n      {}", i + 1, s.label(), s.rationale);
                if let Some(dir) = emit {
                    std::fs::create_dir_all(dir).at(dir)?;
                    let path = dir.join(format!("{:02}-{}.cu", i + 1, s.template));
                    std::fs::write(&path, s.instantiate(&w)?).at(&path)?;
                    println!("      written: {}", path.display());
                }
            }
            Err(why) => println!("  {:>2}. {} -- INVALID: {why}", i + 1, s.label()),
        }
    }
    if space.iter().all(|(_, v)| v.is_err()) {
        println!("  no template handles this workload yet");
        return Ok(EXIT_GOAL_NOT_MET);
    }
    Ok(EXIT_OK)
}
