//! The order guests come up and go down in (decision 0099): each guest names what it
//! `provides` and what it `requires` (short capability names), and a guest starts only once
//! every desired-running guest providing what it requires is running, and stops only once every
//! guest requiring what it provides is stopped.
//!
//! [`boot_order`] turns a document's guests into a [`BootOrder`]: who waits on whom, each
//! guest's place in Proxmox's own `startup` order, and the requirements refused. A requirement
//! that would hold a guest back for good is refused with its reason and not waited on: one no
//! guest provides, one only guests desired stopped provide, and one that closes a cycle (the
//! guest, or a guest it waits on, requires what the guest provides). A hub can therefore delay a
//! start only behind a guest the same document runs, never starve one; it can stop a guest
//! outright anyway (`power`).
//!
//! Pure and shared: the agent plans with it, `bosunctl explain --order` prints it.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::validate::ValidationError;

/// What the order reads of a guest ([`super::GuestSpec`] in a document).
pub trait Orderable {
    /// Its id.
    fn guest_id(&self) -> Uuid;
    /// Its name, as a refusal names it.
    fn hostname(&self) -> &str;
    /// What it provides.
    fn provides(&self) -> &[String];
    /// What it requires.
    fn requires(&self) -> &[String];
    /// Whether it is desired running.
    fn running(&self) -> bool;
}

/// Most capabilities one guest may provide.
pub const MAX_PROVIDES: usize = 8;
/// Most capabilities one guest may require.
pub const MAX_REQUIRES: usize = 8;
/// Longest capability name, in bytes.
pub const MAX_CAPABILITY: usize = 32;
/// Most guests a cycle's refusal names (the rest are counted).
const MAX_NAMED: usize = 4;

/// Checks one guest's `provides` and `requires`: at most [`MAX_PROVIDES`] and
/// [`MAX_REQUIRES`] names of 1 to [`MAX_CAPABILITY`] of `[a-z0-9-]` starting with a letter or
/// digit, none twice in a list. Errors name `at("provides[i]")` or `at("requires[i]")`.
pub(crate) fn validate(
    guest: &impl Orderable,
    at: &dyn Fn(&str) -> String,
) -> Result<(), ValidationError> {
    for (list, names, most) in [
        ("provides", guest.provides(), MAX_PROVIDES),
        ("requires", guest.requires(), MAX_REQUIRES),
    ] {
        crate::validate::count(&at(list), names.len(), most)?;
        let mut seen = BTreeSet::new();
        for (i, name) in names.iter().enumerate() {
            let field = || at(&format!("{list}[{i}]"));
            check_capability(name).map_err(|reason| ValidationError::Invalid {
                field: field(),
                reason: reason.to_owned(),
            })?;
            if !seen.insert(name.as_str()) {
                return Err(ValidationError::Duplicate {
                    field: field(),
                    value: name.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Checks a capability name; the reason when it is not one.
pub fn check_capability(name: &str) -> Result<(), &'static str> {
    let ok = !name.is_empty()
        && name.len() <= MAX_CAPABILITY
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err("expected 1 to 32 of [a-z0-9-], starting with a letter or digit")
    }
}

/// Why a requirement is refused (and not waited on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderRefusal {
    /// No guest of the document provides it.
    NobodyProvides,
    /// Only guests desired stopped provide it, and the guest requiring it is desired running.
    ProvidersStopped {
        /// The providers' hostnames.
        providers: Vec<String>,
    },
    /// It closes a cycle: a guest it would wait on waits, directly or not, on this guest.
    Cycle {
        /// The hostnames of the guests in the cycle, sorted.
        guests: Vec<String>,
    },
}

impl OrderRefusal {
    /// A short name for audit entries.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NobodyProvides => "nobody_provides",
            Self::ProvidersStopped { .. } => "providers_stopped",
            Self::Cycle { .. } => "cycle",
        }
    }
}

/// One refused requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRequirement {
    /// The guest requiring it.
    pub guest_id: Uuid,
    /// The capability.
    pub requirement: String,
    /// Why.
    pub refusal: OrderRefusal,
}

impl RefusedRequirement {
    /// The refusal in words (at most a few hundred bytes: at most four guests are named, the
    /// rest counted).
    pub fn reason(&self) -> String {
        let named = |names: &[String]| {
            let mut text = names
                .iter()
                .take(MAX_NAMED)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if names.len() > MAX_NAMED {
                text.push_str(&format!(" and {} more", names.len() - MAX_NAMED));
            }
            text
        };
        let what = &self.requirement;
        match &self.refusal {
            OrderRefusal::NobodyProvides => format!(
                "no guest of the desired state provides {what}: the guest is not held back for it"
            ),
            OrderRefusal::ProvidersStopped { providers } => format!(
                "only guests desired stopped provide {what} ({}): the guest is not held back for it",
                named(providers)
            ),
            OrderRefusal::Cycle { guests } => format!(
                "requiring {what} closes a cycle through {}: none of them would ever start first, \
                 so the requirement is not waited on",
                named(guests)
            ),
        }
    }
}

/// The order of a document's guests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BootOrder {
    /// Per guest, the guests it waits on: to start, every one of them running; to be stopped
    /// before any of them stops. Only requirements that are not refused count.
    pub waits_on: BTreeMap<Uuid, BTreeSet<Uuid>>,
    /// Per guest that provides or requires anything, its place in Proxmox's `startup` order:
    /// 1 for a guest waiting on none, else one more than the highest place it waits on.
    pub position: BTreeMap<Uuid, u32>,
    /// The refused requirements, in the document's order.
    pub refused: Vec<RefusedRequirement>,
}

