//! The engine: runs the stage machine one step at a time, saving the state after every
//! step, so `run` and `resume` are the same loop.
//!
//! One step is one stage: ask the provider (generate / debug / optimize, with at most one
//! repair request), compile, or validate-and-time. Decisions follow
//! [`super::machine::TRANSITIONS`]; budgets are checked before every request.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::evaluator::Evaluator;
use super::machine::{self, Outcome, Stage};
use super::memory::{Attempt, Verdict};
use super::prompts::{self, GpuFacts, Prompts, WorkloadFacts};
use super::reply::{self, StrategyNote};
use super::session::{Exchange, SessionDir, SessionSpec, State, VersionRecord};
use crate::error::{Error, Result};
use crate::eval::Evaluation;
use crate::events::{Event, EventSink};
use crate::provider::{Ask, Message, Provider, Purpose, Reply};
use crate::spec::Workload;
use crate::toolchain::cache::CompileCache;
use crate::toolchain::compile::{self, CompileOutcome};
use crate::toolchain::Toolchain;

/// The most a failure report or diagnostic may take in a prompt.
const EVIDENCE_MAX: usize = 4096;
/// Strategy history lines in a prompt.
const HISTORY_MAX: usize = 12;

/// A session being run.
pub struct Engine {
    pub dir: SessionDir,
    pub spec: SessionSpec,
    pub state: State,
    pub workload: Workload,
    provider: Box<dyn Provider>,
    /// The built-in provider, when the session is seeded from it.
    seed: Option<Box<dyn Provider>>,
    evaluator: Arc<dyn Evaluator>,
    toolchain: Toolchain,
    cache: CompileCache,
    prompts: Prompts,
    events: Arc<dyn EventSink>,
    probe: Option<Evaluation>,
    last_tick: Instant,
    /// Evaluators of the pool's other GPUs: a batch is evaluated across all of them.
    pool: Vec<Arc<dyn Evaluator>>,
    /// Evaluations of batch versions made ahead (across the pool), taken by the validate
    /// stage instead of evaluating again; kept in memory only (a resumed session
    /// evaluates anew).
    prefetched: std::collections::HashMap<u32, Evaluation>,
}

/// What the engine needs besides the session: where kernels come from and where they run.
pub struct Parts {
    pub provider: Box<dyn Provider>,
    pub seed: Option<Box<dyn Provider>>,
    pub evaluator: Arc<dyn Evaluator>,
    pub toolchain: Toolchain,
    pub cache: CompileCache,
    pub events: Arc<dyn EventSink>,
}

impl Engine {
    /// Starts a new session in `dir` (made by [`SessionDir::create`]).
    pub fn create(
        dir: SessionDir,
        spec: SessionSpec,
        workload: &Workload,
        parts: Parts,
    ) -> Result<Engine> {
        // The session keeps its own copy of the workload spec, named as the workload.
        let copy = dir.path(&format!("{}.toml", workload.name()));
        let text =
            std::fs::read_to_string(workload.path()).map_err(|e| Error::io(workload.path(), e))?;
        dir.write_atomic(&copy, text.as_bytes())?;
        let workload = Workload::load(&copy)?;
        dir.write_json(&dir.path("session.json"), &spec)?;
        let state = State::new();
        dir.save_state(&state)?;
        Engine::assemble(dir, spec, state, workload, parts, false)
    }

    /// Opens an existing session to continue it.
    pub fn open(root: &Path, parts: Parts) -> Result<Engine> {
        let dir = SessionDir::open(root)?;
        let spec = dir.load_spec()?;
        let state = dir.load_state()?;
        let copy = dir.path(&format!("{}.toml", spec.workload));
        let workload = Workload::load(&copy)?;
        Engine::assemble(dir, spec, state, workload, parts, true)
    }

    fn assemble(
        dir: SessionDir,
        spec: SessionSpec,
        state: State,
        workload: Workload,
        parts: Parts,
        resumed: bool,
    ) -> Result<Engine> {
        let probe_path = dir.path("probe.json");
        let probe = if probe_path.is_file() {
            dir.read_json(&probe_path).ok()
        } else {
            None
        };
        let e = Engine {
            dir,
            spec,
            state,
            workload,
            provider: parts.provider,
            seed: parts.seed,
            evaluator: parts.evaluator,
            toolchain: parts.toolchain,
            cache: parts.cache,
            prompts: Prompts::load()?,
            events: parts.events,
            probe,
            last_tick: Instant::now(),
            pool: Vec::new(),
            prefetched: std::collections::HashMap::new(),
        };
        e.emit(Event::SessionStarted {
            id: e.spec.id.clone(),
            workload: e.workload.name().to_string(),
            provider: e.provider.name(),
            evaluator: e.evaluator.name(),
            resumed,
            sandboxed: !crate::sandbox::disabled(),
        });
        Ok(e)
    }

    fn emit(&self, e: Event) {
        self.events.emit(&e);
    }

    /// Saves the state, adding the wall time since the last save.
    fn save(&mut self) -> Result<()> {
        let now = Instant::now();
        self.state.spent.wall_s += now.duration_since(self.last_tick).as_secs_f64();
        self.last_tick = now;
        self.dir.save_state(&self.state)
    }

    /// Runs until the machine reaches `done`.
    pub async fn run(&mut self) -> Result<()> {
        while self.state.stage != Stage::Done {
            self.step().await?;
        }
        Ok(())
    }

    /// Saves the state after a person's action, without counting the time since the last
    /// step (a person thinking at the prompt is not the session's wall time).
    fn save_idle(&mut self) -> Result<()> {
        self.last_tick = Instant::now();
        self.save()
    }

    /// Evaluators of more GPUs (each pinned to its own): the versions of a batch (samples,
    /// a population) are then compiled together and evaluated on all the GPUs at once.
    pub fn with_pool(mut self, pool: Vec<Arc<dyn Evaluator>>) -> Engine {
        self.pool = pool;
        self
    }

