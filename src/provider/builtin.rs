//! The built-in provider: no model at all. It picks candidate strategies for a workload
//! (by family, shape and roofline class, see [`crate::strategy`]), instantiates and
//! compiles them in parallel through the compile cache, evaluates each in a worker
//! process on the GPU (validation on every shape, then timing against the vendor
//! library in the same run), and keeps the fastest correct one.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::eval::job::{FaultKind, Mode, TimingReport};
use crate::eval::{self};
use crate::strategy::{self, Strategy};
use crate::toolchain::cache::CompileCache;
use crate::toolchain::compile::{self, CompileOptions, CompileRequest, CompileStatus};
use crate::toolchain::Toolchain;
use crate::spec::Workload;

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
        let job = eval::job_for(
            w,
            Mode::Check,
            c.shared_object.clone(),
            opts.seeds,
            opts.runs,
        )?;
        let e = eval::evaluate(&job, opts.timeout)?;
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

/// The built-in provider behind the [`crate::provider::Provider`] trait: each request is
/// answered with the next untried candidate strategy, written out as a self-contained
/// source (the strategy's `#define`s above the template's text) in the same reply shape a
/// model uses, so the session log reads the same. All candidates are compiled in
/// parallel through the compile cache on the first request, so the compile stage finds
/// them there. It cannot repair a kernel: asked to debug, it offers the next strategy.
pub struct BuiltinProvider {
    candidates: Vec<Strategy>,
    precompile: Option<(Toolchain, CompileCache, usize, String)>,
    precompiled: bool,
}

impl BuiltinProvider {
    pub fn new(w: &Workload, max_candidates: usize) -> BuiltinProvider {
        BuiltinProvider {
            candidates: strategy::candidates(w)
                .into_iter()
                .take(max_candidates)
                .collect(),
            precompile: None,
            precompiled: false,
        }
    }

    /// Compile every candidate up front, `jobs` at a time, for `arch`.
    pub fn with_precompile(
        mut self,
        tc: Toolchain,
        cache: CompileCache,
        jobs: usize,
        arch: &str,
    ) -> BuiltinProvider {
        self.precompile = Some((tc, cache, jobs, arch.to_string()));
        self
    }

    /// The self-contained source of a strategy instance.
    pub fn source_for(s: &Strategy) -> Result<String> {
        let path = s.source_path();
        let template = std::fs::read_to_string(&path).map_err(|e| crate::Error::io(&path, e))?;
        let mut src = format!("// cutesmith built-in strategy: {}\n", s.label());
        for (k, v) in &s.params {
            src.push_str(&format!("#define {k} {v}\n"));
        }
        src.push_str(&template);
        Ok(src)
    }

    /// The reply text for a strategy: its strategy block and its source.
    pub fn reply_for(s: &Strategy) -> Result<String> {
        Ok(format!(
            "```strategy\nchange: {}\nwhy: {}\nexpected_gain: a candidate of the built-in search\n```\n```cuda\n{}```\n",
            s.label(),
            s.rationale,
            Self::source_for(s)?
        ))
    }

    fn precompile_all(&mut self) {
        let Some((tc, cache, jobs, arch)) = &self.precompile else {
            return;
        };
        let requests: Vec<CompileRequest> = self
            .candidates
            .iter()
            .filter_map(|s| Self::source_for(s).ok())
            .map(|src| crate::agent::compile_request(&src, arch))
            .collect();
        // Failures here are not errors: the compile stage meets them again and reports.
        let _ = tokio::task::block_in_place(|| {
            compile::compile_many(tc, cache, &requests, *jobs, &|_, _| {})
        });
    }
}

#[async_trait::async_trait]
impl crate::provider::Provider for BuiltinProvider {
    fn name(&self) -> String {
        format!("built-in strategies ({} candidates)", self.candidates.len())
    }

    fn reads_prompts(&self) -> bool {
        false
    }

    async fn propose(
        &mut self,
        ask: &crate::provider::Ask,
        events: &dyn crate::events::EventSink,
    ) -> Result<Option<crate::provider::Reply>> {
        if !self.precompiled {
            self.precompiled = true;
            if self.precompile.is_some() {
                events.emit(&crate::events::Event::Note {
                    text: format!(
                        "compiling all {} built-in candidates in parallel (compile cache)",
                        self.candidates.len()
                    ),
                });
                self.precompile_all();
            }
        }
        let Some(s) = self
            .candidates
            .iter()
            .find(|s| !ask.tried.iter().any(|t| *t == s.label()))
        else {
            return Ok(None);
        };
        Ok(Some(crate::provider::Reply {
            text: Self::reply_for(s)?,
            attempts: 1,
            model: "builtin".into(),
            ..crate::provider::Reply::default()
        }))
    }
}