impl BootOrder {
    /// The guests waiting on `guest`.
    pub fn dependents(&self, guest: Uuid) -> impl Iterator<Item = Uuid> + '_ {
        self.waits_on
            .iter()
            .filter(move |(_, on)| on.contains(&guest))
            .map(|(g, _)| *g)
    }
}

/// The order of `guests` (see the module's documentation).
pub fn boot_order<G: Orderable>(guests: &[G]) -> BootOrder {
    let mut providers: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, guest) in guests.iter().enumerate() {
        for name in guest.provides() {
            providers.entry(name.as_str()).or_default().push(i);
        }
    }
    let mut refused = Vec::new();
    // Each requirement not refused outright, with the guests it waits on.
    let mut wanted: Vec<Vec<(&str, Vec<usize>)>> = vec![Vec::new(); guests.len()];
    for (i, guest) in guests.iter().enumerate() {
        for name in guest.requires() {
            let all = providers.get(name.as_str()).cloned().unwrap_or_default();
            let on: Vec<usize> = if guest.running() {
                all.iter()
                    .copied()
                    .filter(|p| guests[*p].running())
                    .collect()
            } else {
                all.clone()
            };
            let refusal = if all.is_empty() {
                Some(OrderRefusal::NobodyProvides)
            } else if on.is_empty() {
                Some(OrderRefusal::ProvidersStopped {
                    providers: all
                        .iter()
                        .map(|p| guests[*p].hostname().to_owned())
                        .collect(),
                })
            } else {
                None
            };
            match refusal {
                Some(refusal) => refused.push((i, name.clone(), refusal)),
                None => wanted[i].push((name.as_str(), on)),
            }
        }
    }
    let edges: Vec<BTreeSet<usize>> = wanted
        .iter()
        .map(|reqs| reqs.iter().flat_map(|(_, on)| on.iter().copied()).collect())
        .collect();
    let component = components(&edges);
    let mut waits: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); guests.len()];
    for (i, reqs) in wanted.iter().enumerate() {
        for (name, on) in reqs {
            if on.iter().any(|p| component[*p] == component[i]) {
                let mut cycle: Vec<String> = (0..guests.len())
                    .filter(|g| component[*g] == component[i])
                    .map(|g| guests[g].hostname().to_owned())
                    .collect();
                cycle.sort();
                refused.push((i, (*name).to_owned(), OrderRefusal::Cycle { guests: cycle }));
            } else {
                waits[i].extend(on.iter().copied());
            }
        }
    }
    refused.sort_by_key(|(i, name, _)| {
        let at = guests[*i].requires().iter().position(|r| r == name);
        (*i, at)
    });
    let positions = positions(&waits);
    BootOrder {
        waits_on: waits
            .iter()
            .enumerate()
            .filter(|(_, on)| !on.is_empty())
            .map(|(i, on)| {
                (
                    guests[i].guest_id(),
                    on.iter().map(|p| guests[*p].guest_id()).collect(),
                )
            })
            .collect(),
        position: guests
            .iter()
            .enumerate()
            .filter(|(_, g)| !g.provides().is_empty() || !g.requires().is_empty())
            .map(|(i, g)| (g.guest_id(), positions[i]))
            .collect(),
        refused: refused
            .into_iter()
            .map(|(i, requirement, refusal)| RefusedRequirement {
                guest_id: guests[i].guest_id(),
                requirement,
                refusal,
            })
            .collect(),
    }
}

/// The strongly connected component of each node of `edges` (Tarjan's, iterative: a chain of
/// a thousand guests must not exhaust a stack).
fn components(edges: &[BTreeSet<usize>]) -> Vec<usize> {
    const UNSEEN: usize = usize::MAX;
    let n = edges.len();
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut component = vec![UNSEEN; n];
    let mut next = 0;
    let mut found = 0;
    let adjacency: Vec<Vec<usize>> = edges.iter().map(|e| e.iter().copied().collect()).collect();
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        // (node, next edge to look at)
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut at)) = work.last_mut() {
            if *at == 0 && index[v] == UNSEEN {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = adjacency[v].get(*at) {
                *at += 1;
                if index[w] == UNSEEN {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component[w] = found;
                    if w == v {
                        break;
                    }
                }
                found += 1;
            }
        }
    }
    component
}

/// Each node's place in an acyclic `waits` (node → the nodes it waits on): 1 with none, else
/// one more than the highest it waits on.
fn positions(waits: &[BTreeSet<usize>]) -> Vec<u32> {
    let n = waits.len();
    let mut position = vec![0u32; n];
    let mut blocking: Vec<usize> = waits.iter().map(BTreeSet::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (g, on) in waits.iter().enumerate() {
        for p in on {
            dependents[*p].push(g);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|g| blocking[*g] == 0).collect();
    for g in &ready {
        position[*g] = 1;
    }
    while let Some(p) = ready.pop() {
        for g in &dependents[p] {
            position[*g] = position[*g].max(position[p].saturating_add(1));
            blocking[*g] -= 1;
            if blocking[*g] == 0 {
                ready.push(*g);
            }
        }
    }
    position
}

#[cfg(test)]
#[path = "order_tests.rs"]
mod tests;
