//! `cutesmith run SUITE`: the workloads of a suite (`workloads/suites/*.toml`: workloads,
//! provider, budgets) run one after another as sessions, with a progress bar showing the
//! current workload, stage and best speedup, every event appended to one suite events
//! file, and a failed workload recorded and passed over. Exit 0 when every workload met
//! its goal, 1 when one missed it, 2 when one failed with an error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::events::{Event, EventSink, JsonlSink};
use crate::cli::bench::SuiteSpec;
use crate::cli::{EXIT_ERROR, EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::config::Config;
use crate::error::Result;
use crate::cli::run::{self, RunArgs};
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

pub fn run_suite(
    opts: &ToolchainOptions,
    no_install: bool,
    config: &Config,
    args: RunArgs,
    name: &str,
    suite: SuiteSpec,
) -> Result<i32> {
    std::fs::create_dir_all(&args.runs_dir).map_err(|e| crate::Error::io(&args.runs_dir, e))?;
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
    let mut worst = EXIT_OK;
    for w in &suite.workloads {
        let mut a = args.clone();
        a.workload = w.clone();
        a.view.quiet = true;
        match suite.provider.as_deref() {
            Some("builtin") => a.builtin = true,
            Some("model") | None => {}
            Some(other) => {
                say(
                    &pb,
                    format!("suite {name}: unknown provider {other:?}; using the default"),
                );
            }
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
        let extra: Vec<Box<dyn EventSink>> = vec![
            Box::new(ProgressSink {
                pb: pb.clone(),
                workload: w.clone(),
                best: Mutex::new(None),
            }),
            Box::new(Shared(suite_events.clone())),
        ];
        let result =
            run::new_session_with(opts, no_install, config, &a, extra).and_then(|mut e| {
                let root = e.dir.root.clone();
                run::interruptible(&rt, &root, async move { e.run().await })??;
                let dir = crate::agent::session::SessionDir::open(&root)?;
                let state = dir.load_state()?;
                Ok((root, run::exit_code(&dir, &state), state))
            });
        match result {
            Ok((root, code, state)) => {
                worst = worst.max(code);
                rows.push(format!(
                    "| {w} | {} | {} | {} |",
                    root.display(),
                    state
                        .best
                        .map(|b| format!("v{b} {:.2} us", state.best_us.unwrap_or(f64::NAN)))
                        .unwrap_or_else(|| "none".into()),
                    if code == EXIT_OK { "met" } else { "NOT met" }
                ));
            }
            Err(e) => {
                worst = EXIT_ERROR;
                say(
                    &pb,
                    format!("{w}: ERROR {e} (going on with the next workload)"),
                );
                rows.push(format!("| {w} | - | - | error: {e} |"));
            }
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    println!("suite {name}:\n| workload | session | best | goal |\n| --- | --- | --- | --- |");
    for r in rows {
        println!("{r}");
    }
    println!("events: {}", events_path.display());
    Ok(match worst {
        EXIT_OK => EXIT_OK,
        EXIT_GOAL_NOT_MET => EXIT_GOAL_NOT_MET,
        _ => EXIT_ERROR,
    })
}

/// A line above the progress bar, or on stderr when the bar is hidden (no terminal).
fn say(pb: &ProgressBar, line: String) {
    if pb.is_hidden() {
        eprintln!("{line}");
    } else {
        pb.println(line);
    }
}
