//! Reference arithmetic in fp64 on the CPU: the activations, the row softmax, the GEMM
//! epilogue, and the sampled fp64 cross-check of GEMM outputs that catches a kernel
//! computing in lower precision than its workload (TF32 or fp16 inside fp32).

use crate::eval::compare::Element;
use crate::spec::{Activation, DType};

/// The activation in fp64.
pub fn activation(act: Activation, x: f64, slope: f64) -> f64 {
    match act {
        Activation::Identity => x,
        Activation::Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        Activation::LeakyRelu => {
            if x >= 0.0 || x.is_nan() {
                x
            } else {
                slope * x
            }
        }
        Activation::GeluErf => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        Activation::GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Activation::Tanh => x.tanh(),
    }
}

/// erf in fp64 (W. J. Cody's rational approximations are overkill here: this uses the
/// series for small |x| and the continued fraction for large |x|, accurate to ~1e-15).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // Maclaurin series: erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
        let mut term = a;
        let mut sum = a;
        let x2 = a * a;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let t = term / (2.0 * n + 1.0);
            sum += t;
            if t.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a > 6.0 {
        1.0
    } else {
        // erfc by Lentz's continued fraction.
        let tiny = 1e-300;
        let mut f = a;
        let mut c = a;
        let mut d = 0.0;
        for i in 1..200 {
            let an = i as f64 / 2.0;
            d = a + an * d;
            d = if d.abs() < tiny { tiny } else { d };
            c = a + an / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        1.0 - (-a * a).exp() / (f * std::f64::consts::PI.sqrt())
    };
    if x < 0.0 {
        -r
    } else {
        r
    }
}

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
