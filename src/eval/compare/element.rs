//! The output element types the comparison reads, and the NaN patterns that poison an
//! output before a launch (so an unwritten element is told from a computed NaN).

/// An output element type the validator reads, so one comparison routine serves every
/// dtype the harness moves (and a reference of another type).
pub trait Element: Copy + Send + Sync {
    /// Short type name for reports ("f32", "bf16", ...).
    const NAME: &'static str;
    /// The value, widened exactly to f64, so comparisons happen in one precision.
    fn to_f64(self) -> f64;
    /// True when the bits are exactly the harness's poison NaN, i.e. the element was never
    /// written; a NaN computed by the kernel has other bits (canonical NaN).
    fn is_poison_bits(self) -> bool;
    /// The poison NaN the harness fills outputs with before a launch.
    fn poison() -> Self;
}

/// The poison NaN for `T`, for callers that prefer a free function.
pub fn poison<T: Element>() -> T {
    T::poison()
}

const F32_POISON: u32 = 0x7FC0_0001;
const F64_POISON: u64 = 0x7FF8_0000_0000_0001;
const BF16_POISON: u16 = 0x7FC1;
const F16_POISON: u16 = 0x7E01;

impl Element for f32 {
    const NAME: &'static str = "f32";
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn is_poison_bits(self) -> bool {
        self.to_bits() == F32_POISON
    }
    fn poison() -> Self {
        f32::from_bits(F32_POISON)
    }
}

impl Element for f64 {
    const NAME: &'static str = "f64";
    fn to_f64(self) -> f64 {
        self
    }
    fn is_poison_bits(self) -> bool {
        self.to_bits() == F64_POISON
    }
    fn poison() -> Self {
        f64::from_bits(F64_POISON)
    }
}

impl Element for half::bf16 {
    const NAME: &'static str = "bf16";
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
    fn is_poison_bits(self) -> bool {
        self.to_bits() == BF16_POISON
    }
    fn poison() -> Self {
        half::bf16::from_bits(BF16_POISON)
    }
}

impl Element for half::f16 {
    const NAME: &'static str = "f16";
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    fn is_poison_bits(self) -> bool {
        self.to_bits() == F16_POISON
    }
    fn poison() -> Self {
        half::f16::from_bits(F16_POISON)
    }
}

/// The poison of an index output: two copies of f32's poison NaN's bits (a fill of
/// 32-bit words writes it), an index no row has.
pub const I64_POISON: i64 = 0x7FC0_0001_7FC0_0001;

impl Element for i64 {
    const NAME: &'static str = "i64";
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn is_poison_bits(self) -> bool {
        self == I64_POISON
    }
    fn poison() -> Self {
        I64_POISON
    }
}

/// fp8 E4M3 (the "fn" variant: finite only, max 448; S.1111.111 is NaN), as its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct E4M3(pub u8);

/// fp8 E5M2 (IEEE-like: infinities and NaNs, max 57344), as its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct E5M2(pub u8);

/// The exact value of an fp8 code with `man` mantissa bits and exponent `bias`.
fn fp8_decode(bits: u8, man: u32, bias: i32, ieee_specials: bool) -> f64 {
    let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp_mask = (0x7Fu8 >> man) as i32;
    let e = ((bits & 0x7F) >> man) as i32;
    let m = (bits & ((1u8 << man) - 1)) as f64;
    let scale = (1u64 << man) as f64;
    if e == exp_mask {
        if ieee_specials {
            return if m == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        if m == scale - 1.0 {
            return f64::NAN;
        }
    }
    if e == 0 {
        sign * m / scale * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + m / scale) * 2f64.powi(e - bias)
    }
}

