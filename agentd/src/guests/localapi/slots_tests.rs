use super::*;

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

fn ip2(third: u8, last: u8) -> IpAddr {
    IpAddr::from([127, 0, third, last])
}

fn limits(
    per_peer: usize,
    per_guest: usize,
    unattributed: usize,
    total: usize,
) -> ConnectionLimits {
    ConnectionLimits {
        max_per_peer: per_peer,
        max_per_guest: per_guest,
        max_unattributed: unattributed,
        max_total: total,
        ..ConnectionLimits::default()
    }
}

/// Acquires as many slots from `peer` as the book gives, up to `want`.
fn take(book: &Arc<SlotBook>, peer: IpAddr, want: usize) -> Vec<ConnPermit> {
    (0..want)
        .map_while(|_| book.try_acquire(peer).ok())
        .collect()
}

fn addresses(pairs: &[(&str, &[IpAddr])]) -> BTreeMap<String, Vec<IpAddr>> {
    pairs
        .iter()
        .map(|(g, a)| ((*g).to_owned(), a.to_vec()))
        .collect()
}

#[test]
fn caps_count_per_peer_and_in_all_and_free_on_drop() {
    let book = SlotBook::new(&ConnectionLimits {
        max_per_peer: 2,
        max_total: 3,
        ..ConnectionLimits::default()
    });
    let a = ip(2);
    let b: IpAddr = "::ffff:127.0.0.3".parse().unwrap();
    let a1 = book.try_acquire(a);
    let a2 = book.try_acquire(a);
    assert!(a1.is_ok() && a2.is_ok());
    assert_eq!(book.try_acquire(a).err(), Some(Cap::PerPeer));
    let b1 = book.try_acquire(b);
    assert!(b1.is_ok());
    assert_eq!(book.try_acquire(ip(3)).err(), Some(Cap::Total));
    assert_eq!(book.open(ip(3)), (1, 3));
    drop(a1);
    assert_eq!(book.open(a), (1, 2));
    assert!(book.try_acquire(a).is_ok());
    drop(a2);
    drop(b1);
}

#[test]
fn a_flood_from_unknown_addresses_is_held_to_the_unattributed_pool() {
    // The default caps: 32 per address, 32 per guest, 64 unattributed, 512 in all.
    let book = SlotBook::new(&ConnectionLimits::default());
    book.set_addresses(&addresses(&[("guest-b", &[ip(3)]), ("guest-c", &[ip(4)])]));
    let mut flood = Vec::new();
    for n in 1..=64 {
        flood.extend(take(&book, ip2(1, n), 8));
    }
    assert_eq!(
        flood.len(),
        64,
        "64 addresses × 8 tries fill the pool, no more"
    );
    assert_eq!(book.try_acquire(ip2(1, 65)).err(), Some(Cap::Unattributed));
    // Each known guest still gets its whole cap.
    assert_eq!(take(&book, ip(3), 40).len(), 32);
    assert_eq!(take(&book, ip(4), 40).len(), 32);
    assert_eq!(book.open_for("guest-b"), (0, 64), "permits were dropped");
}

#[test]
fn a_guest_flooding_from_many_addresses_keeps_to_its_own_cap() {
    let book = SlotBook::new(&limits(32, 8, 16, 64));
    book.set_addresses(&addresses(&[("neighbour", &[ip(3)])]));
    // The flooding guest authenticates from 16 addresses: each is learned for it.
    let mut held = Vec::new();
    for n in 1..=16 {
        let permit = book.try_acquire(ip2(1, n)).unwrap();
        permit.slot().attribute("flooder");
        held.push(permit);
    }
    assert_eq!(book.open_for("flooder").0, 8, "moved up to its cap");
    assert_eq!(book.guest_of(ip2(1, 16)).as_deref(), Some("flooder"));
    for n in 1..=16 {
        held.extend(take(&book, ip2(1, n), 4));
    }
    assert_eq!(book.open_for("flooder"), (8, 8));
    assert_eq!(
        book.try_acquire(ip2(1, 1)).err(),
        Some(Cap::PerGuest),
        "a learned address counts for its guest"
    );
    // A seventeenth address is learned, and the oldest forgotten.
    let extra = book.try_acquire(ip2(1, 17)).unwrap();
    extra.slot().attribute("flooder");
    assert_eq!(book.guest_of(ip2(1, 1)), None);
    assert_eq!(book.guest_of(ip2(1, 17)).as_deref(), Some("flooder"));
    // The neighbour's reservation is untouched.
    assert_eq!(take(&book, ip(3), 20).len(), 8);
    drop(held);
}

