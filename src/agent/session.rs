//! A session on disk, under `runs/<id>/`:
//!
//! ```text
//! session.json          what was asked: workload, provider, evaluator, budgets (written once)
//! <workload>.toml       a copy of the workload spec (resume does not depend on workloads/)
//! state.json            the loop's state, rewritten atomically after every step
//! events.jsonl          every event, appended and flushed as it happens
//! transcript.jsonl      every provider request (messages) and reply, with usage
//! probe.json            the device, ceilings and vendor baselines measured at the start
//! versions/v001/        kernel.cu, reply.md, strategy.json, compile.json, compile.log,
//!                       evaluation.json, evaluation.txt
//! best.cu               a copy of the best version so far
//! ```
//!
//! A kill at any moment loses at most the step in flight: `state.json` names the stage to
//! run next and the version it concerns, and a version directory is complete before the
//! state that points at it is written.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::machine::{Budgets, Spent, Stage};
use super::memory::Memory;
use super::reply::StrategyNote;
use crate::config::ModelConfig;
use crate::error::{Error, IoContext, Result};
use crate::eval::Evaluation;
use crate::provider::{Message, Purpose, Reply};

/// Which provider a session uses (the API key is never stored: only its variable name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProviderSpec {
    Builtin,
    Model { model: ModelConfig },
    Replay { transcript: PathBuf },
}

/// What was asked of a session (session.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionSpec {
    pub id: String,
    pub created: String,
    pub workload: String,
    /// Where the spec came from (a copy sits in the session directory).
    pub workload_source: PathBuf,
    pub provider: ProviderSpec,
    /// `gpu`, or the test double's name.
    pub evaluator: String,
    pub budgets: Budgets,
    pub arch: String,
    /// Try this many built-in strategies first and let the provider start from the best.
    #[serde(default)]
    pub seed_from_builtin: usize,
    /// Validation seeds per shape, timed runs per contender, worker timeout (seconds).
    #[serde(default = "default_seeds")]
    pub seeds: u64,
    #[serde(default = "default_runs")]
    pub timing_runs: u32,
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
    /// Built-in provider: candidates to try.
    #[serde(default = "default_candidates")]
    pub max_candidates: usize,
    /// False when the session was started with `--no-sandbox`: its kernels (and nvcc
    /// on them) ran with the user's rights.
    #[serde(default = "default_sandboxed")]
    pub sandboxed: bool,
    /// Whether optimize and debug prompts invite edit replies.
    #[serde(default)]
    pub reply_mode: ReplyMode,
    /// Replies asked for per optimization round, each evaluated; the fastest correct one
    /// is kept (`--samples`).
    #[serde(default = "default_samples")]
    pub samples: u32,
    /// Strategies the first generation starts from, each implemented and evaluated; the
    /// best becomes the evolving kernel (`--population`; 0 or 1: one kernel).
    #[serde(default)]
    pub population: u32,
    /// The GPU pool it was started on (`--gpus`, as given), which `resume` uses again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<String>,
}

fn default_samples() -> u32 {
    1
}

/// How the model is asked to answer optimize and debug requests. A whole file is accepted
/// in every mode, and edits whenever the prompt showed a source to edit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ReplyMode {
    /// Edits (search/replace blocks against the numbered source) from the first correct
    /// version on; the first generation is a whole file.
    #[default]
    Auto,
    /// Edits whenever there is a source to edit (debugging the first version too).
    Edits,
    /// Whole files only.
    Whole,
}

impl ReplyMode {
    /// Whether an optimize or debug prompt invites edits, given whether some version is
    /// correct yet.
    pub fn invites_edits(self, have_correct: bool) -> bool {
        match self {
            ReplyMode::Whole => false,
            ReplyMode::Edits => true,
            ReplyMode::Auto => have_correct,
        }
    }
}

fn default_sandboxed() -> bool {
    true
}

fn default_seeds() -> u64 {
    2
}
fn default_runs() -> u32 {
    30
}
fn default_timeout() -> u64 {
    300
}
fn default_candidates() -> usize {
    4
}

