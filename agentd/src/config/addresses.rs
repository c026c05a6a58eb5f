//! The `[addresses]` section of the agent's configuration: the host's pool of guest addresses
//! (decision 0101). Every guest the agent creates gets a static address from it (unless desired
//! state names one), written as `ip=`/`ip6=` into its Proxmox config, so Proxmox's `ipfilter`
//! holds the guest to it. Without the section a new guest keeps the golden image's `ip=dhcp`
//! and its firewall holds it to its MAC only (`bosunctl pve check` says so).
//!
//! ```toml
//! [addresses]
//! bridge = "vmbr0"                  # the bridge new guests join (default vmbr0)
//! tag = 20                          # their VLAN (default: none)
//! ipv4_first = "192.0.2.100"        # the IPv4 range handed out, first to last
//! ipv4_last = "192.0.2.199"
//! ipv4_prefix = 24                  # written with each address
//! ipv4_gateway = "192.0.2.1"        # inside the prefix; never handed out
//! ipv6_first = "2001:db8::100"      # an IPv6 range likewise (optional)
//! ipv6_last = "2001:db8::1ff"
//! ipv6_prefix = 64
//! ipv6_gateway = "2001:db8::1"
//! ```
//!
//! A range holds at most [`MAX_POOL_SCAN`] addresses, all inside the prefix of its first
//! address. The pool is the operator's network plan, not customer data, and the hub has no
//! say in it; what keeps it safe is the agent's check of every address it hands out (never
//! one its journal gave another guest, one another container on the node configures, or one
//! of the node's own).

use std::net::IpAddr;

use bosun_proto::desired::network::{Family, assignable, bridge_name_ok, same_prefix};
use serde::Deserialize;

use super::error::ConfigError;
use crate::ops::journal::guest_addresses::MAX_POOL_SCAN;

/// One family's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolRange {
    /// The first address handed out.
    pub first: IpAddr,
    /// The last.
    pub last: IpAddr,
    /// The prefix length written with each.
    pub prefix: u8,
    /// The gateway written with each (never handed out).
    pub gateway: Option<IpAddr>,
}

/// The validated pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPool {
    /// The bridge new guests join.
    pub bridge: String,
    /// Their VLAN tag.
    pub tag: Option<u16>,
    /// The IPv4 range.
    pub ipv4: Option<PoolRange>,
    /// The IPv6 range.
    pub ipv6: Option<PoolRange>,
}

/// The raw `[addresses]` section.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAddresses {
    bridge: Option<String>,
    tag: Option<u16>,
    ipv4_first: Option<IpAddr>,
    ipv4_last: Option<IpAddr>,
    ipv4_prefix: Option<u8>,
    ipv4_gateway: Option<IpAddr>,
    ipv6_first: Option<IpAddr>,
    ipv6_last: Option<IpAddr>,
    ipv6_prefix: Option<u8>,
    ipv6_gateway: Option<IpAddr>,
}

fn bad(field: &'static str, reason: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.to_string(),
    }
}

