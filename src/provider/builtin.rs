//! The built-in provider: no model at all. It picks candidate strategies for a workload
//! (by family, shape and roofline class, see [`crate::strategy`]), instantiates and
//! compiles them in parallel through the compile cache, evaluates each in a worker
//! process on the GPU (validation on every shape, then timing against the vendor
//! library in the same run), and keeps the fastest correct one.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::runner::job::{FaultKind, Mode, TimingReport};
use crate::runner::{self};
use crate::strategy::{self, Strategy};
use crate::toolchain::cache::CompileCache;
use crate::toolchain::compile::{self, CompileOptions, CompileRequest, CompileStatus};
use crate::toolchain::Toolchain;
use crate::workload::Workload;

/// How hard to search.
#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// At most this many candidates (the most promising first).
    pub max_candidates: usize,
    /// Random seeds per validated shape.
    pub seeds: u64,
    /// Timed runs per contender.
    pub runs: u32,
    /// Parallel nvcc processes.
    pub jobs: usize,
    /// Per-evaluation worker timeout.
    pub timeout: Duration,
    pub arch: String,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            max_candidates: 4,
            seeds: 2,
            runs: 30,
            jobs: compile::default_jobs(),
            timeout: Duration::from_secs(300),
            arch: "sm_90a".into(),
        }
    }
}

/// What happened to one candidate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tried {
    pub strategy: Strategy,
    /// "compiled", "compile failed", "correct", or the fault's name.
    pub outcome: String,
    pub detail: String,
    pub timing: Option<TimingReport>,
    pub compile_seconds: f64,
    pub evaluate_seconds: f64,
}

impl Tried {
    /// The candidate's median time in microseconds, when it was correct and timed.
    pub fn median_us(&self) -> Option<f64> {
        (self.outcome == "correct")
            .then(|| {
                self.timing
                    .as_ref()?
                    .candidate
                    .as_ref()
                    .map(|c| c.median_us)
            })
            .flatten()
    }
}

/// The result of a search over one workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchOutcome {
    pub workload: String,
    pub tried: Vec<Tried>,
    /// Index into `tried` of the fastest correct candidate.
    pub best: Option<usize>,
    /// Strategies rejected before compiling, with the rule that rejected them.
    pub rejected: Vec<(Strategy, String)>,
}

impl SearchOutcome {
    pub fn best(&self) -> Option<&Tried> {
        self.best.and_then(|i| self.tried.get(i))
    }
}

/// The candidates a search of `w` would try and their compile requests.
pub fn plan(w: &Workload, opts: &SearchOptions) -> Result<Vec<(Strategy, CompileRequest)>> {
    strategy::candidates(w)
        .into_iter()
        .take(opts.max_candidates)
        .map(|s| {
            let mut req = CompileRequest::from_file(
                &s.source_path(),
                CompileOptions {
                    arch: opts.arch.clone(),
                    defines: s.defines(),
                    ..CompileOptions::default()
                },
            )?;
            req.file_name = format!("{}.cu", s.template);
            Ok((s, req))
        })
        .collect()
}

/// Searches the strategy space of `w` on the GPU.
pub fn search(
    tc: &Toolchain,
    cache: &CompileCache,
    w: &Workload,
    opts: &SearchOptions,
    say: &(dyn Fn(&str) + Sync),
) -> Result<SearchOutcome> {
    let mut rejected = Vec::new();
    let mut chosen = Vec::new();
    for (s, validity) in strategy::space(w) {
        match validity {
            Ok(()) if chosen.len() < opts.max_candidates => chosen.push(s),
            Ok(()) => {}
            Err(why) => rejected.push((s, why)),
        }
    }
    say(&format!(
        "{}: {} candidate strategies ({} rejected by the rules), compiling {} at a time",
        w.name(),
        chosen.len(),
        rejected.len(),
        opts.jobs
    ));
    let requests: Vec<CompileRequest> = plan(w, opts)?.into_iter().map(|(_, r)| r).collect();
    let compiled = compile::compile_many(tc, cache, &requests, opts.jobs, &|i, r| {
        let what = match r {
            Ok(o) if o.ok() => format!(
                "compiled ({:.0} s{})",
                o.nvcc_seconds,
                if o.cached { ", cached" } else { "" }
            ),
            Ok(o) => format!(
                "compile FAILED: {}",
                o.condensed.lines().next().unwrap_or("")
            ),
            Err(e) => format!("compile error: {e}"),
        };
        say(&format!("  [{}] {}: {what}", i + 1, chosen[i].label()));
    });
    let mut tried = Vec::new();
    for (s, c) in chosen.into_iter().zip(compiled) {
        let c = c?;
        let mut t = Tried {
            strategy: s,
            outcome: "compile failed".into(),
            detail: String::new(),
            timing: None,
            compile_seconds: c.nvcc_seconds,
            evaluate_seconds: 0.0,
        };
        if c.status != CompileStatus::Success {
            t.detail = c.condensed.clone();
            tried.push(t);
            continue;
        }
        let job = runner::job_for(
            w,
            Mode::Check,
            c.shared_object.clone(),
            opts.seeds,
            opts.runs,
        )?;
        let e = runner::evaluate(&job, opts.timeout)?;
        t.evaluate_seconds = e.seconds;
        t.timing = e.report.as_ref().and_then(|r| r.timing.clone());
        match (&e.fault, e.passed()) {
            (None, true) => {
                t.outcome = "correct".into();
                let c = t
                    .timing
                    .as_ref()
                    .and_then(|x| x.candidate.as_ref())
                    .map(|c| c.median_us);
                say(&format!(
                    "  {}: correct, {:.2} us",
                    t.strategy.label(),
                    c.unwrap_or(f64::NAN)
                ));
            }
            (Some(f), _) => {
                t.outcome = f.kind.name();
                t.detail = f.message.lines().take(6).collect::<Vec<_>>().join("\n");
                say(&format!("  {}: {}", t.strategy.label(), t.outcome));
            }
            (None, false) => {
                t.outcome = FaultKind::Crash.name();
                t.detail = e.stderr_tail.clone();
            }
        }
        tried.push(t);
    }
    let best = tried
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.median_us().map(|m| (i, m)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i);
    Ok(SearchOutcome {
        workload: w.name().to_string(),
        tried,
        best,
        rejected,
    })
}
