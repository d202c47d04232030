//! The precision hint: normalized errors of sampled GEMM entries against fp64 read as
//! the arithmetic that produced them (fp32, TF32, bf16/f16).

use super::fmt_num;

// ---------------------------------------------------------------------------------------
// Precision hint.
// ---------------------------------------------------------------------------------------

/// fp32 (or fp64) arithmetic: unit roundoff 2^-24 ~ 6e-8; up to 1e-6 allows for fp32
/// accumulation over long reductions.
const FP32_MAX: f64 = 1e-6;
/// Below this (and above FP32_MAX) the error is between fp32 and 10-bit-mantissa levels.
const MIXED_MAX: f64 = 5e-5;
/// tf32 or fp16 inputs: 10 explicit mantissa bits, unit roundoff 2^-11 ~ 4.9e-4; the
/// upper edge sits at the geometric mean of 2^-11 and 2^-8.
const TF32_MAX: f64 = 1.4e-3;
/// bf16 inputs: 7 explicit mantissa bits, unit roundoff 2^-8 ~ 3.9e-3.
const BF16_MAX: f64 = 1e-2;

/// Says which arithmetic a GEMM's errors are consistent with, so a "wrong" result that is
/// merely reduced precision (tf32, bf16, fp16 inputs) is told from a real bug.
///
/// Input: sampled errors normalized as |got - ref_fp64| / sum_k |a_ik * b_kj|. The median
/// is classified: <= 1e-6 fp32/fp64; <= 5e-5 between fp32 and tf32 (partly reduced
/// precision); <= 1.4e-3 tf32 or fp16 inputs (u = 2^-11 ~ 4.9e-4); <= 1e-2 bf16 inputs
/// (u = 2^-8 ~ 3.9e-3); above, more than bf16 rounding explains. A max above 1e-2 and
/// 100x the median is flagged as outliers (some elements really wrong). Note: for
/// random-sign data rounding errors partly cancel, so this statistic falls below u by up
/// to ~sqrt(K) for long reductions; the bands assume errors near u. Returns None when no
/// finite, non-negative sample is given.
pub fn precision_hint(normalized_errors: &[f64]) -> Option<String> {
    let mut v: Vec<f64> = normalized_errors
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    };
    let max = v[n - 1];
    let class = if median <= FP32_MAX {
        "fp32 (or fp64) arithmetic"
    } else if median <= MIXED_MAX {
        "something between fp32 and tf32/fp16 rounding (reduced precision in part of the computation, or fp32 with unusual accumulation)"
    } else if median <= TF32_MAX {
        "tf32 or fp16 inputs (10 mantissa bits, unit roundoff 2^-11 ~ 4.9e-4)"
    } else if median <= BF16_MAX {
        "bf16 inputs (7 mantissa bits, unit roundoff 2^-8 ~ 3.9e-3)"
    } else {
        "more error than bf16 rounding explains (fp8 inputs, or a real bug)"
    };
    let mut s = format!(
        "normalized error median {}, max {} over {n} samples: consistent with {class}",
        fmt_num(median),
        fmt_num(max)
    );
    if max > BF16_MAX && max > 100.0 * median {
        s.push_str(&format!(
            "; outliers up to {} suggest some elements are really wrong",
            fmt_num(max)
        ));
    }
    Some(s)
}
