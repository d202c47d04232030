//! The roofline arithmetic of a workload: FLOPs and the fewest bytes of one run on a
//! shape, its arithmetic intensity, the least time any kernel can take on a device, and
//! which roof bounds it.

use super::chain::TensorKind;
use super::schema::{ComputePipe, DType, Family, NormKind, ReduceKind, RooflineClass, Shape};
use super::Workload;

impl Workload {
    /// Which peak FLOP/s bounds this workload's arithmetic.
    pub fn compute_pipe(&self) -> ComputePipe {
        if !self.family.is_gemm() {
            return ComputePipe::SimtF32;
        }
        match self.dtype {
            DType::F16 => ComputePipe::TensorF16,
            DType::BF16 => ComputePipe::TensorBf16,
            DType::F32 if self.allow_tf32 => ComputePipe::TensorTf32,
            DType::E4M3 | DType::E5M2 => ComputePipe::TensorFp8,
            DType::F32 | DType::F64 | DType::I64 | DType::Bool => ComputePipe::SimtF32,
        }
    }

    /// Floating-point operations of one run on `shape`.
    /// GEMM: `2 m n k batch`, plus 2 per output when beta != 0 (scale C, add); alpha is
    /// folded into the accumulator store and not counted; then the epilogue chain's
    /// per-element count ([`crate::spec::Chain::flops_per_element`]: gemm_bias_act's bias
    /// add and activation are the first ops of its chain). gemm_glu: two GEMMs plus the
    /// gate and a multiply per output. gemm_softmax: the GEMM plus the row softmax.
    /// Activation: `m n` times the chain's count (the activation is its first op).
    /// Norm: 3 per element (a square or abs and a sum, the scale), 5 for LayerNorm (the
    /// mean, the centered square and sum, the shift and scale), plus the chain's count.
    /// Softmax: 5 per element (max, subtract, exp, sum, scale by 1/sum); log-softmax 6
    /// (max, subtract, exp, sum, log, subtract). gemm_reduce: the GEMM, the chain on each
    /// product, the reduction's count per product (as the reduce family's) and the
    /// `[[after]]` ops on each of the m results.
    pub fn flops(&self, shape: &Shape) -> f64 {
        let out = shape.output_elements() as f64;
        let gemm = 2.0 * shape.m as f64 * shape.n as f64 * shape.k as f64 * shape.batch as f64;
        let c_term = if self.params.beta != 0.0 {
            2.0 * out
        } else {
            0.0
        };
        let softmax = if self.params.log_softmax { 6.0 } else { 5.0 };
        match self.family {
            Family::Gemm | Family::GemmBiasAct => {
                gemm + c_term + out * self.chain.flops_per_element()
            }
            Family::GemmGlu => 2.0 * gemm + out * (self.params.gate.flops_per_element() + 1.0),
            Family::GemmSoftmax => gemm + c_term + (softmax + self.chain.flops_per_element()) * out,
            Family::Activation => out * self.chain.flops_per_element(),
            // The ops before the softmax on each element, then the softmax.
            Family::Softmax => (5.0 + self.chain.flops_per_element()) * out,
            // The ops before the scan, one add or multiply an element, then the chain on
            // each result.
            Family::Scan => {
                (1.0 + self.before.flops_per_element() + self.chain.flops_per_element()) * out
            }
            Family::LogSoftmax => (6.0 + self.chain.flops_per_element()) * out,
            Family::Norm => {
                (if matches!(self.params.norm, NormKind::Layer | NormKind::Batch) {
                    5.0
                } else {
                    3.0
                } + self.chain.flops_per_element())
                    * out
            }
            // A compare or add an element (logsumexp: subtract, exp, add, and the max
            // pass; L2: square and add), then the chain on each result.
            Family::Reduce => {
                (self.reduce_flops_per_element() + self.before.flops_per_element())
                    * shape.m as f64
                    * shape.k as f64
                    * shape.batch as f64
                    + out * self.chain.flops_per_element()
            }
            Family::GemmReduce => {
                gemm + out * (self.chain.flops_per_element() + self.reduce_flops_per_element())
                    + self.d_elements(shape) as f64 * self.after.flops_per_element()
            }
            // The ops before the norm, its statistics and scale, and the chain after it.
            Family::GemmNorm => {
                gemm + c_term
                    + (self.before.flops_per_element()
                        + if matches!(self.params.norm, NormKind::Layer | NormKind::Batch) {
                            5.0
                        } else {
                            3.0
                        }
                        + self.chain.flops_per_element())
                        * out
            }
        }
    }

