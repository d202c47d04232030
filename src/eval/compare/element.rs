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