fn value(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// One family's range from its four keys (`names`: first, last, prefix, gateway).
fn range(
    family: Family,
    names: [&'static str; 4],
    parts: (Option<IpAddr>, Option<IpAddr>, Option<u8>, Option<IpAddr>),
) -> Result<Option<PoolRange>, ConfigError> {
    let [first_key, last_key, prefix_key, gateway_key] = names;
    let (first, last, prefix, gateway) = match parts {
        (None, None, None, None) => return Ok(None),
        (Some(first), Some(last), Some(prefix), gateway) => (first, last, prefix, gateway),
        _ => {
            return Err(bad(
                first_key,
                "a range needs its first, last and prefix together",
            ));
        }
    };
    for (key, address) in [(first_key, first), (last_key, last)] {
        if Family::of(address) != family || !assignable(address) {
            return Err(bad(
                key,
                format!("{address} is not a unicast {} address", family.as_str()),
            ));
        }
    }
    if !(1..=family.bits()).contains(&prefix) {
        return Err(bad(prefix_key, format!("must be 1 to {}", family.bits())));
    }
    if value(last) < value(first) {
        return Err(bad(last_key, "comes before the first address"));
    }
    if value(last) - value(first) >= MAX_POOL_SCAN {
        return Err(bad(
            last_key,
            format!("a range holds at most {MAX_POOL_SCAN} addresses"),
        ));
    }
    if !same_prefix(first, last, prefix) {
        return Err(bad(last_key, "is outside the first address's prefix"));
    }
    if let Some(gw) = gateway
        && (Family::of(gw) != family || !assignable(gw) || !same_prefix(gw, first, prefix))
    {
        return Err(bad(
            gateway_key,
            "must be a unicast address inside the range's prefix",
        ));
    }
    Ok(Some(PoolRange {
        first,
        last,
        prefix,
        gateway,
    }))
}

impl RawAddresses {
    /// Validates the section.
    pub(crate) fn settings(self) -> Result<AddressPool, ConfigError> {
        let bridge = self.bridge.unwrap_or_else(|| "vmbr0".to_owned());
        if !bridge_name_ok(&bridge) {
            return Err(bad(
                "addresses.bridge",
                "expected 1 to 16 of [A-Za-z0-9_.-]",
            ));
        }
        if let Some(tag) = self.tag
            && !(1..=4094).contains(&tag)
        {
            return Err(bad("addresses.tag", "must be 1 to 4094"));
        }
        let ipv4 = range(
            Family::V4,
            [
                "addresses.ipv4_first",
                "addresses.ipv4_last",
                "addresses.ipv4_prefix",
                "addresses.ipv4_gateway",
            ],
            (
                self.ipv4_first,
                self.ipv4_last,
                self.ipv4_prefix,
                self.ipv4_gateway,
            ),
        )?;
        let ipv6 = range(
            Family::V6,
            [
                "addresses.ipv6_first",
                "addresses.ipv6_last",
                "addresses.ipv6_prefix",
                "addresses.ipv6_gateway",
            ],
            (
                self.ipv6_first,
                self.ipv6_last,
                self.ipv6_prefix,
                self.ipv6_gateway,
            ),
        )?;
        if ipv4.is_none() && ipv6.is_none() {
            return Err(bad(
                "addresses.ipv4_first",
                "the pool needs an IPv4 or an IPv6 range",
            ));
        }
        Ok(AddressPool {
            bridge,
            tag: self.tag,
            ipv4,
            ipv6,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AddressPool, ConfigError> {
        toml::from_str::<RawAddresses>(text).unwrap().settings()
    }

    #[test]
    fn a_pool_is_one_bounded_range_per_family_inside_its_prefix() {
        let pool = parse(
            "ipv4_first = \"192.0.2.100\"\nipv4_last = \"192.0.2.199\"\nipv4_prefix = 24\n\
             ipv4_gateway = \"192.0.2.1\"\ntag = 20\n",
        )
        .unwrap();
        assert_eq!(pool.bridge, "vmbr0");
        assert_eq!(pool.tag, Some(20));
        assert_eq!(pool.ipv4.unwrap().prefix, 24);
        assert!(pool.ipv6.is_none());
        for bad in [
            // No range at all.
            "bridge = \"vmbr1\"\n",
            // Half a range.
            "ipv4_first = \"192.0.2.100\"\nipv4_prefix = 24\n",
            // Backwards.
            "ipv4_first = \"192.0.2.199\"\nipv4_last = \"192.0.2.100\"\nipv4_prefix = 24\n",
            // Across the prefix.
            "ipv4_first = \"192.0.2.100\"\nipv4_last = \"192.0.3.1\"\nipv4_prefix = 24\n",
            // Gateway outside.
            "ipv4_first = \"192.0.2.100\"\nipv4_last = \"192.0.2.101\"\nipv4_prefix = 24\nipv4_gateway = \"198.51.100.1\"\n",
            // The other family.
            "ipv4_first = \"2001:db8::1\"\nipv4_last = \"2001:db8::2\"\nipv4_prefix = 64\n",
            // Too many.
            "ipv6_first = \"2001:db8::1\"\nipv6_last = \"2001:db8::1:1\"\nipv6_prefix = 64\n",
            // Loopback.
            "ipv4_first = \"127.0.0.2\"\nipv4_last = \"127.0.0.3\"\nipv4_prefix = 8\n",
            // A bridge Proxmox would not take.
            "bridge = \"vmbr0,ip=dhcp\"\nipv4_first = \"192.0.2.100\"\nipv4_last = \"192.0.2.101\"\nipv4_prefix = 24\n",
            // A tag out of range.
            "tag = 4095\nipv4_first = \"192.0.2.100\"\nipv4_last = \"192.0.2.101\"\nipv4_prefix = 24\n",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
