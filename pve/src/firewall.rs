//! A container's own firewall options (`…/lxc/{vmid}/firewall/options`) and the datacenter's
//! switch (`/cluster/firewall/options`), as the agent reads and sets them.
//!
//! Proxmox filters a container's interface only when three switches are on: the datacenter's
//! `enable` (off in a default install; only an operator turns it on), the guest's own
//! `enable`, and `firewall=1` on the interface (`netN`). With the guest's `ipfilter` on, what
//! the guest sends from an address outside `ipfilter-net<N>` is dropped; for a container that
//! set implicitly holds the addresses its `netN` configures (`ip=`, `ip6=`) and the link-local
//! address of its MAC. A guest on `ip=dhcp` configures none, so `ipfilter` would drop all of
//! its IPv4 traffic: the agent turns `ipfilter` on only for guests with static addresses.
//! `macfilter` (on unless set to 0) keeps a guest to its own MAC either way.

use serde::Deserialize;

use super::catalogue::Op;
use super::decode::lenient_bool;
use super::error::PveError;
use super::requests::Params;

/// `GET /nodes/{node}/lxc/{vmid}/firewall/options`: the options the guest's firewall file
/// sets (an option it does not set has Proxmox's default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct GuestFirewall {
    /// The guest's firewall rules and filters apply (default off).
    #[serde(default, deserialize_with = "lenient_bool")]
    pub enable: bool,
    /// What the guest sends from an address outside `ipfilter-net<N>` is dropped (default off).
    #[serde(default, deserialize_with = "lenient_bool")]
    pub ipfilter: bool,
    /// `macfilter` as set: `None` is Proxmox's default (on).
    #[serde(default, deserialize_with = "lenient_opt_bool")]
    pub macfilter: Option<bool>,
    /// SHA-1 of the guest's firewall file.
    #[serde(default)]
    pub digest: Option<String>,
}

impl GuestFirewall {
    /// Whether frames from a MAC other than the interface's own are dropped.
    pub fn macfilter(&self) -> bool {
        self.macfilter.unwrap_or(true)
    }
}

fn lenient_opt_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(None),
        v => super::decode::value_to_bool(&v).map(Some),
    }
}

/// A change to a guest's firewall options (`PUT …/firewall/options`). The agent only ever
/// turns filters on: nothing here can switch one off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirewallUpdate {
    /// Turn the guest's firewall on.
    pub enable: bool,
    /// Turn `ipfilter` on.
    pub ipfilter: bool,
}

impl FirewallUpdate {
    pub(crate) fn params(&self, op: Op) -> Result<Params, PveError> {
        let mut p = Params::new();
        if self.enable {
            p.push(("enable".into(), "1".into()));
        }
        if self.ipfilter {
            p.push(("ipfilter".into(), "1".into()));
        }
        if p.is_empty() {
            return Err(PveError::InvalidRequest {
                op,
                field: "enable",
                source: super::types::ValueError::new("firewall update", "", "turns no filter on"),
            });
        }
        Ok(p)
    }
}

/// `GET /cluster/firewall/options`: whether the datacenter's firewall is on (without it no
/// guest's firewall options take effect).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct DatacenterFirewall {
    /// The datacenter-wide switch (default off).
    #[serde(default, deserialize_with = "lenient_bool")]
    pub enable: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_typed_options_decode() {
        let fw: GuestFirewall = serde_json::from_value(serde_json::json!({
            "enable": 1, "ipfilter": "1", "macfilter": 0, "digest": "ab"
        }))
        .unwrap();
        assert!(fw.enable && fw.ipfilter && !fw.macfilter());
        let fw: GuestFirewall = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(!fw.enable && !fw.ipfilter && fw.macfilter());
        let dc: DatacenterFirewall =
            serde_json::from_value(serde_json::json!({ "enable": 1, "policy_in": "DROP" }))
                .unwrap();
        assert!(dc.enable);
    }

    #[test]
    fn an_update_only_turns_filters_on() {
        let both = FirewallUpdate {
            enable: true,
            ipfilter: true,
        };
        assert_eq!(
            both.params(Op::SetFirewall).unwrap(),
            vec![
                ("enable".to_owned(), "1".to_owned()),
                ("ipfilter".to_owned(), "1".to_owned())
            ]
        );
        assert!(FirewallUpdate::default().params(Op::SetFirewall).is_err());
    }
}
