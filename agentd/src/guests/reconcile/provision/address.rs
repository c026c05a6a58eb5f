//! Every guest the agent creates gets an address it assigned (DESIGN §7; decision 0101):
//! `assign_address` chooses and journals one per family before anything is built — the one
//! desired state names, or the pool's first free one — and `set_address` writes it into the
//! new guest's `net0` as a static `ip=`/`ip6=` (with its gateway, the bridge and the VLAN), so
//! the network guard that follows turns Proxmox's `ipfilter` on.
//!
//! What a hub can make of it is bounded here:
//! - an address desired state names must lie inside the operator's pool prefix of its family,
//!   and be neither the pool's gateway, one of the node's, one another container on the node
//!   configures, nor one the journal gave another guest: anything else is refused and nothing
//!   is built;
//! - a bridge or VLAN desired state names must be the pool's own (a hub cannot put a guest on
//!   another network);
//! - a guest keeps the address journaled for it, whatever a later desired state says (the
//!   planner refuses the change in the report), so an address never moves from a guest that
//!   exists;
//! - a DR restore takes the guest's journaled addresses back and is given no new one;
//! - a provisioning rolled back (a refused golden archive, a failed step) releases what it was
//!   given, so a refused guest holds no address of the pool.

use std::net::IpAddr;

use bosun_proto::desired::GuestSpec;
use bosun_proto::desired::network::{Family, same_prefix};
use bosun_pve::{ConfigUpdate, CtOptions, Ipv4Config, NetConfig, Pve, Vmid};
use serde_json::json;

use super::{Bringup, Provisioner};
use crate::config::addresses::{AddressPool, PoolRange};
use crate::ops::journal::{AddressSource, AssignedAddress, Assignment};
use crate::ops::operation::{OpJournal, StepError, StepName};

/// Why a guest was given no address: nothing of it is built.
#[derive(Debug, thiserror::Error)]
pub enum AddressRefusal {
    /// Desired state names an address of a family the host has no pool for.
    #[error(
        "guest {guest_id}: {family} address {address} named, but the host has no {family} pool to bound it"
    )]
    NoPool {
        /// The guest.
        guest_id: String,
        /// `ipv4` or `ipv6`.
        family: &'static str,
        /// The address named.
        address: IpAddr,
    },
    /// Desired state names an address outside the pool's prefix, or its gateway.
    #[error(
        "guest {guest_id}: address {address} is outside the host's pool prefix or is its gateway"
    )]
    OutsidePool {
        /// The guest.
        guest_id: String,
        /// The address named.
        address: IpAddr,
    },
    /// The address is another guest's, the node's or another container's.
    #[error("guest {guest_id}: address {address} is held by {holder}")]
    Taken {
        /// The guest.
        guest_id: String,
        /// The address.
        address: IpAddr,
        /// Who holds it, in words.
        holder: String,
    },
    /// The pool has no free address of the family.
    #[error("guest {guest_id}: the host's {family} pool has no free address")]
    Exhausted {
        /// The guest.
        guest_id: String,
        /// `ipv4` or `ipv6`.
        family: &'static str,
    },
    /// Desired state names a bridge or VLAN other than the operator's pool's.
    #[error("guest {guest_id}: {what} {value} is not the one the host's [addresses] names")]
    NotAllowed {
        /// The guest.
        guest_id: String,
        /// `bridge` or `vlan tag`.
        what: &'static str,
        /// The value named.
        value: String,
    },
    /// The addresses held on the node could not be read: none is handed out blind.
    #[error("reading the addresses the node and its containers hold")]
    Unread {
        /// The cause.
        #[source]
        source: bosun_pve::PveError,
    },
}

/// What `set_address` writes into `net0`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetPlan {
    /// The addresses journaled for the guest, at most one per family.
    pub addresses: Vec<AssignedAddress>,
    /// The bridge, when it is set.
    pub bridge: Option<String>,
    /// The VLAN tag, when it is set.
    pub tag: Option<u16>,
}

impl NetPlan {
    fn is_empty(&self) -> bool {
        self.addresses.is_empty() && self.bridge.is_none() && self.tag.is_none()
    }
}

