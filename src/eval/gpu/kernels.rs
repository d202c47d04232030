//! Kernels of the harness's own, compiled at run time with NVRTC: the elementwise passes
//! a PyTorch user's unfused code runs after a library GEMM (one pass per op, each reading
//! its inputs and writing a new tensor at full bandwidth: 16-byte vector loads, a
//! grid-stride loop), so a fused kernel is timed against exactly that sequence.

use std::fmt::Write as _;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};

use super::session::{CudaFailure, DevBuf, Session};
use crate::spec::chain::{BinOp, BroadcastMap, Chain, Op, Operand, TensorKind};
use crate::spec::{DType, Layout};

/// Threads per block of a pass.
const THREADS: u32 = 256;

/// Vectors of 16 bytes each thread of a pass loads per loop trip (all loads first, so
/// that enough bytes are in flight for the copy bandwidth).
const PASS_UNROLL: usize = 4;

/// Blocks of a pass an SM must hold at once (`__launch_bounds__`): 4 x 256 threads keeps
/// a pass under 64 registers, so that the transcendental ones (silu, gelu) have the warps
/// to hide their latency.
const PASS_MIN_BLOCKS: u32 = 4;

fn nvrtc_err(what: &str, e: impl std::fmt::Debug) -> CudaFailure {
    CudaFailure {
        code: -1,
        message: format!("{what}: {e:?}"),
    }
}

/// Compiles `src` with NVRTC for compute_90 (`name`: the file name its messages give) and
/// loads it into the session's context.
fn nvrtc_module(s: &Session, src: &str, name: &str) -> Result<Arc<CudaModule>, CudaFailure> {
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(
        src,
        cudarc::nvrtc::CompileOptions {
            arch: Some("compute_90"),
            name: Some(name.into()),
            ..Default::default()
        },
    )
    .map_err(|e| nvrtc_err("NVRTC", e))?;
    s.ctx.load_module(ptx).map_err(CudaFailure::from)
}

/// [`nvrtc_module`] of `src` (file `cutesmith_{name}.cu`) and its kernel `name`.
fn nvrtc_function(
    s: &Session,
    src: &str,
    name: &str,
) -> Result<(Arc<CudaModule>, CudaFunction), CudaFailure> {
    let module = nvrtc_module(s, src, &format!("cutesmith_{name}.cu"))?;
    let func = module.load_function(name).map_err(CudaFailure::from)?;
    Ok((module, func))
}

/// A launch of 256-thread blocks over `grid`, no dynamic shared memory.
fn blocks_of_256(grid: (u32, u32, u32)) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Element storage and conversions for one dtype, in C++ without CUDA headers (NVRTC
/// has none by default): bf16 and f16 are 16-bit patterns converted by bit arithmetic and
/// PTX `cvt`.
fn storage(d: DType) -> Result<(&'static str, &'static str, &'static str), CudaFailure> {
    Ok(match d {
        DType::F32 => ("float", "cs_f32_ld", "cs_f32_st"),
        DType::BF16 => ("unsigned short", "cs_bf16_ld", "cs_bf16_st"),
        DType::F16 => ("unsigned short", "cs_f16_ld", "cs_f16_st"),
        // A mask operand (never a pass's own type: the rules keep bool off A and D).
        DType::Bool => ("unsigned char", "cs_bool_ld", "cs_bool_st"),
        other => {
            return Err(nvrtc_err(
                "elementwise pass",
                format!("no pass over {} tensors", other.name()),
            ))
        }
    })
}

const PRELUDE: &str = r#"
// NVRTC has no math.h: the infinity an index op fills with (`cpp_float`), by its bits.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
__device__ __forceinline__ float cs_f32_ld(float v) { return v; }
__device__ __forceinline__ float cs_f32_st(float v) { return v; }
__device__ __forceinline__ float cs_bf16_ld(unsigned short v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ unsigned short cs_bf16_st(float f) { unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float cs_f16_ld(unsigned short v) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v)); return f; }
__device__ __forceinline__ unsigned short cs_f16_st(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float cs_bool_ld(unsigned char v) { return v != 0 ? 1.0f : 0.0f; }
__device__ __forceinline__ unsigned char cs_bool_st(float f) { return f != 0.0f ? 1 : 0; }
"#;

/// The activations' device functions, from the kernel header every kernel uses (so a
/// pass computes exactly what a fused kernel's chain computes).
const CHAIN_FUNCTIONS: &str =
    include_str!("../../../cutlass-templates/include/cutesmith_chain.cuh");

/// The part of cutesmith_chain.cuh between its markers: the math functions only.
fn chain_functions() -> &'static str {
    let start = CHAIN_FUNCTIONS
        .find("/* ---- the elementwise functions")
        .unwrap_or(0);
    let end = CHAIN_FUNCTIONS[start..]
        .find("/* The activation `act` (cs_activation)")
        .map_or(CHAIN_FUNCTIONS.len(), |e| start + e);
    &CHAIN_FUNCTIONS[start..end]
}

/// One compiled pass per op of a chain, over `total` elements of a `dtype` tensor stored
/// like D (m x n, `layout`).
pub struct Passes {
    _module: Arc<CudaModule>,
    funcs: Vec<CudaFunction>,
    /// Per pass: which saved slots and tensors it reads (for the argument list).
    pub saves: Vec<Option<usize>>,
    total: usize,
    m: usize,
    n: usize,
    col_major: bool,
    elem_bytes: usize,
}

