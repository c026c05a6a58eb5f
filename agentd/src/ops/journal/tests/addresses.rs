use std::net::IpAddr;

use super::*;
use crate::ops::journal::guest_addresses::MAX_POOL_SCAN;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pool(first: &str, last: &str) -> AddressSource {
    AddressSource::Pool {
        first: ip(first),
        last: ip(last),
        prefix: 24,
        gateway: Some(ip("10.1.0.1")),
    }
}

fn new(a: Assignment) -> IpAddr {
    match a {
        Assignment::New(a) => a.address,
        other => panic!("not new: {other:?}"),
    }
}

#[test]
fn the_pool_hands_out_each_address_once_and_a_guest_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _clock) = open(&dir);
    let p = pool("10.1.0.1", "10.1.0.4");
    // The gateway and what the node or another container holds are skipped.
    let a = new(store.assign_address("a", &p, &[ip("10.1.0.2")]).unwrap());
    assert_eq!(a, ip("10.1.0.3"));
    let b = new(store.assign_address("b", &p, &[ip("10.1.0.2")]).unwrap());
    assert_eq!(b, ip("10.1.0.4"));
    assert_eq!(
        store.assign_address("c", &p, &[ip("10.1.0.2")]).unwrap(),
        Assignment::Exhausted
    );
    // Asked again, a guest keeps the one it holds, even when another is named.
    let named = AddressSource::Named {
        address: ip("10.1.0.9"),
        prefix: 24,
        gateway: None,
    };
    match store.assign_address("a", &named, &[]).unwrap() {
        Assignment::Held(held) => assert_eq!(held.address, a),
        other => panic!("{other:?}"),
    }
    // Another guest's address, named, is refused with its holder.
    let bs = AddressSource::Named {
        address: b,
        prefix: 24,
        gateway: None,
    };
    assert_eq!(
        store.assign_address("c", &bs, &[]).unwrap(),
        Assignment::Taken {
            address: b,
            by: Some("b".into())
        }
    );
    // A decommission releases them.
    assert_eq!(store.release_addresses("a").unwrap(), 1);
    assert_eq!(
        new(store.assign_address("c", &p, &[ip("10.1.0.2")]).unwrap()),
        a
    );
    assert_eq!(store.addresses_of("c").unwrap()[0].cidr(), "10.1.0.3/24");
}

#[test]
fn the_families_are_held_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _clock) = open(&dir);
    let v6 = AddressSource::Pool {
        first: ip("2001:db8::10"),
        last: ip("2001:db8::ffff:ffff"),
        prefix: 64,
        gateway: None,
    };
    new(store
        .assign_address("a", &pool("10.1.0.2", "10.1.0.9"), &[])
        .unwrap());
    assert_eq!(
        new(store.assign_address("a", &v6, &[]).unwrap()),
        ip("2001:db8::10")
    );
    let mine = store.addresses_of("a").unwrap();
    assert_eq!(
        mine.iter().map(AssignedAddress::family).collect::<Vec<_>>(),
        ["ipv4", "ipv6"]
    );
}

#[test]
fn an_address_handed_out_stays_handed_out_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool("10.1.0.2", "10.1.0.9");
    let first = {
        let (mut store, _clock) = open(&dir);
        new(store.assign_address("a", &p, &[]).unwrap())
    };
    let (mut store, _clock) = open(&dir);
    let second = new(store.assign_address("b", &p, &[]).unwrap());
    assert_ne!(first, second, "a restart handed out one address twice");
    match store.assign_address("a", &p, &[]).unwrap() {
        Assignment::Held(held) => assert_eq!(held.address, first),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_pool_scan_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _clock) = open(&dir);
    // Every address of a huge range is "taken" up to the bound: the scan gives up there.
    let huge = AddressSource::Pool {
        first: ip("2001:db8::1"),
        last: ip("2001:db8::ffff:ffff:ffff"),
        prefix: 64,
        gateway: None,
    };
    let base = u128::from("2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap());
    let taken: Vec<IpAddr> = (0..MAX_POOL_SCAN)
        .map(|i| IpAddr::V6(std::net::Ipv6Addr::from(base + i)))
        .collect();
    assert_eq!(
        store.assign_address("a", &huge, &taken).unwrap(),
        Assignment::Exhausted
    );
}
