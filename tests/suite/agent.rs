//! The agent loop end to end, without a GPU: a whole session driven through the real
//! async-openai client against a scripted OpenAI-compatible server on 127.0.0.1
//! (wiremock), real nvcc compiles, and the scripted test double in place of the GPU for
//! validation and timing only. Then a session killed mid-run and finished by `resume`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cutesmith::agent::engine::{Engine, Parts};
use cutesmith::agent::evaluator::ScriptedEvaluator;
use cutesmith::agent::machine::{Budgets, Stage};
use cutesmith::agent::session::{ProviderSpec, ReplyMode, SessionDir, SessionSpec, State};
use cutesmith::config::ModelConfig;
use cutesmith::events::{self, Event, Fanout, JsonlSink};
use cutesmith::provider::openai::OpenAiProvider;
use cutesmith::spec::Workload;
use cutesmith::toolchain::cache::CompileCache;
use serde_json::{json, Value};
use wiremock::{Request, ResponseTemplate};

use super::common::{fixture, output_text, toolchain};
use super::mock_model::{self, cut, sse, sse_counted};

fn reply(change: &str, kernel: &str) -> String {
    format!(
        "Plan below.\n```strategy\nchange: {change}\nwhy: test\nexpected_gain: 1.1x\n```\n```cuda\n{kernel}```\n"
    )
}

/// The fixture kernel with test-double markers (and an optional extra line).
fn kernel(marker: &str, extra: &str) -> String {
    let base = std::fs::read_to_string(fixture("agent/relu_plain.cu")).unwrap();
    format!("// cutesmith-test: {marker}\n{extra}\n{base}")
}

