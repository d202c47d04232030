//! Putting a session together: the engine's parts (provider, built-in seed provider,
//! evaluator, toolchain, compile cache, event sinks) for a new session from what was
//! asked of it, or for an existing one from its `session.json`. Every front end that runs
//! sessions (`run`, `resume`, `session`, suite runs, `bench`) starts them here.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::engine::{Engine, Parts};
use super::evaluator::{self, Evaluator, GpuEvaluator, GPU_EVALUATOR, TEST_EVALUATOR_ENV};
use super::machine::Budgets;
use super::session::{self, ProviderSpec, SessionDir, SessionSpec};
use crate::error::{Error, Result};
use crate::events::EventSink;
use crate::provider::builtin::BuiltinProvider;
use crate::provider::openai::OpenAiProvider;
use crate::provider::replay::ReplayProvider;
use crate::provider::Provider;
use crate::spec::Workload;
use crate::toolchain::cache::CompileCache;
use crate::toolchain::{Toolchain, ToolchainOptions};

/// What a new session is to be, before it has an id or a directory.
#[derive(Debug, Clone)]
pub struct Plan {
    pub provider: ProviderSpec,
    pub budgets: Budgets,
    /// The architecture kernels are compiled for (the GPU's).
    pub arch: String,
    /// Built-in strategies tried first, before the provider.
    pub seed_from_builtin: usize,
    /// Validation seeds per shape.
    pub seeds: u64,
    /// Timed runs per contender.
    pub timing_runs: u32,
    /// Seconds before a worker is killed.
    pub timeout_s: u64,
    /// Built-in provider: candidates it offers.
    pub max_candidates: usize,
    /// Whether optimize and debug prompts invite edit replies.
    pub reply_mode: super::session::ReplyMode,
    /// Replies per optimization round (`--samples`).
    pub samples: u32,
    /// Strategies of the first generation (`--population`).
    pub population: u32,
    /// The GPU pool asked for (`--gpus`), kept for `resume`.
    pub gpus: Option<String>,
}

/// One GPU of a pool: its ordinal among the devices this process sees, its name, and the
/// `CUDA_VISIBLE_DEVICES` value that shows a worker that device alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    pub ordinal: usize,
    pub name: String,
    pub visible: String,
}

