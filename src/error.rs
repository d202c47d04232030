//! The library's one error type. `Err` means the infrastructure broke (a tool missing,
//! a file unreadable, a process that could not start); a kernel that fails to compile
//! or computes wrong numbers is an *outcome*, never an `Err`.

use std::path::PathBuf;

/// Every failure the library reports. Each message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tool the command needs (nvcc, CUTLASS headers, cuobjdump, pip) was not found.
    /// Returned by toolchain discovery; not retried: the user runs the fix it names.
    #[error("{what} not found: {hint}")]
    ToolMissing { what: String, hint: String },

    /// `cutesmith setup` could not install the pinned toolkit. Not retried.
    #[error("setup failed: {0}")]
    Setup(String),

    /// A workload spec is malformed: the message names the file, the field and what is
    /// allowed.
    #[error("{0}")]
    Workload(String),

    /// No CUDA driver or device: GPU commands stop here with exit code 2.
    #[error("no CUDA device: {0}")]
    NoGpu(String),

    /// A limit of the machine stopped an evaluation (the GPU's free memory, the workers'
    /// host memory budget): environment error, exit code 2; the message names the limit.
    #[error("resource: {0}")]
    Resource(String),

    /// The sandbox for model-written code cannot be set up on this machine (and
    /// `--no-sandbox` was not given): environment error, exit code 2.
    #[error("sandbox: {0}")]
    Sandbox(String),

    /// A subprocess (nvcc, cuobjdump, pip) could not be started or waited on.
    #[error("could not run {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },

    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A JSON or TOML document could not be read or written.
    #[error("{context}: {message}")]
    Format { context: String, message: String },

    /// The user's input (a flag, a path, a name) is not acceptable.
    #[error("{0}")]
    Usage(String),

    /// The model endpoint failed after every retry (unreachable, refused the key, kept
    /// answering 429/5xx, or cut its stream each time). The session is saved; `resume`
    /// continues it.
    #[error("model endpoint: {0}")]
    Model(String),
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Attaches a path to I/O results, so every I/O error names its file.
pub trait IoContext<T> {
    /// Converts an `io::Result` into this crate's `Result`, naming `path`.
    fn at(self, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