impl Passes {
    /// Compiles the passes of `chain` (NVRTC, for the session's device).
    pub fn compile(
        s: &Session,
        chain: &Chain,
        dtype: DType,
        (m, n, batch): (usize, usize, usize),
        layout: Layout,
        maps: &[Option<BroadcastMap>],
    ) -> Result<Passes, CudaFailure> {
        let module = nvrtc_module(s, &pass_source(chain, dtype, maps)?, "cutesmith_passes.cu")?;
        let funcs = (0..chain.steps.len())
            .map(|j| module.load_function(&format!("cs_pass{j}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(CudaFailure::from)?;
        Ok(Passes {
            _module: module,
            funcs,
            saves: chain.steps.iter().map(|s| s.save).collect(),
            total: m * n * batch,
            m,
            n,
            col_major: layout == Layout::Col,
            elem_bytes: dtype.bytes() as usize,
        })
    }

    /// Number of passes.
    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    /// True when there is no pass.
    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }

    /// Bytes of one intermediate tensor.
    pub fn tensor_bytes(&self) -> usize {
        self.total * self.elem_bytes
    }

    /// Enqueues every pass: the first reads `z`, each writes a fresh tensor (`scratch`
    /// alternates between two buffers; a step that saves its result writes into
    /// `saved[slot]` instead), as separate framework ops would.
    pub fn run(
        &self,
        s: &Session,
        z: u64,
        tensors: &[u64],
        scratch: (u64, u64),
        saved: &[u64],
    ) -> Result<u64, CudaFailure> {
        let per_block = 16 / self.elem_bytes * THREADS as usize * PASS_UNROLL;
        let blocks =
            (self.total.div_ceil(per_block) as u32).clamp(1, s.info.sm_count.max(1) as u32 * 8);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let t = |i: usize| tensors.get(i).copied().unwrap_or(0);
        let sv = |i: usize| saved.get(i).copied().unwrap_or(0);
        let (total, m, n) = (self.total as i64, self.m as i64, self.n as i64);
        let col_major = i32::from(self.col_major);
        let mut x = z;
        for (j, f) in self.funcs.iter().enumerate() {
            let y = match self.saves[j] {
                Some(slot) => sv(slot),
                None if j % 2 == 0 => scratch.0,
                None => scratch.1,
            };
            let args = [sv(0), sv(1), sv(2), sv(3), t(0), t(1), t(2), t(3)];
            let mut b = s.stream.launch_builder(f);
            b.arg(&x).arg(&z);
            for a in &args {
                b.arg(a);
            }
            b.arg(&y).arg(&total).arg(&m).arg(&n).arg(&col_major);
            // SAFETY: the kernel's parameters are the pointers and sizes pushed above,
            // in order; every pointer is a live device buffer of `total` elements (the
            // vectors of their own length), or unused by this pass.
            unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
            x = y;
        }
        Ok(x)
    }
}

/// How a pass reads the second operand of its op (a binary op has one): the C++ of the
/// operand at element v of vector u, the per-thread array and pointer of a full-size
/// operand loaded as 16-byte vectors beside x, and whether it needs each element's row and
/// column (a broadcast vector operand).
struct Second {
    expr: String,
    vector: Option<(String, String)>,
    index: bool,
}

fn second(chain: &Chain, o: &Operand, ty: &str, dtype: DType) -> Second {
    let plain = |expr: String, index: bool| Second {
        expr,
        vector: None,
        index,
    };
    let vector = |ld: &str, array: String, ptr: String| Second {
        expr: format!("{ld}({array}[u][v])"),
        vector: Some((array, ptr)),
        index: false,
    };
    match o {
        Operand::Scalar(v) => plain(crate::spec::chain::cpp_float(*v), false),
        Operand::Z => vector("LDZ", "zin".into(), "z".into()),
        Operand::Saved(k) => vector("LDZ", format!("s{k}in"), format!("s{k}")),
        Operand::Tensor(i) => match chain.tensors.get(*i) {
            Some(t) if t.kind == TensorKind::Matrix && t.dtype == dtype => {
                let ld = storage(dtype).map_or("", |s| s.1);
                vector(
                    ld,
                    format!("t{i}in"),
                    format!("static_cast<const {ty}*>(t{i})"),
                )
            }
            // Another dtype: element by element, not past the end in a partial vector.
            Some(t) if t.kind == TensorKind::Matrix => plain(
                format!("(i < total ? cs_t{i}(t{i}, i, row, col, n, grow) : 0.0f)"),
                false,
            ),
            _ => plain(format!("cs_t{i}(t{i}, i, row, col, n, grow)"), true),
        },
    }
}

/// The CUDA C++ of the passes of `chain` over `dtype` tensors: one `extern "C"` kernel
/// `cs_pass<j>` per op, with no header but what NVRTC has built in.
///
/// Each thread takes one 16-byte vector of x per loop trip and loads every full-size
/// operand of the op (z, a saved value, a residual matrix) as a vector too; a broadcast
/// operand's row and column are found once per vector (a few 64-bit divisions) and stepped
/// per element, as a framework's vectorized elementwise kernels do.
///
/// A broadcast operand's index map (`maps[i]`, this shape's) is compiled in as constants.
pub fn pass_source(
    chain: &Chain,
    dtype: DType,
    maps: &[Option<BroadcastMap>],
) -> Result<String, CudaFailure> {
    let (ty, ld, st) = storage(dtype)?;
    let vec = 16 / dtype.bytes() as usize;
    let mut src = String::new();
    src.push_str("#define CS_HD __device__ __forceinline__\n");
    src.push_str(PRELUDE);
    let _ = writeln!(src, "#define LDZ(v) {ld}(v)");
    let _ = write!(
        src,
        r#"
// One vector of VEC elements from p + base: a 16-byte load when the whole vector is in
// bounds (base is a multiple of VEC, the buffer 16-byte aligned), else element by element.
template <typename T, int VEC>
__device__ __forceinline__ void cs_ldv(T (&d)[VEC], const T* __restrict__ p, long long base, long long total, bool full) {{
  if (full) {{
    *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(p + base);
  }} else {{
#pragma unroll
    for (int v = 0; v < VEC; ++v) d[v] = base + v < total ? p[base + v] : T(0);
  }}
}}
"#
    );
    src.push_str(chain_functions());
    for (ti, t) in chain.tensors.iter().enumerate() {
        let (tty, tld, _) = storage(t.dtype)?;
        let idx = match t.kind {
            TensorKind::Row => "col".to_string(),
            TensorKind::Col => "row".to_string(),
            TensorKind::Matrix => "i".to_string(),
            TensorKind::Channel(r) => format!("row * {r}LL + col / (n / {r}LL)"),
            // By the element's row of the whole output (`grow`: a softmax's passes may see
            // its rows as matrices of the last two dims, `row` the row within one).
            TensorKind::Broadcast(_) => match maps.get(ti).copied().flatten() {
                Some(b) => format!(
                    "(grow / {}LL) % {}LL * {}LL + (grow / {}LL) % {}LL * {}LL + col * {}LL",
                    b.div[0],
                    b.modulus[0],
                    b.stride[0],
                    b.div[1],
                    b.modulus[1],
                    b.stride[1],
                    b.col_stride
                ),
                None => {
                    return Err(CudaFailure {
                        code: -1,
                        message: format!("broadcast operand `{}` has no index map", t.name),
                    })
                }
            },
        };
        let _ = writeln!(
            src,
            "__device__ __forceinline__ float cs_t{ti}(const void* p, long long i, long long row, long long col, long long n, long long grow) {{ (void)i; (void)row; (void)col; (void)n; (void)grow; return {tld}(static_cast<const {tty}*>(p)[{idx}]); }}"
        );
    }
    for (j, step) in chain.steps.iter().enumerate() {
        let sec = match &step.op {
            Op::Binary(_, o) => second(chain, o, ty, dtype),
            // An index op reads each element's row and column.
            op => Second {
                expr: String::new(),
                vector: None,
                index: matches!(op, Op::Tri { .. }),
            },
        };
        let expr = step_expr(&step.op, &sec.expr);
        // A full-size operand: its vectors declared, and loaded beside x's.
        let (loads_decl, loads) = match &sec.vector {
            Some((a, ptr)) => (
                format!("    {ty} {a}[U][{vec}];\n"),
                format!("      cs_ldv({a}[u], {ptr}, base, total, full);\n"),
            ),
            None => (String::new(), String::new()),
        };
        let unroll = PASS_UNROLL;
        let (threads, min_blocks) = (THREADS, PASS_MIN_BLOCKS);
        // The row and column of the vector's first element, then stepped (wrapping into
        // the next column or row, and the next batch) per element.
        let (index, step_index) = if sec.index {
            (
                "      const long long within = base % (m * n);\n      long long row = col_major ? within % m : within / n;\n      long long col = col_major ? within / m : within % n;\n      long long grow = col_major ? 0 : base / n;\n",
                "        if (col_major) { if (++row == m) { row = 0; if (++col == n) col = 0; } }\n        else { if (++col == n) { col = 0; ++grow; if (++row == m) row = 0; } }\n",
            )
        } else {
            ("      const long long row = 0, col = 0, grow = 0;\n", "")
        };
        let _ = write!(
            src,
            r#"
extern "C" __global__ void __launch_bounds__({threads}, {min_blocks}) cs_pass{j}(const {ty}* __restrict__ x, const {ty}* __restrict__ z,
const {ty}* __restrict__ s0, const {ty}* __restrict__ s1, const {ty}* __restrict__ s2, const {ty}* __restrict__ s3,
const void* __restrict__ t0, const void* __restrict__ t1, const void* __restrict__ t2, const void* __restrict__ t3,
{ty}* __restrict__ y, long long total, long long m, long long n, int col_major)
{{
  (void)s0; (void)s1; (void)s2; (void)s3; (void)t0; (void)t1; (void)t2; (void)t3; (void)z;
  (void)m; (void)n; (void)col_major;
  constexpr int U = {unroll};
  const long long lane = (long long)blockDim.x * {vec};
  const long long step = (long long)gridDim.x * lane * U;
  for (long long b0 = (long long)blockIdx.x * lane * U + (long long)threadIdx.x * {vec}; b0 < total; b0 += step) {{
    // Every load of the trip's U vectors first, then the math and the stores.
    {ty} in[U][{vec}];
{loads_decl}#pragma unroll
    for (int u = 0; u < U; ++u) {{
      const long long base = b0 + u * lane;
      const bool full = base + {vec} <= total;
      cs_ldv(in[u], x, base, total, full);
{loads}    }}
#pragma unroll
    for (int u = 0; u < U; ++u) {{
      const long long base = b0 + u * lane;
      if (base >= total) break;
      const bool full = base + {vec} <= total;
{index}      {ty} out[{vec}];
#pragma unroll
      for (int v = 0; v < {vec}; ++v) {{
        const long long i = base + v;
        (void)i; (void)row; (void)col; (void)grow;
        const float xv = {ld}(in[u][v]);
        (void)xv;
        out[v] = {st}({expr});
{step_index}      }}
      if (full) {{
        *reinterpret_cast<uint4*>(y + base) = *reinterpret_cast<const uint4*>(out);
      }} else {{
        for (int v = 0; v < {vec}; ++v) if (base + v < total) y[base + v] = out[v];
      }}
    }}
  }}
}}
"#
        );
    }
    Ok(src)
}

/// The C++ expression of one op on `xv`, `operand` being its second operand's (see
/// [`second`]).
fn step_expr(op: &Op, operand: &str) -> String {
    match op {
        Op::Act(a, p0, p1) => a.cpp_call("xv", *p0, *p1),
        Op::Binary(b, _) => b.cpp("xv", operand),
        Op::Clamp(lo, hi) => crate::spec::chain::cpp_clamp("xv", *lo, *hi),
        Op::Neg => "-xv".into(),
        Op::Abs => "fabsf(xv)".into(),
        Op::Exp => "expf(xv)".into(),
        Op::Log => "logf(xv)".into(),
        Op::Sqrt => "sqrtf(xv)".into(),
        Op::Pow(p) => crate::spec::chain::pow_cpp("xv", *p, "f"),
        Op::Tri { upper, diag, fill } => crate::spec::chain::tri_cpp(
            "xv",
            *upper,
            *diag,
            &crate::spec::chain::cpp_float(*fill),
            "row",
            "col",
        ),
    }
}

/// A pass of one block per row over `rows` rows of `cols` values, `kernel(x, y, cols)`, as
/// a framework runs one after a library GEMM: [`RowSoftmax`] and [`RowReduce`].
pub struct RowPass {
    _module: Arc<CudaModule>,
    func: CudaFunction,
    threads: u32,
    /// Elements one thread covers in one step of its sweep, when the block is sized to the
    /// row (at most `threads`, whole warps, enough for one step over the row): short rows
    /// then take small blocks, many to an SM, as a framework's softmax kernels do.
    fit: Option<usize>,
}

impl RowPass {
    /// Compiles `src` (NVRTC) and takes its kernel `name`, launched with `threads` a block.
    fn compile(s: &Session, src: &str, name: &str, threads: u32) -> Result<RowPass, CudaFailure> {
        let (module, func) = nvrtc_function(s, src, name)?;
        Ok(RowPass {
            _module: module,
            func,
            threads,
            fit: None,
        })
    }

    /// Enqueues the pass from `x` (rows x cols) into `y`.
    pub fn run(
        &self,
        s: &Session,
        x: u64,
        y: u64,
        rows: usize,
        cols: usize,
    ) -> Result<(), CudaFailure> {
        let threads = match self.fit {
            Some(per) => (cols.div_ceil(per.max(1)).div_ceil(32) * 32)
                .clamp(32, self.threads as usize) as u32,
            None => self.threads,
        };
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let cols = cols as i64;
        let mut b = s.stream.launch_builder(&self.func);
        b.arg(&x).arg(&y).arg(&cols);
        // SAFETY: x holds rows x cols elements and y what the pass writes (rows x cols, or
        // rows), live device buffers of the pass's type; the parameters match the kernel's.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        Ok(())
    }
}

/// A row softmax (or log-softmax) pass: one block per row, an online max and sum over the
/// row, then one write of the row (`y = softmax(x)`).
pub struct RowSoftmax;

/// The CUDA C++ of the row softmax pass over `dtype` rows: a block per row (sized to the
/// row: one warp for a row of up to 32 steps of four vectors, at most 512 threads); where every
/// row starts 16-byte aligned (`cols` a multiple of the vector), both sweeps of the row
/// (the online max and sum, then the write) move 16-byte vectors, four in flight per
/// thread, as a framework's softmax kernels do; else element by element.
pub fn row_softmax_source(dtype: DType, log: bool) -> Result<String, CudaFailure> {
    let (ty, ld, st) = storage(dtype)?;
    let vec = 16 / dtype.bytes() as usize;
    let mut src = String::from(PRELUDE);
    let out = if log {
        "(v - mx) - logsm"
    } else {
        "__expf(v - mx) * inv"
    };
    let _ = write!(
        src,
        r#"
// NVRTC has no math.h: negative infinity by its bits.
#define CS_NEG_INF __int_as_float(0xff800000)
// Adds a block of values whose max is bm and whose sum of exp(v - bm) is bs to the running
// (m, s).
__device__ __forceinline__ void cs_merge(float& m, float& s, float bm, float bs) {{
  const float nm = fmaxf(m, bm);
  s = (m == CS_NEG_INF ? 0.0f : s * __expf(m - nm)) + (bm == CS_NEG_INF ? 0.0f : bs * __expf(bm - nm));
  m = nm;
}}
// The four 16-byte vectors of a sweep's step, c0 + u * span for u < 4, those inside the row.
template <typename T, int VEC>
__device__ __forceinline__ void cs_load4(T (&in)[4][VEC], const T* __restrict__ row, long long c0, long long span, long long cols) {{
#pragma unroll
  for (int u = 0; u < 4; ++u)
    if (c0 + u * span < cols) *reinterpret_cast<uint4*>(in[u]) = *reinterpret_cast<const uint4*>(row + c0 + u * span);
}}
extern "C" __global__ void __launch_bounds__(512) cs_row_softmax(const {ty}* __restrict__ x, {ty}* __restrict__ y, long long cols)
{{
  constexpr int VEC = {vec};
  __shared__ float red_m[32];
  __shared__ float red_s[32];
  const {ty}* row = x + (long long)blockIdx.x * cols;
  {ty}* out = y + (long long)blockIdx.x * cols;
  const bool vectors = cols % VEC == 0;
  float m = CS_NEG_INF, s = 0.0f;
  const long long span = (long long)blockDim.x * VEC;
  if (vectors) {{
    for (long long c0 = (long long)threadIdx.x * VEC; c0 < cols; c0 += 4 * span) {{
      {ty} in[4][VEC];
      cs_load4(in, row, c0, span, cols);
#pragma unroll
      for (int u = 0; u < 4; ++u) {{
        if (c0 + u * span >= cols) break;
        float f[VEC];
        float bm = CS_NEG_INF;
#pragma unroll
        for (int v = 0; v < VEC; ++v) {{ f[v] = {ld}(in[u][v]); bm = fmaxf(bm, f[v]); }}
        float bs = 0.0f;
#pragma unroll
        for (int v = 0; v < VEC; ++v) bs += __expf(f[v] - bm);
        cs_merge(m, s, bm, bs);
      }}
    }}
  }} else {{
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) cs_merge(m, s, {ld}(row[c]), 1.0f);
  }}
  for (int o = 16; o > 0; o >>= 1) {{
    const float om = __shfl_xor_sync(0xffffffffu, m, o);
    const float os = __shfl_xor_sync(0xffffffffu, s, o);
    cs_merge(m, s, om, os);
  }}
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {{ red_m[warp] = m; red_s[warp] = s; }}
  __syncthreads();
  const int warps = blockDim.x / 32;
  float mx = CS_NEG_INF, sm = 0.0f;
  for (int w = 0; w < warps; ++w) cs_merge(mx, sm, red_m[w], red_s[w]);
  const float inv = 1.0f / sm, logsm = logf(sm);
  (void)inv; (void)logsm;
  if (vectors) {{
    for (long long c0 = (long long)threadIdx.x * VEC; c0 < cols; c0 += 4 * span) {{
      {ty} in[4][VEC];
      cs_load4(in, row, c0, span, cols);
#pragma unroll
      for (int u = 0; u < 4; ++u) {{
        if (c0 + u * span >= cols) break;
        {ty} o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {{ const float v = {ld}(in[u][e]); o[e] = {st}({out}); }}
        *reinterpret_cast<uint4*>(out + c0 + u * span) = *reinterpret_cast<const uint4*>(o);
      }}
    }}
  }} else {{
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) {{
      const float v = {ld}(row[c]);
      out[c] = {st}({out});
    }}
  }}
}}
"#
    );
    Ok(src)
}