fn bodies(reqs: &[Request]) -> Vec<Value> {
    reqs.iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

fn user_text(b: &Value) -> String {
    b["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The model settings for the mock server at `uri`.
fn mock_model_config(uri: &str, max_attempts: u32) -> ModelConfig {
    ModelConfig {
        base_url: format!("{uri}/v1"),
        model: "mock-model".into(),
        api_key_env: "CUTESMITH_TEST_MODEL_KEY".into(),
        temperature: None,
        max_tokens: None,
        reasoning_effort: None,
        price_prompt_per_mtok: None,
        price_completion_per_mtok: None,
        connect_timeout_s: Some(5),
        read_timeout_s: Some(10),
        max_attempts: Some(max_attempts),
    }
}

/// A model session on `w` with the scripted evaluator, `rounds` optimization rounds and no
/// roofline stop.
fn model_spec(id: &str, w: &Workload, model: &ModelConfig, rounds: u32) -> SessionSpec {
    SessionSpec {
        id: id.into(),
        created: "now".into(),
        workload: w.name().into(),
        workload_source: w.path().to_path_buf(),
        provider: ProviderSpec::Model {
            model: model.clone(),
        },
        evaluator: "scripted".into(),
        budgets: Budgets {
            rounds,
            patience: 5,
            roofline_target: 0.0,
            ..Budgets::default()
        },
        arch: "sm_90a".into(),
        seed_from_builtin: 0,
        seeds: 1,
        timing_runs: 20,
        timeout_s: 60,
        max_candidates: 4,
        sandboxed: true,
        reply_mode: ReplyMode::Auto,
        samples: 1,
        population: 0,
        gpus: None,
    }
}

/// Runs a model session on the relu fixture against the mock server at `uri` (the
/// scripted evaluator in place of the GPU); returns the runs directory, to keep it alive,
/// and the session's directory.
async fn run_mock_session(
    tc: &cutesmith::toolchain::Toolchain,
    uri: &str,
    id: &str,
    rounds: u32,
) -> (tempfile::TempDir, PathBuf) {
    run_mock_session_with(tc, uri, id, rounds, |_| {}).await
}

/// [`run_mock_session`] with the session's spec adjusted first.
async fn run_mock_session_with(
    tc: &cutesmith::toolchain::Toolchain,
    uri: &str,
    id: &str,
    rounds: u32,
    adjust: impl FnOnce(&mut SessionSpec),
) -> (tempfile::TempDir, PathBuf) {
    std::env::set_var("CUTESMITH_TEST_MODEL_KEY", "sk-test-secret");
    let model = mock_model_config(uri, 1);
    let runs = tempfile::tempdir().unwrap();
    let w = Workload::load(fixture("workloads/relu_bf16_small.toml")).unwrap();
    let mut spec = model_spec(id, &w, &model, rounds);
    adjust(&mut spec);
    let dir = SessionDir::create(runs.path(), &spec.id).unwrap();
    let root = dir.root.clone();
    let parts = Parts {
        provider: Box::new(OpenAiProvider::new(model).unwrap()),
        seed: None,
        evaluator: Arc::new(ScriptedEvaluator {
            delay: Duration::ZERO,
        }),
        toolchain: tc.clone(),
        cache: CompileCache::default_location(),
        events: Arc::new(Fanout(vec![])),
    };
    let mut engine = Engine::create(dir, spec, &w, parts).unwrap();
    engine.run().await.unwrap();
    (runs, root)
}

fn state_of(root: &Path) -> State {
    serde_json::from_str(&std::fs::read_to_string(root.join("state.json")).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_session_through_a_mock_openai_server() {
    let Some(tc) = toolchain() else { return };
    let no_code = "I would vectorize the loads.\n```strategy\nchange: vectorized loads\n```\n";
    let broken = reply(
        "first kernel",
        &kernel(
            "median_us=100",
            "static int broken = this_identifier_is_not_declared;",
        ),
    );
    let wrong = reply("fix the declaration", &kernel("wrong", "// v2"));
    let correct = reply("fix the indexing", &kernel("median_us=100", "// v3"));
    let faster = reply("more blocks per SM", &kernel("median_us=80", "// v4"));
    let slower = reply("unroll by 8", &kernel("median_us=90", "// v5"));
    let slower2 = reply("shared-memory staging", &kernel("median_us=95", "// v6"));
    let rate_limited = ResponseTemplate::new(429).set_body_json(json!({"error": {
        "message": "slow down", "type": "rate_limit_error", "param": null, "code": null}}));
    let script = vec![
        sse(no_code),  // 0 generate: no code -> repair request
        sse(&broken),  // 1 repair: v1 does not compile
        sse(&wrong),   // 2 debug (nvcc diagnostics): v2 validates wrong
        sse(&correct), // 3 debug (mismatch report): v3 correct, first
        rate_limited,  // 4 optimize: 429 ...
        sse(&faster),  // 5 ... then v4, faster: accepted
        cut(&slower),  // 6 optimize: the stream is cut ...
        sse(&slower),  // 7 ... retried: v5, slower: rejected
        sse(&slower2), // 8 optimize: v6, slower: rejected; 3 rounds done
    ];
    let server = mock_model::serve(script).await;

    std::env::set_var("CUTESMITH_TEST_MODEL_KEY", "sk-test-secret");
    let model = ModelConfig {
        temperature: Some(0.2),
        max_tokens: Some(8000),
        price_prompt_per_mtok: Some(1.0),
        price_completion_per_mtok: Some(4.0),
        ..mock_model_config(&server.uri(), 3)
    };
    let mut provider = OpenAiProvider::new(model.clone()).unwrap();
    provider.retry_base = Duration::from_millis(50);
    let runs = tempfile::tempdir().unwrap();
    let w = Workload::load(fixture("workloads/relu_bf16_small.toml")).unwrap();
    let spec = model_spec("mock-session", &w, &model, 3);
    let dir = SessionDir::create(runs.path(), &spec.id).unwrap();
    let root = dir.root.clone();
    let sink = JsonlSink::open(&root.join("events.jsonl")).unwrap();
    let parts = Parts {
        provider: Box::new(provider),
        seed: None,
        evaluator: Arc::new(ScriptedEvaluator {
            delay: Duration::ZERO,
        }),
        toolchain: tc,
        cache: CompileCache::default_location(),
        events: Arc::new(Fanout(vec![Box::new(sink)])),
    };
    let mut engine = Engine::create(dir, spec, &w, parts).unwrap();
    engine.run().await.unwrap();

    // What the agent sent.
    let reqs = server.received_requests().await.unwrap();
    let b = bodies(&reqs);
    assert_eq!(b.len(), 9, "requests: {}", b.len());
    for x in &b {
        assert_eq!(x["model"], "mock-model");
        assert_eq!(x["stream"], true);
        assert_eq!(x["messages"][0]["role"], "system");
        assert!(x["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("cutesmith_launch"));
    }
    for r in &reqs {
        assert_eq!(
            r.headers.get("authorization").unwrap().to_str().unwrap(),
            "Bearer sk-test-secret"
        );
    }
    // 1: the repair request carries the unusable reply and says what was missing.
    let msgs = b[1]["messages"].as_array().unwrap();
    assert_eq!(msgs[msgs.len() - 2]["role"], "assistant");
    assert_eq!(msgs[msgs.len() - 2]["content"], no_code);
    assert!(user_text(&b[1]).contains("could not be used"));
    // 2: the debug request carries nvcc's diagnostics for the undeclared identifier.
    let debug1 = user_text(&b[2]);
    assert!(debug1.contains("nvcc diagnostics"), "{debug1}");
    assert!(
        debug1.contains("this_identifier_is_not_declared"),
        "{debug1}"
    );
    assert!(debug1.contains("error"), "{debug1}");
    // 3: the next debug request carries the mismatch report.
    let debug2 = user_text(&b[3]);
    assert!(debug2.contains("mismatch"), "{debug2}");
    assert!(debug2.contains("TEST DOUBLE mismatch"), "{debug2}");
    assert!(
        !debug1.contains("Profile of"),
        "no profile before correctness is stable"
    );
    // 4/5: the 429 was retried with the same request; 6/7: so was the cut stream.
    assert_eq!(b[4], b[5]);
    assert_eq!(b[6], b[7]);
    // Profiles enter only once a version is correct.
    assert!(user_text(&b[4]).contains("Profile of v3"));
    // 8: the history says v5 was slower and rejected, v4 faster and accepted.
    let last = user_text(&b[8]);
    assert!(
        last.contains("- v5 [optimize] unroll by 8 -> slower by"),
        "{last}"
    );
    assert!(last.contains("rejected"), "{last}");
    assert!(
        last.contains("- v4 [optimize] more blocks per SM -> faster by 20.0%"),
        "{last}"
    );
    assert!(last.contains("Profile of v4"), "{last}");

    // What the session kept.
    let st = state_of(&root);
    assert_eq!(st.stage, Stage::Done);
    assert_eq!(st.best, Some(4));
    assert_eq!(st.best_us, Some(80.0));
    assert!(st
        .stop_reason
        .as_deref()
        .unwrap()
        .contains("3 optimization rounds"));
    let status: Vec<(u32, &str, bool)> = st
        .versions
        .iter()
        .map(|v| (v.n, v.status.as_str(), v.accepted))
        .collect();
    assert_eq!(
        status,
        vec![
            (1, "compile_failed", false),
            (2, "mismatch", false),
            (3, "correct", true),
            (4, "correct", true),
            (5, "correct", false),
            (6, "correct", false),
        ]
    );
    assert_eq!(st.spent.model_requests, 7);
    assert_eq!(st.spent.prompt_tokens, 700);
    assert!((st.spent.cost_usd - 7.0 * (100.0 + 50.0 * 4.0) / 1e6).abs() < 1e-9);
    for n in 1..=6 {
        let v = root.join(format!("versions/v{n:03}"));
        assert!(v.join("kernel.cu").is_file() && v.join("reply.md").is_file());
        assert!(v.join("compile.json").is_file() && v.join("compile.log").is_file());
        assert_eq!(v.join("evaluation.json").is_file(), n >= 2, "v{n}");
    }
    let log = std::fs::read_to_string(root.join("versions/v001/compile.log")).unwrap();
    assert!(log.contains("this_identifier_is_not_declared"));
    assert!(std::fs::read_to_string(root.join("best.cu"))
        .unwrap()
        .contains("median_us=80"));
    let transcript = std::fs::read_to_string(root.join("transcript.jsonl")).unwrap();
    assert_eq!(transcript.lines().count(), 7);
    let ev = events::read_jsonl(&root.join("events.jsonl")).unwrap();
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::VersionAccepted { version: 4, .. })));
    assert!(ev.iter().any(
        |e| matches!(e, Event::VersionRejected { version: 5, reason } if reason.contains("slower by"))
    ));
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::ModelRetry { reason, .. } if reason.contains("stream ended"))));
    // The key never reaches the session's files.
    for f in [
        "session.json",
        "state.json",
        "transcript.jsonl",
        "events.jsonl",
    ] {
        let t = std::fs::read_to_string(root.join(f)).unwrap();
        assert!(!t.contains("sk-test-secret"), "{f} holds the key");
    }
}

/// The replies of the resume test: a correct kernel, then three optimization rounds.
fn write_resume_transcript(dir: &Path) -> PathBuf {
    let mut t = String::new();
    for (change, us) in [
        ("first", 100),
        ("faster", 80),
        ("slower", 90),
        ("fastest", 70),
    ] {
        let text = reply(
            change,
            &kernel(&format!("median_us={us}"), &format!("// {change}")),
        );
        t.push_str(&format!("[[reply]]\ntext = '''\n{text}'''\n"));
    }
    let p = dir.join("resume.toml");
    std::fs::write(&p, t).unwrap();
    p
}

#[test]
fn a_killed_session_is_finished_by_resume_with_no_version_lost() {
    let Some(_tc) = toolchain() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let transcript = write_resume_transcript(tmp.path());
    let runs = tmp.path().join("runs");
    let exe = env!("CARGO_BIN_EXE_cutesmith");
    let cmd = |args: &[&str]| {
        let mut c = Command::new(exe);
        c.args(args)
            .env("CUTESMITH_TEST_EVALUATOR", "scripted")
            .env("CUTESMITH_TEST_EVALUATOR_DELAY_MS", "1500")
            .env("CUTESMITH_TUNING_DB", tmp.path().join("tuning.sqlite"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let mut child = cmd(&[
        "run",
        fixture("workloads/relu_bf16_small.toml").to_str().unwrap(),
        "--replay",
        transcript.to_str().unwrap(),
        "--runs-dir",
        runs.to_str().unwrap(),
        "--rounds",
        "3",
        "--roofline-target",
        "0",
    ])
    .spawn()
    .unwrap();
    // Wait until two versions are accepted, then kill -9 mid-session.
    let t0 = Instant::now();
    let root = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "the session never got going"
        );
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the session ended before it was killed: {status}");
        }
        let found = std::fs::read_dir(&runs)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path());
        if let Some(root) = found {
            let accepted = events::read_jsonl(&root.join("events.jsonl"))
                .map(|ev| {
                    ev.iter()
                        .filter(|e| matches!(e, Event::VersionAccepted { .. }))
                        .count()
                })
                .unwrap_or(0);
            if accepted >= 2 {
                break root;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let before = state_of(&root);
    assert_ne!(before.stage, Stage::Done, "killed too late to test resume");
    let kept: Vec<(u32, String)> = before
        .versions
        .iter()
        .map(|v| {
            let src = std::fs::read_to_string(root.join(format!("versions/v{:03}/kernel.cu", v.n)));
            (v.n, src.unwrap())
        })
        .collect();
    assert!(kept.len() >= 2);

    let out = cmd(&["resume", root.to_str().unwrap()]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "resume failed:\n{stdout}\n{stderr}"
    );
    assert!(stderr.contains("resumed"), "{stderr}");
    let after = state_of(&root);
    assert_eq!(after.stage, Stage::Done, "{stdout}\n{stderr}");
    let ns: Vec<u32> = after.versions.iter().map(|v| v.n).collect();
    assert_eq!(ns, vec![1, 2, 3, 4], "every version once, none lost");
    for (n, src) in kept {
        let now =
            std::fs::read_to_string(root.join(format!("versions/v{n:03}/kernel.cu"))).unwrap();
        assert_eq!(now, src, "v{n} changed across the kill");
    }
    for n in 1..=4 {
        assert!(root
            .join(format!("versions/v{n:03}/evaluation.json"))
            .is_file());
    }
    assert_eq!(after.best, Some(4));
    assert_eq!(after.best_us, Some(70.0));
    assert!(stdout.contains("| v4 (best) |"), "{stdout}");
    let sj = std::fs::read_to_string(root.join("session.json")).unwrap();
    assert!(
        sj.contains("scripted test double"),
        "the session says it used the test double"
    );
    // A test double's answers are not measurements: nothing reached the tuning database.
    assert!(!tmp.path().join("tuning.sqlite").exists());
}

/// `--seed-from-builtin`: the built-in provider writes the first version, the model then
/// optimizes from it, and its first request carries that version and its profile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_session_seeded_from_the_builtin_provider() {
    let Some(tc) = toolchain() else { return };
    let server = mock_model::serve(vec![sse(&reply(
        "model's first idea",
        &kernel("median_us=60", "// model"),
    ))])
    .await;
    let model = mock_model_config(&server.uri(), 2);
    let runs = tempfile::tempdir().unwrap();
    let w = Workload::load(fixture("workloads/relu_bf16_small.toml")).unwrap();
    let mut spec = model_spec("seeded", &w, &model, 1);
    spec.seed_from_builtin = 1;
    spec.max_candidates = 1;
    let dir = SessionDir::create(runs.path(), &spec.id).unwrap();
    let root = dir.root.clone();
    let parts = Parts {
        provider: Box::new(OpenAiProvider::new(model).unwrap()),
        seed: Some(Box::new(
            cutesmith::provider::builtin::BuiltinProvider::new(&w, 1),
        )),
        evaluator: Arc::new(ScriptedEvaluator {
            delay: Duration::ZERO,
        }),
        toolchain: tc,
        cache: CompileCache::default_location(),
        events: Arc::new(events::NullSink),
    };
    let mut engine = Engine::create(dir, spec, &w, parts).unwrap();
    engine.run().await.unwrap();
    let st = state_of(&root);
    let origins: Vec<&str> = st.versions.iter().map(|v| v.origin.as_str()).collect();
    assert_eq!(origins, vec!["builtin", "optimize"]);
    assert!(st.versions[0].change.starts_with("elementwise_activation"));
    assert_eq!(
        st.best,
        Some(2),
        "the model's version was faster (60 vs 100 us)"
    );
    let reqs = server.received_requests().await.unwrap();
    assert_eq!(reqs.len(), 1, "the seed version cost no model request");
    let b: Value = serde_json::from_slice(&reqs[0].body).unwrap();
    let user = user_text(&b);
    assert!(user.contains("Profile of v1"), "{user}");
    assert!(
        user.contains("cutesmith built-in strategy: elementwise_activation"),
        "{user}"
    );
}

/// A kill while a model request is in flight: `resume` asks again and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_killed_during_a_model_request_is_resumed() {
    let Some(_tc) = toolchain() else { return };
    let server = mock_model::serve(vec![
        sse(&reply("first", &kernel("median_us=100", "// first"))),
        // Never answered in time: the process is killed while waiting for it.
        sse(&reply("lost", &kernel("median_us=10", "// lost"))).set_delay(Duration::from_secs(60)),
        sse(&reply("faster", &kernel("median_us=80", "// faster"))),
    ])
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let base_url = format!("{}/v1", server.uri());
    let cmd = move |args: Vec<String>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cutesmith"));
        c.args(args)
            .current_dir(tmp_path_parent(&runs))
            .env("CUTESMITH_MODEL_BASE_URL", &base_url)
            .env("CUTESMITH_MODEL", "mock-model")
            .env("CUTESMITH_API_KEY_ENV", "CUTESMITH_KILL_TEST_KEY")
            .env("CUTESMITH_KILL_TEST_KEY", "k")
            .env("CUTESMITH_TEST_EVALUATOR", "scripted")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let runs2 = tmp.path().join("runs");
    let mut child = cmd(vec![
        "run".into(),
        fixture("workloads/relu_bf16_small.toml")
            .display()
            .to_string(),
        "--runs-dir".into(),
        runs2.display().to_string(),
        "--rounds".into(),
        "1".into(),
        "--roofline-target".into(),
        "0".into(),
    ])
    .spawn()
    .unwrap();
    let t0 = Instant::now();
    while server.received_requests().await.unwrap().len() < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "the second request never came"
        );
        if let Ok(Some(s)) = child.try_wait() {
            panic!("the session ended early: {s}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let root = std::fs::read_dir(&runs2)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let before = state_of(&root);
    assert_eq!(before.stage, Stage::Optimize);
    assert_eq!(
        before.next_version, 2,
        "the in-flight version was never written"
    );
    let out = tokio::task::spawn_blocking(move || {
        cmd(vec!["resume".into(), root.display().to_string()])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let root = std::fs::read_dir(&runs2)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let after = state_of(&root);
    assert_eq!(after.stage, Stage::Done, "{stderr}");
    let changes: Vec<&str> = after.versions.iter().map(|v| v.change.as_str()).collect();
    assert_eq!(changes, vec!["first", "faster"], "{stderr}");
    assert_eq!(after.best, Some(2));
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
    let transcript = std::fs::read_to_string(root.join("transcript.jsonl")).unwrap();
    assert_eq!(
        transcript.lines().count(),
        2,
        "the killed request left no exchange"
    );
}

/// `cutesmith run` on the small ReLU fixture, replaying `transcript`, sessions in `runs`.
fn replay_run(transcript: &Path, runs: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cutesmith"));
    c.args([
        "run",
        fixture("workloads/relu_bf16_small.toml").to_str().unwrap(),
    ])
    .arg("--replay")
    .arg(transcript)
    .arg("--runs-dir")
    .arg(runs);
    c
}

fn tmp_path_parent(p: &Path) -> PathBuf {
    p.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Ctrl-C during a long stage: cutesmith leaves at once (exit 130), says how to resume,
/// and the state names the stage that was cut.
#[test]
fn ctrl_c_stops_at_once_and_says_how_to_resume() {
    let Some(_tc) = toolchain() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let transcript = write_resume_transcript(tmp.path());
    let runs = tmp.path().join("runs");
    let child = replay_run(&transcript, &runs)
        .env("CUTESMITH_TEST_EVALUATOR", "scripted")
        .env("CUTESMITH_TEST_EVALUATOR_DELAY_MS", "30000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the (30 s) validate stage to start.
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "validate never started"
        );
        let started = std::fs::read_dir(&runs)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .and_then(|e| events::read_jsonl(&e.path().join("events.jsonl")).ok())
            .is_some_and(|ev| {
                ev.iter()
                    .any(|e| matches!(e, Event::StageStarted { stage, .. } if stage == "validate"))
            });
        if started {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let sent = Instant::now();
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "took {:?} to stop",
        sent.elapsed()
    );
    assert_eq!(out.status.code(), Some(130));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("continue with `cutesmith resume"),
        "{stderr}"
    );
    let root = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(state_of(&root).stage, Stage::Validate);
}

/// Edit replies: once a version is correct the optimize prompt shows the numbered source
/// and invites edits; an edit reply becomes the next version byte for byte; an edit whose
/// SEARCH lines are not in the file gets one repair request naming it, and the repaired
/// edits apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_replies_apply_exactly_and_a_broken_edit_is_named_in_the_repair() {
    let Some(tc) = toolchain() else { return };
    let v1 = kernel("median_us=100", "// v1");
    let edit_reply = |change: &str, pairs: &[(&str, &str)]| {
        let mut t = format!(
            "```strategy\nchange: {change}\nwhy: test\nexpected_gain: 1.2x\n```\n```edit\n"
        );
        for (search, replace) in pairs {
            t.push_str(&format!(
                "<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"
            ));
        }
        t.push_str("```\n");
        t
    };
    let faster = edit_reply(
        "faster marker",
        &[
            (
                "// cutesmith-test: median_us=100",
                "// cutesmith-test: median_us=80",
            ),
            ("// v1", "// v2\n// a second line"),
        ],
    );
    let broken = edit_reply("bad anchor", &[("// v7 is not here", "// nothing")]);
    // The second pair deletes a line: an empty REPLACE.
    let mut repaired = edit_reply(
        "faster again",
        &[(
            "// cutesmith-test: median_us=80",
            "// cutesmith-test: median_us=70",
        )],
    );
    repaired = repaired.replace(
        ">>>>>>> REPLACE\n```",
        ">>>>>>> REPLACE\n<<<<<<< SEARCH\n// a second line\n=======\n>>>>>>> REPLACE\n```",
    );
    let server = mock_model::serve(vec![
        sse(&reply("first", &v1)), // 0 generate: whole file, v1 correct
        sse(&faster),              // 1 optimize: edits -> v2
        sse(&broken),              // 2 optimize: an edit that does not apply ...
        sse(&repaired),            // 3 ... the repair: edits -> v3
    ])
    .await;
    let (_runs, root) = run_mock_session(&tc, &server.uri(), "edits", 2).await;

    let b = bodies(&server.received_requests().await.unwrap());
    assert_eq!(b.len(), 4);
    // The first generation asks for a whole file; the optimize prompt shows v1 numbered
    // and invites edits.
    assert!(!user_text(&b[0]).contains("<<<<<<< SEARCH"));
    let opt = user_text(&b[1]);
    assert!(
        opt.contains("<<<<<<< SEARCH") && opt.contains("numbered"),
        "{opt}"
    );
    assert!(
        opt.contains(" 1| // cutesmith-test: median_us=100"),
        "{opt}"
    );
    // The repair names the edit that did not apply.
    let repair = user_text(&b[3]);
    assert!(
        repair.contains("edit 1 does not apply") && repair.contains("`// v7 is not here`"),
        "{repair}"
    );

    let src =
        |n: u32| std::fs::read_to_string(root.join(format!("versions/v{n:03}/kernel.cu"))).unwrap();
    let v2 = v1
        .replace(
            "// cutesmith-test: median_us=100",
            "// cutesmith-test: median_us=80",
        )
        .replace("// v1\n", "// v2\n// a second line\n");
    assert_eq!(src(1), v1);
    assert_eq!(src(2), v2);
    let v3 = v2
        .replace(
            "// cutesmith-test: median_us=80",
            "// cutesmith-test: median_us=70",
        )
        .replace("// a second line\n", "");
    assert_eq!(src(3), v3);
    let st = state_of(&root);
    assert_eq!(st.best, Some(3));
    assert_eq!(st.best_us, Some(70.0));
}

/// The same improvement of the 700-line raw CuTe Hopper template (one more pipeline
/// stage), answered once as a whole file and once as an edit: the same v2 byte for byte,
/// and the edit reply costs a small fraction of the completion tokens (counted by the
/// mock server from the reply text, word and punctuation pieces).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_reply_costs_a_fraction_of_the_whole_file() {
    let Some(tc) = toolchain() else { return };
    let template = std::fs::read_to_string(
        super::common::root().join("cutlass-templates/gemm_sm90_tma_wgmma.cu"),
    )
    .unwrap();
    assert!(template.lines().count() >= 300);
    let v1 = format!("// cutesmith-test: median_us=100\n{template}");
    let stages = "#define CS_STAGES 4        // depth of the TMA -> WGMMA shared memory ring";
    let stages5 = "#define CS_STAGES 5        // depth of the TMA -> WGMMA shared memory ring";
    let v2 = v1
        .replace(
            "// cutesmith-test: median_us=100",
            "// cutesmith-test: median_us=80",
        )
        .replace(stages, stages5);
    let first = reply("first", &v1);
    let whole = reply("five stages", &v2);
    let edit = format!(
        "```strategy\nchange: five stages\nwhy: test\nexpected_gain: 1.1x\n```\n```edit\n<<<<<<< SEARCH\n// cutesmith-test: median_us=100\n=======\n// cutesmith-test: median_us=80\n>>>>>>> REPLACE\n<<<<<<< SEARCH\n{stages}\n=======\n{stages5}\n>>>>>>> REPLACE\n```\n"
    );
    let mut spent = Vec::new();
    for (name, second) in [("whole", &whole), ("edit", &edit)] {
        let server = mock_model::serve(vec![sse_counted(&first), sse_counted(second)]).await;
        let (_runs, root) = run_mock_session(&tc, &server.uri(), name, 1).await;
        let st = state_of(&root);
        assert_eq!(st.best, Some(2), "{name}: v2 compiled and was faster");
        let got = std::fs::read_to_string(root.join("versions/v002/kernel.cu")).unwrap();
        assert_eq!(got, v2, "{name}: v2 differs");
        // The optimize reply's completion tokens: the session's less the first reply's.
        let tokens = st.spent.completion_tokens - mock_model::token_estimate(&first);
        eprintln!(
            "{name} reply: {tokens} completion tokens ({} lines of kernel)",
            v2.lines().count()
        );
        spent.push(tokens);
    }
    assert!(
        spent[1] * 4 <= spent[0],
        "edit {} tokens, whole file {}",
        spent[1],
        spent[0]
    );
}

/// A model's typical CuTe mistake (the A fragment passed as the accumulator to `gemm`, made
/// in our own raw Hopper template) fails to compile; the debug request then carries the
/// `cute::gemm` overloads from the installed headers under their heading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_debug_prompt_quotes_the_cute_declarations_a_compile_error_points_at() {
    let Some(tc) = toolchain() else { return };
    let template = std::fs::read_to_string(
        super::common::root().join("cutlass-templates/gemm_sm90_tma_wgmma.cu"),
    )
    .unwrap();
    let call = "gemm(tiled_mma, tCrA(_,_,_,stage), tCrB(_,_,_,stage), tCrAcc);";
    assert_eq!(template.matches(call).count(), 1);
    let wrong = template.replace(
        call,
        "gemm(tiled_mma, tCrA(_,_,_,stage), tCrB(_,_,_,stage), tCrA(_,_,_,stage));",
    );
    let v1 = format!("// cutesmith-test: median_us=100\n{wrong}");
    let v2 = format!("// cutesmith-test: median_us=100\n{template}");
    let server = mock_model::serve(vec![
        sse(&reply("first", &v1)), // 0 generate: does not compile
        sse(&reply("fix", &v2)),   // 1 debug: the fix
        sse(&reply("same", &v2)),  // 2 optimize
    ])
    .await;
    let (_runs, root) = run_mock_session(&tc, &server.uri(), "headers", 1).await;
    let b = bodies(&server.received_requests().await.unwrap());
    assert_eq!(b.len(), 3);
    let debug = user_text(&b[1]);
    let version = tc.cutlass.version.clone();
    assert!(
        debug.contains(&format!(
            "From the CUTLASS {version} headers on this machine"
        )),
        "{debug}"
    );
    assert!(
        debug.contains("cute/algorithm/gemm.hpp:") && debug.contains("gemm(MMA_Atom<MMA>"),
        "{debug}"
    );
    // The first request, before any failure, carries none of it.
    assert!(!user_text(&b[0]).contains("headers on this machine"));
    assert_eq!(state_of(&root).best, Some(2));
}

/// The first and last `ts` of a session's events file (RFC 3339 to the second: they
/// compare as strings).
fn session_span(root: &Path) -> (String, String) {
    let text = std::fs::read_to_string(root.join("events.jsonl")).unwrap();
    let ts: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("ts").and_then(Value::as_str).map(str::to_string))
        .collect();
    (ts.first().unwrap().clone(), ts.last().unwrap().clone())
}

