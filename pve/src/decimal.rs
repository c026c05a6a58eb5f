//! Proxmox's `number` options (`cpulimit`, a `netN`'s `rate=`) as exact thousandths: the
//! agent compares what it reads with what it wants without floating-point rounding, and
//! writes the shortest decimal that says it (`1.5`, `2`, `0.125`).

use std::fmt;

use super::types::ValueError;

/// A non-negative decimal with at most three places, held in thousandths (`1.5` is `1500`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Thousandths(pub u64);

/// Most digits before the point accepted when reading (Proxmox's limits are far below).
const MAX_WHOLE_DIGITS: usize = 12;

impl Thousandths {
    /// `whole` units.
    pub const fn whole(whole: u64) -> Self {
        Self(whole.saturating_mul(1000))
    }

    /// Reads a Proxmox `number` as it sends or stores it (`1`, `1.5`, `0.125`, `+2`, `3.`):
    /// digits beyond the third place round half up. A negative number, an exponent or
    /// anything else is refused.
    pub fn parse(value: &str) -> Result<Self, ValueError> {
        let bad = || ValueError::new("number", value, "must be a non-negative decimal");
        let text = value.trim();
        let text = text.strip_prefix('+').unwrap_or(text);
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        if (whole.is_empty() && fraction.is_empty())
            || whole.len() > MAX_WHOLE_DIGITS
            || !whole.bytes().all(|b| b.is_ascii_digit())
            || !fraction.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad())?
        };
        let digit = |i: usize| u64::from(fraction.as_bytes().get(i).map_or(0, |b| b - b'0'));
        let mut thousandths = digit(0) * 100 + digit(1) * 10 + digit(2);
        if digit(3) >= 5 {
            thousandths += 1;
        }
        Ok(Self(whole * 1000 + thousandths))
    }
}

impl fmt::Display for Thousandths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, part) = (self.0 / 1000, self.0 % 1000);
        if part == 0 {
            return write!(f, "{whole}");
        }
        let fraction = format!("{part:03}");
        write!(f, "{whole}.{}", fraction.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::Thousandths;

    #[test]
    fn reads_what_proxmox_stores_and_writes_the_shortest_form() {
        for (text, want, shown) in [
            ("1", 1000, "1"),
            ("1.5", 1500, "1.5"),
            ("1.50", 1500, "1.5"),
            ("0.125", 125, "0.125"),
            ("0.0004", 0, "0"),
            ("0.0005", 1, "0.001"),
            (".25", 250, "0.25"),
            ("3.", 3000, "3"),
            ("+2", 2000, "2"),
            ("8192", 8_192_000, "8192"),
        ] {
            let n = Thousandths::parse(text).unwrap();
            assert_eq!(n, Thousandths(want), "{text}");
            assert_eq!(n.to_string(), shown, "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_non_negative_decimal() {
        for text in ["", ".", "-1", "1e3", "abc", "1.2.3", "1,5", "9999999999999"] {
            assert!(Thousandths::parse(text).is_err(), "{text}");
        }
    }
}