    /// Runs one stage, then saves the state.
    pub async fn step(&mut self) -> Result<()> {
        self.last_tick = Instant::now();
        if self.probe.is_none() {
            self.run_probe()?;
        }
        let stage = self.state.stage;
        let version = self.state.current;
        let t0 = Instant::now();
        self.emit(Event::StageStarted {
            stage: stage.name().into(),
            version: match stage {
                Stage::Compile | Stage::Validate => version,
                _ => None,
            },
        });
        let (outcome, note) = match stage {
            Stage::Generate | Stage::Debug | Stage::Optimize => self.ask_stage(stage).await?,
            Stage::Compile => self.compile_stage()?,
            Stage::Validate => self.validate_stage()?,
            Stage::Done => return Ok(()),
        };
        let mut next = machine::next(stage, outcome).ok_or_else(|| {
            Error::Usage(format!(
                "internal: no transition from {} on {outcome:?}",
                stage.name()
            ))
        })?;
        // A batch (samples of a round, a population): each version is compiled and
        // validated in turn, whatever the one before did; after the last, a correct one
        // found on the way is what the session goes on from (no debugging of a loser).
        if matches!(stage, Stage::Compile | Stage::Validate)
            && matches!(next, Stage::Debug | Stage::Optimize)
        {
            if !self.state.pending.is_empty() {
                let v = self.state.pending.remove(0);
                self.state.current = Some(v);
                next = Stage::Compile;
            } else if self.state.batch {
                self.state.batch = false;
                if next == Stage::Debug && self.state.best.is_some() {
                    self.state.current = self.state.best;
                    next = Stage::Optimize;
                }
            }
        }
        if next == Stage::Done && self.state.stop_reason.is_none() {
            self.state.stop_reason = Some(note.clone());
        }
        self.state.stage = next;
        self.save()?;
        self.emit(Event::StageFinished {
            stage: stage.name().into(),
            version: match stage {
                Stage::Compile | Stage::Validate => version,
                _ => self.state.current,
            },
            outcome: note,
            seconds: t0.elapsed().as_secs_f64(),
        });
        if next == Stage::Done {
            self.emit(Event::SessionStopped {
                reason: self.state.stop_reason.clone().unwrap_or_default(),
                best_version: self.state.best,
                best_us: self.state.best_us,
            });
        }
        Ok(())
    }

    fn run_probe(&mut self) -> Result<()> {
        self.emit(Event::Note {
            text: "measuring the device, its ceilings and the vendor baselines".into(),
        });
        let ev = self.evaluator.clone();
        let w = self.workload.clone();
        let probe = tokio::task::block_in_place(|| ev.probe(&w))?;
        self.state.spent.gpu_s += probe.seconds;
        if probe.report.is_none() {
            return Err(Error::NoGpu(format!(
                "the probe worker did not answer: {}",
                probe.stderr_tail.lines().last().unwrap_or("no output")
            )));
        }
        self.dir.write_json(&self.dir.path("probe.json"), &probe)?;
        self.probe = Some(probe);
        Ok(())
    }

    fn gpu(&self) -> GpuFacts {
        self.probe
            .as_ref()
            .map(GpuFacts::from_probe)
            .unwrap_or_default()
    }

    fn vendor_line(&self) -> String {
        let Some(t) = self
            .probe
            .as_ref()
            .and_then(|p| p.report.as_ref())
            .and_then(|r| r.timing.as_ref())
        else {
            return "not measured".into();
        };
        let v: Vec<String> = t
            .baselines
            .iter()
            .filter(|b| !b.is_reference_only())
            .map(|b| format!("{} {:.2} us", b.name, b.stats.median_us))
            .collect();
        if v.is_empty() {
            "none available".into()
        } else {
            v.join(", ")
        }
    }

    // ---------------------------------------------------------------- steering

    /// A person's hint, carried by the next prompt.
    pub fn set_hint(&mut self, hint: &str) -> Result<()> {
        self.state.hint = Some(hint.to_string());
        self.emit(Event::Note {
            text: format!("hint for the next prompt: {hint}"),
        });
        self.save_idle()
    }

    /// Lets the loop go on for `rounds` more optimization rounds (a person asked for them).
    pub fn allow_rounds(&mut self, rounds: u32) -> Result<()> {
        let b = &mut self.spec.budgets;
        b.rounds = b.rounds.max(self.state.spent.rounds + rounds);
        b.patience = b
            .patience
            .max(self.state.spent.rounds_without_gain + rounds);
        if self.state.stage == Stage::Done && self.state.best.is_some() {
            self.state.stage = Stage::Optimize;
            self.state.stop_reason = None;
        }
        self.dir
            .write_json(&self.dir.path("session.json"), &self.spec)?;
        self.save_idle()
    }

    /// A version written by a person (an edit of `parent`): it enters the compile stage.
    pub fn human_version(&mut self, source: &str, parent: Option<u32>) -> Result<u32> {
        let n = self.state.next_version;
        let note = StrategyNote {
            change: format!(
                "edited by hand{}",
                parent.map(|p| format!(" from v{p}")).unwrap_or_default()
            ),
            why: "a person's edit".into(),
            expected_gain: String::new(),
        };
        self.dir
            .write_version(n, source, "(written by a person, not a provider)", &note)?;
        self.add_version(n, parent, "human", &note.change);
        self.state.stage = Stage::Compile;
        self.state.stop_reason = None;
        self.emit(Event::Note {
            text: format!("v{n}: {}", note.change),
        });
        self.save_idle()?;
        Ok(n)
    }

    /// Makes correct version `n` the best again and continues optimizing from it.
    pub fn rollback(&mut self, n: u32) -> Result<()> {
        let v = self
            .state
            .version(n)
            .cloned()
            .ok_or_else(|| Error::Usage(format!("there is no v{n}")))?;
        if v.status != "correct" {
            return Err(Error::Usage(format!(
                "v{n} is {}: only a correct version can be rolled back to",
                v.status
            )));
        }
        let timing = self
            .dir
            .read_json::<Evaluation>(&self.dir.version_dir(n).join("evaluation.json"))
            .ok()
            .and_then(|e| e.report?.timing);
        self.state.best = Some(n);
        self.state.best_us = v.median_us;
        self.state.best_spread = timing
            .as_ref()
            .and_then(|t| t.candidate.as_ref().map(|c| c.spread));
        self.state.best_pace_us = timing.as_ref().and_then(pace_us);
        self.state.best_roofline = v.roofline_fraction;
        self.state.current = Some(n);
        self.state.stage = Stage::Optimize;
        self.state.stop_reason = None;
        self.state.spent.debug_attempts = 0;
        let source = self.dir.version_source(n)?;
        self.dir
            .write_atomic(&self.dir.path("best.cu"), source.as_bytes())?;
        self.emit(Event::Reverted {
            to_version: n,
            reason: "rolled back by hand".into(),
        });
        self.save_idle()
    }