/// One version's line in the state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionRecord {
    pub n: u32,
    /// The version it was derived from (the failing one for debug, the best for optimize).
    pub parent: Option<u32>,
    /// generate / debug / optimize / builtin / human.
    pub origin: String,
    pub change: String,
    /// proposed, compile_failed, compiled, correct, or the fault's name.
    pub status: String,
    pub median_us: Option<f64>,
    pub vendor_us: Option<f64>,
    pub roofline_fraction: Option<f64>,
    pub accepted: bool,
    /// Why it was accepted or rejected.
    #[serde(default)]
    pub verdict: String,
}

/// The loop's state (state.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub stage: Stage,
    pub next_version: u32,
    /// The version the current stage concerns (being compiled, validated or debugged).
    pub current: Option<u32>,
    pub best: Option<u32>,
    pub best_us: Option<f64>,
    pub best_spread: Option<f64>,
    /// The pace of the GPU when the best was timed: the geometric mean of the baselines'
    /// medians in its batch ([`super::engine::pace_us`]); a later candidate is compared with
    /// the best relative to its own batch's baselines, so a clock that drifted between the
    /// two batches (power, heat) does not decide which is faster.
    #[serde(default)]
    pub best_pace_us: Option<f64>,
    pub best_roofline: Option<f64>,
    pub spent: Spent,
    pub memory: Memory,
    pub versions: Vec<VersionRecord>,
    /// Built-in strategies tried so far when the session is seeded from them.
    #[serde(default)]
    pub seeded: usize,
    /// A person's hint for the next prompt (consumed when used).
    #[serde(default)]
    pub hint: Option<String>,
    pub stop_reason: Option<String>,
    /// Versions of the current batch (samples of one round, or a population) still to be
    /// compiled and validated, in order.
    #[serde(default)]
    pub pending: Vec<u32>,
    /// Whether the current version belongs to a batch of several.
    #[serde(default)]
    pub batch: bool,
    /// Whether the population request was made (it is made once per session).
    #[serde(default)]
    pub population_asked: bool,
    /// Whether a version of the current batch was accepted.
    #[serde(default)]
    pub batch_gain: bool,
}

impl State {
    pub fn new() -> State {
        State {
            stage: Stage::Generate,
            next_version: 1,
            current: None,
            best: None,
            best_us: None,
            best_spread: None,
            best_pace_us: None,
            best_roofline: None,
            spent: Spent::default(),
            memory: Memory::default(),
            versions: Vec::new(),
            seeded: 0,
            hint: None,
            stop_reason: None,
            pending: Vec::new(),
            batch: false,
            population_asked: false,
            batch_gain: false,
        }
    }

    pub fn version(&self, n: u32) -> Option<&VersionRecord> {
        self.versions.iter().find(|v| v.n == n)
    }

    pub fn version_mut(&mut self, n: u32) -> Option<&mut VersionRecord> {
        self.versions.iter_mut().find(|v| v.n == n)
    }
}

impl Default for State {
    fn default() -> Self {
        State::new()
    }
}

/// One provider exchange (a line of transcript.jsonl).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Exchange {
    pub ts: String,
    pub version: u32,
    pub purpose: Purpose,
    pub messages: Vec<Message>,
    pub reply: Option<Reply>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The session directory.
#[derive(Debug, Clone)]
pub struct SessionDir {
    pub root: PathBuf,
}

impl SessionDir {
    /// A new, empty session directory under `runs`.
    pub fn create(runs: &Path, id: &str) -> Result<SessionDir> {
        let root = runs.join(id);
        if root.exists() {
            return Err(Error::Usage(format!(
                "{} already exists: resume it with `cutesmith resume {}`",
                root.display(),
                root.display()
            )));
        }
        std::fs::create_dir_all(root.join("versions")).at(&root)?;
        Ok(SessionDir { root })
    }

