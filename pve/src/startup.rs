//! A guest's `startup` option (format `pve-startup-order`: `[[order=]\d+] [,up=\d+]
//! [,down=\d+]`): where the guest comes in the node's own start at boot and stop at shutdown
//! (ascending `order` up, descending down), how long the node waits after starting it before
//! the next (`up`), and how long it gives it to shut down (`down`). Only guests with `onboot`
//! are started at boot.

use std::fmt;

/// A `startup` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupOrder {
    /// The place in the order (lower first up, last down).
    pub order: u32,
    /// Seconds to wait after starting this guest before starting the next.
    pub up: Option<u32>,
    /// Seconds this guest gets to shut down.
    pub down: Option<u32>,
}

impl StartupOrder {
    /// Parses a value the way Proxmox does (`PVE::JSONSchema::pve_parse_startup_order`):
    /// comma-separated `order=N` (or a bare `N`), `up=N`, `down=N`, empty parts skipped, a later
    /// part overriding an earlier one; `None` for anything else, or no `order`.
    pub fn parse(value: &str) -> Option<Self> {
        let mut order = None;
        let mut up = None;
        let mut down = None;
        let number = |digits: &str| {
            (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse::<u32>().ok())
                .flatten()
        };
        for part in value.split(',') {
            if part.trim().is_empty() {
                continue;
            }
            if let Some(n) = part.strip_prefix("up=") {
                up = Some(number(n)?);
            } else if let Some(n) = part.strip_prefix("down=") {
                down = Some(number(n)?);
            } else {
                order = Some(number(part.strip_prefix("order=").unwrap_or(part))?);
            }
        }
        Some(Self {
            order: order?,
            up,
            down,
        })
    }
}

impl fmt::Display for StartupOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "order={}", self.order)?;
        if let Some(up) = self.up {
            write!(f, ",up={up}")?;
        }
        if let Some(down) = self.down {
            write!(f, ",down={down}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_parses_as_proxmox_does() {
        let s = StartupOrder {
            order: 3,
            up: Some(0),
            down: Some(60),
        };
        assert_eq!(s.to_string(), "order=3,up=0,down=60");
        assert_eq!(StartupOrder::parse("order=3,up=0,down=60"), Some(s));
        assert_eq!(StartupOrder::parse("down=60,up=0,3"), Some(s));
        assert_eq!(
            StartupOrder::parse("order=2,"),
            Some(StartupOrder {
                order: 2,
                up: None,
                down: None
            })
        );
        for bad in [
            "",
            "up=5",
            "order=x",
            "order=-1",
            "sideways=1",
            "order=1,up=",
        ] {
            assert_eq!(StartupOrder::parse(bad), None, "{bad:?}");
        }
    }
}