/// `run SUITE --gpus 0,1`: one thread per GPU takes the next workload, so two sessions
/// run at once, each pinned to its GPU; every workload finishes and the table says where
/// each ran.
#[test]
fn a_suite_spreads_its_workloads_over_the_gpu_pool() {
    let Some(_tc) = toolchain() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let wdir = tmp.path().join("workloads");
    std::fs::create_dir_all(wdir.join("suites")).unwrap();
    let spec = std::fs::read_to_string(fixture("workloads/relu_bf16_small.toml")).unwrap();
    // Named by their files.
    let spec: String = spec
        .lines()
        .filter(|l| !l.starts_with("name ="))
        .map(|l| format!("{l}\n"))
        .collect();
    let names = ["relu_a", "relu_b", "relu_c", "relu_d"];
    for n in names {
        std::fs::write(wdir.join(format!("{n}.toml")), &spec).unwrap();
    }
    std::fs::write(
        wdir.join("suites/pool.toml"),
        format!(
            "description = \"four small workloads\"\nworkloads = [{}]\n",
            names.map(|n| format!("\"{n}\"")).join(", ")
        ),
    )
    .unwrap();
    // One correct reply per session (the transcript is replayed from the start by each).
    let transcript = tmp.path().join("one.toml");
    std::fs::write(
        &transcript,
        format!(
            "[[reply]]\ntext = '''\n{}'''\n",
            reply("first", &kernel("median_us=100", ""))
        ),
    )
    .unwrap();
    let runs = tmp.path().join("runs");
    let out = Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .args(["run", "pool", "--workloads-dir"])
        .arg(&wdir)
        .arg("--replay")
        .arg(&transcript)
        .arg("--runs-dir")
        .arg(&runs)
        .args(["--gpus", "0,1", "--rounds", "1", "--no-profile"])
        .env("CUTESMITH_TEST_EVALUATOR", "scripted")
        .env("CUTESMITH_TEST_EVALUATOR_DELAY_MS", "3000")
        .env("CUTESMITH_TUNING_DB", "off")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("on 2 GPUs (0: test double, 1: test double)"),
        "{stderr}"
    );
    // Every workload has a row with its GPU; both GPUs were used.
    let mut by_gpu: Vec<(String, PathBuf)> = Vec::new();
    for n in names {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {n} |")))
            .unwrap_or_else(|| panic!("no row for {n} in\n{stdout}"));
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert!(cells[2] == "0" || cells[2] == "1", "{line}");
        by_gpu.push((cells[2].to_string(), PathBuf::from(cells[3])));
    }
    assert!(by_gpu.iter().any(|(g, _)| g == "0") && by_gpu.iter().any(|(g, _)| g == "1"));
    // Sessions on different GPUs overlapped in time.
    let overlapped = by_gpu.iter().any(|(g0, r0)| {
        by_gpu.iter().any(|(g1, r1)| {
            let ((s0, e0), (s1, e1)) = (session_span(r0), session_span(r1));
            g0 != g1 && s0 < e1 && s1 < e0
        })
    });
    assert!(overlapped, "no two sessions ran at once:\n{stdout}");
}

