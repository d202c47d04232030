//! One process's hold on the GPU: the primary context, a stream, vendor-library handles,
//! buffers as raw device pointers, event timing and the L2 flush. Only the worker process
//! opens a session; the agent never does.

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    LaunchConfig, PushKernelArg,
};

use crate::error::{Error, Result};
use crate::eval::gpu::DeviceInfo;

/// A device buffer and its raw address (stable for the buffer's life).
pub struct DevBuf<T> {
    pub slice: CudaSlice<T>,
    pub ptr: u64,
    pub len: usize,
}

impl<T> DevBuf<T> {
    /// The address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        self.ptr + (i * std::mem::size_of::<T>()) as u64
    }
}

/// A CUDA driver failure, with its code for classification.
#[derive(Debug, Clone)]
pub struct CudaFailure {
    pub code: i32,
    pub message: String,
}

impl std::fmt::Display for CudaFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (CUDA error {})", self.message, self.code)
    }
}

impl From<cudarc::driver::DriverError> for CudaFailure {
    fn from(e: cudarc::driver::DriverError) -> Self {
        CudaFailure {
            code: e.0 as i32,
            message: format!("{e}"),
        }
    }
}

/// The GPU as one process holds it.
pub struct Session {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub info: DeviceInfo,
    flush: Option<Flush>,
}

/// The L2 flush: a buffer four times the L2 size, and the kernel that reads it.
///
/// Reading (not writing) is what leaves the cache cold without a debt: a memset flush
/// leaves every L2 line dirty, and the timed kernel then pays for writing 50 MB back as
/// it reads its inputs. On an H100 that added 4.6-9.9 us to cuBLAS's small-M GEMMs
/// (16 x 4096 x 4096: 22.0 us after a memset flush, 17.4 after a read), a debt no kernel
/// in a model pays: the kernel before it leaves mostly clean lines (weights it read).
struct Flush {
    buf: DevBuf<u8>,
    /// The read kernel, or None where NVRTC failed (then the flush writes the buffer).
    reader: Option<(Arc<CudaModule>, CudaFunction)>,
    sink: DevBuf<u32>,
}