impl RowSoftmax {
    /// Compiles the pass (NVRTC).
    pub fn compile(s: &Session, dtype: DType, log: bool) -> Result<RowPass, CudaFailure> {
        // Four 16-byte vectors a thread a step.
        let mut pass =
            RowPass::compile(s, &row_softmax_source(dtype, log)?, "cs_row_softmax", 512)?;
        pass.fit = Some(4 * 16 / dtype.bytes() as usize);
        Ok(pass)
    }
}

/// The negative log-likelihood a framework runs after a row log-softmax (`F.nll_loss`, the
/// second half of PyTorch's cross entropy): each row's `-logp[i, t_i]`, 0 where `t_i` is
/// the ignore index; written a row (total none, a thread a row), or summed over each
/// batch's rows by one block (sum; mean over the rows kept, NaN for none), fp32 sums.
pub struct NllPass {
    _module: Arc<CudaModule>,
    func: CudaFunction,
}

/// The CUDA C++ of the NLL pass: log-probabilities in `input`'s type, D in `out`'s.
pub fn nll_source(input: DType, out: DType) -> Result<String, CudaFailure> {
    let (ti, ld, _) = storage(input)?;
    let (to, _, st) = storage(out)?;
    let mut src = String::from(PRELUDE);
    let _ = write!(
        src,
        r#"
extern "C" __global__ void __launch_bounds__(1024) cs_nll(const {ti}* __restrict__ logp, const long long* __restrict__ t, {to}* __restrict__ d, long long m, long long k, long long ignore, int total)
{{
  if (total == 0) {{
    const long long i = (long long)blockIdx.x * 1024 + threadIdx.x, r = (long long)blockIdx.y * m + i;
    if (i < m) {{
      const long long c = t[r];
      d[r] = {st}(c == ignore ? 0.0f : (c < 0 || c >= k) ? __int_as_float(0x7fc00000) : -{ld}(logp[r * k + c]));
    }}
    return;
  }}
  __shared__ float sums[32];
  __shared__ float counts[32];
  const long long b = blockIdx.x;
  float s = 0.0f, n = 0.0f;
  for (long long i = threadIdx.x; i < m; i += 1024) {{
    const long long r = b * m + i, c = t[r];
    if (c == ignore) continue;
    s += (c < 0 || c >= k) ? __int_as_float(0x7fc00000) : -{ld}(logp[r * k + c]);
    n += 1.0f;
  }}
  for (int o = 16; o > 0; o >>= 1) {{
    s += __shfl_xor_sync(0xffffffffu, s, o);
    n += __shfl_xor_sync(0xffffffffu, n, o);
  }}
  if ((threadIdx.x & 31) == 0) {{ sums[threadIdx.x / 32] = s; counts[threadIdx.x / 32] = n; }}
  __syncthreads();
  if (threadIdx.x == 0) {{
    for (int w = 1; w < 32; ++w) {{ s += sums[w]; n += counts[w]; }}
    d[b] = {st}(total == 2 ? s / n : s);
  }}
}}
"#
    );
    Ok(src)
}

