//! The `cutesmith` binary as a user runs it: exit codes, what it prints, and the errors
//! that say what to do.

use std::process::{Command, Output};

use super::common::{fixture, line_of, root, toolchain};

fn cutesmith(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn doctor_reports_the_toolchain_with_versions() {
    if toolchain().is_none() {
        return;
    }
    let o = cutesmith(&["doctor"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("nvcc") && t.contains("13.0"), "{t}");
    assert!(t.contains("CUTLASS") && t.contains("4.2.0"), "{t}");
    assert!(t.contains("GPU"), "{t}");
    assert!(t.contains("model"), "{t}");
    // The tuning database and the Slurm client: where and what, or why not.
    assert!(
        t.lines()
            .any(|l| l.starts_with("tuning database ")
                && (l.contains(".sqlite") || l.contains("off"))),
        "{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.starts_with("Slurm ") && (l.contains("slurm") || l.contains("not found"))),
        "{t}"
    );
    let json = cutesmith(&["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(v["toolchain"]["Ok"]["nvcc"]["version"]
        .as_str()
        .unwrap()
        .starts_with("13.0"));
}

#[test]
fn missing_toolchain_names_the_fix() {
    let o = Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .args(["compile", "--no-install", "--nvcc", "/nonexistent/nvcc"])
        .arg(root().join("cutlass-templates/gemm_sm90_tma_wgmma.cu"))
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("cutesmith setup"), "{t}");
    assert!(t.contains("/nonexistent/nvcc"), "{t}");
}

#[test]
fn compile_failure_exits_1_and_points_at_the_line() {
    if toolchain().is_none() {
        return;
    }
    let path = fixture("kernels/simple_error.cu");
    let o = cutesmith(&["compile", path.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    let line = line_of(&path, "// BROKEN:");
    assert!(
        t.contains(&format!("fix here: simple_error.cu:{line}")),
        "{t}"
    );
    assert!(t.contains("full log:"), "{t}");
}

#[test]
fn compile_prints_resources_and_sass_then_hits_the_cache() {
    if toolchain().is_none() {
        return;
    }
    let gemm = "cutlass-templates/gemm_sm90_tma_wgmma.cu";
    let first = cutesmith(&["compile", gemm]);
    let t = text(&first);
    assert_eq!(first.status.code(), Some(0), "{t}");
    assert!(t.contains("regs"), "{t}");
    assert!(t.contains("HGMMA"), "{t}");
    let start = std::time::Instant::now();
    let second = cutesmith(&["compile", gemm]);
    let t2 = text(&second);
    assert_eq!(second.status.code(), Some(0), "{t2}");
    assert!(t2.contains("cache hit"), "{t2}");
    assert!(start.elapsed().as_secs_f64() < 1.0, "{:?}", start.elapsed());
}

/// How many `.toml` files `dir` holds.
fn toml_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "toml"))
        .count()
}

#[test]
fn workloads_lists_every_spec() {
    let o = cutesmith(&["workloads"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let specs = toml_files(&root().join("workloads"));
    assert!(specs >= 20, "only {specs} specs");
    assert!(t.contains(&format!("{specs} workloads")), "{t}");
    assert!(t.contains("gemm_bf16_4096"), "{t}");
}

/// Every test fixture loads: the compile and GPU tests read them, and a fixture the rules
/// refuse would fail only there.
#[test]
fn workloads_lists_every_test_fixture() {
    let dir = root().join("tests/fixtures/workloads");
    let o = cutesmith(&["workloads", "--dir", dir.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let specs = toml_files(&dir);
    assert!(specs >= 10, "only {specs} fixtures");
    assert!(t.contains(&format!("{specs} workloads")), "{t}");
}

#[test]
fn a_malformed_workload_names_file_field_and_allowed_values() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.toml"),
        "description = \"x\"\nfamily = \"gemm\"\ndtype = \"bf17\"\n[[shapes]]\nm = 1\nn = 1\nk = 1\n",
    )
    .unwrap();
    let o = cutesmith(&["workloads", "--dir", dir.path().to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("bad.toml"), "{t}");
    assert!(t.contains("dtype"), "{t}");
    assert!(t.contains("bf16"), "{t}");
}

#[test]
fn a_bad_host_memory_limit_is_refused_naming_the_flag_or_the_file() {
    let o = cutesmith(&["--host-memory", "lots", "workloads"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("--host-memory: \"lots\" is not a size"), "{t}");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cutesmith.toml");
    let with_config = |body: &str| {
        std::fs::write(&cfg, body).unwrap();
        Command::new(env!("CARGO_BIN_EXE_cutesmith"))
            .arg("--config")
            .arg(&cfg)
            .args(["workloads"])
            .current_dir(root())
            .output()
            .unwrap()
    };
    let o = with_config("[limits]\nhost_memory = \"12X\"\n");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("[limits] host_memory"), "{t}");
    assert!(t.contains("cutesmith.toml"), "{t}");

    let o = with_config("[limits]\nhost_memory = \"12G\"\n");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// `cutesmith tuning` against a database of its own: import adds rows once, show names
/// each shape's best strategy beside the vendor's time, export writes them back, and a
/// bad line is refused with the file and line named and nothing imported.
#[test]
fn tuning_database_imports_shows_and_exports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("t.sqlite");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cutesmith"))
            .args(args)
            .env("CUTESMITH_TUNING_DB", &db)
            .output()
            .expect("run cutesmith")
    };
    let row = |strategy: &str, outcome: &str, us: &str| {
        format!(
            r#"{{"at":1,"gpu":"NVIDIA H200","toolkit":"13.0.88","workload":"gemm_bf16_rr","class":"gemm|bf16>bf16|rowrowrow|none","m":4096,"n":4096,"k":4096,"batch":1,"strategy":"{strategy}","provider":"builtin","outcome":"{outcome}","median_us":{us},"vendor":"cublas","vendor_us":175.0}}"#
        )
    };
    let file = dir.path().join("rows.jsonl");
    std::fs::write(
        &file,
        format!(
            "{}\n{}\n{}\n",
            row("gemm_sm90_cutlass3_ws TILE_N=256", "correct", "178.0"),
            row("gemm_sm90_cutlass3_ws TILE_N=128", "correct", "190.5"),
            row("gemm_sm90_tma_wgmma", "mismatch", "null")
        ),
    )
    .expect("write rows");
    let f = file.to_str().expect("utf-8 path");
    let o = run(&["tuning", "import", f]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("3 rows read, 3 added"), "{}", text(&o));
    let o = run(&["tuning", "import", f]);
    assert!(text(&o).contains("0 added"), "{}", text(&o));

    let o = run(&["tuning", "show"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("3 rows"), "{t}");
    assert!(
        t.contains("gemm_bf16_rr 4096x4096x4096: 3 evaluated; best gemm_sm90_cutlass3_ws TILE_N=256 at 178.00 us, cublas 175.00 us (0.98x)"),
        "{t}"
    );

    let out = dir.path().join("out.jsonl");
    let o = run(&["tuning", "export", out.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(&out)
            .expect("export")
            .lines()
            .count(),
        3
    );

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        format!("{}\n{{\"at\": \"x\"}}\n", row("s", "correct", "1.0")),
    )
    .expect("write");
    let o = run(&["tuning", "import", bad.to_str().expect("utf-8 path")]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("bad.jsonl line 2"), "{t}");
    let o = run(&["tuning", "show"]);
    assert!(text(&o).contains("3 rows"), "{}", text(&o));

    // A bench report whose date is not a day (past February's end) is refused, naming
    // the file and the field, and nothing is imported.
    let smoke = root().join("bench/smoke.json");
    let mut report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(smoke).expect("bench/smoke.json"))
            .expect("json");
    report["date"] = serde_json::Value::from("2026-02-31");
    let dated = dir.path().join("report.json");
    std::fs::write(&dated, report.to_string()).expect("write");
    let o = run(&["tuning", "import", dated.to_str().expect("utf-8 path")]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("report.json") && t.contains("`date` is \"2026-02-31\""),
        "{t}"
    );
    let o = run(&["tuning", "show"]);
    assert!(text(&o).contains("3 rows"), "{}", text(&o));
}

/// `run SUITE --slurm` against stand-ins for sbatch, squeue and sacct that run the array's
/// tasks here, one after the other: the finished workload's session is in the shared runs
/// directory and marked done, the failed task is reported with the command that resubmits
/// it alone, and a resubmitted task of a finished workload does nothing.
#[test]
fn a_suite_runs_as_a_slurm_array_and_a_failed_task_can_be_resubmitted_alone() {
    let Some(_tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let ends = dir.path().join("ends");
    let stubs = [
        (
            "sbatch",
            format!(
                "#!/bin/bash\nscript=\"${{@: -1}}\"\nlast=$(sed -n 's/^#SBATCH --array=0-//p' \"$script\")\nfor k in $(seq 0 \"$last\"); do SLURM_ARRAY_TASK_ID=$k bash \"$script\" > {d}/task$k.log 2>&1; echo \"$k|$?\" >> {e}; done\necho '4242;local'\n",
                d = dir.path().display(),
                e = ends.display()
            ),
        ),
        ("squeue", "#!/bin/bash\nexit 0\n".to_string()),
        (
            "sacct",
            format!(
                "#!/bin/bash\nwhile IFS='|' read -r k rc; do s=COMPLETED; [ \"$rc\" = 0 ] || s=FAILED; echo \"4242_$k|$s|$rc:0\"; done < {}\n",
                ends.display()
            ),
        ),
    ];
    for (name, text) in &stubs {
        let p = bin.join(name);
        std::fs::write(&p, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let suite = dir.path().join("pair.toml");
    std::fs::write(
        &suite,
        "description = \"one workload that runs, one that does not exist\"\nworkloads = [\"relu_bf16_small\", \"no_such_workload\"]\nprovider = \"builtin\"\nmax_candidates = 1\nrounds = 1\nseeds = 1\n",
    )
    .unwrap();
    let runs = dir.path().join("runs");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .args(["run", suite.to_str().unwrap(), "--slurm", "--workloads-dir"])
        .arg(fixture("workloads"))
        .arg("--runs-dir")
        .arg(&runs)
        .current_dir(root())
        .env("PATH", path)
        .env("CUTESMITH_TEST_EVALUATOR", "scripted")
        .env("CUTESMITH_TUNING_DB", dir.path().join("tuning.sqlite"))
        .env("CUTESMITH_SLURM_POLL_MS", "10")
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("submitted job array 4242 (2 tasks)"), "{t}");
    let row = t
        .lines()
        .find(|l| l.starts_with("| relu_bf16_small | 0 | COMPLETED (exit 0:0) |"))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(
        row.contains(&runs.display().to_string()) && row.contains("| v1 "),
        "{row}"
    );
    assert!(
        t.contains("| no_such_workload | 1 | FAILED (exit 2:0) | - | - | - |"),
        "{t}"
    );
    let script = runs.join("slurm/pair.sbatch");
    assert!(
        t.contains(&format!(
            "resubmit them alone with: sbatch --array=1 {}",
            script.display()
        )),
        "{t}"
    );
    assert!(runs.join("slurm/done/relu_bf16_small").exists());
    assert!(!runs.join("slurm/done/no_such_workload").exists());
    // Resubmitting the finished task does nothing.
    let again = Command::new("bash")
        .arg(&script)
        .env("SLURM_ARRAY_TASK_ID", "0")
        .output()
        .unwrap();
    assert!(again.status.success());
    assert!(
        text(&again).contains("relu_bf16_small: finished earlier"),
        "{}",
        text(&again)
    );
}