/// `net` with the plan's addresses, bridge and VLAN; everything else kept.
pub fn apply(net: &mut NetConfig, plan: &NetPlan) {
    for assigned in &plan.addresses {
        match assigned.address {
            IpAddr::V4(_) => {
                net.ip = Some(Ipv4Config::Static(assigned.cidr()));
                net.gw = match assigned.gateway {
                    Some(IpAddr::V4(gw)) => Some(gw),
                    _ => None,
                };
            }
            IpAddr::V6(_) => {
                net.other.retain(|(k, _)| k != "ip6" && k != "gw6");
                net.other.push(("ip6".to_owned(), assigned.cidr()));
                if let Some(gw) = assigned.gateway {
                    net.other.push(("gw6".to_owned(), gw.to_string()));
                }
            }
        }
    }
    if let Some(bridge) = &plan.bridge {
        bridge.clone_into(&mut net.bridge);
    }
    if plan.tag.is_some() {
        net.tag = plan.tag;
    }
}

/// Where `family`'s address comes from: the named one (inside the pool's prefix), the pool,
/// or nowhere (no pool, none named: the guest keeps DHCP).
fn source_of(
    guest_id: &str,
    family: Family,
    named: Option<&bosun_proto::desired::StaticAddress>,
    range: Option<&PoolRange>,
) -> Result<Option<AddressSource>, AddressRefusal> {
    match (named.and_then(|n| n.address().map(|a| (a, n))), range) {
        (Some(((address, _), _)), None) => Err(AddressRefusal::NoPool {
            guest_id: guest_id.to_owned(),
            family: family.as_str(),
            address,
        }),
        (Some(((address, prefix), named)), Some(range)) => {
            if !same_prefix(address, range.first, range.prefix)
                || prefix < range.prefix
                || Some(address) == range.gateway
            {
                return Err(AddressRefusal::OutsidePool {
                    guest_id: guest_id.to_owned(),
                    address,
                });
            }
            Ok(Some(AddressSource::Named {
                address,
                prefix,
                gateway: named.gateway_address().or(range.gateway),
            }))
        }
        (None, Some(range)) => Ok(Some(AddressSource::Pool {
            first: range.first,
            last: range.last,
            prefix: range.prefix,
            gateway: range.gateway,
        })),
        (None, None) => Ok(None),
    }
}

/// The bridge and VLAN of a new guest: the pool's; desired state may only repeat them.
fn link_of(
    guest_id: &str,
    spec: &GuestSpec,
    pool: &AddressPool,
) -> Result<(String, Option<u16>), AddressRefusal> {
    let network = spec.network.clone().unwrap_or_default();
    let bridge = network.bridge.unwrap_or_else(|| pool.bridge.clone());
    if bridge != pool.bridge {
        return Err(AddressRefusal::NotAllowed {
            guest_id: guest_id.to_owned(),
            what: "bridge",
            value: bridge,
        });
    }
    let tag = network.tag.or(pool.tag);
    if tag != pool.tag {
        return Err(AddressRefusal::NotAllowed {
            guest_id: guest_id.to_owned(),
            what: "vlan tag",
            value: tag.map_or_else(|| "none".to_owned(), |t| t.to_string()),
        });
    }
    Ok((bridge, tag))
}

/// Every address the node and the containers on it hold: the node's own (its network
/// configuration) and the static `ip=`/`ip6=` of every container's config.
async fn held_on_node<P: Pve>(pve: &P) -> Result<Vec<IpAddr>, AddressRefusal> {
    let unread = |source| AddressRefusal::Unread { source };
    let mut held: Vec<IpAddr> = pve
        .network()
        .await
        .map_err(unread)?
        .iter()
        .filter_map(|i| i.address.as_deref()?.parse().ok())
        .collect();
    for ct in pve.list_cts().await.map_err(unread)? {
        match pve.ct_config(ct.vmid).await {
            Ok(config) => {
                held.extend(crate::guests::reconcile::network_guard::configured_addresses(&config))
            }
            // Gone between the list and the read: it holds nothing now.
            Err(e) if e.is_missing() => {}
            Err(e) => return Err(unread(e)),
        }
    }
    Ok(held)
}

