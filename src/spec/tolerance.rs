//! Tolerances: the spec's rule ([`Tolerance`], with the atol that grows with the shape)
//! and the bound it gives on one shape ([`ElementTolerance`]), which the comparison
//! applies to every element.

use serde::{Deserialize, Serialize};

use super::float_serde;
use super::schema::{AtolScale, DType, Family, Shape};

/// When a result element is accepted: `|got - want| <= atol_at(shape) + rtol * |want|`.
///
/// Defaults (inputs of unit scale, e.g. uniform in [-1, 1], compared against an exact
/// reference):
/// - rtol is two ulps of the output type at 1.0, so a result rounded once (or two
///   roundings that differ by one ulp) passes: bf16 1.6e-2 (2 * 2^-7), f16 2e-3
///   (2 * 2^-10); for f32 output 1e-5, room for a different f32 summation order.
/// - atol: f32 1e-5, f16 1e-3, bf16 1e-2, catching values near zero where rtol says
///   nothing.
/// - f32 GEMM with tf32 allowed: rtol 5e-3, atol 5e-3, since each operand is rounded
///   to 10 mantissa bits before the multiply (about 1e-3 of the output scale).
/// - fp8 output: two ulps at 1.0 (e4m3 0.25, e5m2 0.5).
/// - atol scales by 1/n for the row softmax families (the mean of a row); the GEMM
///   families and activations use it as is: a GEMM output's own rounding error is
///   bounded per element by the validator from the sum of |a||b| of its dot product,
///   propagated through the epilogue chain (a `slack` on top of this tolerance), so
///   the bound holds at any k.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance before scaling.
    pub atol: f64,
    /// How atol grows with the shape.
    pub atol_scale: AtolScale,
    /// The least the scaled atol may shrink to: half the output type's smallest subnormal
    /// step (f16 2^-25), the rounding no kernel can avoid. Without it an f16 softmax or L1
    /// norm of a long row (elements near 1/n, f16 subnormals) failed on honest rounding.
    pub atol_floor: f64,
}

impl Tolerance {
    /// The documented default for a family, result type and math mode.
    pub fn default_for(family: Family, out_dtype: DType, tf32: bool) -> Tolerance {
        let (rtol, atol) = if tf32 {
            (5e-3, 5e-3)
        } else {
            match out_dtype {
                DType::F32 => (1e-5, 1e-5),
                DType::F16 => (2e-3, 1e-3),
                DType::BF16 => (1.6e-2, 1e-2),
                DType::E4M3 => (0.25, 2f64.powi(-6)),
                DType::E5M2 => (0.5, 2f64.powi(-10)),
                DType::F64 => (1e-12, 1e-12),
                // An index (or a boolean) is right or wrong.
                DType::I64 | DType::Bool => (0.0, 0.0),
            }
        };
        Tolerance {
            rtol,
            atol,
            atol_scale: Self::default_scale(family),
            atol_floor: Self::subnormal_half_step(out_dtype),
        }
    }

    /// Half the gap between 0 and the smallest positive value of `d` (its subnormal step).
    pub fn subnormal_half_step(d: DType) -> f64 {
        2f64.powi(match d {
            DType::F16 => -25,
            DType::BF16 => -134,
            DType::F32 => -150,
            DType::E4M3 => -10,
            DType::E5M2 => -17,
            DType::F64 => -1075,
            DType::I64 | DType::Bool => return 0.0,
        })
    }

    /// 1/n for the row softmax families, none otherwise (see [`Tolerance`]).
    pub fn default_scale(family: Family) -> AtolScale {
        match family {
            // GEMM outputs carry a per-element bound on the dot product's rounding error
            // (from the sum of |a||b|), so their atol does not grow with k.
            Family::Gemm | Family::GemmBiasAct | Family::GemmGlu => AtolScale::None,
            Family::Softmax | Family::LogSoftmax | Family::GemmSoftmax => AtolScale::InvN,
            // The reduction's error bound (from each product's and the sum's) is carried
            // per row, like a GEMM's.
            Family::GemmReduce => AtolScale::None,
            Family::Activation => AtolScale::None,
            // L2 and L1 norms scale by 1/sqrt(n) and 1/n (set by the spec's rules).
            // gemm_norm's product carries its bound through the norm per element.
            Family::Norm | Family::Reduce | Family::GemmNorm => AtolScale::None,
            // A scan's outputs carry their own bound (from the sum of |x| before them).
            Family::Scan => AtolScale::None,
        }
    }

