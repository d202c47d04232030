//! Suites of sessions: `cutesmith run SUITE` (and `cutesmith bench SUITE`, on top of the
//! same [`run_sessions`]): the workloads of a suite (`workloads/suites/*.toml`: workloads,
//! provider, budgets) run one after another as sessions, with a progress bar showing the
//! current workload, stage and best speedup, every event appended to one suite events
//! file, and a failed workload recorded and passed over. Exit 0 when every workload met
//! its goal, 1 when one missed it, 2 when one failed with an error.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use super::run::{self, RunArgs};
use super::{EXIT_ERROR, EXIT_OK};
use crate::agent::launch;
use crate::agent::session::{SessionDir, State};
use crate::config::Config;
use crate::error::Result;
use crate::events::{Event, EventSink, JsonlSink};
use crate::spec::suite::SuiteSpec;
use crate::toolchain::ToolchainOptions;

/// Shows the session's progress on the suite's bar.
struct ProgressSink {
    pb: ProgressBar,
    workload: String,
    best: Mutex<Option<f64>>,
}

impl EventSink for ProgressSink {
    fn emit(&self, e: &Event) {
        let best = |s: &Self| {
            s.best
                .lock()
                .ok()
                .and_then(|b| *b)
                .map(|x| format!(", best {x:.2}x vendor"))
                .unwrap_or_default()
        };
        match e {
            Event::StageStarted { stage, version } => self.pb.set_message(format!(
                "{}: {stage}{}{}",
                self.workload,
                version.map(|v| format!(" v{v}")).unwrap_or_default(),
                best(self)
            )),
            Event::Timed {
                median_us,
                vendor_us: Some(v),
                ..
            } => {
                if let Ok(mut b) = self.best.lock() {
                    let x = v / median_us;
                    if b.is_none_or(|old| x > old) {
                        *b = Some(x);
                    }
                }
            }
            Event::SessionStopped {
                reason,
                best_version,
                best_us,
            } => say(
                &self.pb,
                format!(
                    "{}: stopped ({reason}); best {}{}",
                    self.workload,
                    match (best_version, best_us) {
                        (Some(v), Some(t)) => format!("v{v} at {t:.2} us"),
                        _ => "none".into(),
                    },
                    best(self)
                ),
            ),
            _ => {}
        }
    }
}

/// Forwards to a shared sink (the suite's events file).
struct Shared(Arc<dyn EventSink>);
impl EventSink for Shared {
    fn emit(&self, e: &Event) {
        self.0.emit(e);
    }
}

/// One workload of a suite run: its session directory, exit code and final state, or
/// the error that stopped it, and the GPU of the pool it ran on (when pinned).
#[derive(Clone)]
pub struct SuiteRow {
    pub workload: String,
    pub result: std::result::Result<(PathBuf, i32, State), String>,
    pub gpu: Option<usize>,
}

