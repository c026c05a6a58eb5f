//! Which address went to which guest (decision 0101): one row per guest and family, the
//! address unique across them all. A guest keeps its row for as long as it exists (a signed
//! decommission releases it), so an address the agent handed out is never handed out twice,
//! across restarts and retried provisionings alike, and one a guest holds is never moved to
//! another by a change of desired state.

use std::collections::HashSet;
use std::net::IpAddr;

use rusqlite::{OptionalExtension, params};

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{query_err, to_ms};

/// Most addresses of a pool one assignment looks at (a pool's size is bounded by the
/// agent's configuration to this).
pub const MAX_POOL_SCAN: u128 = 65_536;

/// An address journaled for a guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignedAddress {
    /// The guest.
    pub guest_id: String,
    /// The address.
    pub address: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
    /// The gateway written with it.
    pub gateway: Option<IpAddr>,
}

impl AssignedAddress {
    /// `ipv4` or `ipv6`.
    pub fn family(&self) -> &'static str {
        family(self.address)
    }

    /// `address/prefix`, as Proxmox's `ip=`/`ip6=` takes it.
    pub fn cidr(&self) -> String {
        format!("{}/{}", self.address, self.prefix)
    }
}

fn family(address: IpAddr) -> &'static str {
    match address {
        IpAddr::V4(_) => "ipv4",
        IpAddr::V6(_) => "ipv6",
    }
}

/// Where an assignment takes its address from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressSource {
    /// The address desired state names.
    Named {
        /// The address.
        address: IpAddr,
        /// Its prefix length.
        prefix: u8,
        /// Its gateway.
        gateway: Option<IpAddr>,
    },
    /// The first free address of the range `first..=last` (one family).
    Pool {
        /// The range's first address.
        first: IpAddr,
        /// Its last.
        last: IpAddr,
        /// The prefix length written with it.
        prefix: u8,
        /// The gateway written with it.
        gateway: Option<IpAddr>,
    },
}

/// What an assignment gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// The guest holds an address of the family already: it keeps it, whatever was asked.
    Held(AssignedAddress),
    /// A new address, journaled now.
    New(AssignedAddress),
    /// The named address is another guest's (the journal's word: `by` names it) or is held
    /// outside the journal (the node's, another container's: `by` is `None`).
    Taken {
        /// The address.
        address: IpAddr,
        /// The guest the journal gave it to.
        by: Option<String>,
    },
    /// No address of the pool is free.
    Exhausted,
}

