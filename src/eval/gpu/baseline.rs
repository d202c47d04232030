//! The vendor libraries, reached only here: cuBLAS (the fp32-output reference GEMM and
//! the `gemm_ex`-style baseline), cuBLASLt (best of its heuristic's algorithms, with the
//! bias + activation epilogue where the workload has one), cuDNN (activation and softmax
//! forward) and a device-to-device copy of the same bytes (the bandwidth ceiling).
//!
//! Every call is enqueued on the session's stream with raw device pointers, so the
//! worker can time it exactly like a candidate.

use std::ffi::c_void;

use cudarc::cublas::sys as bsys;
use cudarc::cublaslt::sys as ltsys;
use cudarc::cudnn::sys as dnsys;

use crate::eval::gpu::session::{CudaFailure, DevBuf, Session};
use crate::spec::{Activation, DType, Layout};

fn fail(what: &str, e: impl std::fmt::Debug) -> CudaFailure {
    CudaFailure {
        code: -1,
        message: format!("{what}: {e:?}"),
    }
}

/// A GEMM as the column-major BLAS interface wants it. Row-major D = A·B is computed as
/// column-major Dᵀ = Bᵀ·Aᵀ, so the "first" operand is B and the "second" A.
#[derive(Debug, Clone, Copy)]
pub struct BlasGemm {
    pub trans_first: bool,
    pub trans_second: bool,
    /// Rows and columns of the column-major result, and the reduction size.
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub first_is_a: bool,
    pub ld_first: i64,
    pub ld_second: i64,
    pub stride_first: i64,
    pub stride_second: i64,
}

/// Operand storage of one GEMM problem, as in `cs_problem`.
#[derive(Debug, Clone, Copy)]
pub struct GemmDesc {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub layout_a: Layout,
    pub layout_b: Layout,
    pub layout_cd: Layout,
    pub lda: i64,
    pub ldb: i64,
    pub stride_a: i64,
    pub stride_b: i64,
}

impl GemmDesc {
    /// The column-major formulation.
    pub fn blas(&self) -> BlasGemm {
        let (m, n, k) = (self.m as i32, self.n as i32, self.k as i32);
        match self.layout_cd {
            // Dᵀ (n x m) = Bᵀ (n x k) · Aᵀ (k x m)
            Layout::Row => BlasGemm {
                trans_first: self.layout_b == Layout::Col,
                trans_second: self.layout_a == Layout::Col,
                m: n,
                n: m,
                k,
                first_is_a: false,
                ld_first: self.ldb,
                ld_second: self.lda,
                stride_first: self.stride_b,
                stride_second: self.stride_a,
            },
            // D (m x n) = A (m x k) · B (k x n)
            Layout::Col => BlasGemm {
                trans_first: self.layout_a == Layout::Row,
                trans_second: self.layout_b == Layout::Row,
                m,
                n,
                k,
                first_is_a: true,
                ld_first: self.lda,
                ld_second: self.ldb,
                stride_first: self.stride_a,
                stride_second: self.stride_b,
            },
        }
    }
}

fn cuda_type(d: DType) -> bsys::cudaDataType {
    match d {
        DType::F32 => bsys::cudaDataType::CUDA_R_32F,
        DType::F16 => bsys::cudaDataType::CUDA_R_16F,
        DType::BF16 => bsys::cudaDataType::CUDA_R_16BF,
        DType::F64 => bsys::cudaDataType::CUDA_R_64F,
        DType::E4M3 => bsys::cudaDataType::CUDA_R_8F_E4M3,
        DType::E5M2 => bsys::cudaDataType::CUDA_R_8F_E5M2,
        DType::I64 => bsys::cudaDataType::CUDA_R_64I,
        DType::Bool => bsys::cudaDataType::CUDA_R_8U,
    }
}

fn lt_type(d: DType) -> ltsys::cudaDataType_t {
    match d {
        DType::F32 => ltsys::cudaDataType_t::CUDA_R_32F,
        DType::F16 => ltsys::cudaDataType_t::CUDA_R_16F,
        DType::BF16 => ltsys::cudaDataType_t::CUDA_R_16BF,
        DType::F64 => ltsys::cudaDataType_t::CUDA_R_64F,
        DType::E4M3 => ltsys::cudaDataType_t::CUDA_R_8F_E4M3,
        DType::E5M2 => ltsys::cudaDataType_t::CUDA_R_8F_E5M2,
        DType::I64 => ltsys::cudaDataType_t::CUDA_R_64I,
        DType::Bool => ltsys::cudaDataType_t::CUDA_R_8U,
    }
}

