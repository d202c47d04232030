//! `cutesmith report` over a recorded run directory (two sessions recorded on an
//! H100, tests/fixtures/runs/), then the HTML rendered by a real browser (headless
//! Chromium) into a screenshot.

use std::process::Command;

use super::common::fixture;
use crate::require_tool;

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

#[test]
fn a_report_of_recorded_runs_renders_in_a_headless_browser() {
    let out = tempfile::tempdir().unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .args(["report", fixture("runs").to_str().unwrap(), "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(md.contains(
        "| act_silu_bf16 | act_silu_bf16-20261122-062719-9469 | NVIDIA H100 80GB HBM3 | v4 | 415.90 | 685.63 | 1.65 | 86 | 90% of copy: NOT met |"
    ), "{md}");
    assert!(
        md.contains("| gemm_bf16_skinny |") && md.contains("1.00x cublas: met"),
        "{md}"
    );
    assert!(
        md.contains("| v2 | debug | fix the CuTe pointer wrapper"),
        "{md}"
    );
    // What the sessions cost (built-in provider sessions: calls, no tokens), each and in all.
    assert!(md.contains("## Cost"), "{md}");
    assert!(
        md.contains(
            "| act_silu_bf16 | act_silu_bf16-20261122-062719-9469 | 4 | 0 | 0 | 0.0000 | 79 | 0 |"
        ),
        "{md}"
    );
    assert!(md.contains("In all, 2 sessions: 8 model calls, 0 prompt + 0 completion tokens, $0.0000, 92 s wall, 0 s on the GPU; 0 tokens per session with a correct kernel (2), 2.7 model calls per accepted version (3)."), "{md}");
    for svg in ["speedup.svg", "roofline.svg", "progress.svg"] {
        let s = std::fs::read_to_string(out.path().join(svg)).unwrap();
        assert!(s.starts_with("<svg") && s.contains("<rect"), "{svg}");
        assert!(md.contains(&format!("]({svg})")));
    }
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 3, "the charts are inline");
    assert!(!html.contains("src=\"http"), "self-contained");
    assert!(html.contains("gemm_skinny_splitk BLOCK_N=64 FUSED_REDUCE=0 PDL=1 SPLIT_K=4"));

    let Some(browser) = chromium() else {
        require_tool("chromium (Debian package `chromium`)", false);
        return;
    };
    let shot = out.path().join("report.png");
    let s = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1100,1500",
        ])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!(
            "file://{}",
            out.path().join("report.html").display()
        ))
        .output()
        .unwrap();
    assert!(
        shot.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&s.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let (w, h) = (
        u32::from_be_bytes([png[16], png[17], png[18], png[19]]),
        u32::from_be_bytes([png[20], png[21], png[22], png[23]]),
    );
    assert_eq!((w, h), (1100, 1500));
    // A blank page compresses to a few KB; tables and three charts do not.
    assert!(png.len() > 40_000, "screenshot only {} bytes", png.len());
    if let Ok(keep) = std::env::var("CUTESMITH_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

#[test]
fn export_writes_a_standalone_kernel_that_compiles() {
    let out = tempfile::tempdir().unwrap();
    let session = fixture("runs/act_silu_bf16-20261122-062719-9469");
    let r = Command::new(env!("CARGO_BIN_EXE_cutesmith"))
        .args(["export", session.to_str().unwrap(), "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let cu = std::fs::read_to_string(out.path().join("act_silu_bf16.cu")).unwrap();
    assert!(cu.starts_with(
        "// Exported by cutesmith from session act_silu_bf16-20261122-062719-9469 (version v4)."
    ));
    assert!(cu.contains("silu_flat") && cu.contains("cutesmith_launch"));
    let readme = std::fs::read_to_string(out.path().join("README.md")).unwrap();
    assert!(
        readme.contains("415.90 us") && readme.contains("685.63 us"),
        "{readme}"
    );
    // The exported kernel compiles (nvcc, sm_90a).
    let Some(tc) = super::common::toolchain() else {
        return;
    };
    let req = cutesmith::toolchain::compile::CompileRequest::from_file(
        &out.path().join("act_silu_bf16.cu"),
        Default::default(),
    )
    .unwrap();
    let o = cutesmith::toolchain::compile::compile(
        &tc,
        &cutesmith::toolchain::cache::CompileCache::default_location(),
        &req,
    )
    .unwrap();
    assert!(o.ok(), "{}", o.condensed);
}
