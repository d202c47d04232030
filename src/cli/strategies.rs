//! `cutesmith strategies W [--emit DIR]`: the built-in provider's candidate strategies for
//! a workload, the rule that rejects each invalid one, and optionally the valid ones'
//! kernel sources.

use std::path::Path;

use super::{EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::error::{IoContext, Result};
use crate::spec::Workload;

/// How many of the planned candidates the listing names.
const PLAN_SHOWN: usize = 6;

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
    // What a session or bench run would try first, where the tuning database reorders it.
    let db = crate::tuning::default_path();
    let (planned, ranked) = crate::tuning::planned(&w, PLAN_SHOWN, db.as_deref());
    if let (true, Some(db)) = (ranked > 0, db) {
        let numbers: Vec<String> = planned
            .iter()
            .filter_map(|p| space.iter().position(|(s, _)| s == p))
            .map(|i| (i + 1).to_string())
            .collect();
        println!(
            "  the tuning database ({}) orders them for this shape: {} first",
            db.display(),
            numbers.join(", ")
        );
    }
    Ok(EXIT_OK)
}