fn op(t: bool) -> bsys::cublasOperation_t {
    if t {
        bsys::cublasOperation_t::CUBLAS_OP_T
    } else {
        bsys::cublasOperation_t::CUBLAS_OP_N
    }
}

/// The workspace given to cuBLAS: 32 MiB, the size cuBLAS itself uses by default on
/// Hopper, so its algorithm choice is the usual one.
const CUBLAS_WORKSPACE_BYTES: usize = 32 << 20;

/// The vendor-library handles of a session.
pub struct Libraries {
    cublas: Option<cudarc::cublas::CudaBlas>,
    /// cuBLAS's workspace, set on the handle (declared after it: freed after the handle).
    /// Without one, cuBLAS allocates its workspace on the stream at each call, and a
    /// graph captured from those calls holds an allocation and a free per launch.
    _cublas_workspace: Option<DevBuf<u8>>,
    lt: Option<ltsys::cublasLtHandle_t>,
    cudnn: Option<dnsys::cudnnHandle_t>,
    pub notes: Vec<String>,
}

impl Libraries {
    /// Opens what is installed; a missing library becomes a note, not an error.
    pub fn open(s: &Session) -> Libraries {
        let mut notes = Vec::new();
        let cublas = match cudarc::cublas::CudaBlas::new(s.stream.clone()) {
            Ok(b) => Some(b),
            Err(e) => {
                notes.push(format!("cuBLAS unavailable: {e:?}"));
                None
            }
        };
        let mut cublas_workspace = None;
        if let Some(b) = &cublas {
            match s.zeros::<u8>(CUBLAS_WORKSPACE_BYTES) {
                Ok(ws) => {
                    // SAFETY: a live handle and a buffer of the stated size that lives as
                    // long as the handle (it is dropped after it).
                    let status = unsafe {
                        bsys::cublasSetWorkspace_v2(
                            *b.handle(),
                            ws.ptr as *mut c_void,
                            CUBLAS_WORKSPACE_BYTES,
                        )
                    };
                    if status == bsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                        cublas_workspace = Some(ws);
                    } else {
                        notes.push(format!("cuBLAS workspace not set: {status:?}"));
                    }
                }
                Err(e) => notes.push(format!("cuBLAS workspace not allocated: {e}")),
            }
        }
        let lt = match cudarc::cublaslt::result::create_handle() {
            Ok(h) => Some(h),
            Err(e) => {
                notes.push(format!("cuBLASLt unavailable: {e:?}"));
                None
            }
        };
        // SAFETY: only tries to dlopen the cuDNN library.
        let cudnn = if unsafe { cudarc::cudnn::sys::is_culib_present() } {
            match cudarc::cudnn::result::create_handle() {
                Ok(h) => {
                    // SAFETY: a fresh handle and the session's live stream.
                    match unsafe { cudarc::cudnn::result::set_stream(h, s.stream.cu_stream() as _) }
                    {
                        Ok(()) => Some(h),
                        Err(e) => {
                            notes.push(format!("cuDNN stream: {e:?}"));
                            None
                        }
                    }
                }
                Err(e) => {
                    notes.push(format!("cuDNN unavailable: {e:?}"));
                    None
                }
            }
        } else {
            notes.push("cuDNN library not found".into());
            None
        };
        Libraries {
            cublas,
            _cublas_workspace: cublas_workspace,
            lt,
            cudnn,
            notes,
        }
    }

    pub fn has_cublas(&self) -> bool {
        self.cublas.is_some()
    }
    pub fn has_cublaslt(&self) -> bool {
        self.lt.is_some()
    }

    /// `P = A·B` for every batch with fp32 output (dense, row-major for a row-major D)
    /// and fp32 accumulation without TF32 (`CUBLAS_COMPUTE_32F_PEDANTIC`): the reference.
    pub fn reference_gemm(
        &self,
        g: &GemmDesc,
        dtype: DType,
        a: u64,
        b: u64,
        p: u64,
    ) -> Result<(), CudaFailure> {
        let compute = bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC;
        self.gemm_with(g, dtype, DType::F32, a, b, p, 1.0, 0.0, compute)
    }

    /// The `gemm_ex`-style baseline in the workload's precision: D = alpha·A·B + beta·D,
    /// fp32 accumulation; TF32 only when the workload allows it.
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    pub fn cublas_gemm(
        &self,
        g: &GemmDesc,
        dtype: DType,
        out_dtype: DType,
        d: u64,
        a: u64,
        b: u64,
        alpha: f32,
        beta: f32,
        allow_tf32: bool,
    ) -> Result<(), CudaFailure> {
        let compute = if dtype == DType::F32 && allow_tf32 {
            bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        self.gemm_with(g, dtype, out_dtype, a, b, d, alpha, beta, compute)
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm_with(
        &self,
        g: &GemmDesc,
        in_t: DType,
        out_t: DType,
        a: u64,
        b: u64,
        out: u64,
        alpha: f32,
        beta: f32,
        compute: bsys::cublasComputeType_t,
    ) -> Result<(), CudaFailure> {
        let blas = self
            .cublas
            .as_ref()
            .ok_or_else(|| fail("cuBLAS", "not loaded"))?;
        let x = g.blas();
        let (first, second) = if x.first_is_a { (a, b) } else { (b, a) };
        let ldc = x.m as i64;
        let stride_c = (x.m as i64) * (x.n as i64);
        // SAFETY: pointers are device buffers sized for this problem by the worker; the
        // handle is bound to the session's stream.
        unsafe {
            cudarc::cublas::result::gemm_strided_batched_ex(
                *blas.handle(),
                op(x.trans_first),
                op(x.trans_second),
                x.m,
                x.n,
                x.k,
                (&alpha) as *const f32 as *const c_void,
                first as *const c_void,
                cuda_type(in_t),
                x.ld_first as i32,
                x.stride_first,
                second as *const c_void,
                cuda_type(in_t),
                x.ld_second as i32,
                x.stride_second,
                (&beta) as *const f32 as *const c_void,
                out as *mut c_void,
                cuda_type(out_t),
                ldc as i32,
                stride_c,
                g.batch as i32,
                compute,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| fail("cublasGemmStridedBatchedEx", e))
    }

    /// A cuBLASLt plan for `D = alpha * A * B` (+ a bias/activation epilogue when it
    /// has one), A and B of `dtype`, D of `out_dtype`. The scales of fp8 A and B are the
    /// caller's to fold into alpha; an fp8 D takes `d_scale` (a device pointer to an fp32).
    #[allow(clippy::too_many_arguments)]
    pub fn lt_plan(
        &self,
        g: &GemmDesc,
        dtype: DType,
        out_dtype: DType,
        allow_tf32: bool,
        epilogue: Option<(Activation, u64)>,
        d_scale: Option<u64>,
        workspace: u64,
        workspace_bytes: usize,
    ) -> Result<LtPlan, CudaFailure> {
        let h = self.lt.ok_or_else(|| fail("cuBLASLt", "not loaded"))?;
        let x = g.blas();
        let compute = if dtype == DType::F32 && !allow_tf32 {
            ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC
        } else if dtype == DType::F32 {
            ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let t = lt_type(dtype);
        let t_out = lt_type(out_dtype);
        let lt_err = |w: &str, e: cudarc::cublaslt::result::CublasError| fail(w, e);
        let desc = cudarc::cublaslt::result::create_matmul_desc(
            compute,
            ltsys::cudaDataType_t::CUDA_R_32F,
        )
        .map_err(|e| lt_err("cublasLtMatmulDescCreate", e))?;
        let set_desc = |attr: ltsys::cublasLtMatmulDescAttributes_t, v: *const c_void, n: usize| {
            // SAFETY: `v` points at a live value of the attribute's type and size.
            unsafe { cudarc::cublaslt::result::set_matmul_desc_attribute(desc, attr, v, n) }
                .map_err(|e| lt_err("cublasLtMatmulDescSetAttribute", e))
        };
        let ta = op(x.trans_first) as i32;
        let tb = op(x.trans_second) as i32;
        set_desc(
            ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
            (&ta) as *const i32 as _,
            4,
        )?;
        set_desc(
            ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
            (&tb) as *const i32 as _,
            4,
        )?;
        // fp8 operands' per-tensor scales reach cuBLASLt folded into alpha (the caller's):
        // for scalar scales that is the same product, and with A/B scale pointers set, every
        // algorithm the heuristic offered returned NOT_SUPPORTED from cublasLtMatmul
        // (cuBLASLt 13 on an H200, e4m3 TN, bf16 D). An fp8 D takes its scale by pointer.
        if let Some(sd) = d_scale {
            set_desc(
                ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
                (&sd) as *const u64 as _,
                8,
            )?;
        }
        let mut note = None;
        if let Some((act, bias)) = epilogue {
            let ep = match act {
                Activation::Relu => Some(ltsys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS),
                Activation::GeluErf | Activation::GeluTanh => {
                    note = Some("cuBLASLt's GELU epilogue is the tanh form".to_string());
                    Some(ltsys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS)
                }
                Activation::Identity => Some(ltsys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS),
                _ => None,
            };
            match ep {
                Some(ep) => {
                    let ep = ep as u32;
                    set_desc(
                        ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE,
                        (&ep) as *const u32 as _,
                        4,
                    )?;
                    set_desc(
                        ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                        (&bias) as *const u64 as _,
                        8,
                    )?;
                }
                None => {
                    note = Some(format!(
                        "cuBLASLt has no {} epilogue: plain GEMM timed",
                        act.name()
                    ))
                }
            }
        }
        let layout = |t: ltsys::cudaDataType_t,
                      rows: i32,
                      cols: i32,
                      ld: i64,
                      stride: i64|
         -> Result<ltsys::cublasLtMatrixLayout_t, CudaFailure> {
            let l = cudarc::cublaslt::result::create_matrix_layout(t, rows as u64, cols as u64, ld)
                .map_err(|e| lt_err("cublasLtMatrixLayoutCreate", e))?;
            if g.batch > 1 {
                let count = g.batch as i32;
                // SAFETY: live layout; values of the attributes' types.
                unsafe {
                    cudarc::cublaslt::result::set_matrix_layout_attribute(
                        l,
                        ltsys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                        (&count) as *const i32 as _,
                        4,
                    )
                    .map_err(|e| lt_err("layout batch", e))?;
                    cudarc::cublaslt::result::set_matrix_layout_attribute(
                        l,
                        ltsys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        (&stride) as *const i64 as _,
                        8,
                    )
                    .map_err(|e| lt_err("layout stride", e))?;
                }
            }
            Ok(l)
        };
        let (r1, c1) = if x.trans_first {
            (x.k, x.m)
        } else {
            (x.m, x.k)
        };
        let (r2, c2) = if x.trans_second {
            (x.n, x.k)
        } else {
            (x.k, x.n)
        };
        let la = layout(t, r1, c1, x.ld_first, x.stride_first)?;
        let lb = layout(t, r2, c2, x.ld_second, x.stride_second)?;
        let cd_layout = |t| layout(t, x.m, x.n, x.m as i64, x.m as i64 * x.n as i64);
        let lc = cd_layout(t_out)?;
        // An fp8 D takes a 16-bit C in cuBLASLt (C bf16 with D e4m3 or e5m2); beta is 0, so
        // C is never read, but it then has its own descriptor and must not alias D.
        let c_apart = out_dtype.is_fp8();
        let lc_in = if c_apart {
            cd_layout(ltsys::cudaDataType_t::CUDA_R_16BF)?
        } else {
            lc
        };
        let pref = cudarc::cublaslt::result::create_matmul_pref().map_err(|e| lt_err("pref", e))?;
        let ws = workspace_bytes as u64;
        // SAFETY: live preference; a u64 attribute value.
        unsafe {
            cudarc::cublaslt::result::set_matmul_pref_attribute(
                pref,
                ltsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws) as *const u64 as _,
                8,
            )
        }
        .map_err(|e| lt_err("pref workspace", e))?;
        let mut results: Vec<ltsys::cublasLtMatmulHeuristicResult_t> = Vec::with_capacity(8);
        let mut count: i32 = 0;
        // SAFETY: the results buffer has room for the 8 requested entries.
        let status = unsafe {
            ltsys::cublasLtMatmulAlgoGetHeuristic(
                h,
                desc,
                la,
                lb,
                lc_in,
                lc,
                pref,
                8,
                results.as_mut_ptr(),
                &mut count,
            )
        };
        if status != ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS || count <= 0 {
            return Err(fail("cublasLtMatmulAlgoGetHeuristic", status));
        }
        // SAFETY: the library wrote `count` entries.
        unsafe { results.set_len(count as usize) };
        let algos = results
            .into_iter()
            .filter(|r| {
                r.state == ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                    && r.workspaceSize <= workspace_bytes
            })
            .map(|r| r.algo)
            .collect();
        Ok(LtPlan {
            handle: h,
            desc,
            la,
            lb,
            lc,
            lc_in,
            c_apart,
            algos,
            workspace,
            workspace_bytes,
            first_is_a: x.first_is_a,
            note,
        })
    }

    /// cuDNN activation forward over `n` elements (as a 1 x 1 x rows x cols tensor).
    pub fn cudnn_activation(
        &self,
        act: Activation,
        dtype: DType,
        rows: usize,
        cols: usize,
    ) -> Result<DnnOp, CudaFailure> {
        let h = self.cudnn.ok_or_else(|| fail("cuDNN", "not loaded"))?;
        use dnsys::cudnnActivationMode_t as M;
        let mode = match act {
            Activation::Relu => M::CUDNN_ACTIVATION_RELU,
            Activation::Sigmoid => M::CUDNN_ACTIVATION_SIGMOID,
            Activation::Tanh => M::CUDNN_ACTIVATION_TANH,
            Activation::Silu => M::CUDNN_ACTIVATION_SWISH,
            Activation::Identity => M::CUDNN_ACTIVATION_IDENTITY,
            other => {
                return Err(fail(
                    "cuDNN",
                    format!("no {} activation in cuDNN", other.name()),
                ))
            }
        };
        let desc = tensor(dtype, [1, 1, rows as i32, cols as i32])?;
        let adesc = cudarc::cudnn::result::create_activation_descriptor()
            .map_err(|e| fail("activation desc", e))?;
        // SAFETY: a fresh descriptor.
        unsafe {
            cudarc::cudnn::result::set_activation_descriptor(
                adesc,
                mode,
                dnsys::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
                1.0,
            )
        }
        .map_err(|e| fail("activation desc", e))?;
        Ok(DnnOp {
            handle: h,
            x: desc,
            act: Some(adesc),
            softmax: false,
            log: false,
        })
    }

    /// cuDNN softmax forward over each of `rows` rows of `cols` (accurate algorithm).
    pub fn cudnn_softmax(
        &self,
        dtype: DType,
        rows: usize,
        cols: usize,
        log: bool,
    ) -> Result<DnnOp, CudaFailure> {
        let h = self.cudnn.ok_or_else(|| fail("cuDNN", "not loaded"))?;
        let desc = tensor(dtype, [rows as i32, cols as i32, 1, 1])?;
        Ok(DnnOp {
            handle: h,
            x: desc,
            act: None,
            softmax: true,
            log,
        })
    }
}

fn tensor(dtype: DType, dims: [i32; 4]) -> Result<dnsys::cudnnTensorDescriptor_t, CudaFailure> {
    let t = match dtype {
        DType::F32 => dnsys::cudnnDataType_t::CUDNN_DATA_FLOAT,
        DType::F16 => dnsys::cudnnDataType_t::CUDNN_DATA_HALF,
        DType::BF16 => dnsys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
        DType::F64 => dnsys::cudnnDataType_t::CUDNN_DATA_DOUBLE,
        DType::E4M3 | DType::E5M2 | DType::I64 | DType::Bool => {
            return Err(fail(
                "cuDNN",
                "fp8, index and boolean tensors are not used with cuDNN here",
            ))
        }
    };
    let desc =
        cudarc::cudnn::result::create_tensor_descriptor().map_err(|e| fail("tensor desc", e))?;
    // SAFETY: a fresh descriptor.
    unsafe {
        cudarc::cudnn::result::set_tensor4d_descriptor(
            desc,
            dnsys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            t,
            dims,
        )
    }
    .map_err(|e| fail("tensor desc", e))?;
    Ok(desc)
}

/// A prepared cuBLASLt matmul.
pub struct LtPlan {
    handle: ltsys::cublasLtHandle_t,
    desc: ltsys::cublasLtMatmulDesc_t,
    la: ltsys::cublasLtMatrixLayout_t,
    lb: ltsys::cublasLtMatrixLayout_t,
    lc: ltsys::cublasLtMatrixLayout_t,
    /// C's layout: D's, or a bf16 one beside an fp8 D (`c_apart`).
    lc_in: ltsys::cublasLtMatrixLayout_t,
    /// C is given A's buffer (never read, beta 0) instead of aliasing an fp8 D.
    c_apart: bool,
    pub algos: Vec<ltsys::cublasLtMatmulAlgo_t>,
    workspace: u64,
    workspace_bytes: usize,
    first_is_a: bool,
    pub note: Option<String>,
}

impl LtPlan {
    /// Enqueues D = alpha·A·B (+ epilogue) with algorithm `i`.
    pub fn run(
        &self,
        s: &Session,
        i: usize,
        a: u64,
        b: u64,
        d: u64,
        alpha: f32,
    ) -> Result<(), CudaFailure> {
        let beta = 0f32;
        let (first, second) = if self.first_is_a { (a, b) } else { (b, a) };
        let algo = self
            .algos
            .get(i)
            .ok_or_else(|| fail("cuBLASLt", "no such algorithm"))?;
        // SAFETY: descriptors were made for these buffers' shapes; the pointers are live
        // device buffers; the workspace is as large as the algorithm was filtered for.
        unsafe {
            cudarc::cublaslt::result::matmul(
                self.handle,
                self.desc,
                (&alpha) as *const f32 as _,
                (&beta) as *const f32 as _,
                first as _,
                self.la,
                second as _,
                self.lb,
                if self.c_apart { first } else { d } as _,
                self.lc_in,
                d as _,
                self.lc,
                algo as *const _,
                self.workspace as _,
                self.workspace_bytes,
                s.stream.cu_stream() as _,
            )
        }
        .map_err(|e| fail("cublasLtMatmul", e))
    }
}

/// A prepared cuDNN forward op.
pub struct DnnOp {
    handle: dnsys::cudnnHandle_t,
    x: dnsys::cudnnTensorDescriptor_t,
    act: Option<dnsys::cudnnActivationDescriptor_t>,
    softmax: bool,
    /// Softmax: log-softmax instead.
    log: bool,
}

impl DnnOp {
    /// Enqueues y = op(x).
    pub fn run(&self, x: u64, y: u64) -> Result<(), CudaFailure> {
        let (alpha, beta) = (1f32, 0f32);
        // SAFETY: x and y are device buffers of the descriptor's size.
        unsafe {
            if self.softmax {
                cudarc::cudnn::result::softmax_forward(
                    self.handle,
                    if self.log {
                        dnsys::cudnnSoftmaxAlgorithm_t::CUDNN_SOFTMAX_LOG
                    } else {
                        dnsys::cudnnSoftmaxAlgorithm_t::CUDNN_SOFTMAX_ACCURATE
                    },
                    dnsys::cudnnSoftmaxMode_t::CUDNN_SOFTMAX_MODE_CHANNEL,
                    (&alpha) as *const f32 as _,
                    self.x,
                    x as _,
                    (&beta) as *const f32 as _,
                    self.x,
                    y as _,
                )
            } else if let Some(a) = self.act {
                cudarc::cudnn::result::activation_forward(
                    self.handle,
                    a,
                    (&alpha) as *const f32 as _,
                    self.x,
                    x as _,
                    (&beta) as *const f32 as _,
                    self.x,
                    y as _,
                )
            } else {
                Ok(())
            }
        }
        .map_err(|e| fail("cuDNN forward", e))
    }
}

/// Enqueues a device-to-device copy of `bytes`.
pub fn copy(s: &Session, dst: u64, src: u64, bytes: usize) -> Result<(), CudaFailure> {
    // SAFETY: both buffers are at least `bytes` long.
    unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, s.stream.cu_stream()) }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tn_row_major_maps_to_dt_equals_bt_a() {
        let g = GemmDesc {
            m: 100,
            n: 50,
            k: 30,
            batch: 1,
            layout_a: Layout::Row,
            layout_b: Layout::Col,
            layout_cd: Layout::Row,
            lda: 30,
            ldb: 30,
            stride_a: 3000,
            stride_b: 1500,
        };
        let x = g.blas();
        assert_eq!((x.m, x.n, x.k), (50, 100, 30));
        assert!(x.trans_first && !x.trans_second && !x.first_is_a);
        assert_eq!((x.ld_first, x.ld_second), (30, 30));
    }
}