    /// The absolute tolerance on `shape`, after scaling.
    pub fn atol_at(&self, shape: &Shape) -> f64 {
        match self.atol_scale {
            AtolScale::None => self.atol,
            AtolScale::SqrtK => self.atol * (shape.k.max(1) as f64).sqrt(),
            AtolScale::InvN => self.atol / shape.n.max(1) as f64,
            AtolScale::InvSqrtN => self.atol / (shape.n.max(1) as f64).sqrt(),
            AtolScale::InvSqrtK => self.atol / (shape.k.max(1) as f64).sqrt(),
        }
        .max(self.atol_floor)
    }

    /// The comparison tolerance on `shape` (atol scaled), as the validator applies it.
    pub fn at(&self, shape: &Shape) -> ElementTolerance {
        ElementTolerance {
            rtol: self.rtol,
            atol: self.atol_at(shape),
        }
    }

    /// Whether `got` is close enough to `want` on `shape`: the validator's rule (NaN
    /// passes only against NaN, an infinity only against the same infinity).
    pub fn accepts(&self, got: f64, want: f64, shape: &Shape) -> bool {
        self.at(shape).accepts(got, want)
    }
}

/// How close is close enough: an element passes when |got - want| <= atol + rtol * |want|;
/// a NaN reference needs a NaN, an infinite one the same infinity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ElementTolerance {
    /// Relative tolerance (scaled by |want|).
    #[serde(with = "float_serde")]
    pub rtol: f64,
    /// Absolute tolerance.
    #[serde(with = "float_serde")]
    pub atol: f64,
}

impl ElementTolerance {
    /// The full acceptance rule for one (already written) element, so tests and other
    /// stages apply exactly what `compare` applies.
    pub fn accepts(&self, got: f64, want: f64) -> bool {
        self.accepts_with_slack(got, want, 0.0)
    }

    /// [`ElementTolerance::accepts`] with `slack` more room (see
    /// `eval::compare::compare_with_slack`).
    pub fn accepts_with_slack(&self, got: f64, want: f64, slack: f64) -> bool {
        if want.is_nan() {
            got.is_nan()
        } else if want.is_infinite() {
            got == want
        } else {
            got.is_finite() && (got - want).abs() <= self.atol + self.rtol * want.abs() + slack
        }
    }
}

/// How a GEMM's products are summed on the GPU, for the bound on its dot products' error
/// (the validator's, and the exported PyTorch package's check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Summation {
    /// fp32 (or narrower) sums with round-to-nearest: CUDA-core FMAs, exact products.
    Rounded,
    /// fp32 operands split into TF32 parts on tensor cores (3xTF32).
    TensorCoreF32,
    /// 16-bit or fp8 operands on tensor cores: each MMA's products enter the fp32
    /// accumulator truncated, a bias that grows with the number of MMA steps.
    TensorCore,
}

impl Summation {
    /// The summation a workload's GEMM gets on the GPU, from its operand type.
    pub fn of(dtype: DType, allow_tf32: bool) -> Summation {
        match dtype {
            DType::F32 if !allow_tf32 => Summation::TensorCoreF32,
            DType::F32 | DType::F64 => Summation::Rounded,
            _ => Summation::TensorCore,
        }
    }

    /// Its name in the exported package's `workload.json`.
    pub fn name(self) -> &'static str {
        match self {
            Summation::Rounded => "rounded",
            Summation::TensorCoreF32 => "tc_f32",
            Summation::TensorCore => "tc",
        }
    }
}

/// The unit roundoff that bounds a GEMM's dot products: fp32 accumulation of exact
/// products 2^-24; operands rounded to TF32 where the workload allows it 2^-10 (two
/// operands of 2^-11 each); f16 accumulation 2^-11; fp8 tensor-core accumulation, which
/// keeps fewer bits than fp32 between promotions, 2^-13.
pub fn gemm_roundoff(w: &super::Workload) -> f64 {
    if w.allow_tf32() {
        2f64.powi(-10)
    } else if w.acc_dtype() == DType::F16 {
        2f64.powi(-11)
    } else if w.dtype().is_fp8() {
        2f64.powi(-13)
    } else {
        2f64.powi(-24)
    }
}
