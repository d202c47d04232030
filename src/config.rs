//! Configuration: defaults < config file < environment < flags, resolved once into a
//! [`Config`]. The file is `./cutesmith.toml` if present, else
//! `$XDG_CONFIG_HOME/cutesmith/config.toml` (`~/.config/cutesmith/config.toml`), or the
//! path in `CUTESMITH_CONFIG`.
//!
//! The model endpoint names the *environment variable* that holds the API key, never
//! the key itself, so a config file can be shared and committed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a user writes in the config file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    pub model: Option<ModelSpec>,
    pub toolchain: Option<ToolchainSpec>,
    pub limits: Option<LimitsSpec>,
}

/// Resource limits (`[limits]`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    /// Host memory a worker (and what it starts) may hold, e.g. "16G" or "512M"
    /// (default: half of the host's available memory). `--host-memory` wins.
    pub host_memory: Option<String>,
}

/// An OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama, llama.cpp server).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8000/v1`.
    pub base_url: Option<String>,
    /// The model name the endpoint serves.
    pub model: Option<String>,
    /// Name of the environment variable holding the key (default `OPENAI_API_KEY`).
    pub api_key_env: Option<String>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// Reasoning models: `reasoning_effort` sent as is (e.g. "low", "medium", "high").
    pub reasoning_effort: Option<String>,
    /// Dollars per million prompt / completion tokens, for cost accounting and budgets.
    pub price_prompt_per_mtok: Option<f64>,
    pub price_completion_per_mtok: Option<f64>,
    /// Seconds to wait for the connection, and between two pieces of a streamed reply.
    pub connect_timeout_s: Option<u64>,
    pub read_timeout_s: Option<u64>,
    /// Attempts per request on 429, 5xx, timeouts and cut streams (default 4).
    pub max_attempts: Option<u32>,
    /// `auto`, `edits` or `whole`: how optimize and debug requests ask to be answered
    /// (`run --reply-mode` wins).
    pub reply_mode: Option<String>,
}

/// Toolchain paths a user may pin in the file (flags and environment still win).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolchainSpec {
    pub nvcc: Option<PathBuf>,
    pub cuda_home: Option<PathBuf>,
    pub cutlass_dir: Option<PathBuf>,
}

/// The resolved model endpoint, when one is configured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelConfig {
    pub base_url: String,
    pub model: String,
    pub api_key_env: String,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub price_prompt_per_mtok: Option<f64>,
    #[serde(default)]
    pub price_completion_per_mtok: Option<f64>,
    #[serde(default)]
    pub connect_timeout_s: Option<u64>,
    #[serde(default)]
    pub read_timeout_s: Option<u64>,
    #[serde(default)]
    pub max_attempts: Option<u32>,
}

impl ModelConfig {
    /// True when the environment variable the config names is set and non-empty.
    pub fn key_present(&self) -> bool {
        std::env::var(&self.api_key_env).is_ok_and(|v| !v.is_empty())
    }
}

/// Settings resolved from every source.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The file the settings came from, if any.
    pub file: Option<PathBuf>,
    /// `None` means the built-in provider (no model configured).
    pub model: Option<ModelConfig>,
    pub toolchain: ToolchainSpec,
    /// `[limits] host_memory`, as written (parsed where it is used, naming the file).
    pub host_memory: Option<String>,
    /// `[model] reply_mode`, as written (parsed where it is used, naming the file).
    pub reply_mode: Option<String>,
}

/// Environment variables that override the file.
pub const ENV_BASE_URL: &str = "CUTESMITH_MODEL_BASE_URL";
pub const ENV_MODEL: &str = "CUTESMITH_MODEL";
pub const ENV_KEY_ENV: &str = "CUTESMITH_API_KEY_ENV";

