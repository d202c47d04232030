//! `cutesmith strategies W`: the built-in provider's candidate strategies for a workload,
//! and the rule that rejects each invalid one.

use std::path::Path;

use super::{EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::error::Result;
use crate::spec::Workload;

pub fn cmd_strategies(workloads_dir: &Path, workload: &str) -> Result<i32> {
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
            Ok(()) => println!("  {:>2}. {}\n      {}", i + 1, s.label(), s.rationale),
            Err(why) => println!("  {:>2}. {} -- INVALID: {why}", i + 1, s.label()),
        }
    }
    if space.iter().all(|(_, v)| v.is_err()) {
        println!("  no template handles this workload yet");
        return Ok(EXIT_GOAL_NOT_MET);
    }
    Ok(EXIT_OK)
}