/// The GPUs `spec` names (`--gpus`): `all` (or none given) for every visible device, or a
/// list of ordinals like `0,2,3`. Every GPU of a pool must be of one model: timings and
/// their ratios are compared across the pool, so mixed models are refused. With the
/// scripted test double no device is asked: ordinals stand for themselves (`all`: one).
pub fn gpus(spec: Option<&str>) -> Result<Vec<Gpu>> {
    let asked = gpu_list(spec)?;
    let parent = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let visible = |i: usize| visible_as(parent.as_deref(), i);
    if std::env::var(TEST_EVALUATOR_ENV).is_ok_and(|v| v == "scripted") {
        let list = asked.unwrap_or_else(|| vec![0]);
        return Ok(list
            .into_iter()
            .map(|i| Gpu {
                ordinal: i,
                name: "test double".into(),
                visible: visible(i),
            })
            .collect());
    }
    let devices = crate::eval::gpu::devices()?;
    let list = asked.unwrap_or_else(|| (0..devices.len()).collect());
    let mut out = Vec::new();
    for i in list {
        let d = devices.get(i).ok_or_else(|| {
            Error::Usage(format!(
                "--gpus: there is no GPU {i}: this machine shows {} ({})",
                devices.len(),
                devices
                    .iter()
                    .map(|d| format!("{}: {}", d.ordinal, d.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        out.push(Gpu {
            ordinal: i,
            name: d.name.clone(),
            visible: visible(i),
        });
    }
    if let Some(other) = out.iter().find(|g| g.name != out[0].name) {
        return Err(Error::Usage(format!(
            "--gpus: GPU {} is a {} and GPU {} a {}: a pool must be of one model, since \
             speedups are compared across it; pass --gpus with the ordinals of one kind",
            out[0].ordinal, out[0].name, other.ordinal, other.name
        )));
    }
    Ok(out)
}

/// Whether sessions on `pool` pin their workers to its GPUs: when `--gpus` named them or
/// there are several; one GPU found by default is left as the worker sees it.
pub fn pins(spec: Option<&str>, pool: &[Gpu]) -> bool {
    spec.is_some() || pool.len() > 1
}

/// The ordinals `--gpus` lists (`None`: all of them), or why the list is not one.
fn gpu_list(spec: Option<&str>) -> Result<Option<Vec<usize>>> {
    let Some(list) = spec.map(str::trim).filter(|s| !s.is_empty() && *s != "all") else {
        return Ok(None);
    };
    let mut v = Vec::new();
    for part in list.split(',') {
        let i: usize = part.trim().parse().map_err(|_| {
            Error::Usage(format!(
                "--gpus {list:?}: {part:?} is not a GPU ordinal; give `all` or a list like 0,2,3"
            ))
        })?;
        if v.contains(&i) {
            return Err(Error::Usage(format!(
                "--gpus {list:?}: GPU {i} is named twice"
            )));
        }
        v.push(i);
    }
    Ok(Some(v))
}

/// How a worker names this process's device `i`: the i-th entry of this process's own
/// `CUDA_VISIBLE_DEVICES` when set (a Slurm task's, say), else `i`.
fn visible_as(parent: Option<&str>, i: usize) -> String {
    parent
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| v.split(',').nth(i).map(|s| s.trim().to_string()))
        .unwrap_or_else(|| i.to_string())
}

/// The evaluator for a session: the GPU one (which needs a GPU: `Error::NoGpu`
/// otherwise), or the scripted test double when `CUTESMITH_TEST_EVALUATOR` asks for it.
/// Nsight Compute is used when `ncu` is true and found; `device` pins its workers to one
/// GPU (a [`Gpu::visible`]).
pub fn evaluator(
    opts: &ToolchainOptions,
    seeds: u64,
    runs: u32,
    timeout_s: u64,
    ncu: bool,
    device: Option<String>,
) -> Result<Arc<dyn Evaluator>> {
    let ev = evaluator::from_env(GpuEvaluator {
        seeds,
        runs,
        timeout: Duration::from_secs(timeout_s),
        ncu: ncu
            .then(|| crate::toolchain::find_extra_tools(opts).ncu.map(|t| t.path))
            .flatten(),
        device,
    });
    // The evaluator that was chosen decides, not the variable's mere presence.
    if ev.name() == GPU_EVALUATOR {
        crate::eval::gpu::require_gpu()?;
    }
    Ok(Arc::from(ev))
}

/// The evaluators of a session on the GPU pool `gpus` names (`--gpus`; none: every
/// visible GPU): the session's own first, pinned to the pool's first GPU when the pool
/// pins (see [`pins`]), then one pinned to each other GPU, across which a batch is
/// evaluated. Without a GPU and without `gpus`, the one unpinned evaluator (which says
/// there is no GPU, or is the test double).
pub fn evaluators(
    opts: &ToolchainOptions,
    seeds: u64,
    runs: u32,
    timeout_s: u64,
    ncu: bool,
    gpus: Option<&str>,
) -> Result<Vec<Arc<dyn Evaluator>>> {
    let pool = match self::gpus(gpus) {
        Ok(p) => p,
        Err(_) if gpus.is_none() => Vec::new(),
        Err(e) => return Err(e),
    };
    let pinned = pins(gpus, &pool);
    let first = pool.first().filter(|_| pinned).map(|g| g.visible.clone());
    std::iter::once(first)
        .chain(pool.iter().skip(1).map(|g| Some(g.visible.clone())))
        .map(|device| evaluator(opts, seeds, runs, timeout_s, ncu, device))
        .collect()
}

/// True when `ev` is not the real GPU evaluator (every figure would come from a test
/// double: front ends say so loudly).
pub fn is_test_double(ev: &dyn Evaluator) -> bool {
    ev.name() != GPU_EVALUATOR
}

/// One provider of a session: the built-in one compiles its candidates up front (`tc`,
/// `cache`, `jobs`, `arch`); a replay resumes after the `skip` replies already used.
fn provider_for(
    spec: &ProviderSpec,
    w: &Workload,
    max_candidates: usize,
    (tc, cache, jobs, arch): (&Toolchain, &CompileCache, usize, &str),
    skip: usize,
) -> Result<Box<dyn Provider>> {
    Ok(match spec {
        ProviderSpec::Builtin => Box::new(BuiltinProvider::new(w, max_candidates).with_precompile(
            tc.clone(),
            cache.clone(),
            jobs,
            arch,
        )),
        ProviderSpec::Model { model } => Box::new(OpenAiProvider::new(model.clone())?),
        ProviderSpec::Replay { transcript } => {
            let mut r = ReplayProvider::load(transcript)?;
            r.skip(skip);
            Box::new(r)
        }
    })
}

/// The engine's parts for the session `spec` describes: its provider (a replay skipping
/// `replay_skip` replies), the built-in seed provider when asked for, and the rest.
fn parts_for(
    spec: &SessionSpec,
    w: &Workload,
    tc: Toolchain,
    evaluator: Arc<dyn Evaluator>,
    jobs: usize,
    replay_skip: usize,
    events: Arc<dyn EventSink>,
) -> Result<Parts> {
    let cache = CompileCache::default_location();
    let build = (&tc, &cache, jobs, spec.arch.as_str());
    let provider = provider_for(&spec.provider, w, spec.max_candidates, build, replay_skip)?;
    let seed = (spec.seed_from_builtin > 0 && spec.provider != ProviderSpec::Builtin)
        .then(|| provider_for(&ProviderSpec::Builtin, w, spec.seed_from_builtin, build, 0))
        .transpose()?;
    Ok(Parts {
        provider,
        seed,
        evaluator,
        toolchain: tc,
        cache,
        events,
    })
}

/// A new session for `workload` in its own directory under `runs_dir`. `events` makes
/// the session's event sinks, given its directory (where `events.jsonl` goes).
pub fn create(
    runs_dir: &Path,
    workload: &Workload,
    plan: Plan,
    tc: Toolchain,
    evaluator: Arc<dyn Evaluator>,
    jobs: usize,
    events: impl FnOnce(&Path) -> Result<Arc<dyn EventSink>>,
) -> Result<Engine> {
    let spec = SessionSpec {
        id: session::new_id(workload.name()),
        created: crate::clock::now_rfc3339(),
        workload: workload.name().to_string(),
        workload_source: workload.path().to_path_buf(),
        provider: plan.provider,
        evaluator: evaluator.name(),
        budgets: plan.budgets,
        arch: plan.arch,
        seed_from_builtin: plan.seed_from_builtin,
        seeds: plan.seeds,
        timing_runs: plan.timing_runs,
        timeout_s: plan.timeout_s,
        max_candidates: plan.max_candidates,
        sandboxed: !crate::sandbox::disabled(),
        reply_mode: plan.reply_mode,
        samples: plan.samples.max(1),
        population: plan.population,
        gpus: plan.gpus,
    };
    let dir = SessionDir::create(runs_dir, &spec.id)?;
    let events = events(&dir.root)?;
    let parts = parts_for(&spec, workload, tc, evaluator, jobs, 0, events)?;
    Engine::create(dir, spec, workload, parts)
}

/// An existing session, its provider rebuilt from `session.json` (a replay resumes after
/// the replies already turned into versions). `evaluator` makes the evaluator from the
/// session's seeds, timed runs and timeout; a session never mixes the GPU evaluator's
/// figures with a test double's.
pub fn open(
    root: &Path,
    tc: Toolchain,
    evaluators: impl FnOnce(&SessionSpec) -> Result<Vec<Arc<dyn Evaluator>>>,
    jobs: usize,
    events: impl FnOnce(&Path) -> Result<Arc<dyn EventSink>>,
) -> Result<Engine> {
    let dir = SessionDir::open(root)?;
    let spec = dir.load_spec()?;
    let state = dir.load_state()?;
    let workload = dir.workload(&spec)?;
    let mut evaluators = evaluators(&spec)?;
    if evaluators.is_empty() {
        return Err(Error::Usage(
            "internal: no evaluator for the session".into(),
        ));
    }
    let pool = evaluators.split_off(1);
    let evaluator = evaluators.remove(0);
    if evaluator.name() != spec.evaluator {
        return Err(Error::Usage(format!(
            "{} was run with the {} evaluator and would now resume with the {} one: one \
             session never mixes figures from both ({TEST_EVALUATOR_ENV} decides)",
            root.display(),
            spec.evaluator,
            evaluator.name()
        )));
    }
    let used = match spec.provider {
        ProviderSpec::Replay { .. } => transcript_replies(&dir, state.next_version),
        _ => 0,
    };
    let events = events(&dir.root)?;
    let parts = parts_for(&spec, &workload, tc, evaluator, jobs, used, events)?;
    Ok(Engine::open(&dir.root, parts)?.with_pool(pool))
}

/// Replies a session has already turned into versions (or spent on them): a replayed
/// session resumes after them. A reply for the version that was in flight when the
/// process died (`version >= next_version`) is played again.
fn transcript_replies(dir: &SessionDir, next_version: u32) -> usize {
    std::fs::read_to_string(dir.path("transcript.jsonl"))
        .map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| v.get("reply").is_some_and(|r| !r.is_null()))
                .filter(|v| {
                    v.get("version")
                        .and_then(|x| x.as_u64())
                        .is_some_and(|n| n < u64::from(next_version))
                })
                .count()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_lists_parse_and_map_through_the_parents_visible_devices() {
        assert_eq!(gpu_list(None).unwrap(), None);
        assert_eq!(gpu_list(Some("all")).unwrap(), None);
        assert_eq!(gpu_list(Some("0, 2,3")).unwrap(), Some(vec![0, 2, 3]));
        let e = gpu_list(Some("0,x")).unwrap_err().to_string();
        assert!(e.contains("\"x\" is not a GPU ordinal"), "{e}");
        let e = gpu_list(Some("1,1")).unwrap_err().to_string();
        assert!(e.contains("GPU 1 is named twice"), "{e}");
        assert_eq!(visible_as(None, 1), "1");
        assert_eq!(visible_as(Some(""), 1), "1");
        // A Slurm task given GPUs 4 and 6 sees them as 0 and 1; a worker pinned to its
        // device 1 must be shown GPU 6.
        assert_eq!(visible_as(Some("4,6"), 1), "6");
        assert_eq!(visible_as(Some("GPU-ab12,GPU-cd34"), 0), "GPU-ab12");
    }
}