    /// A reduction's FLOPs per element reduced.
    fn reduce_flops_per_element(&self) -> f64 {
        match self.params.reduce {
            ReduceKind::Logsumexp | ReduceKind::CrossEntropy => 4.0,
            ReduceKind::L2 => 2.0,
            _ => 1.0,
        }
    }

    /// The fewest bytes any kernel must move on `shape`: each input read once, each
    /// output written once. GEMM: A (`m k`, once per batch unless shared) and B (`k n`,
    /// likewise) in `dtype`, D in `out_dtype`, C in `out_dtype` only when beta != 0, and
    /// the chain's tensors (a row vector `n`, a column vector `m`, both shared by the
    /// batch; a matrix `m n` per batch) in their own types (gemm_bias_act's bias is one
    /// of them). gemm_glu reads B and B2. Activation and softmax: `m n` in, `m n` out, and
    /// the chain's tensors.
    pub fn min_bytes(&self, shape: &Shape) -> f64 {
        let t = self.tensor_sizes(shape);
        t.inputs + t.output + t.chain
    }

    /// Device bytes that validating and timing `shape` holds at once: two problems (timing
    /// alternates two input sets, each with its own output), the chain's tensors, the
    /// baselines' buffers ([`Workload::timing_buffers`]: the library's output, the
    /// copy's destination, the unfused sequence's scratch, gemm_reduce's tail, one per
    /// saved value) and, for the GEMM families, the fp32 reference products (the value and
    /// the sum of |a b| per output, twice for gemm_glu). An estimate for admission, not an
    /// allocator's count.
    pub fn device_bytes(&self, shape: &Shape) -> f64 {
        let t = self.tensor_sizes(shape);
        let reference_planes = match self.family {
            Family::Gemm
            | Family::GemmBiasAct
            | Family::GemmSoftmax
            | Family::GemmReduce
            | Family::GemmNorm => 8.0,
            Family::GemmGlu => 16.0,
            Family::Activation
            | Family::Softmax
            | Family::LogSoftmax
            | Family::Norm
            | Family::Reduce
            | Family::Scan => 0.0,
        };
        let need = self.timing_buffers();
        let outb = self.out_dtype.bytes() as f64;
        // The library's output has the whole product's size (gemm_reduce's D is smaller).
        let lib = if self.family == Family::GemmReduce {
            t.elements * outb
        } else {
            t.output
        };
        // The copy's destination: half of what the op moves, its tensors' bytes included.
        let copy = (t.inputs + t.chain + t.output) / 2.0;
        let count = |b: bool| if b { 1.0 } else { 0.0 };
        let buffers = lib
            * (count(need.library_out)
                + count(need.second_output(t.inputs, t.output))
                + 2.0 * count(need.scratch)
                + self.chain.saved.len() as f64
                + if self.family == Family::GemmNorm {
                    self.before.saved.len() as f64
                } else {
                    0.0
                })
            + count(need.copy) * copy
            + 3.0 * count(need.reduce_tail) * t.output
            + count(need.log_probs)
                * shape.m as f64
                * shape.k as f64
                * shape.batch as f64
                * self.dtype.bytes() as f64;
        // A read through a view holds the view's whole input, and the elements it reads
        // packed for the reference (as many as the output's: `inputs` counts a broadcast
        // dim's elements once).
        let view = self.view_on(shape).map_or(0.0, |v| {
            (v.input_len as f64 + t.elements - v.reads as f64) * self.dtype.bytes() as f64
        });
        // Two problem sets, each with its own chain tensors (a loss's target is as large
        // as A).
        2.0 * (t.inputs + t.output + t.chain + view) + buffers + reference_planes * t.elements
    }

    /// An activation-family workload whose chain is one activation and nothing else
    /// (cuDNN's activation is its library baseline, with no elementwise passes).
    pub fn is_single_activation(&self) -> bool {
        self.family == Family::Activation
            && self.chain.steps.len() == 1
            && matches!(self.chain.steps[0].op, crate::spec::chain::Op::Act(..))
    }

