//! `cutesmith session W` (or `cutesmith session runs/<id>`): one kernel refined by hand
//! and by the loop together, over plain stdin/stdout so it can be scripted and tested.
//! Events (stages, streamed model text, outcomes) go to stderr as they land; command
//! answers go to stdout. The state is saved after every step, so `quit` (or EOF, or a
//! kill) loses nothing.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use crate::agent::engine::Engine;
use crate::agent::machine::Stage;
use crate::cli::run::{self, RunArgs};
use crate::cli::EXIT_OK;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::toolchain::ToolchainOptions;

const HELP: &str = "commands:
  step              run one stage (generate, compile, validate, debug or optimize)
  run N             run until N more versions are proposed (or the loop stops)
  hint TEXT         add a hint to the next prompt
  edit              open the current kernel in $EDITOR; the edit becomes a new version
  show [N]          print version N (default: the current one)
  diff A B          unified diff of versions A and B
  history           the versions, their outcomes and speedups
  profile [N]       the profile of version N (default: the best): roofline, ncu, guidance
  rollback N        make correct version N the best and optimize from it
  export DIR        write the best kernel, its header and a README to DIR
  help              this list
  quit              save and leave (the session resumes with `cutesmith session runs/<id>`)";

/// `cutesmith session`.
pub fn cmd_session(
    opts: &ToolchainOptions,
    no_install: bool,
    config: &Config,
    args: RunArgs,
) -> Result<i32> {
    let target = args
        .resume
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.workload));
    let mut engine = if args.resume.is_some() || target.join("session.json").is_file() {
        run::open_session(opts, no_install, &target, &args.view)?
    } else {
        run::new_session(opts, no_install, config, &args, Vec::new())?
    };
    let rt = run::runtime()?;
    let root = engine.dir.root.clone();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    let _ = writeln!(
        out,
        "session {} on {}: {}\n{HELP}",
        engine.dir.root.display(),
        engine.workload.name(),
        status(&engine)
    );
    loop {
        let _ = write!(out, "cutesmith> ");
        let _ = out.flush();
        let mut line = String::new();
        if stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| Error::io("stdin", e))?
            == 0
        {
            break;
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (cmd, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.trim();
        let answer = match cmd {
            "quit" | "exit" | "q" => break,
            "help" | "?" => Ok(HELP.to_string()),
            // Stages run through run::interruptible: Ctrl-C ends them at once, kills
            // their nvcc/worker processes and leaves the saved state to resume.
            "step" => {
                let (e, r) = run::interruptible(&rt, &root, async move {
                    let r = step(&mut engine).await;
                    (engine, r)
                })?;
                engine = e;
                r
            }
            "run" => match rest.parse::<u32>() {
                Ok(n) => {
                    let (e, r) = run::interruptible(&rt, &root, async move {
                        let r = run_versions(&mut engine, n).await;
                        (engine, r)
                    })?;
                    engine = e;
                    r
                }
                Err(_) => Err(Error::Usage("run N: N is a number of versions".into())),
            },
            "hint" if !rest.is_empty() => engine.set_hint(rest).map(|_| "hint saved".into()),
            "edit" => edit(&mut engine),
            "show" => show(&engine, rest),
            "diff" => diff(&engine, rest),
            "history" => Ok(run::summary(&engine.dir, &engine.state)),
            "profile" => version_arg(&engine, rest, engine.state.best)
                .map(|n| format!("v{n}:\n{}", engine.profile_text(n))),
            "rollback" => version_arg(&engine, rest, None).and_then(|n| {
                engine.rollback(n)?;
                Ok(format!(
                    "v{n} is the best again; the next step optimizes from it"
                ))
            }),
            "export" if !rest.is_empty() => engine.export(Path::new(rest)).map(|files| {
                files
                    .iter()
                    .map(|f| format!("wrote {}", f.display()))
                    .collect::<Vec<_>>()
                    .join("\n")
            }),
            _ => Err(Error::Usage(format!(
                "unknown command {line:?}; `help` lists them"
            ))),
        };
        match answer {
            Ok(text) => {
                let _ = writeln!(out, "{text}");
            }
            Err(e @ Error::Usage(_)) => {
                let _ = writeln!(out, "error: {e}");
            }
            Err(e) => {
                let _ = writeln!(out, "error: {e}");
                if matches!(e, Error::Model(_) | Error::NoGpu(_) | Error::Resource(_)) {
                    let _ = writeln!(out, "(the session is saved; fix the cause and go on)");
                }
            }
        }
    }
    let _ = writeln!(
        out,
        "saved: {} ({}); resume with `cutesmith session {}`",
        engine.dir.root.display(),
        status(&engine),
        engine.dir.root.display()
    );
    Ok(EXIT_OK)
}

