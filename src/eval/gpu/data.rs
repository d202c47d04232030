//! Inputs and outputs on the host: element types, counter-based random inputs (signed,
//! with a spread of magnitudes, reproducible from a seed and parallel to generate), and
//! the NaN poison and guard pattern the harness writes around every output.

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

use crate::eval::compare::{Element, E4M3, E5M2};
use crate::spec::DType;

/// An element type the harness moves between host and device.
pub trait HostElement: Element + DeviceRepr + ValidAsZeroBits + Default + 'static {
    /// Rounds an f64 to this type (round to nearest even).
    fn from_f64(v: f64) -> Self;
    /// The element's bits, widened (for device fills of a pattern).
    fn bits(self) -> u32;
    /// The workload dtype this is.
    const DTYPE: DType;
    /// The guard pattern around an output: a finite value no kernel computes by accident.
    fn guard() -> Self {
        Self::from_f64(-1234.5)
    }
    /// Whether an element still holds the guard (by value; an index by its bits).
    fn is_guard(self) -> bool {
        self.to_f64() == Self::guard().to_f64()
    }
}

impl HostElement for i64 {
    fn from_f64(v: f64) -> Self {
        v as i64
    }
    /// An index's fill pattern is a 32-bit word written twice: its low half (every
    /// pattern this type is filled with has equal halves).
    fn bits(self) -> u32 {
        self as u32
    }
    const DTYPE: DType = DType::I64;
    /// Equal halves (a 32-bit fill writes it) and negative: no index.
    fn guard() -> Self {
        i64::from_ne_bytes([0xC3; 8])
    }
    /// Every bit (as an f64, a write to the low bits would go unseen).
    fn is_guard(self) -> bool {
        self == Self::guard()
    }
}

impl HostElement for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn bits(self) -> u32 {
        self.to_bits()
    }
    const DTYPE: DType = DType::F32;
}

impl HostElement for half::bf16 {
    fn from_f64(v: f64) -> Self {
        half::bf16::from_f64(v)
    }
    fn bits(self) -> u32 {
        u32::from(self.to_bits())
    }
    const DTYPE: DType = DType::BF16;
}

impl HostElement for half::f16 {
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
    fn bits(self) -> u32 {
        u32::from(self.to_bits())
    }
    const DTYPE: DType = DType::F16;
}

// SAFETY: both fp8 types are a transparent u8: any bit pattern is valid, zero included.
unsafe impl DeviceRepr for E4M3 {}
unsafe impl ValidAsZeroBits for E4M3 {}
unsafe impl DeviceRepr for E5M2 {}
unsafe impl ValidAsZeroBits for E5M2 {}

impl HostElement for E4M3 {
    fn from_f64(v: f64) -> Self {
        E4M3::from_f64(v)
    }
    fn bits(self) -> u32 {
        u32::from(self.0)
    }
    const DTYPE: DType = DType::E4M3;
}

impl HostElement for E5M2 {
    fn from_f64(v: f64) -> Self {
        E5M2::from_f64(v)
    }
    fn bits(self) -> u32 {
        u32::from(self.0)
    }
    const DTYPE: DType = DType::E5M2;
}

/// SplitMix64: a counter-based generator, so element i of stream s under seed x is the
/// same however the work is split across threads.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value of element `i` of input `stream` under `seed`: uniform in (-1, 1), scaled
/// by 2^e with e uniform in {-2, ..., 2}, so signs and magnitudes both vary (never all
/// in [0, 1), never zeros).
pub fn input_value(seed: u64, stream: u64, i: u64) -> f64 {
    let r = mix(seed ^ mix(stream.wrapping_mul(0xA24B_AED4_963E_E407) ^ i));
    let u = ((r >> 11) as f64) / ((1u64 << 53) as f64); // [0, 1)
    let e = (r & 0x7) % 5; // 0..4
    let v = 2.0 * u - 1.0;
    let v = if v == 0.0 { 0.5 } else { v };
    v * f64::powi(2.0, e as i32 - 2)
}