fn to_u128(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn from_u128(like: IpAddr, value: u128) -> Option<IpAddr> {
    match like {
        IpAddr::V4(_) => u32::try_from(value)
            .ok()
            .map(|v| IpAddr::V4(std::net::Ipv4Addr::from(v))),
        IpAddr::V6(_) => Some(IpAddr::V6(std::net::Ipv6Addr::from(value))),
    }
}

fn corrupt(column: &'static str, value: String) -> JournalError {
    JournalError::Corrupt {
        table: "guest_addresses",
        column,
        value,
    }
}

type Row = (String, String, i64, Option<String>);

fn parse_row((guest_id, address, prefix, gateway): Row) -> Result<AssignedAddress, JournalError> {
    Ok(AssignedAddress {
        guest_id,
        address: address
            .parse()
            .map_err(|_| corrupt("address", address.clone()))?,
        prefix: u8::try_from(prefix).map_err(|_| corrupt("prefix", prefix.to_string()))?,
        gateway: gateway
            .map(|g| g.parse().map_err(|_| corrupt("gateway", g.clone())))
            .transpose()?,
    })
}

impl Store {
    /// Every address the journal holds for a guest.
    pub fn guest_addresses(&self) -> Result<Vec<AssignedAddress>, JournalError> {
        const WHAT: &str = "list guest addresses";
        let mut statement = self
            .conn
            .prepare(
                "SELECT guest_id, address, prefix, gateway FROM guest_addresses
                 ORDER BY guest_id, family",
            )
            .map_err(query_err(WHAT))?;
        let rows = statement
            .query_map([], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .map_err(query_err(WHAT))?
            .collect::<Result<Vec<Row>, _>>()
            .map_err(query_err(WHAT))?;
        rows.into_iter().map(parse_row).collect()
    }

    /// Gives `guest_id` an address of `source`'s family in one transaction: the one it holds
    /// already, else the named one or the pool's first free one, neither held by another
    /// guest in the journal nor in `taken` (the node's and other containers' addresses).
    pub fn assign_address(
        &mut self,
        guest_id: &str,
        source: &AddressSource,
        taken: &[IpAddr],
    ) -> Result<Assignment, JournalError> {
        const WHAT: &str = "assign guest address";
        let now = to_ms(self.now());
        let like = match source {
            AddressSource::Named { address, .. } => *address,
            AddressSource::Pool { first, .. } => *first,
        };
        let fam = family(like);
        self.write(WHAT, |tx| {
            let held: Option<Row> = tx
                .query_row(
                    "SELECT guest_id, address, prefix, gateway FROM guest_addresses
                     WHERE guest_id = ?1 AND family = ?2",
                    params![guest_id, fam],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
                )
                .optional()
                .map_err(query_err(WHAT))?;
            if let Some(row) = held {
                return Ok(Assignment::Held(parse_row(row)?));
            }
            let holder = |address: IpAddr| -> Result<Option<String>, JournalError> {
                tx.query_row(
                    "SELECT guest_id FROM guest_addresses WHERE address = ?1",
                    params![address.to_string()],
                    |row| row.get(0),
                )
                .optional()
                .map_err(query_err(WHAT))
            };
            let chosen = match source {
                AddressSource::Named {
                    address,
                    prefix,
                    gateway,
                } => {
                    if let Some(by) = holder(*address)? {
                        return Ok(Assignment::Taken {
                            address: *address,
                            by: Some(by),
                        });
                    }
                    if taken.contains(address) {
                        return Ok(Assignment::Taken {
                            address: *address,
                            by: None,
                        });
                    }
                    AssignedAddress {
                        guest_id: guest_id.to_owned(),
                        address: *address,
                        prefix: *prefix,
                        gateway: *gateway,
                    }
                }
                AddressSource::Pool {
                    first,
                    last,
                    prefix,
                    gateway,
                } => {
                    let mut held = tx
                        .prepare("SELECT address FROM guest_addresses")
                        .map_err(query_err(WHAT))?;
                    let held: HashSet<String> = held
                        .query_map([], |row| row.get(0))
                        .map_err(query_err(WHAT))?
                        .collect::<Result<_, _>>()
                        .map_err(query_err(WHAT))?;
                    let taken: HashSet<&IpAddr> = taken.iter().collect();
                    let (low, high) = (to_u128(*first), to_u128(*last));
                    let high = high.min(low.saturating_add(MAX_POOL_SCAN - 1));
                    let mut found = None;
                    let mut at = low;
                    while at <= high {
                        if let Some(address) = from_u128(*first, at)
                            && Some(address) != *gateway
                            && !taken.contains(&address)
                            && !held.contains(&address.to_string())
                        {
                            found = Some(address);
                            break;
                        }
                        at += 1;
                    }
                    let Some(address) = found else {
                        return Ok(Assignment::Exhausted);
                    };
                    AssignedAddress {
                        guest_id: guest_id.to_owned(),
                        address,
                        prefix: *prefix,
                        gateway: *gateway,
                    }
                }
            };
            tx.execute(
                "INSERT INTO guest_addresses
                     (guest_id, family, address, prefix, gateway, assigned_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    chosen.guest_id,
                    fam,
                    chosen.address.to_string(),
                    i64::from(chosen.prefix),
                    chosen.gateway.map(|g| g.to_string()),
                    now
                ],
            )
            .map_err(query_err(WHAT))?;
            Ok(Assignment::New(chosen))
        })
    }

    /// The addresses journaled for `guest_id`.
    pub fn addresses_of(&self, guest_id: &str) -> Result<Vec<AssignedAddress>, JournalError> {
        Ok(self
            .guest_addresses()?
            .into_iter()
            .filter(|a| a.guest_id == guest_id)
            .collect())
    }

    /// Releases `guest_id`'s addresses: the pool may hand them out again. Gives how many were
    /// released: a provisioning rolled back (nothing of the guest is left), and a signed
    /// decommission, which releases them with the guest's record ([`Store::retire_guest`]).
    pub fn release_addresses(&mut self, guest_id: &str) -> Result<usize, JournalError> {
        const WHAT: &str = "release guest addresses";
        self.write(WHAT, |tx| {
            tx.execute(
                "DELETE FROM guest_addresses WHERE guest_id = ?1",
                params![guest_id],
            )
            .map_err(query_err(WHAT))
        })
    }
}

journal_calls! {
    /// See [`Store::guest_addresses`].
    fn guest_addresses() -> Vec<AssignedAddress> = |s| s.guest_addresses();
    /// See [`Store::assign_address`].
    fn assign_address(guest_id: String, source: AddressSource, taken: Vec<IpAddr>) -> Assignment
        = |s| s.assign_address(&guest_id, &source, &taken);
    /// See [`Store::release_addresses`].
    fn release_addresses(guest_id: String) -> usize = |s| s.release_addresses(&guest_id);
    /// See [`Store::addresses_of`].
    fn addresses_of(guest_id: String) -> Vec<AssignedAddress> = |s| s.addresses_of(&guest_id);
}