/// Reads the flush buffer with 16-byte loads, so that it fills the L2 with clean lines.
/// The XOR of what it read is stored only if it equals a value the zero-filled buffer
/// cannot give, so the loads stay and nothing is written. (Public for the test that
/// compiles it with nvcc.)
pub const EVICT_SOURCE: &str = r#"
struct alignas(16) cs_u4 { unsigned x, y, z, w; };
extern "C" __global__ void cs_l2_evict(const cs_u4* __restrict__ p, unsigned long long n, unsigned* sink) {
  unsigned acc = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    cs_u4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
"#;

impl Flush {
    fn compile_reader(ctx: &Arc<CudaContext>) -> Result<(Arc<CudaModule>, CudaFunction), String> {
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(
            EVICT_SOURCE,
            cudarc::nvrtc::CompileOptions {
                arch: Some("compute_90"),
                name: Some("cutesmith_l2_evict.cu".into()),
                ..Default::default()
            },
        )
        .map_err(|e| format!("NVRTC: {e:?}"))?;
        let module = ctx.load_module(ptx).map_err(|e| e.to_string())?;
        let func = module
            .load_function("cs_l2_evict")
            .map_err(|e| e.to_string())?;
        Ok((module, func))
    }
}

fn gpu_err(e: impl std::fmt::Display) -> Error {
    Error::NoGpu(e.to_string())
}

impl Session {
    /// Opens device 0's primary context (so pointers are shared with the CUDA runtime
    /// inside kernels' shared objects) and a stream.
    pub fn open() -> Result<Session> {
        let info = super::devices()?
            .into_iter()
            .next()
            .ok_or_else(|| Error::NoGpu("no device".into()))?;
        let ctx = CudaContext::new(0).map_err(gpu_err)?;
        // Buffers are handed out as raw pointers on one stream: cudarc's per-buffer
        // event tracking would only add work.
        // SAFETY: every buffer of this session is used on `stream` alone.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(gpu_err)?;
        Ok(Session {
            ctx,
            stream,
            info,
            flush: None,
        })
    }

    /// Uploads a host slice.
    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<DevBuf<T>, CudaFailure> {
        let slice = self.stream.clone_htod(host)?;
        let ptr = slice.device_ptr(&self.stream).0;
        Ok(DevBuf {
            len: host.len(),
            slice,
            ptr,
        })
    }

    /// A zero-filled buffer of `len` elements (at least one byte, so it has an address).
    pub fn zeros<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<DevBuf<T>, CudaFailure> {
        let slice = self.stream.alloc_zeros::<T>(len.max(1))?;
        let ptr = slice.device_ptr(&self.stream).0;
        Ok(DevBuf { slice, ptr, len })
    }

    /// Downloads a whole buffer.
    pub fn download<T: DeviceRepr + Default + Clone>(
        &self,
        buf: &DevBuf<T>,
    ) -> Result<Vec<T>, CudaFailure> {
        let mut host = vec![T::default(); buf.slice.len()];
        self.stream.memcpy_dtoh(&buf.slice, &mut host)?;
        self.stream.synchronize()?;
        host.truncate(buf.len);
        Ok(host)
    }

    /// Reads `n` elements at a raw device address (waits for the copy).
    pub fn read<T: DeviceRepr + Default + Clone>(
        &self,
        src: u64,
        n: usize,
    ) -> Result<Vec<T>, CudaFailure> {
        let mut host = vec![T::default(); n];
        // SAFETY: callers pass the address of a live buffer of at least n elements; the
        // copy completes before `host` is returned (synchronize below).
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(&mut host, src, self.stream.cu_stream())
        }?;
        self.stream.synchronize()?;
        Ok(host)
    }

    /// Copies `bytes` between raw device addresses, stream-ordered.
    pub fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), CudaFailure> {
        // SAFETY: callers pass two live, non-overlapping buffers of at least `bytes`.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream())
        }?;
        Ok(())
    }

    /// Copies a host slice to a raw device address and waits for the copy.
    pub fn write_raw<T: DeviceRepr>(&self, dst: u64, host: &[T]) -> Result<(), CudaFailure> {
        // SAFETY: callers pass the address of a live buffer of at least `host.len()`
        // elements; the copy completes before `host` can go away (synchronize below).
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, host, self.stream.cu_stream()) }?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Fills `n` elements of `elem_bytes` (1, 2 or 4) at `dst` with the bit pattern `bits`,
    /// stream-ordered (the NaN poison before a timed launch).
    pub fn fill_bits(
        &self,
        dst: u64,
        n: usize,
        elem_bytes: usize,
        bits: u32,
    ) -> Result<(), CudaFailure> {
        use cudarc::driver::sys;
        let stream = self.stream.cu_stream();
        // SAFETY: callers pass a live device buffer of at least n elements of that size;
        // the fill is ordered on this session's stream.
        let rc = unsafe {
            match elem_bytes {
                1 => sys::cuMemsetD8Async(dst, bits as u8, n, stream),
                2 => sys::cuMemsetD16Async(dst, bits as u16, n, stream),
                // 8-byte elements (an index; no output is f64) hold the 32-bit pattern twice.
                8 => sys::cuMemsetD32Async(dst, bits, 2 * n, stream),
                _ => sys::cuMemsetD32Async(dst, bits, n, stream),
            }
        };
        rc.result()?;
        Ok(())
    }

    pub fn sync(&self) -> Result<(), CudaFailure> {
        self.stream.synchronize()?;
        Ok(())
    }

    /// Allocates the buffer [`flush_l2`](Session::flush_l2) reads (four times the L2
    /// size, at least 256 MiB) and compiles the kernel that reads it. Returns a note when
    /// that kernel could not be built and the flush falls back to writing the buffer.
    pub fn prepare_flush(&mut self) -> Result<Option<String>, CudaFailure> {
        if self.flush.is_none() {
            let bytes = (self.info.l2_bytes as usize * 4).max(256 << 20);
            let buf = self.zeros::<u8>(bytes)?;
            let sink = self.zeros::<u32>(1)?;
            let reader = Flush::compile_reader(&self.ctx);
            let note = reader.as_ref().err().map(|e| {
                format!("L2 flush by writing (the read kernel failed: {e}): small kernels pay for writing the dirty lines back")
            });
            self.flush = Some(Flush {
                buf,
                reader: reader.ok(),
                sink,
            });
            return Ok(note);
        }
        Ok(None)
    }

    /// Evicts the L2 cache by reading the flush buffer, leaving it full of clean lines
    /// (a no-op before `prepare_flush`).
    pub fn flush_l2(&self) -> Result<(), CudaFailure> {
        let Some(f) = &self.flush else {
            return Ok(());
        };
        match &f.reader {
            Some((_, func)) => {
                let n = (f.buf.len / 16) as u64;
                let sms = self.info.sm_count.max(1) as u32;
                let cfg = LaunchConfig {
                    grid_dim: (sms * 4, 1, 1),
                    block_dim: (512, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut b = self.stream.launch_builder(func);
                b.arg(&f.buf.ptr).arg(&n).arg(&f.sink.ptr);
                // SAFETY: the buffer holds n 16-byte words and sink one u32, both ours;
                // the parameters match the kernel's.
                unsafe { b.launch(cfg) }?;
            }
            None => {
                // SAFETY: the buffer is ours and `len` long; the memset is stream-ordered.
                unsafe {
                    cudarc::driver::result::memset_d8_async(
                        f.buf.ptr,
                        0x5a,
                        f.buf.len,
                        self.stream.cu_stream(),
                    )
                }?;
            }
        }
        Ok(())
    }

    /// Times one call of `launch` with CUDA events on the stream, in microseconds.
    pub fn time_us(
        &self,
        launch: &mut dyn FnMut() -> Result<(), CudaFailure>,
    ) -> Result<f64, CudaFailure> {
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.ctx.new_event(flags)?;
        let stop = self.ctx.new_event(flags)?;
        start.record(&self.stream)?;
        launch()?;
        stop.record(&self.stream)?;
        stop.synchronize()?;
        Ok(start.elapsed_ms(&stop)? as f64 * 1000.0)
    }

    /// Device-to-device copy bandwidth (bytes read + written per second) over 1 GiB.
    pub fn measure_copy_bandwidth(&self) -> Result<f64, CudaFailure> {
        let bytes: usize = 1 << 30;
        let src = self.zeros::<u8>(bytes)?;
        let dst = self.zeros::<u8>(bytes)?;
        let mut times = Vec::new();
        for i in 0..8 {
            let stream = self.stream.cu_stream();
            let t = self.time_us(&mut || {
                // SAFETY: both buffers are `bytes` long and live for the call.
                unsafe {
                    cudarc::driver::result::memcpy_dtod_async(dst.ptr, src.ptr, bytes, stream)
                }?;
                Ok(())
            })?;
            if i > 0 {
                times.push(t);
            }
        }
        times.sort_by(f64::total_cmp);
        let median_s = times[times.len() / 2] * 1e-6;
        Ok(2.0 * bytes as f64 / median_s)
    }
}