impl NllPass {
    /// Compiles the pass (NVRTC).
    pub fn compile(s: &Session, input: DType, out: DType) -> Result<NllPass, CudaFailure> {
        let (module, func) = nvrtc_function(s, &nll_source(input, out)?, "cs_nll")?;
        Ok(NllPass {
            _module: module,
            func,
        })
    }

    /// Enqueues the pass: `logp` (batch x m rows of k), the int64 targets (batch x m), D;
    /// `total` as `cs_total`.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        s: &Session,
        logp: u64,
        targets: u64,
        d: u64,
        (batch, m, k): (usize, usize, usize),
        ignore: i64,
        total: i32,
    ) -> Result<(), CudaFailure> {
        let grid = if total == 0 {
            (m.div_ceil(1024).max(1) as u32, batch as u32, 1)
        } else {
            (batch as u32, 1, 1)
        };
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: (1024, 1, 1),
            shared_mem_bytes: 0,
        };
        let (m, k) = (m as i64, k as i64);
        let mut b = s.stream.launch_builder(&self.func);
        b.arg(&logp)
            .arg(&targets)
            .arg(&d)
            .arg(&m)
            .arg(&k)
            .arg(&ignore)
            .arg(&total);
        // SAFETY: logp holds batch x m x k elements of the pass's input type, targets batch x
        // m int64 values, d what the total writes (batch x m, or batch) in its output type;
        // the parameters match the kernel's.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        Ok(())
    }
}

