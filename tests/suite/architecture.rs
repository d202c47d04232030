//! The shape of `src/`, checked from the code's own `crate::` paths so it stays true:
//! layers point down only (a module may use modules of lower layers, never of its own
//! layer or above, so no two top-level modules import each other), every top-level module
//! has a layer, and only the front ends print to the terminal. ARCHITECTURE.md draws the
//! same layers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules by layer, highest first.
const LAYERS: &[(&str, &[&str])] = &[
    ("front ends", &["cli"]),
    ("reports over sessions", &["report"]),
    ("engine", &["agent"]),
    ("providers", &["provider"]),
    ("tuning history", &["tuning"]),
    ("feedback", &["feedback"]),
    ("evaluation and strategies", &["eval", "strategy"]),
    ("the PyTorch bridge", &["pytorch"]),
    ("toolchain", &["toolchain"]),
    ("processes", &["process", "sandbox"]),
    ("events", &["events"]),
    ("workload specs", &["spec"]),
    ("shared data", &["abi", "config", "clock"]),
    ("the error type", &["error"]),
];

/// Names lib.rs re-exports at the crate root, and the module each comes from.
const REEXPORTS: &[(&str, &str)] = &[("Error", "error"), ("Result", "error")];

/// Files that may print to the terminal besides `cli/`: the binary's entry point, and the
/// worker process, whose stdout/stderr are its protocol with the parent.
const MAY_PRINT: &[&str] = &["main.rs", "eval/worker/"];

fn src() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The file's text without its trailing unit-test module.
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// The top-level modules a file names through `crate::` paths (in code or in docs).
fn uses(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

fn top_module(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

#[test]
fn layers_point_down_only() {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 40, "found only {} files", files.len());
    let mut wrong = Vec::new();
    let mut edges: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap();
        let from = top_module(rel);
        if from == "main" || from == "lib" {
            continue;
        }
        let Some(from_layer) = layer_of(&from) else {
            wrong.push(format!(
                "{}: top-level module `{from}` has no layer in this test (and ARCHITECTURE.md)",
                rel.display()
            ));
            continue;
        };
        for to in uses(&code_of(f)) {
            let to = REEXPORTS
                .iter()
                .find(|(name, _)| *name == to)
                .map_or(to.clone(), |(_, m)| m.to_string());
            if to == from {
                continue;
            }
            match layer_of(&to) {
                None => wrong.push(format!("{}: uses unknown module `{to}`", rel.display())),
                Some(l) if l <= from_layer => {
                    edges
                        .entry((from.clone(), to.clone()))
                        .or_default()
                        .push(rel.display().to_string());
                }
                Some(_) => {}
            }
        }
    }
    for ((from, to), files) in &edges {
        wrong.push(format!(
            "`{from}` ({}) uses `{to}` ({}), which is not below it: {}",
            LAYERS[layer_of(from).unwrap()].0,
            LAYERS[layer_of(to).unwrap()].0,
            files.join(", ")
        ));
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn every_top_level_module_has_a_layer() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .collect();
    assert!(declared.len() >= 10, "{declared:?}");
    for (name, module) in REEXPORTS {
        assert!(
            lib.lines()
                .any(|l| l.starts_with(&format!("pub use {module}::")) && l.contains(name)),
            "lib.rs no longer re-exports {name} from {module}"
        );
    }
    for m in &declared {
        assert!(layer_of(m).is_some(), "module `{m}` has no layer");
    }
    for (_, mods) in LAYERS {
        for m in *mods {
            assert!(
                declared.contains(m),
                "layer names `{m}`, which lib.rs lacks"
            );
        }
    }
}

#[test]
fn the_checker_sees_grouped_and_plain_paths() {
    let code = "use crate::{error::Result, spec::Workload};\nfn f() { crate::eval::run(); }";
    let mut got = uses(code);
    got.sort();
    assert_eq!(got, vec!["error", "eval", "spec"]);
    assert_eq!(layer_of("cli"), Some(0));
    assert!(layer_of("agent") < layer_of("provider"));
    assert!(layer_of("eval") < layer_of("spec"));
}

#[test]
fn only_the_front_ends_print() {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut wrong = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        if rel.starts_with("cli/") || MAY_PRINT.iter().any(|p| rel.starts_with(p)) {
            continue;
        }
        for (n, line) in code_of(f).lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            if ["println!", "eprintln!", "print!(", "eprint!("]
                .iter()
                .any(|m| l.contains(m))
            {
                wrong.push(format!("{rel}:{}: {l}", n + 1));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "prints outside the front ends:\n{}",
        wrong.join("\n")
    );
}
