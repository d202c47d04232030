//! The roofline arithmetic of a workload: FLOPs and the fewest bytes of one run on a
//! shape, its arithmetic intensity, the least time any kernel can take on a device, and
//! which roof bounds it.

use super::schema::{ComputePipe, DType, Family, RooflineClass, Shape};
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
            DType::F32 | DType::F64 => ComputePipe::SimtF32,
        }
    }

    /// Floating-point operations of one run on `shape`.
    /// GEMM: `2 m n k batch`, plus 2 per output when beta != 0 (scale C, add); alpha is
    /// folded into the accumulator store and not counted. gemm_bias_act adds 1 per
    /// output for the bias and [`Activation::flops_per_element`] for the activation.
    /// Activation: `m n` times the per-element count. Softmax: 5 per element (max,
    /// subtract, exp, sum, scale by 1/sum).
    pub fn flops(&self, shape: &Shape) -> f64 {
        let out = shape.output_elements() as f64;
        match self.family {
            Family::Gemm | Family::GemmBiasAct => {
                let mut flops = 2.0 * shape.m as f64 * shape.n as f64 * shape.k as f64;
                flops *= shape.batch as f64;
                if self.params.beta != 0.0 {
                    flops += 2.0 * out;
                }
                if self.family == Family::GemmBiasAct {
                    if self.params.bias {
                        flops += out;
                    }
                    flops += out * self.params.activation.flops_per_element();
                }
                flops
            }
            Family::Activation => out * self.params.activation.flops_per_element(),
            Family::Softmax => 5.0 * out,
        }
    }

    /// The fewest bytes any kernel must move on `shape`: each input read once, each
    /// output written once. GEMM: A (`m k batch`) and B (`k n batch`) in `dtype`, D in
    /// `out_dtype`, C in `out_dtype` only when beta != 0, the bias (`n`, shared by the
    /// batch) in `out_dtype` when present. Activation and softmax: `m n` in, `m n` out.
    pub fn min_bytes(&self, shape: &Shape) -> f64 {
        let (m, n, k, b) = (
            shape.m as f64,
            shape.n as f64,
            shape.k as f64,
            shape.batch as f64,
        );
        let inb = self.dtype.bytes() as f64;
        let outb = self.out_dtype.bytes() as f64;
        match self.family {
            Family::Gemm | Family::GemmBiasAct => {
                let mut bytes = (m * k + k * n) * b * inb + m * n * b * outb;
                if self.params.beta != 0.0 {
                    bytes += m * n * b * outb;
                }
                if self.family == Family::GemmBiasAct && self.params.bias {
                    bytes += n * outb;
                }
                bytes
            }
            Family::Activation | Family::Softmax => m * n * b * (inb + outb),
        }
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