    /// An existing session directory.
    pub fn open(root: &Path) -> Result<SessionDir> {
        if !root.join("session.json").is_file() {
            return Err(Error::Usage(format!(
                "{} is not a cutesmith session (no session.json); sessions live under runs/<id>",
                root.display()
            )));
        }
        Ok(SessionDir {
            root: root.to_path_buf(),
        })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    pub fn version_dir(&self, n: u32) -> PathBuf {
        self.root.join("versions").join(format!("v{n:03}"))
    }

    /// Writes `name` atomically (a temporary file renamed over it).
    pub fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes).at(&tmp)?;
        std::fs::rename(&tmp, path).at(path)
    }

    pub fn write_json(&self, path: &Path, v: &impl Serialize) -> Result<()> {
        let text = serde_json::to_string_pretty(v).map_err(|e| Error::Format {
            context: path.display().to_string(),
            message: e.to_string(),
        })?;
        self.write_atomic(path, text.as_bytes())
    }

    pub fn read_json<T: for<'de> Deserialize<'de>>(&self, path: &Path) -> Result<T> {
        let text = std::fs::read_to_string(path).at(path)?;
        serde_json::from_str(&text).map_err(|e| Error::Format {
            context: path.display().to_string(),
            message: e.to_string(),
        })
    }

    pub fn save_state(&self, s: &State) -> Result<()> {
        self.write_json(&self.path("state.json"), s)
    }

    pub fn load_state(&self) -> Result<State> {
        self.read_json(&self.path("state.json"))
    }

    pub fn load_spec(&self) -> Result<SessionSpec> {
        self.read_json(&self.path("session.json"))
    }

    /// Appends one exchange to transcript.jsonl (flushed).
    pub fn append_exchange(&self, x: &Exchange) -> Result<()> {
        use std::io::Write;
        let p = self.path("transcript.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .at(&p)?;
        let line = serde_json::to_string(x).map_err(|e| Error::Format {
            context: p.display().to_string(),
            message: e.to_string(),
        })?;
        writeln!(f, "{line}").at(&p)?;
        f.flush().at(&p)
    }

    /// Writes a new version's source, reply and strategy (before the state names it).
    pub fn write_version(
        &self,
        n: u32,
        source: &str,
        reply: &str,
        strategy: &StrategyNote,
    ) -> Result<PathBuf> {
        let d = self.version_dir(n);
        std::fs::create_dir_all(&d).at(&d)?;
        self.write_atomic(&d.join("kernel.cu"), source.as_bytes())?;
        self.write_atomic(&d.join("reply.md"), reply.as_bytes())?;
        self.write_json(&d.join("strategy.json"), strategy)?;
        Ok(d)
    }

    pub fn version_source(&self, n: u32) -> Result<String> {
        let p = self.version_dir(n).join("kernel.cu");
        std::fs::read_to_string(&p).at(&p)
    }
}

impl SessionDir {
    /// The session's copy of its workload spec.
    pub fn workload(&self, spec: &SessionSpec) -> Result<crate::spec::Workload> {
        Ok(crate::spec::Workload::load(
            self.path(&format!("{}.toml", spec.workload)),
        )?)
    }

    /// The best version's evaluation, when there is a best version.
    pub fn best_evaluation(&self, state: &State) -> Option<Evaluation> {
        let best = state.best?;
        self.read_json(&self.version_dir(best).join("evaluation.json"))
            .ok()
    }

    /// The workload's goal in words and whether the best version meets it; `None`
    /// when nothing is correct (or its files cannot be read).
    pub fn goal(&self, state: &State) -> Option<(String, bool)> {
        let spec = self.load_spec().ok()?;
        let w = self.workload(&spec).ok()?;
        let t = self.best_evaluation(state)?.report?.timing?;
        let baselines: Vec<(String, f64, Option<f64>)> = t
            .baselines
            .iter()
            .map(|b| (b.name.clone(), b.stats.median_us, b.speedup))
            .collect();
        Some(w.goal(
            t.candidate.map(|c| c.median_us),
            &baselines,
            t.roofline_fraction,
        ))
    }
}

/// A new session id: `<workload>-<yyyymmdd-hhmmss>-<4 hex>`.
pub fn new_id(workload: &str) -> String {
    let now = super::now_utc();
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id();
    format!(
        "{workload}-{:04}{:02}{:02}-{:02}{:02}{:02}-{:04x}",
        now.0,
        now.1,
        now.2,
        now.3,
        now.4,
        now.5,
        salt & 0xffff
    )
}