/// The row reduction a framework runs after its elementwise passes (`torch.sum(x, 1)`,
/// `amax`, `logsumexp`, ...): a block per row of `dtype` values, fp32 accumulation, one
/// value a row written in `dtype`.
pub struct RowReduce;

/// The CUDA C++ of the row reduction pass (`kind` as `cs_reduce`: 0 sum, 1 mean, 2 max,
/// 3 min, 4 logsumexp, 5 L2): each thread strides the row, then a shuffle and shared-memory
/// tree; logsumexp takes the row's max first and a second sweep for the sum.
pub fn row_reduce_source(dtype: DType, kind: i32) -> Result<String, CudaFailure> {
    let (ty, ld, st) = storage(dtype)?;
    let mut src = String::from(PRELUDE);
    let _ = write!(
        src,
        r#"
#define CS_NEG_INF __int_as_float(0xff800000)
#define CS_POS_INF __int_as_float(0x7f800000)
__device__ __forceinline__ float cs_comb(float a, float b, int op) {{
  return op == 0 ? a + b : op == 1 ? fmaxf(a, b) : fminf(a, b);
}}
// The op over the block (256 threads), returned to every thread.
__device__ float cs_block(float v, int op) {{
  __shared__ float red[8];
  for (int o = 16; o > 0; o >>= 1) v = cs_comb(v, __shfl_xor_sync(0xffffffffu, v, o), op);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < 8; ++w) r = cs_comb(r, red[w], op);
  return r;
}}
extern "C" __global__ void __launch_bounds__(256) cs_row_reduce(const {ty}* __restrict__ x, {ty}* __restrict__ y, long long cols)
{{
  const int kind = {kind};
  const {ty}* row = x + (long long)blockIdx.x * cols;
  const int op = kind == 2 ? 1 : kind == 3 ? 2 : kind == 4 ? 1 : 0;
  float acc = op == 1 ? CS_NEG_INF : op == 2 ? CS_POS_INF : 0.0f;
  for (long long c = threadIdx.x; c < cols; c += 256) {{
    const float v = {ld}(row[c]);
    acc = kind == 5 ? acc + v * v : cs_comb(acc, v, op);
  }}
  float r = cs_block(acc, op);
  if (kind == 4) {{
    const float mx = r;
    float s = 0.0f;
    if (mx != CS_NEG_INF && mx == mx)
      for (long long c = threadIdx.x; c < cols; c += 256) s += __expf({ld}(row[c]) - mx);
    s = cs_block(s, 0);
    r = (mx != CS_NEG_INF && mx == mx) ? mx + __logf(s) : mx;
  }} else if (kind == 1) {{
    r = r / (float)cols;
  }} else if (kind == 5) {{
    r = sqrtf(r);
  }}
  if (threadIdx.x == 0) y[blockIdx.x] = {st}(r);
}}
"#
    );
    Ok(src)
}

impl RowReduce {
    /// Compiles the pass (NVRTC) for a `cs_reduce` kind: `y[r] = reduce(x[r, :])`.
    pub fn compile(s: &Session, dtype: DType, kind: i32) -> Result<RowPass, CudaFailure> {
        RowPass::compile(s, &row_reduce_source(dtype, kind)?, "cs_row_reduce", 256)
    }
}

/// The group normalization a framework runs after its elementwise passes
/// (`nn.GroupNorm`, `InstanceNorm`, `F.layer_norm` without its weight): a block per group
/// of `len` adjacent values (a row of D is `groups` of them), fp32 statistics, the
/// variance about the mean (a second sweep), then one write, with the per-channel weight
/// and bias (a row operand of n = groups x len values) applied in the same sweep, as
/// PyTorch's group norm applies its affine.
pub struct RowNorm {
    _module: Arc<CudaModule>,
    func: CudaFunction,
}

/// The per-channel affine the norm pass applies itself: the types of its weight and bias
/// (a `mul` and an `add` of a row operand), where the chain after the norm starts with
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NormAffine {
    pub weight: Option<DType>,
    pub bias: Option<DType>,
}

impl NormAffine {
    /// The leading `mul row` and `add row` steps of `after` (neither saved, and no op
    /// reading z after them): their types,
    /// their tensors' indices in `after` (weight, bias) and the number of steps they take;
    /// the pass applies them and the passes after it skip them.
    pub fn of(after: &Chain) -> (NormAffine, [Option<usize>; 2], usize) {
        let mut affine = NormAffine::default();
        let mut tensors = [None; 2];
        let mut taken = 0;
        // A later op reading z (the normalized value before the affine) needs it as a
        // tensor of its own: the passes then run the affine too.
        if after
            .steps
            .iter()
            .any(|s| matches!(s.op, Op::Binary(_, Operand::Z)))
        {
            return (affine, tensors, taken);
        }
        for want in [BinOp::Mul, BinOp::Add] {
            let Some(st) = after.steps.get(taken) else {
                break;
            };
            let Op::Binary(b, Operand::Tensor(t)) = &st.op else {
                break;
            };
            let Some(tensor) = after.tensors.get(*t) else {
                break;
            };
            if *b != want || tensor.kind != TensorKind::Row || st.save.is_some() {
                continue;
            }
            if want == BinOp::Mul {
                affine.weight = Some(tensor.dtype);
                tensors[0] = Some(*t);
            } else {
                affine.bias = Some(tensor.dtype);
                tensors[1] = Some(*t);
            }
            taken += 1;
        }
        (affine, tensors, taken)
    }
}

/// A norm pass's weight and bias in C++: their element types and loads, and whether each is
/// applied (0 or 1).
struct AffineC {
    wty: &'static str,
    wld: &'static str,
    bty: &'static str,
    bld: &'static str,
    has_w: i32,
    has_b: i32,
}

impl NormAffine {
    /// The C++ terms of the weight and bias beside `dtype` values (absent ones take its type).
    fn c_terms(self, dtype: DType) -> Result<AffineC, CudaFailure> {
        let (wty, wld, _) = storage(self.weight.unwrap_or(dtype))?;
        let (bty, bld, _) = storage(self.bias.unwrap_or(dtype))?;
        Ok(AffineC {
            wty,
            wld,
            bty,
            bld,
            has_w: i32::from(self.weight.is_some()),
            has_b: i32::from(self.bias.is_some()),
        })
    }
}

