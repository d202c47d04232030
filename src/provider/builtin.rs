//! The built-in provider: no model at all. It offers the candidate strategies of a
//! workload (by family, shape and roofline class, see [`crate::strategy`]) one per
//! request, each instantiated as a self-contained source, after compiling them all in
//! parallel through the compile cache. The engine evaluates them like any other version
//! and keeps the best; `cutesmith bench` is a suite of such sessions.

use crate::error::Result;
use crate::events::{Event, EventSink};
use crate::spec::Workload;
use crate::strategy::{self, Strategy};
use crate::toolchain::cache::CompileCache;
use crate::toolchain::compile::{self, CompileRequest};
use crate::toolchain::Toolchain;

/// The built-in provider behind the [`crate::provider::Provider`] trait: each request is
/// answered with the next untried candidate strategy, written out as a self-contained
/// source (the strategy's `#define`s above the template's text) in the same reply shape a
/// model uses, so the session log reads the same. All candidates are compiled in
/// parallel through the compile cache on the first request, so the compile stage finds
/// them there. It cannot repair a kernel: asked to debug, it offers the next strategy.
pub struct BuiltinProvider {
    workload: Workload,
    candidates: Vec<Strategy>,
    precompile: Option<(Toolchain, CompileCache, usize, String)>,
    precompiled: bool,
}

impl BuiltinProvider {
    pub fn new(w: &Workload, max_candidates: usize) -> BuiltinProvider {
        BuiltinProvider {
            workload: w.clone(),
            candidates: crate::tuning::planned(
                w,
                max_candidates,
                crate::tuning::default_path().as_deref(),
            )
            .0,
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

    /// The reply text for a strategy: its strategy block and its source.
    pub fn reply_for(s: &Strategy, w: &Workload) -> Result<String> {
        Ok(format!(
            "```strategy\nchange: {}\nwhy: {}\nexpected_gain: a candidate of the built-in search\n```\n```cuda\n{}```\n",
            s.label(),
            s.rationale,
            s.instantiate(w)?
        ))
    }

    fn precompile_all(&mut self) {
        let Some((tc, cache, jobs, arch)) = &self.precompile else {
            return;
        };
        let requests: Vec<CompileRequest> = self
            .candidates
            .iter()
            .filter_map(|s| s.compile_request(&self.workload, arch).ok())
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
        events: &dyn EventSink,
    ) -> Result<Option<crate::provider::Reply>> {
        if self.candidates.is_empty() {
            let why = strategy::coverage(&self.workload)
                .err()
                .unwrap_or_else(|| "no candidate left".into());
            return Err(crate::Error::Usage(format!(
                "no built-in kernel runs workload {} ({why}); run it with a model \
                 (`cutesmith run {} --model NAME`, see the README's configuration)",
                self.workload.name(),
                self.workload.name()
            )));
        }
        if !self.precompiled {
            self.precompiled = true;
            if self.precompile.is_some() {
                events.emit(&Event::Note {
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
            text: Self::reply_for(s, &self.workload)?,
            attempts: 1,
            model: "builtin".into(),
            ..crate::provider::Reply::default()
        }))
    }
}