/// The target class of row `i` of input `stream` under `seed`: uniform in 0..classes, or
/// None (the row is left out: a cross entropy's ignore index) for about one row in 16.
pub fn input_class(seed: u64, stream: u64, i: u64, classes: u64) -> Option<u64> {
    let r = mix(seed ^ mix(stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i));
    (r & 0xF != 0).then(|| (r >> 4) % classes.max(1))
}

/// `n` random elements of input `stream`, generated on all cores.
pub fn random_vec<T: HostElement>(n: usize, seed: u64, stream: u64) -> Vec<T> {
    let mut out = vec![T::default(); n];
    parallel_fill(&mut out, |i| {
        T::from_f64(input_value(seed, stream, i as u64))
    });
    out
}

/// Fills `out[i] = f(i)` on all cores.
pub fn parallel_fill<T: Send, F: Fn(usize) -> T + Sync>(out: &mut [T], f: F) {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(64);
    let chunk = out.len().div_ceil(threads).max(1 << 16);
    std::thread::scope(|s| {
        for (c, part) in out.chunks_mut(chunk).enumerate() {
            let f = &f;
            s.spawn(move || {
                let base = c * chunk;
                for (j, slot) in part.iter_mut().enumerate() {
                    *slot = f(base + j);
                }
            });
        }
    });
}

/// Elements of guard region placed before and after every output buffer.
pub const GUARD_ELEMENTS: usize = 4096;

/// The guard pattern: a finite value no kernel computes by accident (-1234.5).
pub fn guard<T: HostElement>() -> T {
    T::guard()
}

/// An output buffer's host image: guard, poison (the output proper), guard.
pub fn poisoned_output<T: HostElement>(len: usize) -> Vec<T> {
    let mut v = vec![guard::<T>(); len + 2 * GUARD_ELEMENTS];
    for x in &mut v[GUARD_ELEMENTS..GUARD_ELEMENTS + len] {
        *x = T::poison();
    }
    v
}

/// True when both guard regions of a downloaded output still hold the pattern.
pub fn guards_intact<T: HostElement>(buf: &[T]) -> bool {
    let n = buf.len();
    if n < 2 * GUARD_ELEMENTS {
        return false;
    }
    buf[..GUARD_ELEMENTS]
        .iter()
        .chain(&buf[n - GUARD_ELEMENTS..])
        .all(|x| x.is_guard())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_signed_spread_and_reproducible() {
        let a: Vec<f32> = random_vec(100_000, 7, 0);
        let b: Vec<f32> = random_vec(100_000, 7, 0);
        let c: Vec<f32> = random_vec(100_000, 8, 0);
        let d: Vec<f32> = random_vec(100_000, 7, 1);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        let neg = a.iter().filter(|x| **x < 0.0).count();
        assert!((40_000..60_000).contains(&neg), "{neg} negatives");
        assert!(a.iter().any(|x| x.abs() > 1.0));
        assert!(a.iter().any(|x| x.abs() < 0.25));
        assert!(a.iter().all(|x| *x != 0.0 && x.abs() < 4.0));
    }

    #[test]
    fn index_fill_patterns_are_one_word_twice() {
        // fill_bits writes an 8-byte element as its low 32-bit word twice.
        for v in [guard::<i64>(), <i64 as Element>::poison()] {
            let word = u64::from(v.bits());
            assert_eq!(v as u64, word << 32 | word, "{v:#x}");
        }
        assert!(guard::<i64>() < 0, "the guard is no index");
        // A write to the guard's low bits is seen (its f64 would not change).
        let mut v: Vec<i64> = poisoned_output(3);
        assert!(guards_intact(&v));
        v[0] ^= 1;
        assert!(!guards_intact(&v));
        assert!(
            <i64 as Element>::poison() > 1 << 40,
            "the poison is no index"
        );
    }

    #[test]
    fn guards_detect_writes_outside_the_output() {
        let mut v: Vec<half::bf16> = poisoned_output(10);
        assert!(guards_intact(&v));
        assert!(v[GUARD_ELEMENTS].is_poison_bits());
        v[GUARD_ELEMENTS + 10] = half::bf16::from_f32(1.0);
        assert!(!guards_intact(&v));
    }
}