/// The CUDA C++ of the group norm pass over `dtype` values (`kind` as `cs_norm`: 0 rms,
/// 1 layer, 2 L2, 3 L1).
pub fn row_norm_source(
    dtype: DType,
    kind: i32,
    eps: f32,
    affine: NormAffine,
) -> Result<String, CudaFailure> {
    let (ty, ld, st) = storage(dtype)?;
    let AffineC {
        wty,
        wld,
        bty,
        bld,
        has_w,
        has_b,
    } = affine.c_terms(dtype)?;
    let mut src = String::from(PRELUDE);
    let _ = write!(
        src,
        r#"
// The sum over the block (256 threads), returned to every thread.
__device__ float cs_block_sum(float v) {{
  __shared__ float red[8];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < 8; ++w) r += red[w];
  return r;
}}
extern "C" __global__ void __launch_bounds__(256) cs_row_norm(const {ty}* __restrict__ x, {ty}* __restrict__ y,
    long long len, int groups, const {wty}* __restrict__ weight, const {bty}* __restrict__ bias)
{{
  const int kind = {kind};
  const float eps = {eps:?}f;
  const long long seg = blockIdx.x;
  const {ty}* in = x + seg * len;
  {ty}* out = y + seg * len;
  const long long ch0 = (seg % groups) * len;
  float a = 0.0f;
  for (long long c = threadIdx.x; c < len; c += 256) {{
    const float v = {ld}(in[c]);
    a += kind == 0 || kind == 2 ? v * v : kind == 3 ? fabsf(v) : v;
  }}
  a = cs_block_sum(a);
  float shift = 0.0f, scale;
  if (kind == 1) {{
    shift = a / (float)len;
    float d = 0.0f;
    for (long long c = threadIdx.x; c < len; c += 256) {{
      const float v = {ld}(in[c]) - shift;
      d += v * v;
    }}
    d = cs_block_sum(d);
    scale = rsqrtf(d / (float)len + eps);
  }} else if (kind == 0) {{
    scale = rsqrtf(a / (float)len + eps);
  }} else if (kind == 2) {{
    scale = 1.0f / fmaxf(sqrtf(a), eps);
  }} else {{
    scale = 1.0f / fmaxf(a, eps);
  }}
  for (long long c = threadIdx.x; c < len; c += 256) {{
    float v = ({ld}(in[c]) - shift) * scale;
    if ({has_w}) v *= {wld}(weight[ch0 + c]);
    if ({has_b}) v += {bld}(bias[ch0 + c]);
    out[c] = {st}(v);
  }}
}}
"#
    );
    Ok(src)
}

impl RowNorm {
    /// Compiles the pass (NVRTC) for a `cs_norm` kind and epsilon, with `affine`.
    pub fn compile(
        s: &Session,
        dtype: DType,
        kind: i32,
        eps: f32,
        affine: NormAffine,
    ) -> Result<RowNorm, CudaFailure> {
        let src = row_norm_source(dtype, kind, eps, affine)?;
        let (module, func) = nvrtc_function(s, &src, "cs_row_norm")?;
        Ok(RowNorm {
            _module: module,
            func,
        })
    }

    /// Enqueues the pass from `x` (`segments` groups of `len` values) into `y`; `weight`
    /// and `bias` (0 where the pass has none) hold `groups x len` values.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        s: &Session,
        x: u64,
        y: u64,
        segments: usize,
        len: usize,
        groups: usize,
        (weight, bias): (u64, u64),
    ) -> Result<(), CudaFailure> {
        let cfg = blocks_of_256((segments as u32, 1, 1));
        let (len, groups) = (len as i64, groups as i32);
        let mut b = s.stream.launch_builder(&self.func);
        b.arg(&x)
            .arg(&y)
            .arg(&len)
            .arg(&groups)
            .arg(&weight)
            .arg(&bias);
        // SAFETY: x and y hold segments x len values of the pass's type, weight and bias
        // groups x len values of theirs (or are 0 and not read); the parameters match the
        // kernel's, in order.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        Ok(())
    }
}

/// The batch norm a framework runs after its elementwise passes (`nn.BatchNorm1d` in
/// training mode on the (rows, features) output of a linear layer): each column's
/// statistics over its batch item's m rows, as PyTorch's channels-last batch norm
/// collects them (partial statistics of 32 columns over slices of rows, then a merge per
/// column), then one write with the per-feature weight and bias. Three kernels; their
/// scratch (the slices' and the columns' statistics) is allocated once here.
pub struct ColNorm {
    _module: Arc<CudaModule>,
    part: CudaFunction,
    stat: CudaFunction,
    apply: CudaFunction,
    scratch: DevBuf<u8>,
    slices: usize,
}

/// Rows a slice of [`ColNorm`]'s partial statistics.
const COL_SLICE_ROWS: usize = 128;

/// The CUDA C++ of the column norm passes over `dtype` values (eps, and the affine its
/// write applies).
pub fn col_norm_source(dtype: DType, eps: f32, affine: NormAffine) -> Result<String, CudaFailure> {
    let (ty, ld, st) = storage(dtype)?;
    let AffineC {
        wty,
        wld,
        bty,
        bld,
        has_w,
        has_b,
    } = affine.c_terms(dtype)?;
    let mut src = String::from(PRELUDE);
    let _ = write!(
        src,
        r#"
// Slice blockIdx.y of {COL_SLICE_ROWS} rows of batch blockIdx.z, 32 columns: (mean, M2).
extern "C" __global__ void __launch_bounds__(256) cs_col_part(const {ty}* __restrict__ x, float2* part,
    int m, int n, int slices)
{{
  __shared__ float red[8][33];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int col = blockIdx.x * 32 + tx;
  const int r0 = blockIdx.y * {COL_SLICE_ROWS}, r1 = min(m, r0 + {COL_SLICE_ROWS});
  const {ty}* in = x + (long long)blockIdx.z * m * n;
  float s = 0.0f;
  if (col < n) for (int r = r0 + ty; r < r1; r += 8) s += {ld}(in[(long long)r * n + col]);
  red[ty][tx] = s;
  __syncthreads();
  float t = 0.0f;
  for (int i = 0; i < 8; ++i) t += red[i][tx];
  const float cnt = (float)(r1 - r0), mean = t / cnt;
  __syncthreads();
  float q = 0.0f;
  if (col < n) for (int r = r0 + ty; r < r1; r += 8) {{
    const float d = {ld}(in[(long long)r * n + col]) - mean;
    q += d * d;
  }}
  red[ty][tx] = q;
  __syncthreads();
  if (ty == 0 && col < n) {{
    float u = 0.0f;
    for (int i = 0; i < 8; ++i) u += red[i][tx];
    part[((long long)blockIdx.z * slices + blockIdx.y) * n + col] = make_float2(mean, u);
  }}
}}
// A thread a column (of batch * n): its slices merged, (mean, rstd).
extern "C" __global__ void __launch_bounds__(256) cs_col_stat(const float2* part, float2* stat,
    int m, int n, int slices, long long columns)
{{
  const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i >= columns) return;
  const long long b = i / n, col = i % n;
  float cnt = 0.0f, mean = 0.0f, m2 = 0.0f;
  for (int s = 0; s < slices; ++s) {{
    const float2 pm = part[(b * slices + s) * n + col];
    const float nb = (float)min(m - s * {COL_SLICE_ROWS}, {COL_SLICE_ROWS}), tot = cnt + nb;
    const float d = pm.x - mean;
    mean += d * nb / tot;
    m2 += pm.y + d * d * cnt * nb / tot;
    cnt = tot;
  }}
  stat[i] = make_float2(mean, rsqrtf(m2 / (float)m + {eps:?}f));
}}
// Every element: (x - mean) * rstd, the weight and bias, one write.
extern "C" __global__ void __launch_bounds__(256) cs_col_apply(const {ty}* __restrict__ x, {ty}* __restrict__ y,
    const float2* stat, int m, int n, long long total, const {wty}* __restrict__ weight, const {bty}* __restrict__ bias)
{{
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < total; i += (long long)gridDim.x * 256) {{
    const long long col = i % n, b = i / ((long long)m * n);
    const float2 ms = stat[b * n + col];
    float v = ({ld}(x[i]) - ms.x) * ms.y;
    if ({has_w}) v *= {wld}(weight[col]);
    if ({has_b}) v += {bld}(bias[col]);
    y[i] = {st}(v);
  }}
}}
"#
    );
    Ok(src)
}