#[test]
fn reservations_keep_each_known_guest_its_share_of_the_total() {
    // 4 known guests and the pool share 40 slots: 8 each, reserved.
    let book = SlotBook::new(&limits(64, 20, 20, 40));
    book.set_addresses(&addresses(&[
        ("a", &[ip(1)]),
        ("b", &[ip(2)]),
        ("c", &[ip(3)]),
        ("d", &[ip(4)]),
    ]));
    let a = take(&book, ip(1), 64);
    let b = take(&book, ip(2), 64);
    // a took its 8 and the 8 free of every reservation... none are free: 5 × 8 = 40.
    assert_eq!((a.len(), b.len()), (8, 8));
    assert_eq!(book.try_acquire(ip(1)).err(), Some(Cap::Total));
    let c = take(&book, ip(3), 64);
    let d = take(&book, ip(4), 64);
    let pool = take(&book, ip(9), 64);
    assert_eq!((c.len(), d.len(), pool.len()), (8, 8, 8));
    // Without c and d known, their reservations return to the shared slots.
    drop((c, d));
    book.set_addresses(&addresses(&[("a", &[ip(1)]), ("b", &[ip(2)])]));
    // 3 accounts: 13 reserved each (40 / 3), 1 shared; a holds 8.
    assert_eq!(
        take(&book, ip(1), 64).len(),
        6,
        "up to its reservation and the one shared"
    );
    drop((a, b, pool));
}

#[test]
fn a_configured_address_is_never_learned_for_another_guest() {
    let book = SlotBook::new(&ConnectionLimits::default());
    book.set_addresses(&addresses(&[("owner", &[ip(5)])]));
    let permit = book.try_acquire(ip(5)).unwrap();
    permit.slot().attribute("intruder");
    assert_eq!(book.guest_of(ip(5)).as_deref(), Some("owner"));
    assert_eq!(book.open_for("owner").0, 1);
    assert_eq!(book.open_for("intruder").0, 0);
    // An address two guests claim counts for neither.
    book.set_addresses(&addresses(&[("x", &[ip(6)]), ("y", &[ip(6)])]));
    assert_eq!(book.guest_of(ip(6)), None);
    drop(permit);
    assert_eq!(book.open(ip(5)), (0, 0));
    assert_eq!(book.open_for("owner"), (0, 0));
}

#[test]
fn an_unattributed_connection_moves_to_its_guest_and_is_released_there() {
    let book = SlotBook::new(&ConnectionLimits::default());
    let permit = book.try_acquire(ip(7)).unwrap();
    assert_eq!(book.open_for("g"), (0, 1));
    permit.slot().attribute("g");
    assert_eq!(book.open_for("g"), (1, 0));
    // Attributing again changes nothing.
    permit.slot().attribute("g");
    assert_eq!(book.open_for("g"), (1, 0));
    let next = book.try_acquire(ip(7)).unwrap();
    assert_eq!(
        book.open_for("g"),
        (2, 0),
        "the learned address counts at once"
    );
    drop((permit, next));
    assert_eq!(book.open_for("g"), (0, 0));
    assert_eq!(book.open(ip(7)), (0, 0));
}

#[test]
fn a_guest_with_a_configured_address_is_known_by_it_alone() {
    let book = SlotBook::new(&ConnectionLimits::default());
    // A DHCP guest is learned by the address it authenticates from.
    let dhcp = book.try_acquire(ip(20)).unwrap();
    dhcp.slot().attribute("owner");
    assert_eq!(book.guest_of(ip(20)).as_deref(), Some("owner"));
    // Once its config gives it a static address, what it was learned by is forgotten…
    book.set_addresses(&addresses(&[("owner", &[ip(5)]), ("other", &[ip(6)])]));
    assert_eq!(book.guest_of(ip(20)), None);
    // …and a connection from any other address, even authenticated as it (a neighbour that
    // named its address and holds its token, or its own from a foreign address), stays
    // unattributed and learns nothing.
    let foreign = book.try_acquire(ip(30)).unwrap();
    foreign.slot().attribute("owner");
    assert_eq!(book.guest_of(ip(30)), None);
    // (The connection it was learned by stays counted where it was.)
    assert_eq!(book.open_for("owner"), (1, 1));
    // Its own address counts for it before any request.
    let own = book.try_acquire(ip(5)).unwrap();
    assert_eq!(book.open_for("owner"), (2, 1));
    drop((dhcp, foreign, own));
}
