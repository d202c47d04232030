//! `cutesmith import PROBLEM.py [--out workloads/NAME.toml] [--force] [--train]`: a PyTorch
//! problem file (KernelBench convention) becomes a workload spec ([`crate::pytorch::import`]),
//! its Model traced in eval mode, or in training mode with `--train`.

use std::path::{Path, PathBuf};

use super::EXIT_OK;
use crate::error::{Error, Result};
use crate::pytorch::{import, python};

pub fn cmd_import(problem: &Path, out: Option<PathBuf>, force: bool, train: bool) -> Result<i32> {
    let out = out.unwrap_or_else(|| {
        PathBuf::from("workloads").join(format!("{}.toml", import::workload_name(problem)))
    });
    if out.extension().is_none_or(|e| e != "toml") {
        return Err(Error::Usage(format!(
            "--out {}: a workload spec is a .toml file (its stem is the workload's name)",
            out.display()
        )));
    }
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !crate::spec::is_workload_name(&stem) {
        return Err(Error::Usage(format!(
            "--out {}: the file stem \"{stem}\" is the workload's name, which takes lowercase letters, digits, '_' and '-' only (e.g. --out {})",
            out.display(),
            out.with_file_name(format!("{}.toml", import::workload_name(&out))).display()
        )));
    }
    if out.exists() && !force {
        return Err(Error::Usage(format!(
            "{} already exists; pass --force to replace it, or --out another file",
            out.display()
        )));
    }
    let py = python::python();
    let imported = import::import(problem, &py, train)?;
    let (text, workload) = import::render(&imported, problem, &out)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    std::fs::write(&out, &text).map_err(|e| Error::io(&out, e))?;
    println!("wrote {}", out.display());
    println!(
        "  {}: {} {}, headline {}, {} shapes",
        workload.name(),
        workload.dtype(),
        workload.family(),
        workload.headline(),
        workload.shapes().len()
    );
    println!("  ops: {}", imported.ops.join(" -> "));
    // The format accepts some workloads no built-in template computes yet: say so now,
    // with the first template's reason, rather than at the first `run`.
    let space = crate::strategy::space(&workload);
    if let Some(why) = space
        .iter()
        .all(|(_, v)| v.is_err())
        .then(|| {
            space
                .iter()
                .find_map(|(s, v)| v.as_ref().err().map(|e| format!("{}: {e}", s.template)))
        })
        .flatten()
    {
        println!(
            "note: no built-in template computes this workload yet ({why}); `cutesmith run` needs a model provider for it ([model] in cutesmith.toml), and `cutesmith strategies {}` lists every template's reason",
            out.display()
        );
    }
    // (export --torch does not take gemm_reduce, gemm_norm, [[before]] ops or a cross
    // entropy yet: their kernel and C ABI, then.)
    let export = if matches!(
        workload.family(),
        crate::spec::Family::GemmReduce | crate::spec::Family::GemmNorm
    ) || !workload.before_chain().is_identity()
        || workload.params().reduce.reads_targets()
    {
        "cutesmith export runs/<id> --out DIR"
    } else {
        "cutesmith export runs/<id> --torch DIR"
    };
    println!(
        "next: cutesmith run {} (on a GPU machine), then {export}",
        out.display()
    );
    Ok(EXIT_OK)
}