impl ColNorm {
    /// Compiles the passes (NVRTC) for `batch` items of m x n values, and allocates their
    /// statistics.
    pub fn compile(
        s: &Session,
        dtype: DType,
        eps: f32,
        affine: NormAffine,
        (batch, m, n): (usize, usize, usize),
    ) -> Result<ColNorm, CudaFailure> {
        let slices = m.div_ceil(COL_SLICE_ROWS).max(1);
        // The partial pass's grid takes the slices in y and the batch in z; its indices are
        // 32-bit ints within a batch item.
        if slices > 65535 || batch > 65535 || m > i32::MAX as usize || n > i32::MAX as usize - 32 {
            return Err(nvrtc_err(
                "batch norm pass",
                format!(
                    "{batch} x {m} x {n} is past its grid (at most 65535 slices of {COL_SLICE_ROWS} rows and 65535 batches)"
                ),
            ));
        }
        let src = col_norm_source(dtype, eps, affine)?;
        let module = nvrtc_module(s, &src, "cutesmith_col_norm.cu")?;
        let load = |name: &str| module.load_function(name).map_err(CudaFailure::from);
        let (part, stat, apply) = (
            load("cs_col_part")?,
            load("cs_col_stat")?,
            load("cs_col_apply")?,
        );
        let bytes = batch * (slices + 1) * n * 8;
        let scratch = s.zeros::<u8>(bytes.max(8))?;
        Ok(ColNorm {
            _module: module,
            part,
            stat,
            apply,
            scratch,
            slices,
        })
    }

    /// Enqueues the passes from `x` (batch x m x n values) into `y`; `weight` and `bias`
    /// (0 where the pass has none) hold n values.
    pub fn run(
        &self,
        s: &Session,
        x: u64,
        y: u64,
        (batch, m, n): (usize, usize, usize),
        (weight, bias): (u64, u64),
    ) -> Result<(), CudaFailure> {
        let part = self.scratch.ptr;
        let stat = part + (batch * self.slices * n * 8) as u64;
        let (mi, ni, si) = (m as i32, n as i32, self.slices as i32);
        let columns = (batch * n) as i64;
        let total = (batch * m * n) as i64;
        let mut b = s.stream.launch_builder(&self.part);
        b.arg(&x).arg(&part).arg(&mi).arg(&ni).arg(&si);
        let cfg = blocks_of_256((n.div_ceil(32) as u32, self.slices as u32, batch as u32));
        // SAFETY: x holds batch x m x n values of the pass's type; part has room for
        // batch x slices x n float2 (allocated for these dims); the parameters match.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        let mut b = s.stream.launch_builder(&self.stat);
        b.arg(&part)
            .arg(&stat)
            .arg(&mi)
            .arg(&ni)
            .arg(&si)
            .arg(&columns);
        let cfg = blocks_of_256(((batch * n).div_ceil(256) as u32, 1, 1));
        // SAFETY: part as above, stat has room for batch x n float2 after it.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        let mut b = s.stream.launch_builder(&self.apply);
        b.arg(&x)
            .arg(&y)
            .arg(&stat)
            .arg(&mi)
            .arg(&ni)
            .arg(&total)
            .arg(&weight)
            .arg(&bias);
        let cfg = blocks_of_256((
            ((batch * m * n).div_ceil(256) as u32).clamp(1, s.info.sm_count.max(1) as u32 * 32),
            1,
            1,
        ));
        // SAFETY: x and y hold batch x m x n values, stat batch x n float2, weight and bias
        // n values of theirs (or are 0 and not read); the parameters match, in order.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        Ok(())
    }
}

/// Checks a timed launch's output on the device against the validated answer: counts the
/// elements outside the tolerance (`|got - want| > atol + rtol |want| + slack`) and the
/// ones still holding the harness's NaN poison, into two counters per launch.
pub struct Verifier {
    _module: Arc<CudaModule>,
    func: CudaFunction,
}

/// The CUDA C++ of the verifier over `dtype` outputs.
pub fn verify_source(dtype: DType) -> Result<String, CudaFailure> {
    let (ty, ld, poison) = match dtype {
        DType::F32 => ("unsigned int", "__uint_as_float(v)", "0x7FC00001u"),
        DType::BF16 => ("unsigned short", "cs_bf16_ld(v)", "0x7FC1"),
        DType::F16 => ("unsigned short", "cs_f16_ld(v)", "0x7E01"),
        DType::E4M3 => ("unsigned char", "cs_e4m3_ld(v)", "0xFF"),
        DType::E5M2 => ("unsigned char", "cs_e5m2_ld(v)", "0xFF"),
        // An index (below 2^24 in every workload an index reduction accepts: exact in f32).
        DType::I64 => ("long long", "(float)v", "0x7FC000017FC00001ll"),
        DType::F64 | DType::Bool => return Err(nvrtc_err("verifier", "no f64 or boolean outputs")),
    };
    let mut src = String::from(PRELUDE);
    src.push_str(
        r#"
__device__ __forceinline__ float cs_e4m3_ld(unsigned char b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int e = (b >> 3) & 0xF, m = b & 7;
  if (e == 0xF && m == 7) return __int_as_float(0x7fc00000);
  return e == 0 ? sign * m * 0.001953125f : sign * (1.0f + m / 8.0f) * exp2f((float)(e - 7));
}
__device__ __forceinline__ float cs_e5m2_ld(unsigned char b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int e = (b >> 2) & 0x1F, m = b & 3;
  if (e == 0x1F) return m == 0 ? sign * __int_as_float(0x7f800000) : __int_as_float(0x7fc00000);
  return e == 0 ? sign * m * 1.52587890625e-05f : sign * (1.0f + m / 4.0f) * exp2f((float)(e - 15));
}
"#,
    );
    let _ = write!(
        src,
        r#"
extern "C" __global__ void cs_verify(const {ty}* __restrict__ got, const float* __restrict__ want,
    const float* __restrict__ slack, long long n, float rtol, float atol,
    unsigned long long* counts)
{{
  unsigned long long wrong = 0, poisoned = 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {{
    const {ty} v = got[i];
    if (v == ({ty}){poison}) {{ ++poisoned; continue; }}
    const float g = {ld};
    const float w = want[i];
    bool ok;
    if (isnan(w)) ok = isnan(g);
    else if (isinf(w)) ok = g == w;
    else ok = isfinite(g) && fabsf(g - w) <= atol + rtol * fabsf(w) + slack[i];
    if (!ok) ++wrong;
  }}
  for (int o = 16; o > 0; o >>= 1) {{
    wrong += __shfl_xor_sync(0xffffffffu, wrong, o);
    poisoned += __shfl_xor_sync(0xffffffffu, poisoned, o);
  }}
  if ((threadIdx.x & 31) == 0 && (wrong | poisoned)) {{
    atomicAdd(&counts[0], wrong);
    atomicAdd(&counts[1], poisoned);
  }}
}}
"#
    );
    Ok(src)
}