impl<P: Pve + 'static> Provisioner<P> {
    /// `assign_address`: the guest's addresses, journaled (see the module docs). Nothing is
    /// journaled for a guest that gets none (no pool, none named: it keeps DHCP).
    pub(super) async fn assign_addresses(
        &self,
        op: &OpJournal,
        spec: &GuestSpec,
        bringup: &Bringup,
    ) -> Result<NetPlan, StepError> {
        let guest_id = spec.guest_id.to_string();
        let journal = op.journal();
        let failed = |source: AddressRefusal| StepError::Failed {
            op_id: op.op_id(),
            step: StepName::AssignAddress.as_str().into(),
            source: Box::new(source),
        };
        let journal_failed = |source| StepError::Journal {
            op_id: op.op_id(),
            step: StepName::AssignAddress.as_str().into(),
            source,
        };
        if let Bringup::Recover(_) = bringup {
            // A restored guest takes back what it held, and nothing new.
            let addresses = journal
                .addresses_of(guest_id)
                .await
                .map_err(journal_failed)?;
            return Ok(NetPlan {
                addresses,
                ..NetPlan::default()
            });
        }
        let Some(pool) = &self.addresses else {
            if let Some(named) = spec
                .network
                .as_ref()
                .and_then(|n| n.static_addresses().next())
            {
                return Err(failed(AddressRefusal::NoPool {
                    guest_id,
                    family: Family::of(named).as_str(),
                    address: named,
                }));
            }
            return Ok(NetPlan::default());
        };
        let network = spec.network.clone().unwrap_or_default();
        let (bridge, tag) = link_of(&guest_id, spec, pool).map_err(failed)?;
        let sources = [
            source_of(
                &guest_id,
                Family::V4,
                network.ipv4.as_ref(),
                pool.ipv4.as_ref(),
            ),
            source_of(
                &guest_id,
                Family::V6,
                network.ipv6.as_ref(),
                pool.ipv6.as_ref(),
            ),
        ]
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed)?;
        let held = held_on_node(&*self.pve).await.map_err(failed)?;
        let mut addresses = Vec::new();
        for source in sources.into_iter().flatten() {
            let detail = json!({ "guest_id": guest_id, "source": match &source {
                AddressSource::Named { address, .. } => format!("named {address}"),
                AddressSource::Pool { first, last, .. } => format!("pool {first}-{last}"),
            }});
            let assignment = op
                .local(StepName::AssignAddress, detail, async {
                    journal
                        .assign_address(guest_id.clone(), source.clone(), held.clone())
                        .await
                        .map_err(|e| bosun_errchain::error_chain(&e))
                })
                .await?;
            match assignment {
                Assignment::Held(a) | Assignment::New(a) => {
                    tracing::info!(%guest_id, address = %a.cidr(), "guest address assigned");
                    addresses.push(a);
                }
                Assignment::Taken { address, by } => {
                    return Err(failed(AddressRefusal::Taken {
                        guest_id: guest_id.clone(),
                        address,
                        holder: by.map_or_else(
                            || "the node or another container".to_owned(),
                            |g| format!("guest {g}"),
                        ),
                    }));
                }
                Assignment::Exhausted => {
                    let family = match &source {
                        AddressSource::Named { address, .. } => Family::of(*address),
                        AddressSource::Pool { first, .. } => Family::of(*first),
                    };
                    return Err(failed(AddressRefusal::Exhausted {
                        guest_id: guest_id.clone(),
                        family: family.as_str(),
                    }));
                }
            }
        }
        Ok(NetPlan {
            addresses,
            bridge: Some(bridge),
            tag,
        })
    }

    /// Releases the addresses journaled for a guest whose provisioning was rolled back.
    pub(super) async fn release_addresses(&self, op: &OpJournal, guest_id: &str) {
        match op.journal().release_addresses(guest_id.to_owned()).await {
            Ok(0) => {}
            Ok(released) => {
                tracing::info!(%guest_id, released, "a rolled-back guest's addresses went back to the pool");
            }
            Err(e) => {
                tracing::warn!(%guest_id, error = %bosun_errchain::error_chain(&e), "could not release a rolled-back guest's addresses; they stay reserved for it");
            }
        }
    }

    /// `set_address`: `plan` written into the guest's `net0` (read again: `reset_identity`
    /// changed it), its other keys kept; nothing when `net0` holds it already.
    pub(super) async fn set_address(
        &self,
        op: &OpJournal,
        vmid: Vmid,
        plan: &NetPlan,
    ) -> Result<(), StepError> {
        if plan.is_empty() {
            return Ok(());
        }
        let pve = &*self.pve;
        let config = op
            .call(
                StepName::ReadConfig,
                json!({ "vmid": vmid.get() }),
                pve.ct_config(vmid),
            )
            .await?;
        let failed = |reason: String| StepError::Other {
            op_id: op.op_id(),
            step: StepName::SetAddress.as_str().into(),
            reason,
        };
        let raw = config
            .get_str("net0")
            .ok_or_else(|| failed("the guest has no net0".to_owned()))?;
        let current = NetConfig::parse(&raw).map_err(|e| failed(e.to_string()))?;
        let mut net = current.clone();
        apply(&mut net, plan);
        if net == current {
            return Ok(());
        }
        let mut set = CtOptions::default();
        set.net.insert(0, net);
        let update = ConfigUpdate {
            set,
            delete: Vec::new(),
            digest: Some(config.digest.clone()),
        };
        let addresses: Vec<String> = plan.addresses.iter().map(AssignedAddress::cidr).collect();
        op.call(
            StepName::SetAddress,
            json!({ "vmid": vmid.get(), "addresses": addresses, "bridge": plan.bridge, "tag": plan.tag }),
            pve.update_ct_config(vmid, &update),
        )
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn range() -> PoolRange {
        PoolRange {
            first: ip("192.0.2.100"),
            last: ip("192.0.2.199"),
            prefix: 24,
            gateway: Some(ip("192.0.2.1")),
        }
    }

    fn named(cidr: &str) -> bosun_proto::desired::StaticAddress {
        bosun_proto::desired::StaticAddress {
            cidr: cidr.into(),
            gateway: None,
        }
    }

    #[test]
    fn a_named_address_must_lie_in_the_pool_prefix_and_not_be_its_gateway() {
        let r = range();
        let ok = source_of("g", Family::V4, Some(&named("192.0.2.50/24")), Some(&r)).unwrap();
        assert_eq!(
            ok,
            Some(AddressSource::Named {
                address: ip("192.0.2.50"),
                prefix: 24,
                gateway: Some(ip("192.0.2.1")),
            })
        );
        for bad in ["198.51.100.5/24", "192.0.2.1/24", "192.0.2.50/16"] {
            assert!(
                matches!(
                    source_of("g", Family::V4, Some(&named(bad)), Some(&r)),
                    Err(AddressRefusal::OutsidePool { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            source_of("g", Family::V4, Some(&named("192.0.2.50/24")), None),
            Err(AddressRefusal::NoPool { .. })
        ));
        assert_eq!(source_of("g", Family::V6, None, None).unwrap(), None);
    }

    #[test]
    fn the_plan_replaces_the_lease_and_keeps_every_other_key() {
        let mut net = NetConfig::parse(
            "name=eth0,bridge=vmbr0,ip=dhcp,ip6=auto,link_down=1,firewall=1,rate=5",
        )
        .unwrap();
        let plan = NetPlan {
            addresses: vec![
                AssignedAddress {
                    guest_id: "g".into(),
                    address: ip("192.0.2.100"),
                    prefix: 24,
                    gateway: Some(ip("192.0.2.1")),
                },
                AssignedAddress {
                    guest_id: "g".into(),
                    address: ip("2001:db8::100"),
                    prefix: 64,
                    gateway: None,
                },
            ],
            bridge: Some("vmbr0".into()),
            tag: Some(20),
        };
        apply(&mut net, &plan);
        let text = net.to_property_string().unwrap();
        for part in [
            "ip=192.0.2.100/24",
            "gw=192.0.2.1",
            "ip6=2001:db8::100/64",
            "tag=20",
            "link_down=1",
            "firewall=1",
            "rate=5",
        ] {
            assert!(text.split(',').any(|p| p == part), "{part} not in {text}");
        }
        assert!(!text.contains("auto"), "{text}");
    }
}
