//! Connection slots of the local API, counted per guest so a flood from one guest leaves every
//! other guest its share (DESIGN §7; `docs/decisions/0029-per-guest-connection-fairness.md`).
//!
//! A connection is counted before its TLS handshake, when only its peer address is known. The
//! [`SlotBook`] maps the address to a guest:
//! - **configured**: the static addresses in each of the agent's guests' Proxmox config
//!   ([`SlotBook::set_addresses`], from every reconcile pass). With Proxmox's `ipfilter` on,
//!   these are the only source addresses that guest can use, and no other guest can use them;
//! - **learned**: the address an authenticated request came from ([`ConnSlot::attribute`],
//!   called by the [`super::Caller`] extractor), at most [`LEARNED_PER_GUEST`] per guest (the
//!   oldest is forgotten first), and only for a guest with no configured address (a DHCP
//!   guest from before Bosun assigned addresses: decision 0101). A configured address is never
//!   learned for another guest, and a guest with a configured address learns nothing: a guest
//!   that names a neighbour's address is never counted as it.
//!
//! and counts it in that guest's account, or, from an address no guest is known by, in the
//! **unattributed** pool. The caps, each refusing before the handshake:
//! - `max_per_peer` connections from one address;
//! - `max_per_guest` connections of one guest, over all its addresses;
//! - `max_unattributed` connections from addresses no guest is known by, in all;
//! - `max_total` connections in all.
//!
//! Within `max_total` every known guest and the unattributed pool hold a **reservation**:
//! `min(cap, max_total / (known guests + 1))` slots nobody else can take. A guest below its
//! reservation is admitted whatever the others hold; above it, only into slots no reservation
//! needs. So a flood from one guest is held to its own account, a flood from addresses nobody
//! is known by to the unattributed pool, and neither reaches another guest's reservation. A
//! connection from an unknown address that authenticates moves to its guest's account when
//! that account has room.
//!
//! A refusal logs a warning naming the peer, the cap and its limit — at most once per
//! [`CAP_LOG_INTERVAL`] per cap, with the count of refusals it stands for.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::conn::ConnectionLimits;

/// How often, at most, a refusal by one cap is logged.
pub const CAP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Addresses learned per guest from its authenticated requests; the oldest goes first.
pub const LEARNED_PER_GUEST: usize = 16;

/// A guest, by the hub's guest id.
type GuestKey = Arc<str>;

/// Which cap refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// `max_per_peer`.
    PerPeer,
    /// `max_per_guest`.
    PerGuest,
    /// `max_unattributed`.
    Unattributed,
    /// `max_total`, or the slots left outside every reservation.
    Total,
}

impl Cap {
    fn name(self) -> &'static str {
        match self {
            Self::PerPeer => "per_peer",
            Self::PerGuest => "per_guest",
            Self::Unattributed => "unattributed",
            Self::Total => "total",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::PerPeer => 0,
            Self::PerGuest => 1,
            Self::Unattributed => 2,
            Self::Total => 3,
        }
    }
}

/// The account a connection is counted in.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Account {
    Guest(GuestKey),
    Unattributed,
}

/// The open connections and the address directory, under one lock.
#[derive(Debug, Default)]
struct Book {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
    per_guest: HashMap<GuestKey, usize>,
    unattributed: usize,
    configured: HashMap<IpAddr, GuestKey>,
    learned: HashMap<IpAddr, GuestKey>,
    learned_order: HashMap<GuestKey, VecDeque<IpAddr>>,
    /// Guests whose Proxmox config gives them a static address (even one two guests share):
    /// attributed by configured address only, nothing learned for them (decision 0101).
    addressed: HashSet<GuestKey>,
    /// Guests with at least one configured or learned address: those holding a reservation.
    known: HashSet<GuestKey>,
}

/// The rate limit of one cap's warning.
#[derive(Debug, Default)]
struct CapLog {
    last: Option<Instant>,
    suppressed: u64,
}

/// Counts open connections per address, per guest, unattributed and in all.
#[derive(Debug)]
pub struct SlotBook {
    limits: ConnectionLimits,
    book: Mutex<Book>,
    logs: [Mutex<CapLog>; 4],
}

impl Book {
    fn guest_of(&self, peer: IpAddr) -> Option<&GuestKey> {
        self.configured
            .get(&peer)
            .or_else(|| self.learned.get(&peer))
    }

    fn refresh_known(&mut self) {
        self.known = self
            .configured
            .values()
            .chain(self.learned.values())
            .cloned()
            .collect();
    }

    /// Each known guest's reservation and the unattributed pool's.
    fn reservations(&self, limits: &ConnectionLimits) -> (usize, usize) {
        let share = limits.max_total / (self.known.len() + 1);
        (
            limits.max_per_guest.min(share),
            limits.max_unattributed.min(share),
        )
    }

