//! Suite files (`workloads/suites/*.toml`): a list of workloads run together by
//! `cutesmith run SUITE` and `cutesmith bench SUITE`, with the provider and budgets to use.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A suite file (`workloads/suites/*.toml`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteSpec {
    pub description: String,
    pub workloads: Vec<String>,
    #[serde(default)]
    pub max_candidates: Option<usize>,
    #[serde(default)]
    pub seeds: Option<u64>,
    /// `cutesmith run SUITE`: "builtin" or "model" (default: the model when one is
    /// configured, else the built-in provider).
    #[serde(default)]
    pub provider: Option<String>,
    /// `cutesmith run SUITE`: optimization rounds per workload.
    #[serde(default)]
    pub rounds: Option<u32>,
    /// `cutesmith run SUITE`: wall-clock seconds per workload.
    #[serde(default)]
    pub max_time_s: Option<f64>,
    /// `cutesmith run SUITE`: model tokens per workload.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// The stages of one Model in the order they run, a workload once per stage (`cutesmith
    /// import` of a Model no one workload computes): `cutesmith bench` adds up their times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<String>,
}

/// Finds a suite by name (in `workloads/suites/`) or path.
pub fn load(dir: &Path, name: &str) -> Result<(String, SuiteSpec)> {
    let path = if name.ends_with(".toml") {
        PathBuf::from(name)
    } else {
        dir.join("suites").join(format!("{name}.toml"))
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let avail: Vec<String> = std::fs::read_dir(dir.join("suites"))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        e.path()
                            .file_stem()
                            .map(|s| s.to_string_lossy().into_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        Error::Usage(format!(
            "suite {}: {e}; available: {}",
            path.display(),
            avail.join(", ")
        ))
    })?;
    let spec: SuiteSpec = toml::from_str(&text).map_err(|e| Error::Format {
        context: path.display().to_string(),
        message: e.to_string(),
    })?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "suite".into());
    Ok((stem, spec))
}

/// The suite `name` names, when it names one (`workloads/suites/NAME.toml` with no
/// workload of that name in `dir`, or a `.toml` file with a `workloads` list).
pub fn named(dir: &Path, name: &str) -> Result<Option<(String, SuiteSpec)>> {
    let w = name;
    let path = if w.ends_with(".toml") {
        PathBuf::from(w)
    } else {
        if dir.join(format!("{w}.toml")).is_file() {
            return Ok(None);
        }
        dir.join("suites").join(format!("{w}.toml"))
    };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let is_suite = toml::from_str::<toml::Table>(&text)
        .map(|t| t.contains_key("workloads"))
        .unwrap_or(false);
    if !is_suite {
        return Ok(None);
    }
    load(dir, &path.display().to_string()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workloads_dir() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/workloads"))
    }

    #[test]
    fn a_missing_suite_lists_the_available_ones() {
        let e = load(&workloads_dir(), "nope").unwrap_err().to_string();
        assert!(e.contains("available:") && e.contains("gemm"), "{e}");
    }
}
