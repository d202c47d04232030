//! The one error type of spec loading: every message names the file (or directory) and,
//! for a malformed spec, the field and what it allows.

use std::path::PathBuf;

/// Everything that can go wrong loading a workload; every message names the file (or
/// directory) and, for a malformed spec, the field and what it allows, so a person can
/// fix the spec without reading this code.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The spec file or the workloads directory could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The TOML did not parse into the schema (syntax, unknown field or value, type).
    #[error("{}: {message}{}", path.display(), line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Parse {
        /// The spec file.
        path: PathBuf,
        /// 1-based line of the offending text, when toml reported a position.
        line: Option<usize>,
        /// `field "x": what is wrong; allowed: ...` where the field is known.
        message: String,
    },
    /// The spec parsed but breaks a rule of the schema (a missing dimension, a
    /// parameter that does not belong to the family, ...).
    #[error("{}: field \"{field}\": {message}{}", path.display(), line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Invalid {
        /// The spec file.
        path: PathBuf,
        /// 1-based line of the field (or of its table), when the spec text is known.
        line: Option<usize>,
        /// The field, as a TOML path (`shapes[2].k`, `params.activation`).
        field: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// [`Workload::find`] was asked for a name that no file in the directory has.
    #[error("no workload named \"{name}\" in {}; available: {}", dir.display(), if available.is_empty() { "(none)".to_string() } else { available.join(", ") })]
    NotFound {
        /// The name asked for.
        name: String,
        /// The directory searched.
        dir: PathBuf,
        /// The names that do exist, sorted.
        available: Vec<String>,
    },
    /// Several specs in a directory failed; each is reported, one per line.
    #[error("{} workload specs failed to load:\n{}", .0.len(), .0.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Many(Vec<WorkloadError>),
}

pub(super) type Result<T> = std::result::Result<T, WorkloadError>;

/// Lets the CLI and the agent use `?` on workload calls: an unreadable file stays an
/// I/O error, an unknown name is a usage error, a malformed spec keeps its full message.
impl From<WorkloadError> for crate::error::Error {
    fn from(e: WorkloadError) -> Self {
        match e {
            WorkloadError::Io { path, source } => crate::error::Error::Io { path, source },
            e @ WorkloadError::NotFound { .. } => crate::error::Error::Usage(e.to_string()),
            e => crate::error::Error::Workload(e.to_string()),
        }
    }
}
