//! A guest's network (DESIGN §7, "Addresses are Bosun's to assign"; decision 0101): the bridge
//! and VLAN its `net0` joins, and a static IPv4 and IPv6 address each desired state names, or,
//! for a family it leaves out, one the agent assigns from the host's pool. The agent writes the
//! address as a static `ip=`/`ip6=` into the new guest's Proxmox config, so Proxmox's
//! `ipfilter` holds the guest to it.
//!
//! Unsigned: a hub may place a new guest's address, never move one. The agent gives an address
//! only to a guest it is creating, never one another guest holds (its journal, any container's
//! config on the node) or the node itself; a changed address for a guest that exists is
//! refused in the report (an address moves only by the operator's hand).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::validate::ValidationError;

/// The network of one guest; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GuestNetwork {
    /// The host bridge `net0` joins (`[A-Za-z0-9_.-]`, at most 16 bytes); absent: the pool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<String>,
    /// The VLAN tag of `net0` (1..=4094); absent: the pool's, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<u16>,
    /// A static IPv4 address for `net0`; absent: one from the host's IPv4 pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<StaticAddress>,
    /// A static IPv6 address for `net0`; absent: one from the host's IPv6 pool, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<StaticAddress>,
}

/// One static address, as Proxmox writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StaticAddress {
    /// The address and its prefix length (`192.0.2.20/24`, `2001:db8::20/64`).
    #[cfg_attr(feature = "openapi", schema(max_length = 43))]
    pub cidr: String,
    /// The gateway, inside the address's prefix; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 39))]
    pub gateway: Option<String>,
}

/// Which family a [`StaticAddress`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 (`ip=`, `gw=`).
    V4,
    /// IPv6 (`ip6=`, `gw6=`).
    V6,
}

impl Family {
    /// `ipv4` or `ipv6`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V4 => "ipv4",
            Self::V6 => "ipv6",
        }
    }

    /// The family of `address`.
    pub fn of(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(_) => Self::V4,
            IpAddr::V6(_) => Self::V6,
        }
    }

    /// The longest prefix of the family.
    pub fn bits(self) -> u8 {
        match self {
            Self::V4 => 32,
            Self::V6 => 128,
        }
    }
}

/// Whether `address` is one a guest may hold: unicast, neither loopback, link-local,
/// unspecified, multicast nor broadcast.
pub fn assignable(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local()
                || v6.to_ipv4_mapped().is_some())
        }
    }
}

/// Whether `a` and `b` share their first `prefix` bits (same family only).
pub fn same_prefix(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    let mask = |bits: u8, width: u8| -> u128 {
        if bits == 0 {
            0
        } else {
            (u128::MAX << (width - bits.min(width))) & (u128::MAX >> (128 - u32::from(width)))
        }
    };
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = mask(prefix, 32);
            (u128::from(u32::from(a)) & m) == (u128::from(u32::from(b)) & m)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = mask(prefix, 128);
            (u128::from(a) & m) == (u128::from(b) & m)
        }
        _ => false,
    }
}

impl StaticAddress {
    /// The address and prefix of [`StaticAddress::cidr`], when it reads as one.
    pub fn address(&self) -> Option<(IpAddr, u8)> {
        let (address, prefix) = self.cidr.split_once('/')?;
        let address: IpAddr = address.parse().ok()?;
        if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let prefix: u8 = prefix.parse().ok()?;
        (prefix >= 1 && prefix <= Family::of(address).bits()).then_some((address, prefix))
    }

    /// The gateway, when there is one and it reads as an address.
    pub fn gateway_address(&self) -> Option<IpAddr> {
        self.gateway.as_deref()?.parse().ok()
    }

    /// Checks the address is of `family`, assignable, not its prefix's network or broadcast
    /// address (IPv4 up to /30), and that the gateway is another address inside the prefix.
    pub(super) fn validate(&self, family: Family, field: &str) -> Result<(), ValidationError> {
        let invalid = |field: String, reason: &str| ValidationError::Invalid {
            field,
            reason: reason.to_owned(),
        };
        let Some((address, prefix)) = self.address() else {
            return Err(invalid(
                format!("{field}.cidr"),
                "expected ADDRESS/PREFIX of the family",
            ));
        };
        if Family::of(address) != family {
            return Err(invalid(format!("{field}.cidr"), "of the other family"));
        }
        if !assignable(address) {
            return Err(invalid(
                format!("{field}.cidr"),
                "not a unicast address a guest may hold",
            ));
        }
        if let IpAddr::V4(v4) = address
            && prefix <= 30
        {
            let host_bits = u32::from(v4) & (u32::MAX >> prefix);
            if host_bits == 0 || host_bits == u32::MAX >> prefix {
                return Err(invalid(
                    format!("{field}.cidr"),
                    "the prefix's network or broadcast address",
                ));
            }
        }
        if let Some(gateway) = &self.gateway {
            let Some(gw) = gateway.parse::<IpAddr>().ok() else {
                return Err(invalid(format!("{field}.gateway"), "not an address"));
            };
            if Family::of(gw) != family
                || gw == address
                || !assignable(gw)
                || !same_prefix(gw, address, prefix)
            {
                return Err(invalid(
                    format!("{field}.gateway"),
                    "must be another unicast address inside the address's prefix",
                ));
            }
        }
        Ok(())
    }
}