/// `--samples 2`: one optimization round asks the same question twice, both replies become
/// versions, both are evaluated, and the faster correct one is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_two_evaluates_both_replies_and_keeps_the_faster() {
    let Some(tc) = toolchain() else { return };
    let server = mock_model::serve(vec![
        sse(&reply("first", &kernel("median_us=100", "// v1"))),
        sse(&reply("sample one", &kernel("median_us=70", "// v2"))),
        sse(&reply("sample two", &kernel("median_us=90", "// v3"))),
    ])
    .await;
    let (_runs, root) =
        run_mock_session_with(&tc, &server.uri(), "samples", 1, |s| s.samples = 2).await;
    let b = bodies(&server.received_requests().await.unwrap());
    assert_eq!(
        b.len(),
        3,
        "one generate request, then two samples of one round"
    );
    // Both samples answer the same optimize request.
    assert_eq!(user_text(&b[1]), user_text(&b[2]));
    let st = state_of(&root);
    assert_eq!(st.versions.len(), 3);
    for v in &st.versions {
        assert_eq!(v.status, "correct", "v{} was not evaluated: {v:?}", v.n);
    }
    assert_eq!(st.versions[1].parent, Some(1));
    assert_eq!(st.versions[2].parent, Some(1));
    // The faster came first: kept, and the slower second sample is rejected without
    // counting the round as one without gain.
    assert_eq!(st.best, Some(2));
    assert_eq!(st.best_us, Some(70.0));
    assert_eq!(st.spent.rounds, 1, "two samples are one round");
    assert_eq!(st.spent.rounds_without_gain, 0, "the round had a gain");
    assert!(st.pending.is_empty() && !st.batch);
}

