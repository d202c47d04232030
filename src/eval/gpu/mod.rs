//! The GPU: the only module that talks to the CUDA driver and the vendor libraries
//! (through cudarc): device facts, the worker process's session, inputs, references,
//! baselines and timing.

pub mod baseline;
pub mod check;
pub mod data;
pub mod kernels;
pub mod reference;
pub mod session;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};

/// Facts about one device, read from the driver.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sm_count: i32,
    pub memory_bytes: u64,
    pub l2_bytes: u64,
    /// Shared memory one block may opt into (`cudaFuncSetAttribute` limit).
    pub smem_per_block_optin: u64,
    /// SM clock in kHz, as the driver reports it.
    pub clock_khz: i32,
    /// Driver's CUDA version, e.g. 13000 for 13.0.
    pub driver_cuda_version: i32,
}

impl DeviceInfo {
    /// `sm_90a` for Hopper, `sm_XY` otherwise: the arch kernels are compiled for.
    pub fn arch(&self) -> String {
        let (major, minor) = self.compute_capability;
        if major == 9 && minor == 0 {
            "sm_90a".into()
        } else {
            format!("sm_{major}{minor}")
        }
    }
}

/// True when the CUDA driver library can be loaded at all (cudarc panics otherwise).
pub fn driver_present() -> bool {
    // SAFETY: is_culib_present only tries to dlopen the driver library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Stops GPU work early, with [`Error::NoGpu`] (exit code 2), on a machine without a
/// CUDA driver.
pub fn require_gpu() -> Result<()> {
    if !driver_present() {
        return Err(Error::NoGpu(
            "this command runs kernels on an NVIDIA GPU, and this machine has no CUDA driver \
             (libcuda.so); run it on a machine with one (`cutesmith doctor` shows what is found)"
                .into(),
        ));
    }
    Ok(())
}

/// The architecture to compile for: the first device's (e.g. `sm_90a`), or `sm_90a` when
/// no device answers.
pub fn target_arch() -> String {
    devices()
        .ok()
        .and_then(|d| d.first().map(|d| d.arch()))
        .unwrap_or_else(|| "sm_90a".into())
}

/// Reads every device's facts. `Err(NoGpu)` when there is no driver or no device.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    use cudarc::driver::CudaContext;

    if !driver_present() {
        return Err(Error::NoGpu(
            "the CUDA driver library (libcuda.so) is not on this machine".into(),
        ));
    }
    let count = CudaContext::device_count()
        .map_err(|e| Error::NoGpu(format!("the driver found no usable device ({e})")))?;
    if count <= 0 {
        return Err(Error::NoGpu("the driver reports 0 devices".into()));
    }
    let mut driver_version: std::ffi::c_int = 0;
    // SAFETY: the driver library is present (checked above) and initialized by
    // device_count; the pointer is to a live local.
    unsafe {
        cudarc::driver::sys::cuDriverGetVersion(&mut driver_version);
    }
    let mut out = Vec::new();
    for ordinal in 0..count as usize {
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| Error::NoGpu(format!("device {ordinal}: {e}")))?;
        let attr = |a: A| ctx.attribute(a).unwrap_or(0);
        out.push(DeviceInfo {
            ordinal,
            name: ctx.name().unwrap_or_else(|_| "unknown".into()),
            compute_capability: ctx.compute_capability().unwrap_or((0, 0)),
            sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            memory_bytes: ctx.total_mem().unwrap_or(0) as u64,
            l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) as u64,
            smem_per_block_optin: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                as u64,
            clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            driver_cuda_version: driver_version,
        });
    }
    Ok(out)
}

/// A vendor library found on disk.
#[derive(Debug, Clone, Serialize)]
pub struct LibraryInfo {
    pub name: &'static str,
    pub path: Option<PathBuf>,
    /// The version in the file name (`libcublas.so.13.0.2.14` gives `13.0.2.14`).
    pub version: Option<String>,
}

/// The vendor libraries the baselines need, searched where the CUDA runtime would.
pub fn libraries() -> Vec<LibraryInfo> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(ld) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&ld));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(home) = std::env::var(var) {
            dirs.push(Path::new(&home).join("lib64"));
            dirs.push(Path::new(&home).join("targets/x86_64-linux/lib"));
        }
    }
    for d in [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/local/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    ["cublas", "cublasLt", "cudnn"]
        .into_iter()
        .map(|name| find_library(name, &dirs))
        .collect()
}

fn find_library(name: &'static str, dirs: &[PathBuf]) -> LibraryInfo {
    let prefix = format!("lib{name}.so");
    let mut best: Option<(PathBuf, String)> = None;
    for dir in dirs {
        let Ok(read) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in read.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = file.strip_prefix(&prefix) else {
                continue;
            };
            let version = rest.trim_start_matches('.').to_string();
            // Prefer the most specific version string (the real file, not a link).
            if best.as_ref().is_none_or(|(_, v)| version.len() > v.len()) {
                best = Some((entry.path(), version));
            }
        }
        if best.is_some() {
            break;
        }
    }
    LibraryInfo {
        name,
        version: best
            .as_ref()
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty()),
        path: best.map(|(p, _)| p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_most_specific_library_file() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "libcublas.so",
            "libcublas.so.13",
            "libcublas.so.13.0.2.14",
            "libcublasLt.so.13",
        ] {
            std::fs::write(dir.path().join(f), b"").unwrap();
        }
        let dirs = vec![dir.path().to_path_buf()];
        let lib = find_library("cublas", &dirs);
        assert_eq!(lib.version.as_deref(), Some("13.0.2.14"));
        let lt = find_library("cublasLt", &dirs);
        assert_eq!(lt.version.as_deref(), Some("13"));
        let none = find_library("cudnn", &dirs);
        assert!(none.path.is_none());
    }

    #[test]
    fn hopper_compiles_for_sm_90a() {
        let mut d = DeviceInfo {
            ordinal: 0,
            name: "x".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            memory_bytes: 0,
            l2_bytes: 0,
            smem_per_block_optin: 0,
            clock_khz: 0,
            driver_cuda_version: 13000,
        };
        assert_eq!(d.arch(), "sm_90a");
        d.compute_capability = (8, 9);
        assert_eq!(d.arch(), "sm_89");
    }
}