    /// Slots neither held nor reserved.
    fn headroom(&self, limits: &ConnectionLimits) -> usize {
        let (guest_share, pool_share) = self.reservations(limits);
        let mut committed = self.unattributed.max(pool_share);
        for guest in &self.known {
            let used = self.per_guest.get(guest).copied().unwrap_or(0);
            committed = committed.saturating_add(used.max(guest_share));
        }
        for (guest, used) in &self.per_guest {
            if !self.known.contains(guest) {
                committed = committed.saturating_add(*used);
            }
        }
        limits.max_total.saturating_sub(committed)
    }

    /// Whether `account` may count one more connection (the per-address and total caps apart).
    fn admits(&self, limits: &ConnectionLimits, account: &Account) -> Result<(), Cap> {
        let (guest_share, pool_share) = self.reservations(limits);
        let (used, cap, reserved, refused) = match account {
            Account::Guest(guest) => (
                self.per_guest.get(guest).copied().unwrap_or(0),
                limits.max_per_guest,
                if self.known.contains(guest) {
                    guest_share
                } else {
                    0
                },
                Cap::PerGuest,
            ),
            Account::Unattributed => (
                self.unattributed,
                limits.max_unattributed,
                pool_share,
                Cap::Unattributed,
            ),
        };
        if used >= cap {
            Err(refused)
        } else if used < reserved || self.headroom(limits) > 0 {
            Ok(())
        } else {
            Err(Cap::Total)
        }
    }

    fn add(&mut self, account: &Account) {
        match account {
            Account::Guest(guest) => *self.per_guest.entry(Arc::clone(guest)).or_insert(0) += 1,
            Account::Unattributed => self.unattributed += 1,
        }
    }

    fn remove(&mut self, account: &Account) {
        match account {
            Account::Guest(guest) => {
                if let Some(used) = self.per_guest.get_mut(guest) {
                    *used = used.saturating_sub(1);
                    if *used == 0 {
                        self.per_guest.remove(guest);
                    }
                }
            }
            Account::Unattributed => self.unattributed = self.unattributed.saturating_sub(1),
        }
    }

    /// Records that `guest` spoke from `peer`; a configured address stays its guest's, and a
    /// guest with a configured address learns none.
    fn learn(&mut self, peer: IpAddr, guest: &str) {
        if self.configured.contains_key(&peer)
            || self.addressed.contains(guest)
            || self.learned.get(&peer).is_some_and(|g| &**g == guest)
        {
            return;
        }
        let key: GuestKey = self
            .known
            .get(guest)
            .cloned()
            .unwrap_or_else(|| Arc::from(guest));
        if let Some(previous) = self.learned.insert(peer, Arc::clone(&key))
            && let Some(order) = self.learned_order.get_mut(&previous)
        {
            order.retain(|a| *a != peer);
            if order.is_empty() {
                self.learned_order.remove(&previous);
            }
        }
        let order = self.learned_order.entry(Arc::clone(&key)).or_default();
        order.push_back(peer);
        if order.len() > LEARNED_PER_GUEST
            && let Some(oldest) = order.pop_front()
        {
            self.learned.remove(&oldest);
        }
        self.refresh_known();
    }
}