/// `--population 3`: the first request asks for three strategies only; each is then asked
/// for as its own implementation; all three are evaluated (the failing one is not
/// debugged once a correct one exists), and the session goes on from the fastest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn population_three_asks_for_strategies_implements_each_and_continues_from_the_best() {
    let Some(tc) = toolchain() else { return };
    let strategies = [
        ("one CTA per row, vectorized", "memory-bound"),
        ("a persistent grid with four vectors in flight", "latency"),
        ("warp-per-chunk with shuffles", "fewer barriers"),
    ];
    let mut pop = String::from("Three strategies:\n");
    for (change, why) in strategies {
        pop.push_str(&format!(
            "```strategy\nchange: {change}\nwhy: {why}\nexpected_gain: 1.1x\n```\n"
        ));
    }
    let server = mock_model::serve(vec![
        sse(&pop),
        sse(&reply(strategies[0].0, &kernel("median_us=100", "// A"))),
        sse(&reply(strategies[1].0, &kernel("median_us=60", "// B"))),
        sse(&reply(strategies[2].0, &kernel("wrong", "// C"))),
        sse(&reply("tune B", &kernel("median_us=50", "// B2"))),
    ])
    .await;
    let (_runs, root) =
        run_mock_session_with(&tc, &server.uri(), "population", 1, |s| s.population = 3).await;
    let b = bodies(&server.received_requests().await.unwrap());
    assert_eq!(b.len(), 5, "population, three members, one optimize round");
    let first = user_text(&b[0]);
    assert!(
        first.contains("Do not write code yet") && first.contains("propose 3 distinct"),
        "{first}"
    );
    for (i, (change, _)) in strategies.iter().enumerate() {
        let t = user_text(&b[i + 1]);
        assert!(
            t.contains(&format!("Implement this strategy ({} of the 3", i + 1))
                && t.contains(&format!("change: {change}")),
            "member {i}: {t}"
        );
    }
    // The optimize round starts from B (the fastest correct member), not from C (wrong).
    let opt = user_text(&b[4]);
    assert!(
        opt.contains("median_us=60") && opt.contains("// B"),
        "{opt}"
    );
    let st = state_of(&root);
    let status: Vec<&str> = st.versions.iter().map(|v| v.status.as_str()).collect();
    assert_eq!(
        status[..3],
        ["correct", "correct", "mismatch"],
        "{status:?}"
    );
    assert_eq!(st.versions[3].parent, Some(2));
    assert_eq!(st.best, Some(4));
    assert_eq!(st.best_us, Some(50.0));
    assert!(st.population_asked);
    assert_eq!(st.spent.debug_attempts, 0, "no member was debugged");
}

