//! `cutesmith doctor`: what this machine has for cutesmith, each item with where it was
//! found and its version, and what to do about anything missing.

use serde::Serialize;

use super::{to_json, EXIT_ERROR, EXIT_OK};
use crate::config::Config;
use crate::error::Result;
use crate::eval::gpu::{self, DeviceInfo, LibraryInfo};
use crate::toolchain::{self, ExtraTools, Toolchain, ToolchainOptions};

/// `cutesmith doctor [--json]`: exit 0 when kernels can be compiled, 2 when not.
pub fn cmd_doctor(opts: &ToolchainOptions, config: &Config, json: bool) -> Result<i32> {
    let report = DoctorReport::gather(opts, config);
    if json {
        println!("{}", to_json(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(if report.can_compile() {
        EXIT_OK
    } else {
        EXIT_ERROR
    })
}

/// Everything doctor found.
#[derive(Debug, Serialize)]
pub struct DoctorReport {
    pub toolchain: std::result::Result<Toolchain, String>,
    pub extra: ExtraTools,
    pub devices: std::result::Result<Vec<DeviceInfo>, String>,
    pub libraries: Vec<LibraryInfo>,
    pub model: String,
    pub cache_dir: String,
    /// What the sandbox for model-written code does here, or why it cannot.
    pub sandbox: String,
    /// The tuning database: its file and how many evaluations it holds, or why none.
    pub tuning: String,
    /// The Slurm client (`sbatch --version`), for `run SUITE --slurm`.
    pub slurm: String,
    /// The Python of the PyTorch bridge (CUTESMITH_PYTHON or python3) and its torch, or
    /// why none and what to install.
    pub pytorch: String,
}

fn pytorch_summary() -> String {
    let python = crate::pytorch::python::python();
    match crate::pytorch::python::probe(&python) {
        Ok(info) => info.summary(),
        Err(e) => format!("{e} (needed only by import and export --torch)"),
    }
}

fn tuning_summary() -> String {
    let Some(path) = crate::tuning::default_path() else {
        return "off (CUTESMITH_TUNING_DB=off)".into();
    };
    if !path.is_file() {
        return format!(
            "{} (not made yet: the first GPU evaluation makes it)",
            path.display()
        );
    }
    match crate::tuning::TuningDb::open(&path).and_then(|db| db.rows(None)) {
        Ok(rows) => format!("{} ({} evaluations)", path.display(), rows.len()),
        Err(e) => format!("{} (unreadable: {e})", path.display()),
    }
}

fn slurm_summary() -> String {
    let mut cmd = std::process::Command::new("sbatch");
    cmd.arg("--version");
    match crate::process::run(cmd, std::time::Duration::from_secs(10), 4096) {
        Ok(o) if o.success() => o.stdout.trim().to_string(),
        _ => "not found (sbatch, squeue and sacct are needed only for run SUITE --slurm)".into(),
    }
}

impl DoctorReport {
    /// Looks at everything; never fails (each missing piece is part of the report).
    pub fn gather(opts: &ToolchainOptions, config: &Config) -> DoctorReport {
        DoctorReport {
            toolchain: Toolchain::discover(opts).map_err(|e| e.to_string()),
            extra: toolchain::find_extra_tools(opts),
            devices: gpu::devices().map_err(|e| e.to_string()),
            libraries: gpu::libraries(),
            model: config.model_summary(),
            cache_dir: toolchain::cache_dir().display().to_string(),
            sandbox: crate::sandbox::describe(),
            tuning: tuning_summary(),
            slurm: slurm_summary(),
            pytorch: pytorch_summary(),
        }
    }

    /// True when kernels can be compiled (nvcc and CUTLASS found).
    pub fn can_compile(&self) -> bool {
        self.toolchain.is_ok()
    }

    /// The human-readable report.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: String| s.push_str(&format!("{k:<18} {v}\n"));
        match &self.toolchain {
            Ok(tc) => {
                line(
                    "nvcc",
                    format!(
                        "{} ({}, {})",
                        tc.nvcc.version,
                        tc.nvcc.path.display(),
                        tc.nvcc.source
                    ),
                );
                line(
                    "CUTLASS",
                    format!(
                        "{} ({}, {})",
                        tc.cutlass.version,
                        tc.cutlass.include.display(),
                        tc.cutlass.source
                    ),
                );
                line(
                    "CUTLASS util",
                    tc.cutlass
                        .util_include
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|| "not found (tools/util/include)".into()),
                );
                line(
                    "ABI header",
                    tc.abi_include.join("cutesmith_abi.h").display().to_string(),
                );
            }
            Err(e) => line("toolchain", format!("MISSING: {e}")),
        }
        for (name, t) in [
            ("cuobjdump", &self.extra.cuobjdump),
            ("ncu", &self.extra.ncu),
            ("compute-sanitizer", &self.extra.compute_sanitizer),
        ] {
            line(
                name,
                match t {
                    Some(t) => format!("{} ({}, {})", t.version, t.path.display(), t.source),
                    None => "not found".into(),
                },
            );
        }
        match &self.devices {
            Ok(devs) => {
                for d in devs {
                    line(
                        &format!("GPU {}", d.ordinal),
                        format!(
                            "{}, compute capability {}.{} ({}), {} SMs, {:.1} GiB, L2 {:.0} MiB, \
                             {} KiB smem/block opt-in, driver CUDA {}.{}",
                            d.name,
                            d.compute_capability.0,
                            d.compute_capability.1,
                            d.arch(),
                            d.sm_count,
                            d.memory_bytes as f64 / (1u64 << 30) as f64,
                            d.l2_bytes as f64 / (1u64 << 20) as f64,
                            d.smem_per_block_optin / 1024,
                            d.driver_cuda_version / 1000,
                            (d.driver_cuda_version % 1000) / 10
                        ),
                    );
                }
            }
            Err(e) => line("GPU", e.clone()),
        }
        for lib in &self.libraries {
            line(
                lib.name,
                match &lib.path {
                    Some(p) => format!(
                        "{} ({})",
                        lib.version.clone().unwrap_or_else(|| "unversioned".into()),
                        p.display()
                    ),
                    None => "not found".into(),
                },
            );
        }
        line("model", self.model.clone());
        line("cache", self.cache_dir.clone());
        line("sandbox", self.sandbox.clone());
        line("tuning database", self.tuning.clone());
        line("Slurm", self.slurm.clone());
        line("PyTorch", self.pytorch.clone());
        if self.toolchain.is_err() {
            s.push_str(&format!(
                "\nto compile kernels: {}\n",
                toolchain::SETUP_HINT
            ));
        }
        s
    }
}
