//! Reading a JSON request body the way the OpenAPI documents describe it.
//!
//! JSON Schema counts `969.0` as an integer, so a field the documents type `integer` may be
//! sent with a fraction of zero (a client whose numbers are all doubles does). serde reads an
//! integer only from the integer spelling; [`from_slice`] reads the body as it is first and,
//! only when that fails, once more with every whole number written as a float (at most 2^53
//! in size, where a double is still exact) turned into that integer. A fraction (`969.5`), a
//! float past 2^53 and an integer out of the field's range stay errors, with serde's message
//! naming the value and what was expected. A body that parses the first time costs nothing
//! more.

use serde::de::DeserializeOwned;
use serde_json::{Number, Value};

/// The largest float taken as an integer: past it, a double no longer holds every integer.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// Parses `bytes` as `T`, taking a whole float (`969.0`, `9.69e2`) where `T` wants an integer.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    match serde_json::from_slice(bytes) {
        Ok(parsed) => Ok(parsed),
        Err(first) if first.is_data() => {
            let Ok(mut value) = serde_json::from_slice::<Value>(bytes) else {
                return Err(first);
            };
            if whole_floats_to_integers(&mut value) {
                serde_json::from_value(value)
            } else {
                Err(first)
            }
        }
        Err(other) => Err(other),
    }
}

/// Turns each whole float in `value` into its integer; whether any was.
fn whole_floats_to_integers(value: &mut Value) -> bool {
    match value {
        Value::Number(number) => match whole(number) {
            Some(integer) => {
                *number = integer;
                true
            }
            None => false,
        },
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |any, item| whole_floats_to_integers(item) | any),
        Value::Object(fields) => fields
            .values_mut()
            .fold(false, |any, item| whole_floats_to_integers(item) | any),
        Value::Null | Value::Bool(_) | Value::String(_) => false,
    }
}

/// The integer a float stands for, when it is whole and exact.
fn whole(number: &Number) -> Option<Number> {
    if !number.is_f64() {
        return None;
    }
    let float = number.as_f64()?;
    if float.fract() != 0.0 || float.abs() > EXACT {
        return None;
    }
    // Exact: whole and within 2^53.
    let text = format!("{float:.0}");
    text.parse::<i64>().ok().map(Number::from)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Body {
        ttl_seconds: u32,
        #[serde(default)]
        items: Vec<i64>,
        #[serde(default)]
        ratio: Option<f64>,
    }

    #[test]
    fn a_whole_float_is_its_integer() {
        let body: Body = from_slice(br#"{"ttl_seconds": 969.0, "items": [-2.0, 3e2]}"#).unwrap();
        assert_eq!(
            body,
            Body {
                ttl_seconds: 969,
                items: vec![-2, 300],
                ratio: None
            }
        );
        let body: Body = from_slice(br#"{"ttl_seconds": 969, "ratio": 2.5}"#).unwrap();
        assert_eq!(body.ratio, Some(2.5));
        let body: Body = from_slice(br#"{"ttl_seconds": 9.0, "ratio": 2.0}"#).unwrap();
        assert_eq!((body.ttl_seconds, body.ratio), (9, Some(2.0)));
    }

    #[test]
    fn a_fraction_or_a_value_out_of_range_is_refused_by_name() {
        let err = from_slice::<Body>(br#"{"ttl_seconds": 969.5}"#).unwrap_err();
        assert!(err.to_string().contains("969.5"), "{err}");
        let err = from_slice::<Body>(br#"{"ttl_seconds": 5000000000.0}"#).unwrap_err();
        assert!(err.to_string().contains("5000000000"), "{err}");
        let err = from_slice::<Body>(br#"{"ttl_seconds": -1.0}"#).unwrap_err();
        assert!(err.to_string().contains("-1"), "{err}");
        let err = from_slice::<Body>(br#"{"ttl_seconds": 1e300}"#).unwrap_err();
        assert!(err.to_string().contains("floating point"), "{err}");
        // Past 2^53 a double is not exact: refused, never rounded.
        let err = from_slice::<Body>(br#"{"ttl_seconds": 1, "items": [9007199254740993.0]}"#);
        assert!(err.is_err());
        // Other errors are the first parse's.
        let err = from_slice::<Body>(br#"{"ttl_seconds": 1.0, "x": 1}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        assert!(from_slice::<Body>(b"{").unwrap_err().is_eof());
    }
}
