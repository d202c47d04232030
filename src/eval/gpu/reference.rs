//! Reference arithmetic in fp64 on the CPU: the activations, the row softmax, the GEMM
//! epilogue, and the sampled fp64 cross-check of GEMM outputs that catches a kernel
//! computing in lower precision than its workload (TF32 or fp16 inside fp32).

use crate::eval::compare::Element;
use crate::spec::{Activation, DType};

/// The activation in fp64 with one parameter (the leaky slope; other parameters at
/// their defaults).
pub fn activation(act: Activation, x: f64, slope: f64) -> f64 {
    let (p0, p1) = act.default_params();
    let p0 = if act == Activation::LeakyRelu {
        slope
    } else {
        p0
    };
    act.eval(x, p0, p1)
}

pub use crate::spec::chain::erf;

/// Softmax of each of `rows` rows of `cols` inputs, into `out` (dense), in fp64.
pub fn softmax_rows<T: Element>(x: &[T], rows: usize, cols: usize, ld: usize, out: &mut [f64]) {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let per = rows.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (t, chunk) in out.chunks_mut(per * cols).enumerate() {
            s.spawn(move || {
                for (rr, orow) in chunk.chunks_mut(cols).enumerate() {
                    let r = t * per + rr;
                    let row = &x[r * ld..r * ld + cols];
                    let max = row
                        .iter()
                        .map(|v| v.to_f64())
                        .fold(f64::NEG_INFINITY, f64::max);
                    let mut sum = 0.0;
                    for (o, v) in orow.iter_mut().zip(row) {
                        *o = (v.to_f64() - max).exp();
                        sum += *o;
                    }
                    for o in orow.iter_mut() {
                        *o /= sum;
                    }
                }
            });
        }
    });
}

/// Unit roundoff of a type's significand (half an ulp at 1.0).
pub fn unit_roundoff(d: DType) -> f64 {
    match d {
        DType::F64 => f64::EPSILON / 2.0,
        DType::F32 => f32::EPSILON as f64 / 2.0,
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::E4M3 => 2f64.powi(-4),
        DType::E5M2 => 2f64.powi(-3),
        DType::I64 | DType::Bool => 0.0,
    }
}

/// The GEMM epilogue in fp64: act(alpha * acc + beta * c + bias).
pub fn epilogue(
    acc: f64,
    alpha: f64,
    beta: f64,
    c: f64,
    bias: f64,
    act: Activation,
    slope: f64,
) -> f64 {
    activation(act, alpha * acc + beta * c + bias, slope)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (-1.0, -0.842_700_792_949_714_9),
        ] {
            assert!((erf(x) - want).abs() < 1e-14, "erf({x}) = {}", erf(x));
        }
    }

    #[test]
    fn activations() {
        assert_eq!(activation(Activation::Relu, -2.0, 0.0), 0.0);
        assert_eq!(activation(Activation::LeakyRelu, -2.0, 0.1), -0.2);
        assert!(
            (activation(Activation::GeluErf, 1.0, 0.0) - 0.841_344_746_068_542_9).abs() < 1e-14
        );
        assert!(
            (activation(Activation::GeluTanh, 1.0, 0.0) - 0.841_191_990_607_477_6).abs() < 1e-12
        );
        assert!((activation(Activation::Sigmoid, 0.0, 0.0) - 0.5).abs() < 1e-15);
        assert!((activation(Activation::Silu, 1.0, 0.0) - 0.731_058_578_630_004_9).abs() < 1e-14);
        assert!(activation(Activation::Relu, f64::NAN, 0.0).is_nan());
    }

    #[test]
    fn softmax_rows_sum_to_one() {
        let x: Vec<f32> = vec![1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let mut out = vec![0.0; 6];
        softmax_rows(&x, 2, 3, 4, &mut out);
        assert!((out[..3].iter().sum::<f64>() - 1.0).abs() < 1e-15);
        assert!((out[3] - 1.0 / 3.0).abs() < 1e-15);
        assert!(out[2] > out[1] && out[1] > out[0]);
    }
}