/// Whether `bridge` is a bridge name Proxmox takes (`[A-Za-z0-9_.-]`, 1 to 16 bytes).
pub fn bridge_name_ok(bridge: &str) -> bool {
    (1..=16).contains(&bridge.len())
        && bridge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl GuestNetwork {
    /// Checks every field; `at` names a field for the error.
    pub(super) fn validate(&self, at: &dyn Fn(&str) -> String) -> Result<(), ValidationError> {
        if let Some(bridge) = &self.bridge
            && !bridge_name_ok(bridge)
        {
            return Err(ValidationError::Invalid {
                field: at("network.bridge"),
                reason: "expected 1 to 16 of [A-Za-z0-9_.-]".into(),
            });
        }
        if let Some(tag) = self.tag {
            crate::validate::range(|| at("network.tag"), tag, 1, 4094)?;
        }
        if let Some(v4) = &self.ipv4 {
            v4.validate(Family::V4, &at("network.ipv4"))?;
        }
        if let Some(v6) = &self.ipv6 {
            v6.validate(Family::V6, &at("network.ipv6"))?;
        }
        Ok(())
    }

    /// The static addresses it names.
    pub fn static_addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        [&self.ipv4, &self.ipv6]
            .into_iter()
            .flatten()
            .filter_map(|a| a.address().map(|(ip, _)| ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(cidr: &str, gateway: Option<&str>) -> StaticAddress {
        StaticAddress {
            cidr: cidr.into(),
            gateway: gateway.map(str::to_owned),
        }
    }

    #[test]
    fn an_address_reads_only_as_address_and_prefix_of_its_family() {
        let at = |f: &str| f.to_owned();
        let ok = |a: StaticAddress| {
            GuestNetwork {
                ipv4: Some(a),
                ..GuestNetwork::default()
            }
            .validate(&at)
            .is_ok()
        };
        assert!(ok(v4("192.0.2.20/24", Some("192.0.2.1"))));
        assert!(ok(v4("192.0.2.20/32", None)));
        for bad in [
            v4("192.0.2.20", None),
            v4("192.0.2.20/33", None),
            v4("192.0.2.20/0", None),
            v4("192.0.2.20/+8", None),
            v4("192.0.2.0/24", None),
            v4("192.0.2.255/24", None),
            v4("127.0.0.2/8", None),
            v4("224.0.0.1/4", None),
            v4("169.254.1.1/16", None),
            v4("2001:db8::1/64", None),
            v4("192.0.2.20/24", Some("198.51.100.1")),
            v4("192.0.2.20/24", Some("192.0.2.20")),
            v4("192.0.2.20/24", Some("router")),
        ] {
            assert!(!ok(bad.clone()), "{bad:?} passed");
        }
        let six = GuestNetwork {
            ipv6: Some(v4("2001:db8::20/64", Some("2001:db8::1"))),
            ..GuestNetwork::default()
        };
        assert!(six.validate(&at).is_ok());
        let wrong = GuestNetwork {
            ipv6: Some(v4("192.0.2.20/24", None)),
            ..GuestNetwork::default()
        };
        assert!(wrong.validate(&at).is_err());
    }

    #[test]
    fn a_bridge_and_tag_are_bounded() {
        let at = |f: &str| f.to_owned();
        let net = |bridge: &str, tag: Option<u16>| GuestNetwork {
            bridge: Some(bridge.into()),
            tag,
            ..GuestNetwork::default()
        };
        assert!(net("vmbr1", Some(10)).validate(&at).is_ok());
        assert!(net("vmbr1,ip=dhcp", None).validate(&at).is_err());
        assert!(net("", None).validate(&at).is_err());
        assert!(net(&"b".repeat(17), None).validate(&at).is_err());
        assert!(net("vmbr1", Some(0)).validate(&at).is_err());
        assert!(net("vmbr1", Some(4095)).validate(&at).is_err());
    }

    #[test]
    fn prefixes_compare_by_their_bits() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(same_prefix(ip("10.0.1.5"), ip("10.0.1.200"), 24));
        assert!(!same_prefix(ip("10.0.1.5"), ip("10.0.2.5"), 24));
        assert!(same_prefix(ip("10.0.1.5"), ip("10.0.2.5"), 16));
        assert!(same_prefix(ip("10.0.1.5"), ip("10.0.1.5"), 32));
        assert!(same_prefix(ip("2001:db8::1"), ip("2001:db8::ffff"), 64));
        assert!(!same_prefix(ip("2001:db8::1"), ip("10.0.0.1"), 8));
    }
}
