//! Lenient decoding of Perl-typed answers: booleans as `0`/`1`, numbers as strings.
//!
//! PVE's JSON comes from Perl scalars, so the same field may arrive as `1`, `"1"` or `true`
//! depending on how the value was last used on the server. These helpers accept every form.

use serde::Deserialize;
use serde::de::{self, Deserializer};
use serde_json::Value;

fn value_to_u64<E: de::Error>(v: &Value) -> Result<u64, E> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                    .map(float_to_u64)
            })
            .ok_or_else(|| E::custom(format!("expected a non-negative integer, got {n}"))),
        Value::String(s) => s
            .trim()
            .parse::<u64>()
            .map_err(|_| E::custom(format!("expected an integer, got {s:?}"))),
        Value::Bool(b) => Ok(u64::from(*b)),
        other => Err(E::custom(format!("expected an integer, got {other}"))),
    }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn float_to_u64(f: f64) -> u64 {
    // Callers have checked that `f` is a non-negative whole number.
    f as u64
}

fn value_to_f64<E: de::Error>(v: &Value) -> Result<f64, E> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| E::custom(format!("expected a number, got {n}"))),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| E::custom(format!("expected a number, got {s:?}"))),
        Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        other => Err(E::custom(format!("expected a number, got {other}"))),
    }
}

pub(crate) fn value_to_bool<E: de::Error>(v: &Value) -> Result<bool, E> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Number(n) => match n.as_i64() {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(E::custom(format!("expected 0 or 1, got {n}"))),
        },
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "0" | "false" | "no" | "off" => Ok(false),
            "1" | "true" | "yes" | "on" => Ok(true),
            _ => Err(E::custom(format!("expected a boolean, got {s:?}"))),
        },
        other => Err(E::custom(format!("expected a boolean, got {other}"))),
    }
}

/// An integer given as a number or a numeric string.
pub fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    value_to_u64(&Value::deserialize(d)?)
}

/// An optional integer; `null` and an absent field give `None`.
pub fn lenient_opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => value_to_u64(&v).map(Some),
    }
}

/// An optional float given as a number or a numeric string.
pub fn lenient_opt_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => value_to_f64(&v).map(Some),
    }
}

/// A boolean given as `0`/`1`, `"0"`/`"1"` or `true`/`false`; absent or `null` is `false`.
pub fn lenient_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(false),
        v => value_to_bool(&v),
    }
}

/// A string that Perl may have sent as a number (e.g. `cpulimit`, a numeric name).
pub fn lenient_opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::Bool(b) => Ok(Some(u8::from(b).to_string())),
        other => Err(de::Error::custom(format!("expected a string, got {other}"))),
    }
}

/// A `lock` value: PVE may send `lock: ""` for a guest that holds no lock, which is `None`.
pub fn lenient_lock<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(lenient_opt_string(d)?.filter(|l| !l.trim().is_empty()))
}