fn status(e: &Engine) -> String {
    format!(
        "next stage {}, {} versions, best {}",
        e.state.stage.name(),
        e.state.versions.len(),
        match (e.state.best, e.state.best_us) {
            (Some(b), Some(t)) => format!("v{b} at {t:.2} us"),
            (Some(b), None) => format!("v{b}"),
            _ => "none yet".into(),
        }
    )
}

async fn step(e: &mut Engine) -> Result<String> {
    if e.state.stage == Stage::Done {
        return Ok(format!(
            "the loop stopped ({}); `run N` allows N more rounds, `edit` or `rollback N` go on by hand",
            e.state.stop_reason.clone().unwrap_or_default()
        ));
    }
    e.step().await?;
    Ok(status(e))
}

async fn run_versions(e: &mut Engine, n: u32) -> Result<String> {
    e.allow_rounds(n)?;
    let target = e.state.next_version + n;
    while e.state.stage != Stage::Done {
        // Finish the version in flight before counting it.
        let in_flight = matches!(e.state.stage, Stage::Compile | Stage::Validate);
        if e.state.next_version >= target && !in_flight {
            break;
        }
        e.step().await?;
    }
    Ok(status(e))
}

fn version_arg(e: &Engine, arg: &str, default: Option<u32>) -> Result<u32> {
    let n = if arg.is_empty() {
        default
    } else {
        arg.trim_start_matches('v').parse::<u32>().ok()
    };
    let n = n.ok_or_else(|| Error::Usage("name a version, e.g. 3 or v3".into()))?;
    if e.state.version(n).is_none() {
        return Err(Error::Usage(format!("there is no v{n}")));
    }
    Ok(n)
}

fn show(e: &Engine, arg: &str) -> Result<String> {
    let n = version_arg(e, arg, e.state.current.or(e.state.best))?;
    let v = e.state.version(n).cloned();
    let src = e.dir.version_source(n)?;
    Ok(format!(
        "v{n} [{}] {} ({})\n{src}",
        v.as_ref().map(|v| v.origin.as_str()).unwrap_or(""),
        v.as_ref().map(|v| v.change.as_str()).unwrap_or(""),
        v.as_ref().map(|v| v.status.as_str()).unwrap_or("")
    ))
}

fn diff(e: &Engine, args: &str) -> Result<String> {
    let mut it = args.split_whitespace();
    let (Some(a), Some(b)) = (it.next(), it.next()) else {
        return Err(Error::Usage("diff A B: two version numbers".into()));
    };
    let (a, b) = (version_arg(e, a, None)?, version_arg(e, b, None)?);
    let (sa, sb) = (e.dir.version_source(a)?, e.dir.version_source(b)?);
    Ok(similar::TextDiff::from_lines(&sa, &sb)
        .unified_diff()
        .header(&format!("v{a}/kernel.cu"), &format!("v{b}/kernel.cu"))
        .to_string())
}

/// Opens the current kernel (or the best) in `$EDITOR` (else `$VISUAL`, else `vi`); a
/// changed file becomes a new, human version that goes to the compile stage.
fn edit(e: &mut Engine) -> Result<String> {
    let base = e.state.current.or(e.state.best);
    let source = match base {
        Some(n) => e.dir.version_source(n)?,
        None => return Err(Error::Usage("no version to edit yet: `step` first".into())),
    };
    let tmp = tempfile::Builder::new()
        .prefix("cutesmith-edit-")
        .suffix(".cu")
        .tempfile()
        .map_err(|x| Error::io("temp file", x))?;
    std::fs::write(tmp.path(), &source).map_err(|x| Error::io(tmp.path(), x))?;
    let editor = std::env::var("EDITOR")
        .or_else(|_| std::env::var("VISUAL"))
        .unwrap_or_else(|_| "vi".into());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("editor")
        .arg(tmp.path())
        .status()
        .map_err(|x| Error::Spawn {
            program: editor.clone(),
            source: x,
        })?;
    if !status.success() {
        return Err(Error::Usage(format!(
            "{editor} exited with {status}: edit discarded"
        )));
    }
    let edited = std::fs::read_to_string(tmp.path()).map_err(|x| Error::io(tmp.path(), x))?;
    if edited == source {
        return Ok("no change: nothing recorded".into());
    }
    let n = e.human_version(&edited, base)?;
    Ok(format!("v{n} recorded as a human edit; `step` compiles it"))
}
