//! Serde for f64 that survives JSON: non-finite values become "NaN", "inf", "-inf"
//! (JSON has no such numbers), and read back.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else if v.is_nan() {
        s.serialize_str("NaN")
    } else if *v > 0.0 {
        s.serialize_str("inf")
    } else {
        s.serialize_str("-inf")
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Repr {
    Num(f64),
    Text(String),
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match Option::<Repr>::deserialize(d)? {
        None => Ok(f64::NAN),
        Some(Repr::Num(x)) => Ok(x),
        Some(Repr::Text(t)) => match t.to_ascii_lowercase().as_str() {
            "nan" => Ok(f64::NAN),
            "inf" | "+inf" | "infinity" | "+infinity" => Ok(f64::INFINITY),
            "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
            other => Err(D::Error::custom(format!("not a number: {other:?}"))),
        },
    }
}
