//! Suites of sessions: `cutesmith run SUITE` (and `cutesmith bench SUITE`, on top of the
//! same [`run_sessions`]): the workloads of a suite (`workloads/suites/*.toml`: workloads,
//! provider, budgets) run one after another as sessions, with a progress bar showing the
//! current workload, stage and best speedup, every event appended to one suite events
//! file, and a failed workload recorded and passed over. Exit 0 when every workload met
//! its goal, 1 when one missed it, 2 when one failed with an error.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::run::{self, RunArgs};
use super::{EXIT_ERROR, EXIT_OK};
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
/// the error that stopped it.
pub struct SuiteRow {
    pub workload: String,
    pub result: std::result::Result<(PathBuf, i32, State), String>,
}

/// Runs every workload of `suite` as a session, one after another, with a progress bar
/// and one events file for the suite; a failed workload is recorded and passed over.
/// `after_each` sees the rows so far after every workload (a crash then loses at most
/// the one in flight). Returns the rows and the events file.
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
    let stamp = crate::clock::now_rfc3339().replace([':', '-'], "");
    let events_path = args.runs_dir.join(format!("suite-{name}-{stamp}.jsonl"));
    let suite_events: Arc<dyn EventSink> = Arc::new(JsonlSink::open(&events_path)?);
    let pb = ProgressBar::new(suite.workloads.len() as u64);
    pb.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:20} {pos}/{len} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.enable_steady_tick(Duration::from_millis(500));
    say(
        &pb,
        format!(
            "suite {name}: {} ({} workloads); events in {}",
            suite.description,
            suite.workloads.len(),
            events_path.display()
        ),
    );
    let rt = run::runtime()?;
    let mut rows = Vec::new();
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
    for w in &suite.workloads {
        let a = args_for(args, suite, w);
        let extra: Vec<Box<dyn EventSink>> = vec![
            Box::new(ProgressSink {
                pb: pb.clone(),
                workload: w.clone(),
                best: Mutex::new(None),
            }),
            Box::new(Shared(suite_events.clone())),
        ];
        let result = run::new_session(opts, no_install, config, &a, extra).and_then(|mut e| {
            let root = e.dir.root.clone();
            run::interruptible(&rt, &root, async move { e.run().await })??;
            let dir = SessionDir::open(&root)?;
            let state = dir.load_state()?;
            Ok((root.clone(), run::exit_code(&dir, &state), state))
        });
        if let Err(e) = &result {
            say(
                &pb,
                format!("{w}: ERROR {e} (going on with the next workload)"),
            );
        }
        rows.push(SuiteRow {
            workload: w.clone(),
            result: result.map_err(|e| e.to_string()),
        });
        after_each(&rows)?;
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok((rows, events_path))
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
    println!("suite {name}:\n| workload | session | best | goal |\n| --- | --- | --- | --- |");
    for r in &rows {
        match &r.result {
            Ok((root, code, state)) => println!(
                "| {} | {} | {} | {} |",
                r.workload,
                root.display(),
                state
                    .best
                    .map(|b| format!("v{b} {:.2} us", state.best_us.unwrap_or(f64::NAN)))
                    .unwrap_or_else(|| "none".into()),
                if *code == EXIT_OK { "met" } else { "NOT met" }
            ),
            Err(e) => println!("| {} | - | - | error: {e} |", r.workload),
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