/// The nearest fp8 code to `v` (round to nearest even), saturating to the largest finite
/// value as the CUDA conversions with `__NV_SATFINITE` do; NaN stays NaN.
fn fp8_encode(v: f64, man: u32, bias: i32, max_finite: f64, nan: u8) -> u8 {
    if v.is_nan() {
        return nan;
    }
    let sign: u8 = if v.is_sign_negative() { 0x80 } else { 0 };
    let a = v.abs();
    let min_normal_exp = 1 - bias;
    let scale = (1u64 << man) as f64;
    if a >= max_finite {
        let e = max_finite.log2().floor() as i32;
        let m = (max_finite / 2f64.powi(e) - 1.0) * scale;
        return sign | (((e + bias) as u8) << man) | m as u8;
    }
    let e = if a > 0.0 {
        (a.log2().floor() as i32).max(min_normal_exp)
    } else {
        min_normal_exp
    };
    // a = q * 2^(e - man), q in [0, 2^(man+1)) for normals, [0, 2^man) for subnormals.
    let mut q = (a / 2f64.powi(e - man as i32)).round_ties_even();
    let mut e = e;
    if q >= 2.0 * scale {
        q /= 2.0;
        e += 1;
    }
    let (exp_field, m) = if q >= scale {
        (e + bias, q - scale)
    } else {
        (0, q) // subnormal (or zero)
    };
    let code = sign | (((exp_field as u8) << man) | m as u8);
    // Rounding up past the largest finite value saturates.
    if fp8_decode(code & 0x7F, man, bias, false).is_nan()
        || fp8_decode(code & 0x7F, man, bias, false) > max_finite
    {
        return fp8_encode(sign_of(sign) * max_finite, man, bias, max_finite, nan);
    }
    code
}

fn sign_of(s: u8) -> f64 {
    if s != 0 {
        -1.0
    } else {
        1.0
    }
}

impl E4M3 {
    pub const MAX: f64 = 448.0;
    pub fn from_f64(v: f64) -> Self {
        E4M3(fp8_encode(v, 3, 7, Self::MAX, 0x7F))
    }
}

impl E5M2 {
    pub const MAX: f64 = 57344.0;
    pub fn from_f64(v: f64) -> Self {
        E5M2(fp8_encode(v, 2, 15, Self::MAX, 0x7F))
    }
}

impl Element for E4M3 {
    const NAME: &'static str = "e4m3";
    fn to_f64(self) -> f64 {
        fp8_decode(self.0, 3, 7, false)
    }
    /// The negative NaN (0xFF); conversions produce the positive one.
    fn is_poison_bits(self) -> bool {
        self.0 == 0xFF
    }
    fn poison() -> Self {
        E4M3(0xFF)
    }
}

impl Element for E5M2 {
    const NAME: &'static str = "e5m2";
    fn to_f64(self) -> f64 {
        fp8_decode(self.0, 2, 15, true)
    }
    fn is_poison_bits(self) -> bool {
        self.0 == 0xFF
    }
    fn poison() -> Self {
        E5M2(0xFF)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_codes_round_trip_exactly() {
        for b in 0..=255u8 {
            let v = E4M3(b).to_f64();
            if v.is_nan() {
                assert!(b & 0x7F == 0x7F, "{b:#x}");
                continue;
            }
            assert_eq!(E4M3::from_f64(v).to_f64(), v, "e4m3 {b:#x} = {v}");
            let w = E5M2(b).to_f64();
            if w.is_finite() {
                assert_eq!(E5M2::from_f64(w).to_f64(), w, "e5m2 {b:#x} = {w}");
            }
        }
        assert_eq!(E4M3(0x7E).to_f64(), 448.0);
        assert_eq!(E4M3(0x01).to_f64(), 2f64.powi(-9));
        assert_eq!(E5M2(0x7B).to_f64(), 57344.0);
        assert_eq!(E5M2(0x7C).to_f64(), f64::INFINITY);
        assert_eq!(E5M2(0x01).to_f64(), 2f64.powi(-16));
    }

    #[test]
    fn fp8_rounds_to_nearest_even_and_saturates() {
        // 1.0625 lies halfway between 1.0 and 1.125 in e4m3: ties to even (1.0).
        assert_eq!(E4M3::from_f64(1.0625).to_f64(), 1.0);
        assert_eq!(E4M3::from_f64(1.1875).to_f64(), 1.25);
        assert_eq!(E4M3::from_f64(1.07).to_f64(), 1.125);
        assert_eq!(E4M3::from_f64(1000.0).to_f64(), 448.0);
        assert_eq!(E4M3::from_f64(-1000.0).to_f64(), -448.0);
        assert_eq!(E5M2::from_f64(1e9).to_f64(), 57344.0);
        assert_eq!(E4M3::from_f64(1e-12).to_f64(), 0.0);
        assert!(E4M3::from_f64(f64::NAN).to_f64().is_nan());
        assert!(E4M3::poison().is_poison_bits());
        assert!(E4M3::poison().to_f64().is_nan());
    }
}