/// Seconds since midnight of an event's `ts` (RFC 3339, to the second).
fn ts_seconds(v: &Value) -> i64 {
    let t = v.get("ts").and_then(Value::as_str).unwrap();
    let hms: Vec<i64> = t[11..19].split(':').map(|x| x.parse().unwrap()).collect();
    hms[0] * 3600 + hms[1] * 60 + hms[2]
}

/// `run W --gpus 0,1 --samples 2`: the two samples of a round are compiled together and
/// evaluated on both GPUs at once (3 s each under the test double: about 3 s, not 6),
/// and the faster is kept.
#[test]
fn the_samples_of_a_round_are_evaluated_across_the_gpu_pool_at_once() {
    let Some(_tc) = toolchain() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut t = String::new();
    for (change, us) in [("first", 100), ("sample one", 90), ("sample two", 70)] {
        let text = reply(
            change,
            &kernel(&format!("median_us={us}"), &format!("// {change}")),
        );
        t.push_str(&format!("[[reply]]\ntext = '''\n{text}'''\n"));
    }
    let transcript = tmp.path().join("t.toml");
    std::fs::write(&transcript, t).unwrap();
    let relu = fixture("workloads/relu_bf16_small.toml");
    let (_runs, root, _) = scripted_run_delayed(
        &[
            "run",
            relu.to_str().unwrap(),
            "--replay",
            transcript.to_str().unwrap(),
            "--gpus",
            "0,1",
            "--samples",
            "2",
            "--rounds",
            "1",
            "--no-profile",
            "--roofline-target",
            "0",
            "-q",
        ],
        3000,
    );
    let events: Vec<Value> = std::fs::read_to_string(root.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let note = events
        .iter()
        .find(|e| {
            e.get("text").and_then(Value::as_str).is_some_and(|t| {
                t.contains("batch v2, v3: compiled together, evaluated on 2 GPUs at once")
            })
        })
        .unwrap_or_else(|| panic!("no batch note in {events:?}"));
    let v3_validated = events
        .iter()
        .find(|e| {
            e.get("event").and_then(Value::as_str) == Some("stage_finished")
                && e.get("stage").and_then(Value::as_str) == Some("validate")
                && e.get("version").and_then(Value::as_u64) == Some(3)
        })
        .unwrap_or_else(|| panic!("v3 was not validated: {events:?}"));
    let took = ts_seconds(v3_validated) - ts_seconds(note);
    assert!(
        (0..=5).contains(&took),
        "two 3 s evaluations on two GPUs took {took} s"
    );
    let st = state_of(&root);
    assert_eq!(st.best, Some(3));
    assert_eq!(st.versions.len(), 3);
}

/// `cutesmith ARGS --runs-dir <tmp>/runs` under the scripted evaluator (no tuning
/// database): the temp dir (kept alive), the one session's directory and what it printed.
fn scripted_run(args: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    scripted_run_delayed(args, 0)
}

/// [`scripted_run`] with every evaluation taking `delay_ms` more.
fn scripted_run_delayed(args: &[&str], delay_ms: u32) -> (tempfile::TempDir, PathBuf, String) {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let out = Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .args(args)
        .arg("--runs-dir")
        .arg(&runs)
        .env("CUTESMITH_TEST_EVALUATOR", "scripted")
        .env("CUTESMITH_TEST_EVALUATOR_DELAY_MS", delay_ms.to_string())
        .env("CUTESMITH_TUNING_DB", "off")
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{text}");
    let root = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap();
    (tmp, root, text)
}

/// One optimization round of the built-in provider (three candidates at most) on the ReLU
/// fixture under the test double, with `flags`.
fn builtin_round(flags: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    let relu = fixture("workloads/relu_bf16_small.toml");
    let mut args = vec![
        "run",
        relu.to_str().unwrap(),
        "--builtin",
        "--rounds",
        "1",
        "--max-candidates",
        "3",
        "--roofline-target",
        "0",
        "--no-profile",
        "-q",
    ];
    args.extend_from_slice(flags);
    scripted_run(&args)
}

/// `--samples 2` with the built-in provider: a round's two samples are two different
/// candidates (a batch's own strategies count as tried).
#[test]
fn builtin_samples_of_a_round_are_distinct_candidates() {
    let Some(_tc) = toolchain() else { return };
    let (_tmp, root, _) = builtin_round(&["--samples", "2"]);
    let st = state_of(&root);
    let changes: Vec<&str> = st.versions.iter().map(|v| v.change.as_str()).collect();
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert!(
        changes[0] != changes[1] && changes[1] != changes[2] && changes[0] != changes[2],
        "{changes:?}"
    );
}

/// The built-in provider on a pool of two GPUs: each round offers two candidates (one per
/// GPU), evaluated at once, without --samples.
#[test]
fn builtin_candidates_spread_over_the_pool_by_default() {
    let Some(_tc) = toolchain() else { return };
    let (_tmp, root, _) = builtin_round(&["--gpus", "0,1"]);
    // The pool is part of the session: `resume` evaluates on it again.
    let spec: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("session.json")).unwrap()).unwrap();
    assert_eq!(spec["gpus"], "0,1");
    let st = state_of(&root);
    assert_eq!(st.versions.len(), 3, "{:?}", st.versions);
    let events = std::fs::read_to_string(root.join("events.jsonl")).unwrap();
    assert!(
        events.contains("batch v2, v3: compiled together, evaluated on 2 GPUs at once"),
        "{events}"
    );
}