    /// Writes the best kernel as a standalone drop-in (see [`super::export::export`]).
    pub fn export(&self, out: &Path) -> Result<Vec<PathBuf>> {
        super::export::export(&self.dir, &self.toolchain.abi_include, out)
    }

    // ---------------------------------------------------------------- asking

    async fn ask_stage(&mut self, stage: Stage) -> Result<(Outcome, String)> {
        let has_best = self.state.best.is_some();
        if let Some(why) =
            self.spec
                .budgets
                .exhausted(&self.state.spent, has_best, self.state.best_roofline)
        {
            self.state.stop_reason = Some(why.clone());
            return Ok((Outcome::Stop, why));
        }
        match stage {
            Stage::Debug if self.state.spent.debug_attempts >= self.spec.budgets.debug_attempts => {
                self.state.spent.debug_attempts = 0;
                if let Some(b) = self.state.best {
                    let why = format!(
                        "{} debug attempts failed; back to the best version",
                        self.spec.budgets.debug_attempts
                    );
                    self.state.current = Some(b);
                    self.emit(Event::Reverted {
                        to_version: b,
                        reason: why.clone(),
                    });
                    return Ok((Outcome::DebugExhaustedWithBest, why));
                }
                self.state.spent.regenerations += 1;
                return Ok((
                    Outcome::DebugExhaustedNoBest,
                    format!(
                        "{} debug attempts failed and nothing is correct yet: regenerating",
                        self.spec.budgets.debug_attempts
                    ),
                ));
            }
            Stage::Generate if self.state.spent.regenerations > self.spec.budgets.regenerations => {
                let why = format!(
                    "gave up: {} fresh starts without a correct kernel",
                    self.state.spent.regenerations
                );
                self.state.stop_reason = Some(why.clone());
                return Ok((Outcome::GiveUp, why));
            }
            _ => {}
        }
        let purpose = match stage {
            Stage::Generate => Purpose::Generate,
            Stage::Debug => Purpose::Debug,
            _ => Purpose::Optimize,
        };
        let n = self.state.next_version;
        let messages = self.messages(purpose)?;
        let mut ask = Ask {
            purpose,
            version: n,
            messages,
            tried: self.state.memory.tried(),
        };
        let use_seed = self.seed.is_some() && self.state.seeded < self.spec.seed_from_builtin;
        if stage == Stage::Generate && !use_seed {
            if let Some(done) = self.population(&ask).await? {
                return Ok(done);
            }
        }
        let first_messages = ask.messages.clone();
        let Some(first) = self.propose(&ask, use_seed).await? else {
            if use_seed {
                // The built-in candidates are spent: the session's own provider goes on.
                self.state.seeded = self.spec.seed_from_builtin;
                return Ok((Outcome::NoCode, "built-in seed candidates spent".into()));
            }
            let why = "the provider has nothing more to offer".to_string();
            self.state.stop_reason = Some(why.clone());
            return Ok((Outcome::ProviderExhausted, why));
        };
        if use_seed {
            self.state.seeded += 1;
        }
        // The version the prompt showed: what edits apply to.
        let parent = match stage {
            Stage::Debug => self.state.current,
            Stage::Optimize => self.state.best,
            _ => None,
        };
        let Some((n, change)) = self
            .version_from_reply(&mut ask, first, parent, use_seed)
            .await?
        else {
            self.count_failed_proposal(stage);
            return Ok((
                Outcome::NoCode,
                "no usable code, even after the repair request".into(),
            ));
        };
        // --samples: more replies to the same optimize request, each a version of its
        // own; all are evaluated (see `step`) and the fastest correct one is kept.
        let mut batch = vec![n];
        if stage == Stage::Optimize && !use_seed {
            // The batch's own strategies count as tried (the built-in provider then offers
            // its next candidates, not the same one again).
            let mut tried = self.state.memory.tried();
            tried.push(change.clone());
            for _ in 1..self.spec.samples.max(1) {
                let mut more = Ask {
                    purpose,
                    version: self.state.next_version,
                    messages: first_messages.clone(),
                    tried: tried.clone(),
                };
                let Some(r) = self.propose(&more, false).await? else {
                    break;
                };
                if let Some((m, c)) = self.version_from_reply(&mut more, r, parent, false).await? {
                    batch.push(m);
                    tried.push(c);
                }
            }
        }
        // Built-in seed candidates are not the provider's optimization rounds.
        if stage == Stage::Optimize && !use_seed {
            self.state.spent.rounds += 1;
        }
        let note = if batch.len() > 1 {
            format!(
                "v{n}: {change} (and {} more sample{}: {})",
                batch.len() - 1,
                if batch.len() == 2 { "" } else { "s" },
                version_list(&batch[1..])
            )
        } else {
            format!("v{n}: {change}")
        };
        self.start_batch(batch);
        Ok((Outcome::Proposed, note))
    }

    /// Makes `batch` (versions just written) the ones to compile and validate next: the
    /// first now, the rest after it (see `step`).
    fn start_batch(&mut self, batch: Vec<u32>) {
        self.state.current = batch.first().copied();
        self.state.batch = batch.len() > 1;
        self.state.batch_gain = false;
        self.state.pending = batch.into_iter().skip(1).collect();
    }

    /// Whether the version just judged (not accepted) closes an optimization round with no
    /// gain: always for a lone version; for a batch of samples, only its last one, and only
    /// when no sample of the round was accepted (a round counts once against --patience).
    fn round_ends_without_gain(&self) -> bool {
        !self.state.batch || (self.state.pending.is_empty() && !self.state.batch_gain)
    }