impl SlotBook {
    /// A book with `limits`' caps and no address known yet.
    pub fn new(limits: &ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits: *limits,
            book: Mutex::new(Book::default()),
            logs: Default::default(),
        })
    }

    /// Replaces the configured addresses: each guest's static addresses by guest id (an
    /// address two guests claim is counted for neither).
    pub fn set_addresses(&self, addresses: &BTreeMap<String, Vec<IpAddr>>) {
        let mut claims: HashMap<IpAddr, Option<GuestKey>> = HashMap::new();
        let mut addressed: HashSet<GuestKey> = HashSet::new();
        for (guest, addrs) in addresses {
            let key: GuestKey = Arc::from(guest.as_str());
            if !addrs.is_empty() {
                addressed.insert(Arc::clone(&key));
            }
            for addr in addrs {
                claims
                    .entry(addr.to_canonical())
                    .and_modify(|g| {
                        if g.as_ref() != Some(&key) {
                            *g = None;
                        }
                    })
                    .or_insert_with(|| Some(Arc::clone(&key)));
            }
        }
        let configured: HashMap<IpAddr, GuestKey> = claims
            .into_iter()
            .filter_map(|(addr, guest)| guest.map(|g| (addr, g)))
            .collect();
        let mut book = self.book.lock();
        if book.configured == configured && book.addressed == addressed {
            return;
        }
        for addr in configured.keys() {
            if let Some(guest) = book.learned.remove(addr)
                && let Some(order) = book.learned_order.get_mut(&guest)
            {
                order.retain(|a| a != addr);
            }
        }
        // A guest with a configured address keeps nothing it was learned by.
        book.learned.retain(|_, guest| !addressed.contains(guest));
        book.learned_order
            .retain(|guest, order| !order.is_empty() && !addressed.contains(guest));
        book.addressed = addressed;
        book.configured = configured;
        book.refresh_known();
    }

    /// A slot for one more connection from `peer`, or the cap that refuses it.
    pub fn try_acquire(self: &Arc<Self>, peer: IpAddr) -> Result<ConnPermit, Cap> {
        let peer = peer.to_canonical();
        let mut book = self.book.lock();
        if book.total >= self.limits.max_total {
            return Err(Cap::Total);
        }
        if book.per_peer.get(&peer).copied().unwrap_or(0) >= self.limits.max_per_peer {
            return Err(Cap::PerPeer);
        }
        let account = match book.guest_of(peer) {
            Some(guest) => Account::Guest(Arc::clone(guest)),
            None => Account::Unattributed,
        };
        book.admits(&self.limits, &account)?;
        book.add(&account);
        *book.per_peer.entry(peer).or_insert(0) += 1;
        book.total += 1;
        drop(book);
        Ok(ConnPermit {
            slot: ConnSlot {
                book: Arc::clone(self),
                inner: Arc::new(Slot {
                    peer,
                    account: Mutex::new(Some(account)),
                }),
            },
        })
    }

    /// Open connections from `peer` and in all.
    pub fn open(&self, peer: IpAddr) -> (usize, usize) {
        let book = self.book.lock();
        let mine = book
            .per_peer
            .get(&peer.to_canonical())
            .copied()
            .unwrap_or(0);
        (mine, book.total)
    }

    /// Open connections counted for `guest_id`, and unattributed.
    pub fn open_for(&self, guest_id: &str) -> (usize, usize) {
        let book = self.book.lock();
        (
            book.per_guest.get(guest_id).copied().unwrap_or(0),
            book.unattributed,
        )
    }

    /// The guest `peer` is counted for, if any.
    pub fn guest_of(&self, peer: IpAddr) -> Option<String> {
        self.book
            .lock()
            .guest_of(peer.to_canonical())
            .map(|g| g.to_string())
    }

    /// Counts a refusal by `cap` in the metrics, and logs it unless one was logged less than
    /// [`CAP_LOG_INTERVAL`] ago.
    pub(crate) fn log_refusal(&self, cap: Cap, peer: IpAddr) {
        crate::metrics::agent().local_api_refused(cap.name());
        let limit = match cap {
            Cap::PerPeer => self.limits.max_per_peer,
            Cap::PerGuest => self.limits.max_per_guest,
            Cap::Unattributed => self.limits.max_unattributed,
            Cap::Total => self.limits.max_total,
        };
        let mut log = self.logs[cap.index()].lock();
        let now = Instant::now();
        if log
            .last
            .is_some_and(|last| now.duration_since(last) < CAP_LOG_INTERVAL)
        {
            log.suppressed = log.suppressed.saturating_add(1);
            return;
        }
        let suppressed = std::mem::take(&mut log.suppressed);
        log.last = Some(now);
        drop(log);
        let guest_id = self.guest_of(peer).unwrap_or_default();
        tracing::warn!(
            peer = %peer,
            guest_id,
            cap = cap.name(),
            limit,
            refused_since_last_line = suppressed,
            "local api connection refused: connection cap reached"
        );
    }

    fn release(&self, peer: IpAddr, account: &Account) {
        let mut book = self.book.lock();
        book.total = book.total.saturating_sub(1);
        if let Some(mine) = book.per_peer.get_mut(&peer) {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                book.per_peer.remove(&peer);
            }
        }
        book.remove(account);
    }
}

/// One connection's place in the book.
#[derive(Debug)]
struct Slot {
    peer: IpAddr,
    /// `None` once released.
    account: Mutex<Option<Account>>,
}

/// A connection's slot as its requests see it (a request extension): authentication tells it
/// which guest the connection belongs to.
#[derive(Debug, Clone)]
pub struct ConnSlot {
    book: Arc<SlotBook>,
    inner: Arc<Slot>,
}

impl ConnSlot {
    /// The connection's peer address.
    pub fn peer(&self) -> IpAddr {
        self.inner.peer
    }

    /// Records that `guest_id` authenticated on this connection: its address is learned for
    /// the guest, and a connection counted as unattributed moves to the guest's account if
    /// that has room (else it stays where it is).
    pub fn attribute(&self, guest_id: &str) {
        let limits = self.book.limits;
        let mut book = self.book.book.lock();
        book.learn(self.inner.peer, guest_id);
        let mut account = self.inner.account.lock();
        if account.as_ref() != Some(&Account::Unattributed) {
            return;
        }
        let Some(guest) = book.guest_of(self.inner.peer).cloned() else {
            return;
        };
        let target = Account::Guest(guest);
        book.remove(&Account::Unattributed);
        if book.admits(&limits, &target).is_ok() {
            book.add(&target);
            *account = Some(target);
        } else {
            book.add(&Account::Unattributed);
        }
    }
}

/// One open connection, counted until dropped.
#[derive(Debug)]
pub struct ConnPermit {
    slot: ConnSlot,
}

impl ConnPermit {
    /// The slot, for the connection's requests.
    pub fn slot(&self) -> ConnSlot {
        self.slot.clone()
    }
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let taken = self.slot.inner.account.lock().take();
        if let Some(account) = taken {
            self.slot.book.release(self.slot.inner.peer, &account);
        }
    }
}

#[cfg(test)]
#[path = "slots_tests.rs"]
mod tests;