/// Runs every workload of `suite` as a session, with a progress bar and one events file
/// for the suite; a failed workload is recorded and passed over. With a pool of several
/// GPUs (`--gpus`, default every visible one) one thread per GPU takes the next workload
/// in the suite's order and runs its session pinned to that GPU (its workers see only
/// it, so each candidate and its baselines are timed on one GPU, one evaluation per GPU
/// at a time), with a progress line per GPU; nvcc's parallel jobs are shared out among
/// them. `after_each` sees the rows finished so far, in the suite's order, after every
/// workload (a crash then loses at most the ones in flight). Returns the rows and the
/// events file.
pub fn run_sessions(
    opts: &ToolchainOptions,
    no_install: bool,
    config: &Config,
    args: &RunArgs,
    name: &str,
    suite: &SuiteSpec,
    after_each: &mut dyn FnMut(&[SuiteRow]) -> Result<()>,
) -> Result<(Vec<SuiteRow>, PathBuf)> {
    std::fs::create_dir_all(&args.runs_dir)
        .map_err(|e| crate::error::Error::io(&args.runs_dir, e))?;
    // The pool: pinned GPUs when there are several or --gpus names them, else whatever
    // the worker sees (one slot, unpinned).
    let pool = launch::gpus(args.gpus.as_deref())?;
    let slots: Vec<Option<launch::Gpu>> = if launch::pins(args.gpus.as_deref(), &pool) {
        pool.into_iter().map(Some).collect()
    } else {
        vec![None]
    };
    let stamp = crate::clock::now_rfc3339().replace([':', '-'], "");
    let events_path = args.runs_dir.join(format!("suite-{name}-{stamp}.jsonl"));
    let suite_events: Arc<dyn EventSink> = Arc::new(JsonlSink::open(&events_path)?);
    let mp = MultiProgress::new();
    let pb = mp.add(ProgressBar::new(suite.workloads.len() as u64));
    pb.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:20} {pos}/{len} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.enable_steady_tick(Duration::from_millis(500));
    let pool_text = match slots.as_slice() {
        [None] => String::new(),
        s => format!(
            " on {} GPU{} ({})",
            s.len(),
            if s.len() == 1 { "" } else { "s" },
            s.iter()
                .flatten()
                .map(|g| format!("{}: {}", g.ordinal, g.name))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    say(
        &pb,
        format!(
            "suite {name}: {} ({} workloads){pool_text}; events in {}",
            suite.description,
            suite.workloads.len(),
            events_path.display()
        ),
    );
    if let Some(other) = suite
        .provider
        .as_deref()
        .filter(|p| !matches!(*p, "builtin" | "model"))
    {
        say(
            &pb,
            format!("suite {name}: unknown provider {other:?}; using the default"),
        );
    }
    // One progress line per GPU when there are several; else the suite's bar.
    let bars: Vec<ProgressBar> = if slots.len() > 1 {
        slots
            .iter()
            .map(|g| {
                let b = mp.add(ProgressBar::new_spinner());
                b.set_style(
                    ProgressStyle::with_template("  {prefix} {wide_msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                b.set_prefix(
                    g.as_ref()
                        .map_or_else(String::new, |g| format!("GPU {}:", g.ordinal)),
                );
                b.enable_steady_tick(Duration::from_millis(500));
                b
            })
            .collect()
    } else {
        vec![pb.clone()]
    };
    let jobs = args
        .jobs
        .unwrap_or_else(crate::toolchain::compile::default_jobs);
    let jobs_each = (jobs / slots.len()).max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, SuiteRow)>();
    let mut done: Vec<Option<SuiteRow>> = (0..suite.workloads.len()).map(|_| None).collect();
    let mut failed_after_each: Option<crate::error::Error> = None;
    std::thread::scope(|scope| {
        for (slot, gpu) in slots.iter().enumerate() {
            let tx = tx.clone();
            let bar = bars[slot].clone();
            let (next, suite_events) = (&next, suite_events.clone());
            scope.spawn(move || {
                let rt = match run::runtime() {
                    Ok(rt) => rt,
                    Err(e) => {
                        say(&bar, format!("cannot start a runtime: {e}"));
                        return;
                    }
                };
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(w) = suite.workloads.get(i) else {
                        bar.set_message("done");
                        return;
                    };
                    let mut a = args_for(args, suite, w);
                    a.jobs = Some(jobs_each);
                    if let Some(g) = gpu {
                        a.gpus = Some(g.ordinal.to_string());
                    }
                    let extra: Vec<Box<dyn EventSink>> = vec![
                        Box::new(ProgressSink {
                            pb: bar.clone(),
                            workload: w.clone(),
                            best: Mutex::new(None),
                        }),
                        Box::new(Shared(suite_events.clone())),
                    ];
                    let result =
                        run::new_session(opts, no_install, config, &a, extra).and_then(|mut e| {
                            let root = e.dir.root.clone();
                            run::interruptible(&rt, &root, async move { e.run().await })??;
                            let dir = SessionDir::open(&root)?;
                            let state = dir.load_state()?;
                            Ok((root.clone(), run::exit_code(&dir, &state), state))
                        });
                    if let Err(e) = &result {
                        say(
                            &bar,
                            format!("{w}: ERROR {e} (going on with the next workload)"),
                        );
                    }
                    let row = SuiteRow {
                        workload: w.clone(),
                        result: result.map_err(|e| e.to_string()),
                        gpu: gpu.as_ref().map(|g| g.ordinal),
                    };
                    if tx.send((i, row)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        // Rows as they finish; after_each sees the finished ones in the suite's order.
        for (i, row) in rx {
            done[i] = Some(row);
            pb.inc(1);
            if failed_after_each.is_none() {
                let rows: Vec<SuiteRow> = done.iter().flatten().cloned().collect();
                if let Err(e) = after_each(&rows) {
                    failed_after_each = Some(e);
                }
            }
        }
    });
    for b in &bars {
        b.finish_and_clear();
    }
    pb.finish_and_clear();
    if let Some(e) = failed_after_each {
        return Err(e);
    }
    Ok((done.into_iter().flatten().collect(), events_path))
}

/// The arguments of one workload's session in a suite: the command line's, with the
/// suite's settings (provider, rounds, budgets, seeds, candidates) over them.
pub fn args_for(args: &RunArgs, suite: &SuiteSpec, w: &str) -> RunArgs {
    let mut a = args.clone();
    a.workload = w.to_string();
    a.view.quiet = true;
    if suite.provider.as_deref() == Some("builtin") {
        a.builtin = true;
    }
    if let Some(r) = suite.rounds {
        a.rounds = r;
    }
    if let Some(t) = suite.max_time_s {
        a.max_time = t;
    }
    if let Some(t) = suite.max_tokens {
        a.max_tokens = t;
    }
    if let Some(s) = suite.seeds {
        a.seeds = s;
    }
    if let Some(c) = suite.max_candidates {
        a.max_candidates = c;
    }
    a
}

/// The exit code of a suite: 0 when every workload met its goal, 1 when one missed it,
/// 2 when one failed with an error.
pub fn exit_code(rows: &[SuiteRow]) -> i32 {
    rows.iter()
        .map(|r| match &r.result {
            Ok((_, code, _)) => *code,
            Err(_) => EXIT_ERROR,
        })
        .fold(EXIT_OK, i32::max)
        .min(EXIT_ERROR)
}

/// `cutesmith run SUITE`.
pub fn cmd_run_suite(
    opts: &ToolchainOptions,
    no_install: bool,
    config: &Config,
    args: RunArgs,
    name: &str,
    suite: SuiteSpec,
) -> Result<i32> {
    let (rows, events) = run_sessions(opts, no_install, config, &args, name, &suite, &mut |_| {
        Ok(())
    })?;
    println!(
        "suite {name}:\n| workload | GPU | session | best | goal |\n| --- | --- | --- | --- | --- |"
    );
    for r in &rows {
        match &r.result {
            Ok((root, code, state)) => println!(
                "| {} | {} | {} | {} | {} |",
                r.workload,
                r.gpu.map_or_else(|| "-".to_string(), |g| g.to_string()),
                root.display(),
                state
                    .best
                    .map(|b| format!("v{b} {:.2} us", state.best_us.unwrap_or(f64::NAN)))
                    .unwrap_or_else(|| "none".into()),
                if *code == EXIT_OK { "met" } else { "NOT met" }
            ),
            Err(e) => println!(
                "| {} | {} | - | - | error: {e} |",
                r.workload,
                r.gpu.map_or_else(|| "-".to_string(), |g| g.to_string())
            ),
        }
    }
    let states: Vec<&crate::agent::session::State> = rows
        .iter()
        .filter_map(|r| r.result.as_ref().ok().map(|(_, _, s)| s))
        .collect();
    println!("cost: {}", crate::report::cost_totals(&states));
    println!("events: {}", events.display());
    Ok(exit_code(&rows))
}

/// A line above the progress bar, or on stderr when the bar is hidden (no terminal).
fn say(pb: &ProgressBar, line: String) {
    if pb.is_hidden() {
        eprintln!("{line}");
    } else {
        pb.println(line);
    }
}