    /// `--population N` on the first generation: the model proposes N distinct strategies
    /// (strategy blocks only), each is then asked for as its own implementation, and all
    /// are evaluated; the fastest correct one becomes the evolving kernel (cuPilot's
    /// strategy-level population ahead of the one-kernel loop). `None`: not asked for,
    /// already done, or the model gave fewer than two strategies (the plain generate
    /// request goes on).
    async fn population(&mut self, generate: &Ask) -> Result<Option<(Outcome, String)>> {
        let want = self.spec.population;
        if want < 2
            || self.state.population_asked
            || !self.state.versions.is_empty()
            || !self.provider.reads_prompts()
        {
            return Ok(None);
        }
        self.state.population_asked = true;
        let with = |ask: &Ask, extra: String| {
            let mut messages = ask.messages.clone();
            if let Some(last) = messages.iter_mut().rev().find(|m| m.role == "user") {
                last.content.push_str("\n\n");
                last.content.push_str(&extra);
            }
            messages
        };
        let ask = Ask {
            purpose: Purpose::Population,
            version: self.state.next_version,
            messages: with(
                generate,
                self.prompts
                    .render("population", &minijinja::context! { n => want })?,
            ),
            tried: self.state.memory.tried(),
        };
        let Some(r) = self.propose(&ask, false).await? else {
            return Ok(None);
        };
        let mut strategies: Vec<StrategyNote> = Vec::new();
        for s in reply::strategies(&r.text) {
            if !strategies.iter().any(|t| t.change == s.change) && strategies.len() < want as usize
            {
                strategies.push(s);
            }
        }
        if strategies.len() < 2 {
            self.emit(Event::Note {
                text: format!(
                    "population: the reply named {} distinct strateg{} (asked for {want}); generating one kernel instead",
                    strategies.len(),
                    if strategies.len() == 1 { "y" } else { "ies" }
                ),
            });
            return Ok(None);
        }
        self.emit(Event::Note {
            text: format!(
                "population: {} strategies: {}",
                strategies.len(),
                strategies
                    .iter()
                    .map(|s| s.change.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        });
        let mut made = Vec::new();
        let total = strategies.len();
        for (i, s) in strategies.into_iter().enumerate() {
            let extra = self.prompts.render(
                "population_member",
                &minijinja::context! {
                    i => i + 1, n => total, change => s.change, why => s.why,
                    expected_gain => s.expected_gain,
                },
            )?;
            let mut member = Ask {
                purpose: Purpose::Generate,
                version: self.state.next_version,
                messages: with(generate, extra),
                tried: self.state.memory.tried(),
            };
            let Some(r) = self.propose(&member, false).await? else {
                break;
            };
            if let Some((v, _)) = self.version_from_reply(&mut member, r, None, false).await? {
                made.push(v);
            }
        }
        if made.is_empty() {
            self.count_failed_proposal(Stage::Generate);
            return Ok(Some((
                Outcome::NoCode,
                "population: no member gave usable code".into(),
            )));
        }
        let note = format!("population of {}: {}", made.len(), version_list(&made));
        self.start_batch(made);
        Ok(Some((Outcome::Proposed, note)))
    }

    /// Turns a reply to `ask` into version `ask.version` (its files written, recorded as
    /// the current one): the whole file, or edits on `parent`'s source; one repair request
    /// when neither is usable. `None` (recorded in the memory) when even that fails.
    async fn version_from_reply(
        &mut self,
        ask: &mut Ask,
        first: Reply,
        parent: Option<u32>,
        use_seed: bool,
    ) -> Result<Option<(u32, String)>> {
        let n = self.state.next_version;
        let purpose = ask.purpose;
        let base = parent.and_then(|p| self.dir.version_source(p).ok());
        let mut parsed = reply::parse(&first.text);
        let mut text = first.text;
        let mut code = parsed.kernel(base.as_deref());
        if let Err(missing) = &code {
            // One repair request, carrying the unusable reply and what was missing (or
            // which edit did not apply, and why).
            let ctx = minijinja::context! { missing => missing, edits => base.is_some() };
            ask.messages.push(Message::assistant(text.clone()));
            ask.messages
                .push(Message::user(self.prompts.render("repair", &ctx)?));
            ask.purpose = Purpose::Repair;
            if let Some(r) = self.propose(ask, use_seed).await? {
                parsed = reply::parse(&r.text);
                text = r.text;
                code = parsed.kernel(base.as_deref());
            }
        }
        let origin = if use_seed { "builtin" } else { purpose.name() };
        let Ok(code) = code else {
            self.state.memory.record(Attempt {
                version: n,
                origin: origin.into(),
                change: parsed
                    .strategy
                    .map(|s| s.change)
                    .unwrap_or_else(|| "(no strategy stated)".into()),
                verdict: Verdict::NoCode,
            });
            return Ok(None);
        };
        let strategy = parsed.strategy.unwrap_or_else(|| StrategyNote {
            change: "(no strategy stated)".into(),
            ..StrategyNote::default()
        });
        if let Some(prev) = self.state.memory.repeats_failure(&strategy.change) {
            self.emit(Event::Note {
                text: format!(
                    "v{n} states the same change as v{} which failed ({}); trying it since the code differs",
                    prev.version,
                    prev.verdict.describe()
                ),
            });
        }
        self.dir.write_version(n, &code, &text, &strategy)?;
        self.add_version(n, parent, origin, &strategy.change);
        Ok(Some((n, strategy.change)))
    }

    /// Records a new version (its files already written) as the current one.
    fn add_version(&mut self, n: u32, parent: Option<u32>, origin: &str, change: &str) {
        self.state.versions.push(VersionRecord {
            n,
            parent,
            origin: origin.into(),
            change: change.into(),
            status: "proposed".into(),
            median_us: None,
            vendor_us: None,
            roofline_fraction: None,
            accepted: false,
            verdict: String::new(),
        });
        self.state.next_version = n + 1;
        self.state.current = Some(n);
    }

    fn count_failed_proposal(&mut self, stage: Stage) {
        match stage {
            Stage::Generate => self.state.spent.regenerations += 1,
            Stage::Debug => self.state.spent.debug_attempts += 1,
            _ => {
                self.state.spent.rounds += 1;
                self.state.spent.rounds_without_gain += 1;
            }
        }
    }

    /// Asks the provider (or the seed provider), records the exchange and the spending.
    async fn propose(&mut self, ask: &Ask, use_seed: bool) -> Result<Option<Reply>> {
        let events = self.events.clone();
        let provider: &mut Box<dyn Provider> = match (use_seed, self.seed.as_mut()) {
            (true, Some(s)) => s,
            _ => &mut self.provider,
        };
        let result = provider.propose(ask, events.as_ref()).await;
        let exchange = Exchange {
            ts: super::now_rfc3339(),
            version: ask.version,
            purpose: ask.purpose,
            messages: ask.messages.clone(),
            reply: result.as_ref().ok().and_then(|r| r.clone()),
            error: result.as_ref().err().map(|e| e.to_string()),
        };
        self.dir.append_exchange(&exchange)?;
        let reply = result?;
        if let Some(r) = &reply {
            let s = &mut self.state.spent;
            s.model_requests += 1;
            s.prompt_tokens += r.usage.prompt_tokens;
            s.completion_tokens += r.usage.completion_tokens;
            s.cost_usd += r.cost_usd;
        }
        Ok(reply)
    }

    /// The messages for a request: the system prompt and the purpose's prompt.
    fn messages(&mut self, purpose: Purpose) -> Result<Vec<Message>> {
        let uses_prompts = match (&self.seed, self.state.seeded < self.spec.seed_from_builtin) {
            (Some(_), true) => false,
            _ => self.provider.reads_prompts(),
        };
        if !uses_prompts {
            return Ok(Vec::new());
        }
        let gpu = self.gpu();
        let w = &self.workload;
        let wf = WorkloadFacts::new(w, &gpu);
        let abi_path = self.toolchain.abi_include.join("cutesmith_abi.h");
        let abi = std::fs::read_to_string(&abi_path).map_err(|e| Error::io(&abi_path, e))?;
        let hint = self.state.hint.take();
        let history = self.state.memory.summary(HISTORY_MAX);
        let system = self.prompts.render(
            "system",
            &minijinja::context! {
                cutlass_version => self.toolchain.cutlass.version,
                nvcc_version => self.toolchain.nvcc.version,
                arch => self.spec.arch,
                precision_rule => prompts::precision_rule(w),
                gpu => gpu,
                abi_header => abi,
            },
        )?;
        let user = match purpose {
            Purpose::Generate | Purpose::Repair | Purpose::Population => self.prompts.render(
                "generate",
                &minijinja::context! {
                    w => wf,
                    vendor => self.vendor_line(),
                    class_advice => prompts::class_advice(w),
                    hint => hint,
                    history => (!self.state.memory.attempts.is_empty()).then_some(history),
                },
            )?,
            Purpose::Debug => {
                let n = self.state.current.unwrap_or(0);
                let (kind, failure) = self.failure_evidence(n);
                let source = self.dir.version_source(n).unwrap_or_default();
                self.prompts.render(
                    "debug",
                    &minijinja::context! {
                        w => wf,
                        version => n,
                        failure_kind => kind,
                        failure => failure,
                        edits => self.spec.reply_mode.invites_edits(self.state.best.is_some()),
                        numbered => reply::numbered(&source),
                        headers => self.header_lookup(n),
                        cutlass_version => self.toolchain.cutlass.version,
                        source => source,
                        hint => hint,
                        history => (!self.state.memory.attempts.is_empty()).then_some(history),
                    },
                )?
            }
            Purpose::Optimize => {
                let n = self.state.best.unwrap_or(0);
                let source = self.dir.version_source(n).unwrap_or_default();
                let last_failed = self
                    .state
                    .memory
                    .attempts
                    .last()
                    .filter(|a| a.verdict.failed())
                    .map(|a| {
                        format!(
                            "The last attempt (v{}: {}) did not work: {}. Do not propose it again.",
                            a.version,
                            a.change,
                            a.verdict.describe()
                        )
                    });
                self.prompts.render(
                    "optimize",
                    &minijinja::context! {
                        w => wf,
                        version => n,
                        profile => self.profile_text(n),
                        history => history,
                        repeat_warning => last_failed,
                        hint => hint,
                        tuning => crate::tuning::summary(
                            &self.workload,
                            crate::tuning::default_path().as_deref(),
                            3,
                        ),
                        edits => self.spec.reply_mode.invites_edits(true),
                        numbered => reply::numbered(&source),
                        source => source,
                    },
                )?
            }
        };
        Ok(vec![Message::system(system), Message::user(user)])
    }

    /// For a version that failed to compile: the CuTe/CUTLASS declarations its errors
    /// point at, from the installed headers (see `toolchain::headers`).
    fn header_lookup(&self, n: u32) -> Option<String> {
        let d = self.dir.version_dir(n);
        let c = self
            .dir
            .read_json::<CompileOutcome>(&d.join("compile.json"))
            .ok()
            .filter(|c| !c.ok())?;
        let cutlass = &self.toolchain.cutlass;
        let index = crate::toolchain::headers::HeaderIndex::load_or_build(
            &cutlass.include,
            &cutlass.version,
            &crate::toolchain::cache_dir().join("header-index"),
        );
        let source = self.dir.version_source(n).ok();
        crate::toolchain::headers::lookup(
            &index,
            &cutlass.include,
            &c.diagnostics,
            source.as_deref(),
            4000,
        )
    }

    /// (what failed, the evidence) for a failed version: condensed compile diagnostics or
    /// the validation report.
    fn failure_evidence(&self, n: u32) -> (String, String) {
        let d = self.dir.version_dir(n);
        if let Ok(c) = self
            .dir
            .read_json::<CompileOutcome>(&d.join("compile.json"))
        {
            if !c.ok() {
                let loc = c
                    .primary_location
                    .as_ref()
                    .map(|(f, l)| format!(" (most likely at {f}:{l})"))
                    .unwrap_or_default();
                return (
                    format!("nvcc rejected it{loc}"),
                    format!("nvcc diagnostics:\n{}", c.condensed),
                );
            }
        }
        match self.dir.read_json::<Evaluation>(&d.join("evaluation.json")) {
            Ok(e) => {
                let kind = e
                    .fault
                    .as_ref()
                    .map(|f| format!("validation failed ({})", f.kind.name()))
                    .unwrap_or_else(|| "validation failed".into());
                (kind, prompts::failure_report(&e, EVIDENCE_MAX))
            }
            Err(_) => ("it failed".into(), "(no report was saved)".into()),
        }
    }

    /// Profiles an accepted version under Nsight Compute (when the evaluator can) and
    /// keeps the result, or why there is none, in `versions/vNNN/ncu.json`.
    fn profile_version(&mut self, n: u32, so: &Path, out: &CompileOutcome) -> Result<()> {
        let kernels: Vec<String> = out.resources.iter().map(|r| r.mangled.clone()).collect();
        let ev = self.evaluator.clone();
        let w = self.workload.clone();
        let got = tokio::task::block_in_place(|| ev.profile(&w, so, &kernels));
        let record = match &got {
            Ok(p) => serde_json::json!({ "profiles": p }),
            Err(why) => serde_json::json!({ "profiles": [], "note": why }),
        };
        if let Err(why) = &got {
            self.emit(Event::Note {
                text: format!("v{n} not profiled: {why}"),
            });
        }
        self.dir
            .write_json(&self.dir.version_dir(n).join("ncu.json"), &record)
    }

    /// The profile of a correct version for the optimize prompt: the roofline position,
    /// the few findings that matter most (guidance), the Nsight Compute summary, the
    /// timing against the vendor library, and the resources of its compile.
    pub fn profile_text(&self, n: u32) -> String {
        use crate::feedback::{ncu::KernelProfile, profile::Profile};
        let d = self.dir.version_dir(n);
        let eval = self
            .dir
            .read_json::<Evaluation>(&d.join("evaluation.json"))
            .ok();
        let ncu: Vec<KernelProfile> = self
            .dir
            .read_json::<serde_json::Value>(&d.join("ncu.json"))
            .ok()
            .and_then(|v| serde_json::from_value(v.get("profiles")?.clone()).ok())
            .unwrap_or_default();
        let compile = self
            .dir
            .read_json::<CompileOutcome>(&d.join("compile.json"))
            .ok();
        Profile::assemble(&self.workload, eval.as_ref(), compile.as_ref(), Ok(ncu)).prompt_text()
    }

    // ---------------------------------------------------------------- compile

    /// Compiles version `n` (through the cache) and records the outcome in compile.json.
    fn compile_version(&self, n: u32) -> Result<CompileOutcome> {
        let source = self.dir.version_source(n)?;
        let req = compile::CompileRequest::version(&source, &self.spec.arch);
        let (tc, cache) = (&self.toolchain, &self.cache);
        let out = tokio::task::block_in_place(|| compile::compile(tc, cache, &req))?;
        self.dir
            .write_json(&self.dir.version_dir(n).join("compile.json"), &out)?;
        Ok(out)
    }

    fn compile_stage(&mut self) -> Result<(Outcome, String)> {
        let n = self.current()?;
        if self.state.batch && !self.pool.is_empty() && !self.prefetched.contains_key(&n) {
            self.prefetch_batch(n)?;
        }
        let out = self.compile_version(n)?;
        let d = self.dir.version_dir(n);
        if let Ok(log) = std::fs::read(&out.log_path) {
            self.dir.write_atomic(&d.join("compile.log"), &log)?;
        }
        let summary = if out.ok() {
            out.resources
                .iter()
                .map(|r| format!("{} regs, {} B spill", r.registers, r.spill_bytes()))
                .next()
                .unwrap_or_else(|| "ok".into())
        } else {
            out.condensed.lines().next().unwrap_or("failed").to_string()
        };
        self.emit(Event::Compiled {
            version: n,
            ok: out.ok(),
            cached: out.cached,
            seconds: out.nvcc_seconds,
            summary: summary.clone(),
        });
        if out.ok() {
            self.set_status(n, "compiled");
            return Ok((Outcome::Compiled, summary));
        }
        self.set_status(n, "compile_failed");
        let first_error = out
            .diagnostics
            .iter()
            .find(|d| d.severity == crate::toolchain::diagnostics::Severity::Error)
            .map(|d| d.message.clone())
            .unwrap_or_else(|| summary.clone());
        self.fail(n, Verdict::CompileFailed { first_error });
        Ok((Outcome::CompileFailed, summary))
    }

    /// A batch on a GPU pool: `n` and the pending versions are compiled in parallel
    /// (through the cache, so their compile stages find them there) and evaluated at once,
    /// one worker per GPU, each with its own baselines on its own GPU; the evaluations wait
    /// in memory for the validate stages, which record them in order as usual.
    fn prefetch_batch(&mut self, n: u32) -> Result<()> {
        let mut versions = vec![n];
        versions.extend(self.state.pending.iter().copied());
        let sources = versions
            .iter()
            .map(|v| self.dir.version_source(*v))
            .collect::<Result<Vec<_>>>()?;
        let requests: Vec<_> = sources
            .iter()
            .map(|src| compile::CompileRequest::version(src, &self.spec.arch))
            .collect();
        let (tc, cache) = (&self.toolchain, &self.cache);
        let outs = tokio::task::block_in_place(|| {
            compile::compile_many(tc, cache, &requests, compile::default_jobs(), &|_, _| {})
        });
        // (version, shared object, source) of each that compiled.
        let work: Vec<(u32, PathBuf, String)> = versions
            .into_iter()
            .zip(sources)
            .zip(outs)
            .filter_map(|((v, src), out)| Some((v, out.ok()?.shared_object?, src)))
            .collect();
        let evaluators: Vec<Arc<dyn Evaluator>> = std::iter::once(self.evaluator.clone())
            .chain(self.pool.iter().cloned())
            .collect();
        let done_versions: Vec<u32> = work.iter().map(|(v, _, _)| *v).collect();
        self.emit(Event::Note {
            text: format!(
                "batch {}: compiled together, evaluated on {} GPUs at once",
                version_list(&done_versions),
                evaluators.len().min(work.len())
            ),
        });
        // One thread per GPU takes the next version; an evaluation that errs is made
        // again by the validate stage.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done: std::sync::Mutex<Vec<(u32, Evaluation)>> = std::sync::Mutex::new(Vec::new());
        let w = &self.workload;
        tokio::task::block_in_place(|| {
            std::thread::scope(|scope| {
                for ev in &evaluators {
                    let (next, done, work) = (&next, &done, &work);
                    scope.spawn(move || {
                        while let Some((v, so, source)) =
                            work.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                        {
                            if let (Ok(e), Ok(mut d)) = (ev.evaluate(w, so, source), done.lock()) {
                                d.push((*v, e));
                            }
                        }
                    });
                }
            })
        });
        if let Ok(d) = done.into_inner() {
            self.prefetched.extend(d);
        }
        Ok(())
    }

    fn current(&self) -> Result<u32> {
        self.state
            .current
            .ok_or_else(|| Error::Usage("internal: no current version".into()))
    }

    fn set_status(&mut self, n: u32, status: &str) {
        if let Some(v) = self.state.version_mut(n) {
            v.status = status.into();
        }
    }

    fn change_of(&self, n: u32) -> (String, String) {
        self.state
            .version(n)
            .map(|v| (v.origin.clone(), v.change.clone()))
            .unwrap_or_default()
    }

    /// Records a failed version; the next debug attempt counts against the budget.
    fn fail(&mut self, n: u32, verdict: Verdict) {
        let (origin, change) = self.change_of(n);
        if let Some(v) = self.state.version_mut(n) {
            v.verdict = verdict.describe();
        }
        self.state.memory.record(Attempt {
            version: n,
            origin: origin.clone(),
            change,
            verdict,
        });
        // Only failed fixes count against --debug-attempts (the first failure of a
        // generated or optimized version is what the fixes are for).
        if origin == "debug" {
            self.state.spent.debug_attempts += 1;
        }
        // An optimization round without gain is counted once: here, or when its version
        // is correct but not faster (a later fix of it does not count again).
        if origin == "optimize" && self.round_ends_without_gain() {
            self.state.spent.rounds_without_gain += 1;
        }
    }

    /// Adds the evaluation of version `n` to the tuning database (when it ran on a GPU and
    /// the database can be opened: a failure there costs the session nothing but a note).
    fn remember(&self, n: u32, e: &Evaluation) {
        if !self.evaluator.measures() {
            return;
        }
        let Some(report) = e.report.as_ref() else {
            return;
        };
        let Some(device) = report.device.as_ref() else {
            return;
        };
        let Some(path) = crate::tuning::default_path() else {
            return;
        };
        let (_, change) = self.change_of(n);
        let record = crate::tuning::Record {
            at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
            gpu: device.name.clone(),
            toolkit: self.toolchain.nvcc.version.clone(),
            strategy: change,
            provider: self.provider.name(),
            outcome: if e.passed() {
                "correct".to_string()
            } else {
                e.fault
                    .as_ref()
                    .map_or_else(|| "failed".to_string(), |f| f.kind.name().to_string())
            },
            ..crate::tuning::Record::timed(
                &self.workload,
                *self.workload.headline(),
                report.timing.as_ref(),
            )
        };
        let result = crate::tuning::TuningDb::open(&path).and_then(|db| db.record(&record));
        if let Err(err) = result {
            self.emit(Event::Note {
                text: format!("v{n} not added to the tuning database: {err}"),
            });
        }
    }

    // ---------------------------------------------------------------- validate

    fn validate_stage(&mut self) -> Result<(Outcome, String)> {
        let n = self.current()?;
        let d = self.dir.version_dir(n);
        let mut out: CompileOutcome = self.dir.read_json(&d.join("compile.json"))?;
        let source = self.dir.version_source(n)?;
        if out.shared_object.as_ref().is_none_or(|so| !so.is_file()) {
            // The shared object lives in the compile cache, which may have been cleared
            // since (a resumed session): build it again from the version's source.
            out = self.compile_version(n)?;
        }
        let so: PathBuf = out
            .shared_object
            .clone()
            .ok_or_else(|| Error::Usage(format!("v{n} no longer compiles: {}", out.condensed)))?;
        let e = match self.prefetched.remove(&n) {
            Some(e) => e,
            None => {
                let ev = self.evaluator.clone();
                let w = self.workload.clone();
                tokio::task::block_in_place(|| ev.evaluate(&w, &so, &source))?
            }
        };
        self.state.spent.gpu_s += e.seconds;
        self.dir.write_json(&d.join("evaluation.json"), &e)?;
        self.remember(n, &e);
        let text = e.render();
        self.dir
            .write_atomic(&d.join("evaluation.txt"), text.as_bytes())?;
        // A limit of the machine (GPU memory, the host budget) stops the session, saved
        // and resumable, without a debug round against a kernel that did nothing wrong.
        if let Some(f) = e
            .fault
            .as_ref()
            .filter(|f| f.kind == crate::eval::job::FaultKind::Resource)
        {
            return Err(Error::Resource(f.message.clone()));
        }
        let passed = e.passed();
        let fault = e.fault.as_ref().map(|f| f.kind.name());
        let shapes = e.report.as_ref().map_or(0, |r| r.validations.len());
        self.emit(Event::Validated {
            version: n,
            passed,
            fault: fault.clone(),
            summary: if passed {
                format!("{shapes} shape x seed runs pass")
            } else {
                e.fault
                    .as_ref()
                    .and_then(|f| f.message.lines().next().map(str::to_string))
                    .unwrap_or_else(|| "failed".into())
            },
        });
        if !passed {
            let fault = fault.unwrap_or_else(|| "crash".into());
            self.set_status(n, &fault);
            self.fail(
                n,
                Verdict::Wrong {
                    fault: fault.clone(),
                },
            );
            return Ok((Outcome::Wrong, format!("wrong ({fault})")));
        }
        let timing = e.report.as_ref().and_then(|r| r.timing.clone());
        let cand = timing.as_ref().and_then(|t| t.candidate.clone());
        let vendor = timing.as_ref().and_then(|t| {
            t.fastest_vendor()
                .map(|b| (b.name.clone(), b.stats.median_us))
        });
        let roof = timing.as_ref().and_then(|t| t.roofline_fraction);
        if let Some(c) = &cand {
            self.emit(Event::Timed {
                version: n,
                median_us: c.median_us,
                vendor: vendor.as_ref().map(|v| v.0.clone()),
                vendor_us: vendor.as_ref().map(|v| v.1),
                roofline_fraction: roof,
            });
        }
        if let Some(v) = self.state.version_mut(n) {
            v.status = "correct".into();
            v.median_us = cand.as_ref().map(|c| c.median_us);
            v.vendor_us = vendor.as_ref().map(|v| v.1);
            v.roofline_fraction = roof;
        }
        self.state.spent.debug_attempts = 0;
        let (origin, change) = self.change_of(n);
        let origin_is_optimize = origin == "optimize";
        let verdict = match (self.state.best_us, &cand) {
            // No best yet, or one that was never timed: the first timed correct version
            // takes its place.
            (None, _) => Verdict::FirstCorrect {
                median_us: cand.as_ref().map(|c| c.median_us),
            },
            (Some(best), Some(c)) => {
                let pace = timing.as_ref().and_then(pace_us);
                let gain = gain_over_best(best, self.state.best_pace_us, c.median_us, pace);
                if gain > noise_band(c.spread, self.state.best_spread.unwrap_or(0.0)) {
                    Verdict::Faster {
                        percent: gain * 100.0,
                        median_us: c.median_us,
                    }
                } else {
                    Verdict::Slower {
                        percent: -gain * 100.0,
                        median_us: c.median_us,
                    }
                }
            }
            // Correct but untimed, with a timed best: nothing shows it is faster.
            (Some(_), None) => Verdict::Slower {
                percent: 0.0,
                median_us: f64::NAN,
            },
        };
        let accepted = !verdict.failed();
        let why = verdict.describe();
        if let Some(v) = self.state.version_mut(n) {
            v.accepted = accepted;
            v.verdict = why.clone();
        }
        self.state.memory.record(Attempt {
            version: n,
            origin,
            change,
            verdict,
        });
        if accepted {
            self.state.best = Some(n);
            self.state.best_us = cand.as_ref().map(|c| c.median_us);
            self.state.best_spread = cand.as_ref().map(|c| c.spread);
            self.state.best_pace_us = timing.as_ref().and_then(pace_us);
            self.state.best_roofline = roof;
            self.state.spent.rounds_without_gain = 0;
            self.state.batch_gain = true;
            let source = self.dir.version_source(n)?;
            self.dir
                .write_atomic(&self.dir.path("best.cu"), source.as_bytes())?;
            self.profile_version(n, &so, &out)?;
            self.emit(Event::VersionAccepted {
                version: n,
                median_us: self.state.best_us,
                reason: why.clone(),
            });
        } else {
            if origin_is_optimize && self.round_ends_without_gain() {
                self.state.spent.rounds_without_gain += 1;
            }
            self.emit(Event::VersionRejected {
                version: n,
                reason: why.clone(),
            });
        }
        self.state.current = self.state.best;
        Ok((Outcome::Correct, why))
    }
}

/// `v2, v3, v5`: versions for a note.
fn version_list(versions: &[u32]) -> String {
    versions
        .iter()
        .map(|v| format!("v{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The GPU's pace during one timed batch: the geometric mean of the medians of the
/// baselines timed in it, interleaved with the candidate (the vendor libraries, and the
/// copy or TF32 rows shown for reference). `None` without a finite, positive one.
pub fn pace_us(t: &crate::eval::job::TimingReport) -> Option<f64> {
    let logs: Vec<f64> = t
        .baselines
        .iter()
        .map(|b| b.stats.median_us)
        .filter(|us| us.is_finite() && *us > 0.0)
        .map(f64::ln)
        .collect();
    if logs.is_empty() || logs.len() != t.baselines.len() {
        return None;
    }
    Some((logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// How much faster a candidate is than the best (0.05: 5% faster). Two batches timed
/// minutes apart can run at different clocks (the same cuBLAS call drifted 2.4% between
/// the batches of one bench session on the H100), so where both batches have a pace the
/// candidate's time is taken relative to its own batch's baselines, and the best's to its:
/// each against what the same GPU did at that moment. Without a pace, the plain ratio.
pub fn gain_over_best(
    best_us: f64,
    best_pace: Option<f64>,
    cand_us: f64,
    cand_pace: Option<f64>,
) -> f64 {
    match (best_pace, cand_pace) {
        (Some(bp), Some(cp)) if bp > 0.0 && cp > 0.0 => 1.0 - (cand_us / cp) / (best_us / bp),
        _ => 1.0 - cand_us / best_us,
    }
}

/// The most one timing's spread counts toward [`noise_band`]: a run noisier than this (a
/// disturbed GPU, a bimodal kernel) says little about its median, and must not make every
/// later candidate beat it by half its spread (one best timed at 51.5 us with a spread of
/// 100% once kept a 31.4 us candidate out).
pub const MAX_SPREAD_COUNTED: f64 = 0.10;

/// How much faster than the best a candidate must be to count: half the two timings'
/// p10-p90 spreads (each at most [`MAX_SPREAD_COUNTED`]), at least 1%.
pub fn noise_band(candidate_spread: f64, best_spread: f64) -> f64 {
    let counted = |s: f64| {
        if s.is_finite() {
            s.clamp(0.0, MAX_SPREAD_COUNTED)
        } else {
            MAX_SPREAD_COUNTED
        }
    };
    (0.5 * (counted(candidate_spread) + counted(best_spread))).max(0.01)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gain_over_the_best_is_taken_against_each_batchs_own_baselines() {
        // llm_llama3_8b_up_m4096 on the H100 (bench/llm-h100-2026-11-26.json): the first candidate
        // 677.66 us beside cuBLAS 655.23 and cuBLASLt 628.67; the fourth 657.31 beside
        // 639.94 and 615.74. The plain ratio says 3.0% faster; against each batch's own
        // baselines it is 0.8%, which is what the same-batch speedups (0.967x, 0.974x) say.
        let best_pace = (655.23f64 * 628.67).sqrt();
        let cand_pace = (639.94f64 * 615.74).sqrt();
        let plain = gain_over_best(677.66, None, 657.31, Some(cand_pace));
        assert!((plain - 0.0300).abs() < 1e-3, "{plain}");
        let fair = gain_over_best(677.66, Some(best_pace), 657.31, Some(cand_pace));
        assert!((fair - 0.0076).abs() < 1e-3, "{fair}");
        // A candidate that only ran on a faster clock is not faster.
        assert!(gain_over_best(100.0, Some(50.0), 95.0, Some(47.5)).abs() < 1e-12);
        // A pace of 0 is no pace.
        assert!((gain_over_best(100.0, Some(0.0), 90.0, Some(45.0)) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn the_pace_is_the_geometric_mean_of_every_baseline_or_none() {
        let stats = |us: f64| crate::eval::job::Stats {
            runs: 30,
            median_us: us,
            min_us: us,
            p10_us: us,
            p90_us: us,
            spread: 0.0,
        };
        let baseline = |name: &str, us: f64| crate::eval::job::BaselineTiming {
            name: name.into(),
            stats: stats(us),
            speedup: None,
            note: None,
        };
        let mut t = crate::eval::job::TimingReport {
            shape: crate::spec::Shape::gemm(1, 1, 1),
            flops: 1.0,
            min_bytes: 1.0,
            floor_s: 1.0,
            candidate: Some(stats(10.0)),
            roofline_fraction: None,
            achieved_tflops: None,
            achieved_tb_per_s: None,
            baselines: vec![baseline("cublas", 4.0), baseline("copy", 9.0)],
            retimed: None,
        };
        assert!((pace_us(&t).unwrap() - 6.0).abs() < 1e-9);
        t.baselines.push(baseline("cublaslt", f64::NAN));
        assert_eq!(pace_us(&t), None);
        t.baselines.clear();
        assert_eq!(pace_us(&t), None);
    }

    #[test]
    fn the_noise_band_is_half_the_spreads_within_bounds() {
        assert!((noise_band(0.04, 0.02) - 0.03).abs() < 1e-12);
        // At least 1%.
        assert_eq!(noise_band(0.0, 0.0), 0.01);
        // A best timed with a spread of 100% counts as 10%: a candidate 39% faster
        // (51.5 -> 31.4 us, spread 3.5%) is faster beyond the noise.
        let band = noise_band(0.035, 1.0087);
        assert!((band - 0.0675).abs() < 1e-12, "{band}");
        assert!(1.0 - 31.4 / 51.5 > band);
        // ... while 5% faster against it is not.
        assert!(0.05 < band);
        assert_eq!(noise_band(f64::NAN, 0.0), 0.05);
    }
}