    /// Which of the timing's output-sized baseline buffers this workload's baselines
    /// write: the worker allocates those at full size (one element otherwise).
    pub fn timing_buffers(&self) -> TimingBuffers {
        let fam = self.family;
        // The unfused sequence's elementwise passes: the chain after the library op (and
        // for gemm_glu the gate and the product).
        let passes = match fam {
            Family::Gemm | Family::GemmBiasAct | Family::GemmSoftmax | Family::GemmReduce => {
                !self.chain.steps.is_empty()
            }
            Family::GemmNorm => true,
            // One activation alone is cuDNN's, not a pass.
            Family::Activation => !self.chain.steps.is_empty() && !self.is_single_activation(),
            Family::GemmGlu => true,
            // The ops before a softmax: passes, then the softmax pass.
            Family::Softmax | Family::LogSoftmax => !self.chain.steps.is_empty(),
            Family::Norm | Family::Reduce | Family::Scan => false,
        };
        let cross_entropy = fam == Family::Reduce && self.params.reduce.reads_targets();
        TimingBuffers {
            library_out: fam.is_gemm()
                || cross_entropy
                || matches!(
                    fam,
                    Family::Softmax | Family::LogSoftmax | Family::Activation
                ),
            log_probs: cross_entropy,
            library_out2: fam == Family::GemmGlu,
            copy: !fam.is_gemm(),
            scratch: passes || matches!(fam, Family::GemmSoftmax | Family::GemmNorm),
            reduce_tail: matches!(fam, Family::GemmReduce | Family::GemmNorm),
        }
    }

    /// The bytes of `shape`'s tensors, by role (what [`Workload::min_bytes`] and
    /// [`Workload::device_bytes`] add up).
    fn tensor_sizes(&self, shape: &Shape) -> TensorSizes {
        let (m, n, k, b) = (
            shape.m as f64,
            shape.n as f64,
            shape.k as f64,
            shape.batch as f64,
        );
        let inb = self.dtype.bytes() as f64;
        let outb = self.out_dtype.bytes() as f64;
        let elements = m * n * b;
        let ba = if self.layouts.shared_a { 1.0 } else { b };
        let bb = if self.layouts.shared_b { 1.0 } else { b };
        let c = if self.params.beta != 0.0 {
            elements * outb
        } else {
            0.0
        };
        let (inputs, chain) = match self.family {
            Family::Gemm | Family::GemmBiasAct | Family::GemmSoftmax | Family::GemmNorm => (
                (m * k * ba + k * n * bb) * inb + c,
                self.tensor_bytes(shape),
            ),
            Family::GemmGlu => ((m * k * ba + 2.0 * k * n * bb) * inb, 0.0),
            Family::GemmReduce => ((m * k * ba + k * n * bb) * inb, self.tensor_bytes(shape)),
            // (A broadcast view reads each input element once.)
            Family::Activation => (
                self.view_on(shape).map_or(elements, |v| v.reads as f64) * inb,
                self.tensor_bytes(shape),
            ),
            Family::Softmax | Family::LogSoftmax | Family::Norm | Family::Scan => {
                (elements * inb, self.tensor_bytes(shape))
            }
            // m rows of k elements in (and a cross entropy's int64 target a row), one
            // value a row out (or one a batch).
            Family::Reduce => {
                let targets = if self.params.reduce.reads_targets() {
                    m * b * 8.0
                } else {
                    0.0
                };
                (m * k * b * inb + targets, self.tensor_bytes(shape))
            }
        };
        TensorSizes {
            inputs,
            output: self.d_elements(shape) as f64 * outb,
            chain,
            elements,
        }
    }

    /// Bytes of the chain's tensors on `shape`: a row vector `n`, a column vector `m` (both
    /// shared by the batch), a matrix `m n` per batch, each in its own type.
    fn tensor_bytes(&self, shape: &Shape) -> f64 {
        let (m, n, k, b) = (
            shape.m as f64,
            shape.n as f64,
            shape.k as f64,
            shape.batch as f64,
        );
        // A reduction's [[before]] tensors are indexed like A: k values, m values, m x k;
        // gemm_norm's and a scan's like D.
        let dims = shape.dims.as_slice();
        let before = if self.family.before_like_d() {
            chain_tensor_bytes(&self.before, (n, m, m * n * b), dims)
        } else {
            chain_tensor_bytes(&self.before, (k, m, m * k * b), dims)
        };
        chain_tensor_bytes(&self.chain, (n, m, m * n * b), dims) + before
    }

    /// Elements of the `[[before]]` tensors on `shape` (a reduction's indexed like A: k values,
    /// m values, m x k a batch).
    pub fn before_elements(&self, shape: &Shape) -> f64 {
        let (m, b) = (shape.m as f64, shape.batch as f64);
        // gemm_norm's and a scan's are indexed like D (n values a row).
        let k = if self.family.before_like_d() {
            shape.n as f64
        } else {
            shape.k as f64
        };
        self.before
            .tensors
            .iter()
            .map(|t| tensor_len(t.kind, (k, m, m * k * b), shape.dims.as_slice()))
            .sum()
    }