impl Verifier {
    /// Compiles the verifier for `dtype` outputs (NVRTC).
    pub fn compile(s: &Session, dtype: DType) -> Result<Verifier, CudaFailure> {
        let (module, func) = nvrtc_function(s, &verify_source(dtype)?, "cs_verify")?;
        Ok(Verifier {
            _module: module,
            func,
        })
    }

    /// Enqueues the check of `n` elements at `got` against `want`/`slack` (device f32
    /// arrays), adding to the two counters at `counts`.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        s: &Session,
        got: u64,
        want: u64,
        slack: u64,
        n: usize,
        (rtol, atol): (f32, f32),
        counts: u64,
    ) -> Result<(), CudaFailure> {
        let blocks = (n.div_ceil(256) as u32).clamp(1, s.info.sm_count.max(1) as u32 * 8);
        let cfg = blocks_of_256((blocks, 1, 1));
        let n = n as i64;
        let mut b = s.stream.launch_builder(&self.func);
        b.arg(&got)
            .arg(&want)
            .arg(&slack)
            .arg(&n)
            .arg(&rtol)
            .arg(&atol)
            .arg(&counts);
        // SAFETY: got holds n outputs of the verifier's type, want and slack n f32 each,
        // counts two u64; the parameters match the kernel's.
        unsafe { b.launch(cfg) }.map_err(CudaFailure::from)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::chain::OpSpec;

    fn chain(ops: &[(&str, Option<&str>)]) -> Chain {
        let specs: Vec<OpSpec> = ops
            .iter()
            .map(|(op, operand)| OpSpec {
                op: (*op).into(),
                operand: operand.map(Into::into),
                ..OpSpec::default()
            })
            .collect();
        let mut c = Chain::default();
        c.extend_from_spec(&specs, DType::BF16).unwrap();
        c
    }

    /// A broadcast operand's pass reads it by the shape's map, compiled in as constants
    /// (here an ALiBi-like [1, H, 1, T] term of a [2, 3, 4, 5] output); without a map the
    /// source is refused rather than indexed some other way.
    #[test]
    fn a_broadcast_operand_pass_indexes_by_its_map() {
        let mut c = Chain::default();
        c.extend_from_spec(
            &[OpSpec {
                op: "add".into(),
                operand: Some("broadcast".into()),
                over: Some(vec![1, 3]),
                ..OpSpec::default()
            }],
            DType::BF16,
        )
        .unwrap();
        let map = BroadcastMap::new(&[2, 3, 4, 5], 0b1010, 1).unwrap();
        assert_eq!(
            (map.div[0], map.modulus[0], map.stride[0], map.col_stride),
            (4, 3, 5, 1)
        );
        let src = pass_source(&c, DType::BF16, &[Some(map)]).unwrap();
        assert!(
            src.contains("(grow / 4LL) % 3LL * 5LL + (grow / 1LL) % 1LL * 0LL + col * 1LL"),
            "{src}"
        );
        assert!(pass_source(&c, DType::BF16, &[]).is_err());
    }

    /// The source of pass `j` alone.
    fn pass(src: &str, j: usize) -> &str {
        let start = src
            .find(&format!("cs_pass{j}("))
            .expect("the pass is there");
        let end = src[start..]
            .find("extern \"C\"")
            .map_or(src.len(), |e| start + e);
        &src[start..end]
    }

    #[test]
    fn passes_load_full_size_operands_as_vectors_and_index_broadcasts_once_per_vector() {
        let c = chain(&[
            ("add", Some("row")),
            ("silu", None),
            ("sub", Some("matrix")),
            ("max", Some("z")),
        ]);
        let src = pass_source(&c, DType::BF16, &[]).unwrap();
        // Every pass moves x by 16-byte vectors, four a thread in flight, under 64 registers.
        assert_eq!(src.matches("__launch_bounds__(256, 4)").count(), 4);
        assert_eq!(src.matches("constexpr int U = 4;").count(), 4);
        // The row operand: row and column found once per vector (one 64-bit division),
        // then stepped; no other pass divides.
        let p0 = pass(&src, 0);
        assert_eq!(p0.matches("base % (m * n)").count(), 1, "{p0}");
        assert!(p0.contains("cs_t0(t0, i, row, col, n, grow)"), "{p0}");
        for j in 1..4 {
            assert!(!pass(&src, j).contains('%'), "pass {j} divides");
        }
        // The residual matrix and z are loaded as vectors beside x.
        let p2 = pass(&src, 2);
        assert!(p2.contains("cs_ldv(t1in[u]"), "{p2}");
        assert!(p2.contains("cs_bf16_ld(t1in[u][v])"), "{p2}");
        let p3 = pass(&src, 3);
        assert!(p3.contains("cs_ldv(zin[u], z,"), "{p3}");
        // bf16 stores by the hardware conversion.
        assert!(src.contains("cvt.rn.bf16.f32"));
    }

    #[test]
    fn a_matrix_operand_of_another_dtype_is_read_element_by_element_inside_the_tensor() {
        let specs = [OpSpec {
            op: "add".into(),
            operand: Some("matrix".into()),
            dtype: Some(DType::F32),
            ..OpSpec::default()
        }];
        let mut c = Chain::default();
        c.extend_from_spec(&specs, DType::BF16).unwrap();
        let src = pass_source(&c, DType::BF16, &[]).unwrap();
        assert!(
            src.contains("(i < total ? cs_t0(t0, i, row, col, n, grow) : 0.0f)"),
            "{src}"
        );
        assert!(!src.contains("cs_ldv(t0in"));
    }

    #[test]
    fn the_row_softmax_moves_vectors_where_rows_are_aligned() {
        for (d, vec) in [(DType::BF16, 8), (DType::F32, 4)] {
            let src = row_softmax_source(d, false).unwrap();
            assert!(src.contains(&format!("constexpr int VEC = {vec};")));
            assert!(src.contains("const bool vectors = cols % VEC == 0;"));
            assert_eq!(src.matches("cs_load4(in, row, c0, span, cols);").count(), 2);
        }
        assert!(row_softmax_source(DType::BF16, true)
            .unwrap()
            .contains("(v - mx) - logsm"));
    }
}
