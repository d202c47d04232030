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
    let py = python::python();
    // Whether a built-in template computes a spec: the split into stages prefers stages
    // that have one.
    let probe = out.with_file_name("cutesmith_stage_probe.toml");
    let builtin = |spec: &crate::spec::WorkloadSpec| {
        spec.to_toml()
            .ok()
            .and_then(|text| crate::spec::Workload::parse(&probe, &text).ok())
            .is_some_and(|w| crate::strategy::space(&w).iter().any(|(_, v)| v.is_ok()))
    };
    let imported = import::import(problem, &py, train, &builtin)?;
    let dir = out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf);
    if imported.stages.len() == 1 {
        if out.exists() && !force {
            return Err(Error::Usage(format!(
                "{} already exists; pass --force to replace it, or --out another file",
                out.display()
            )));
        }
        let (text, workload) = import::render(&imported, 0, &[stem], problem, &out)?;
        write(dir.as_deref(), &out, &text)?;
        println!("wrote {}", out.display());
        summary(&workload, &out, &imported.stages[0].ops);
        let export = export_hint(&workload);
        println!(
            "next: cutesmith run {} (on a GPU machine), then {export}",
            out.display()
        );
        return Ok(EXIT_OK);
    }
    // Stages: `<stem>_s1.toml`, ... beside `out`, and a suite of them. Stages with the same
    // spec (a deep MLP's hidden layers) are one workload, named for the first of them.
    let n = imported.stages.len();
    let key = |k: usize| {
        let mut spec = imported.stages[k].spec.clone();
        spec.description.clear();
        spec.to_toml().unwrap_or_default()
    };
    let keys: Vec<String> = (0..n).map(key).collect();
    let first: Vec<usize> = (0..n)
        .map(|k| (0..k).find(|&j| keys[j] == keys[k]).unwrap_or(k))
        .collect();
    let names: Vec<String> = (0..n)
        .map(|k| format!("{stem}_s{}", first[k] + 1))
        .collect();
    let unique: Vec<usize> = (0..n).filter(|&k| first[k] == k).collect();
    let paths: Vec<PathBuf> = names
        .iter()
        .map(|nm| out.with_file_name(format!("{nm}.toml")))
        .collect();
    let suite_dir = dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("suites");
    let suite_path = suite_dir.join(format!("{stem}.toml"));
    if !force {
        if let Some(p) = unique
            .iter()
            .map(|&k| &paths[k])
            .chain([&suite_path])
            .find(|p| p.exists())
        {
            return Err(Error::Usage(format!(
                "{} already exists (the Model runs as {n} stages: {}, and the suite {}); pass \
                 --force to replace them, or --out another file",
                p.display(),
                unique
                    .iter()
                    .map(|&k| paths[k].display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                suite_path.display()
            )));
        }
    }
    // The stages each workload runs as (1-based), where more than one.
    let runs_as =
        |k: usize| -> Vec<usize> { (0..n).filter(|&j| first[j] == k).map(|j| j + 1).collect() };
    // Every stage renders and loads before anything is written.
    let rendered = unique
        .iter()
        .map(|&k| {
            let (mut text, w) = import::render(&imported, k, &names, problem, &paths[k])?;
            let also = runs_as(k);
            if also.len() > 1 {
                let line = format!(
                    "# The same workload runs as stages {} (one spec, written once).\n",
                    also.iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let at = text.find('\n').map_or(0, |i| i + 1);
                text.insert_str(at, &line);
            }
            Ok((k, text, w))
        })
        .collect::<Result<Vec<_>>>()?;
    // Every file is written before anything is printed: a closed stdout (`| head`) loses
    // nothing.
    for (k, text, _) in &rendered {
        write(dir.as_deref(), &paths[*k], text)?;
    }
    let suite = crate::spec::suite::SuiteSpec {
        description: format!(
            "The stages of {}'s Model (written by `cutesmith import`)",
            problem.display()
        ),
        workloads: unique.iter().map(|&k| names[k].clone()).collect(),
        max_candidates: None,
        seeds: None,
        provider: None,
        rounds: None,
        max_time_s: None,
        max_tokens: None,
        stages: names.clone(),
    };
    let text = toml::to_string(&suite).map_err(|e| Error::Format {
        context: suite_path.display().to_string(),
        message: e.to_string(),
    })?;
    write(Some(&suite_dir), &suite_path, &text)?;
    println!(
        "no one workload computes the Model: it runs as {n} stages, one after another (each \
         validated and timed by itself){}",
        if unique.len() < n {
            format!(", {} distinct workloads", unique.len())
        } else {
            String::new()
        }
    );
    for (k, _, workload) in &rendered {
        let k = *k;
        let also = runs_as(k);
        if also.len() > 1 {
            println!(
                "wrote {} (stages {})",
                paths[k].display(),
                also.iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        } else {
            println!("wrote {}", paths[k].display());
        }
        summary(workload, &paths[k], &imported.stages[k].ops);
        for (node, st) in &imported.stages[k].reads {
            println!("  reads `{node}`, the output of {}", names[*st]);
        }
    }
    println!("wrote {} (the stages as a suite)", suite_path.display());
    let workloads_dir = dir.unwrap_or_else(|| PathBuf::from("."));
    let bench = if workloads_dir == Path::new("workloads") {
        format!("cutesmith bench {stem}")
    } else {
        format!(
            "cutesmith bench {} --workloads-dir {}",
            suite_path.display(),
            workloads_dir.display()
        )
    };
    println!(
        "next: {bench} (on a GPU machine: each stage's built-in kernels against the vendor \
         library), or cutesmith run {} for one stage",
        paths[0].display()
    );
    Ok(EXIT_OK)
}

fn write(dir: Option<&Path>, path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

fn summary(workload: &crate::spec::Workload, path: &Path, ops: &[String]) {
    println!(
        "  {}: {} {}, headline {}, {} shapes",
        workload.name(),
        workload.dtype(),
        workload.family(),
        workload.headline(),
        workload.shapes().len()
    );
    println!("  ops: {}", ops.join(" -> "));
    // The format accepts some workloads no built-in template computes yet: say so now,
    // with the first template's reason, rather than at the first `run`.
    let space = crate::strategy::space(workload);
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
            "note: no built-in template computes {} yet ({why}); `cutesmith run` needs a model provider for it ([model] in cutesmith.toml), and `cutesmith strategies {}` lists every template's reason",
            workload.name(),
            path.display()
        );
    }
}

/// The export command for a run of `workload`: `--torch` where the package takes it.
fn export_hint(workload: &crate::spec::Workload) -> &'static str {
    // (export --torch does not take gemm_reduce, gemm_norm, [[before]] ops or a cross
    // entropy yet: their kernel and C ABI, then.)
    if matches!(
        workload.family(),
        crate::spec::Family::GemmReduce | crate::spec::Family::GemmNorm
    ) || !workload.before_chain().is_identity()
        || workload.params().reduce.reads_targets()
    {
        "cutesmith export runs/<id> --out DIR"
    } else {
        "cutesmith export runs/<id> --torch DIR"
    }
}