    /// FLOPs per byte on `shape`.
    pub fn arithmetic_intensity(&self, shape: &Shape) -> f64 {
        let bytes = self.min_bytes(shape);
        if bytes > 0.0 {
            self.flops(shape) / bytes
        } else {
            0.0
        }
    }

    /// The least time any kernel can take on `shape` on a device moving
    /// `bytes_per_s` and computing `flops_per_s` (pick the latter by
    /// [`Workload::compute_pipe`]): the larger of the two times.
    pub fn roofline_floor_s(&self, shape: &Shape, bytes_per_s: f64, flops_per_s: f64) -> f64 {
        let mem = self.min_bytes(shape) / bytes_per_s;
        let math = self.flops(shape) / flops_per_s;
        mem.max(math)
    }

    /// Memory- or compute-bound on `shape`, against a ridge point in FLOPs per byte
    /// (peak FLOP/s / peak bytes/s).
    pub fn roofline_class(&self, shape: &Shape, ridge_flops_per_byte: f64) -> RooflineClass {
        if self.arithmetic_intensity(shape) >= ridge_flops_per_byte {
            RooflineClass::ComputeBound
        } else {
            RooflineClass::MemoryBound
        }
    }

    /// The index of the cheapest shape (fewest FLOPs, then fewest bytes): the one
    /// sanitizer runs use.
    pub fn smallest_shape(&self) -> usize {
        self.shapes()
            .iter()
            .enumerate()
            .min_by(|a, b| {
                self.flops(a.1)
                    .total_cmp(&self.flops(b.1))
                    .then(self.min_bytes(a.1).total_cmp(&self.min_bytes(b.1)))
            })
            .map_or(0, |(i, _)| i)
    }
}

/// Which of the timing's output-sized baseline buffers a workload's baselines write
/// ([`Workload::timing_buffers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimingBuffers {
    /// The library op's output: cuBLAS / cuBLASLt for the GEMM families, cuDNN's softmax
    /// or activation.
    pub library_out: bool,
    /// gemm_glu's second library GEMM.
    pub library_out2: bool,
    /// The device copy's destination (every family but the GEMMs).
    pub copy: bool,
    /// The unfused sequence's two ping-pong buffers (elementwise passes, gemm_softmax's
    /// row softmax).
    pub scratch: bool,
    /// gemm_reduce's reduction output and its [[after]] passes' buffers; gemm_norm's norm
    /// output and the buffers of the passes after it.
    pub reduce_tail: bool,
    /// A cross entropy's unfused log-softmax output: the logits' size and type.
    pub log_probs: bool,
}

impl TimingBuffers {
    /// Whether the second library-output buffer is written: gemm_glu's second GEMM, or the
    /// copy's source where the output is larger than the input (bf16 in, f32 out: the copy
    /// moves half of each, more than the input holds), given their bytes.
    pub fn second_output(&self, input_bytes: f64, output_bytes: f64) -> bool {
        self.library_out2 || (self.copy && input_bytes < output_bytes)
    }
}

/// Bytes of a chain's tensors: `row` values a row vector, `col` a column vector, `matrix`
/// a matrix (every batch), a broadcast tensor the product of the `dims` it spans, each in
/// its own type.
fn chain_tensor_bytes(chain: &crate::spec::Chain, lens: (f64, f64, f64), dims: &[u64]) -> f64 {
    chain
        .tensors
        .iter()
        .map(|t| tensor_len(t.kind, lens, dims) * t.dtype.bytes() as f64)
        .sum()
}

/// Elements of a tensor of `kind`: (`row`, `col`, `matrix`) values by kind; a broadcast
/// tensor's from the shape's `dims`.
fn tensor_len(kind: TensorKind, (row, col, matrix): (f64, f64, f64), dims: &[u64]) -> f64 {
    match kind {
        TensorKind::Row => row,
        TensorKind::Col => col,
        TensorKind::Channel(r) => col * f64::from(r),
        TensorKind::Matrix => matrix,
        TensorKind::Broadcast(mask) => dims
            .iter()
            .enumerate()
            .filter(|(d, _)| mask & (1 << d) != 0)
            .map(|(_, &v)| v as f64)
            .product(),
    }
}

/// One shape's tensors by role, in bytes (elements: of the output).
struct TensorSizes {
    /// A and B (and B2), once per batch unless shared, and C when beta != 0.
    inputs: f64,
    /// D.
    output: f64,
    /// The epilogue chain's tensors.
    chain: f64,
    elements: f64,
}