impl Config {
    /// Loads the config from `explicit` (a `--config` flag), `CUTESMITH_CONFIG`, or the
    /// default locations, then applies the environment.
    pub fn load(explicit: Option<&Path>) -> Result<Config> {
        let path = explicit
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("CUTESMITH_CONFIG").map(PathBuf::from))
            .or_else(default_file);
        let (spec, file) = match path {
            Some(p) if p.is_file() => (read_spec(&p)?, Some(p)),
            Some(p) if explicit.is_some() => {
                return Err(Error::Usage(format!(
                    "config file {} does not exist",
                    p.display()
                )))
            }
            _ => (ConfigSpec::default(), None),
        };
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Ok(Self::resolve(spec, file, &env))
    }

    /// Merges a parsed file with the environment (given as a lookup, for tests).
    pub fn resolve(
        spec: ConfigSpec,
        file: Option<PathBuf>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Config {
        let m = spec.model.unwrap_or_default();
        let reply_mode = m.reply_mode.clone();
        let base_url = env(ENV_BASE_URL).or(m.base_url);
        let model_name = env(ENV_MODEL).or(m.model);
        let model = match (base_url, model_name) {
            (Some(base_url), Some(model)) => Some(ModelConfig {
                base_url,
                model,
                api_key_env: env(ENV_KEY_ENV)
                    .or(m.api_key_env)
                    .unwrap_or_else(|| "OPENAI_API_KEY".into()),
                temperature: m.temperature,
                max_tokens: m.max_tokens,
                reasoning_effort: m.reasoning_effort,
                price_prompt_per_mtok: m.price_prompt_per_mtok,
                price_completion_per_mtok: m.price_completion_per_mtok,
                connect_timeout_s: m.connect_timeout_s,
                read_timeout_s: m.read_timeout_s,
                max_attempts: m.max_attempts,
            }),
            _ => None,
        };
        Config {
            file,
            model,
            toolchain: spec.toolchain.unwrap_or_default(),
            host_memory: spec.limits.and_then(|l| l.host_memory),
            reply_mode,
        }
    }

    /// One line for `doctor`.
    pub fn model_summary(&self) -> String {
        match &self.model {
            None => "none configured: the built-in provider (CuTe templates) is used; set \
                     [model] base_url and model in cutesmith.toml, or CUTESMITH_MODEL_BASE_URL \
                     and CUTESMITH_MODEL"
                .into(),
            Some(m) => format!(
                "{} at {}, key from ${} ({})",
                m.model,
                m.base_url,
                m.api_key_env,
                if m.key_present() { "set" } else { "NOT set" }
            ),
        }
    }
}

/// A size in bytes from "16G", "512M", "2GiB", "1.5T", "4096" (powers of 1024; the
/// suffix's case and a trailing "B" or "iB" do not matter).
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("\"{text}\" is not a size (e.g. 16G, 512M, 2GiB)"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.trim_end_matches("ib").trim_end_matches('b');
    let scale: f64 = match unit {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        "t" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("\"{text}\": unknown unit (use K, M, G or T)")),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || !(1.0..=1.8e19).contains(&bytes) {
        return Err(format!("\"{text}\" is out of range"));
    }
    Ok(bytes as u64)
}

fn default_file() -> Option<PathBuf> {
    let local = PathBuf::from("cutesmith.toml");
    if local.is_file() {
        return Some(local);
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("cutesmith/config.toml"))
}

fn read_spec(path: &Path) -> Result<ConfigSpec> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    toml::from_str(&text).map_err(|e| Error::Format {
        context: path.display().to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> ConfigSpec {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn no_model_means_builtin() {
        let c = Config::resolve(ConfigSpec::default(), None, &|_| None);
        assert!(c.model.is_none());
        assert!(c.model_summary().contains("built-in"));
    }

    #[test]
    fn env_overrides_file() {
        let s = spec("[model]\nbase_url = \"http://a/v1\"\nmodel = \"m1\"\napi_key_env = \"K\"\n");
        let env = |k: &str| (k == ENV_MODEL).then(|| "m2".to_string());
        let c = Config::resolve(s, None, &env);
        let m = c.model.unwrap();
        assert_eq!(m.model, "m2");
        assert_eq!(m.base_url, "http://a/v1");
        assert_eq!(m.api_key_env, "K");
    }

    #[test]
    fn unknown_fields_are_rejected() {
        assert!(toml::from_str::<ConfigSpec>("[model]\napi_key = \"sk-...\"\n").is_err());
    }

    #[test]
    fn sizes_parse_with_binary_units_and_bad_ones_are_named() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("16G").unwrap(), 16 << 30);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size(" 1.5g ").unwrap(), 3 << 29);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
        assert!(parse_size("lots")
            .unwrap_err()
            .contains("\"lots\" is not a size"));
        assert!(parse_size("3X").unwrap_err().contains("unknown unit"));
        assert!(parse_size("0").is_err());
    }
}
