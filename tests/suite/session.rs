//! `cutesmith session` driven through its stdin, with a scripted model server, a scripted
//! `$EDITOR` and the scripted test double for the GPU: hint, edit, rollback, export, and
//! the session files afterwards.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use cutesmith::agent::machine::Stage;
use cutesmith::agent::session::State;
use cutesmith::events::{self, Event};
use serde_json::Value;

use super::common::{fixture, toolchain};
use super::mock_model::{self, sse};

fn reply(change: &str, median: u32) -> String {
    let base = std::fs::read_to_string(fixture("agent/relu_plain.cu")).unwrap();
    format!(
        "```strategy\nchange: {change}\nwhy: test\nexpected_gain: 1.1x\n```\n```cuda\n// cutesmith-test: median_us={median}\n{base}```\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_session_with_hint_edit_rollback_and_export() {
    let Some(_tc) = toolchain() else { return };
    let server = mock_model::serve(vec![
        sse(&reply("a plain grid-stride kernel", 100)),
        sse(&reply("more blocks", 90)),
    ])
    .await;
    let tmp = tempfile::tempdir().unwrap();
    // The scripted editor: makes the kernel "faster" for the test double.
    let editor = tmp.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/median_us=[0-9]*/median_us=50/' \"$1\"\necho '// tuned by hand' >> \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    let runs = tmp.path().join("runs");
    let export = tmp.path().join("export");
    let commands = format!(
        "step\nstep\nstep\nhint try 16-byte vectors\nstep\nstep\nstep\nedit\nstep\nstep\nhistory\ndiff 2 3\nrollback 1\nexport {}\nbogus\nquit\n",
        export.display()
    );
    let workload = fixture("workloads/relu_bf16_small.toml");
    let base_url = format!("{}/v1", server.uri());
    let out = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cutesmith"))
            .args(["session", workload.to_str().unwrap(), "--runs-dir"])
            .arg(&runs)
            .current_dir(runs.parent().unwrap())
            .env("CUTESMITH_MODEL_BASE_URL", base_url)
            .env("CUTESMITH_MODEL", "mock-model")
            .env("CUTESMITH_API_KEY_ENV", "CUTESMITH_SESSION_TEST_KEY")
            .env("CUTESMITH_SESSION_TEST_KEY", "k")
            .env("CUTESMITH_TEST_EVALUATOR", "scripted")
            .env("EDITOR", &editor)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(commands.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");

    // The hint reached the model with the next request.
    let reqs = server.received_requests().await.unwrap();
    assert_eq!(reqs.len(), 2, "{stdout}\n{stderr}");
    let second: Value = serde_json::from_slice(&reqs[1].body).unwrap();
    assert!(second.to_string().contains("try 16-byte vectors"));
    let first: Value = serde_json::from_slice(&reqs[0].body).unwrap();
    assert!(!first.to_string().contains("try 16-byte vectors"));

    // The answers on stdout.
    assert!(stdout.contains("v3 recorded as a human edit"), "{stdout}");
    assert!(
        stdout.contains("+// cutesmith-test: median_us=50"),
        "{stdout}"
    );
    assert!(
        stdout.contains("-// cutesmith-test: median_us=90"),
        "{stdout}"
    );
    assert!(stdout.contains("| v3 (best) | human |"), "{stdout}");
    assert!(stdout.contains("v1 is the best again"), "{stdout}");
    assert!(
        stdout.contains("error: unknown command \"bogus\""),
        "{stdout}"
    );
    assert!(stdout.contains("saved:"), "{stdout}");

    // The session files.
    let root = std::fs::read_dir(tmp.path().join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let st: State =
        serde_json::from_str(&std::fs::read_to_string(root.join("state.json")).unwrap()).unwrap();
    let origins: Vec<&str> = st.versions.iter().map(|v| v.origin.as_str()).collect();
    assert_eq!(origins, vec!["generate", "optimize", "human"]);
    assert_eq!(st.versions[2].parent, Some(2));
    assert!(st.versions[2].accepted, "the edit was faster");
    assert_eq!(st.best, Some(1), "rolled back");
    assert_eq!(st.stage, Stage::Optimize);
    let edited = std::fs::read_to_string(root.join("versions/v003/kernel.cu")).unwrap();
    assert!(edited.ends_with("// tuned by hand\n"));
    let ev = events::read_jsonl(&root.join("events.jsonl")).unwrap();
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::Reverted { to_version: 1, .. })));

    // The export: v1 (the best after the rollback), its header, a README.
    let cu = std::fs::read_to_string(export.join("relu_bf16_small.cu")).unwrap();
    assert!(cu.starts_with("// Exported by cutesmith"));
    assert!(cu.contains("median_us=100") && cu.contains("cutesmith_launch"));
    assert!(export.join("cutesmith_abi.h").is_file());
    let readme = std::fs::read_to_string(export.join("README.md")).unwrap();
    assert!(readme.contains("nvcc") && readme.contains("cutesmith_launch(&p, stream)"));
}
