use super::*;
use crate::desired::{CustomerIdentity, GoldenArchive, GuestResources, GuestSpec, Power};

fn guest(n: u128, name: &str, power: Power, provides: &[&str], requires: &[&str]) -> GuestSpec {
    GuestSpec {
        guest_id: Uuid::from_u128(n),
        kind: Default::default(),
        hostname: name.to_owned(),
        vmid: None,
        customer: CustomerIdentity {
            customer_id: "acme".to_owned(),
            display_name: "Acme".to_owned(),
        },
        resources: GuestResources {
            cores: 1,
            memory_mib: 512,
            rootfs_gib: 4,
        },
        power,
        golden: GoldenArchive {
            volid: String::new(),
            sha256: String::new(),
            signed: None,
            version: Some("1".to_owned()),
        },
        bulk_volumes: Vec::new(),
        hot_volumes: Vec::new(),
        thresholds: None,
        share_class: None,
        provides: provides.iter().map(|s| (*s).to_owned()).collect(),
        requires: requires.iter().map(|s| (*s).to_owned()).collect(),
        network: None,
    }
}

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

#[test]
fn a_chain_waits_link_by_link_and_takes_places_one_two_three() {
    use Power::Running;
    // Listed web first: the order comes from the requirements, not the list.
    let guests = [
        guest(3, "web", Running, &[], &["app"]),
        guest(1, "db", Running, &["db"], &[]),
        guest(2, "app", Running, &["app"], &["db"]),
        guest(4, "loner", Running, &[], &[]),
    ];
    let order = boot_order(&guests);
    assert!(order.refused.is_empty(), "{order:?}");
    assert_eq!(order.waits_on[&id(3)], BTreeSet::from([id(2)]));
    assert_eq!(order.waits_on[&id(2)], BTreeSet::from([id(1)]));
    assert!(!order.waits_on.contains_key(&id(1)));
    assert_eq!(
        order.position,
        BTreeMap::from([(id(1), 1), (id(2), 2), (id(3), 3)]),
        "a guest taking no part has no place"
    );
    assert_eq!(order.dependents(id(1)).collect::<Vec<_>>(), vec![id(2)]);
}

#[test]
fn a_requirement_waits_on_every_running_provider_and_takes_the_highest_place() {
    use Power::{Running, Stopped};
    let guests = [
        guest(1, "db1", Running, &["db"], &[]),
        guest(2, "cache", Running, &["cache"], &[]),
        guest(3, "db2", Running, &["db"], &["cache"]),
        guest(4, "db3", Stopped, &["db"], &[]),
        guest(5, "app", Running, &[], &["db"]),
    ];
    let order = boot_order(&guests);
    assert!(order.refused.is_empty(), "{order:?}");
    assert_eq!(order.waits_on[&id(5)], BTreeSet::from([id(1), id(3)]));
    assert_eq!(order.position[&id(5)], 3);
}

#[test]
fn a_requirement_nobody_provides_or_only_stopped_guests_provide_is_refused_not_waited_on() {
    use Power::{Running, Stopped};
    let guests = [
        guest(1, "db", Stopped, &["db"], &[]),
        guest(2, "app", Running, &[], &["db", "queue"]),
        guest(3, "batch", Stopped, &[], &["db"]),
    ];
    let order = boot_order(&guests);
    assert_eq!(order.refused.len(), 2, "{order:?}");
    assert_eq!(order.refused[0].guest_id, id(2));
    assert_eq!(order.refused[0].requirement, "db");
    assert_eq!(
        order.refused[0].refusal,
        OrderRefusal::ProvidersStopped {
            providers: vec!["db".to_owned()]
        }
    );
    assert!(
        order.refused[0]
            .reason()
            .contains("only guests desired stopped"),
        "{}",
        order.refused[0].reason()
    );
    assert_eq!(order.refused[1].requirement, "queue");
    assert_eq!(order.refused[1].refusal, OrderRefusal::NobodyProvides);
    assert!(order.refused[1].reason().contains("no guest"));
    assert!(!order.waits_on.contains_key(&id(2)), "{order:?}");
    // A stopped guest still stops before what it requires.
    assert_eq!(order.waits_on[&id(3)], BTreeSet::from([id(1)]));
}

#[test]
fn every_requirement_inside_a_cycle_is_refused_and_the_rest_of_the_order_holds() {
    use Power::Running;
    let guests = [
        guest(1, "a", Running, &["a"], &["c"]),
        guest(2, "b", Running, &["b"], &["a"]),
        guest(3, "c", Running, &["c"], &["b"]),
        guest(4, "base", Running, &["base"], &[]),
        guest(5, "top", Running, &[], &["a", "base"]),
        guest(6, "selfish", Running, &["me"], &["me"]),
    ];
    let order = boot_order(&guests);
    let refused: Vec<(Uuid, &str, &str)> = order
        .refused
        .iter()
        .map(|r| (r.guest_id, r.requirement.as_str(), r.refusal.as_str()))
        .collect();
    assert_eq!(
        refused,
        vec![
            (id(1), "c", "cycle"),
            (id(2), "a", "cycle"),
            (id(3), "b", "cycle"),
            (id(6), "me", "cycle"),
        ]
    );
    assert!(
        order.refused[0].reason().contains("a, b, c"),
        "{}",
        order.refused[0].reason()
    );
    for g in [1, 2, 3, 6] {
        assert!(!order.waits_on.contains_key(&id(g)), "{order:?}");
    }
    // A guest outside the cycle still waits on it and on its other provider.
    assert_eq!(order.waits_on[&id(5)], BTreeSet::from([id(1), id(4)]));
    assert_eq!(order.position[&id(5)], 2);
}

#[test]
fn a_long_chain_and_a_wide_cycle_are_ordered_without_exhausting_a_stack() {
    let n = crate::desired::MAX_GUESTS;
    let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let chain: Vec<GuestSpec> = (0..n)
        .map(|i| {
            let requires: Vec<&str> = if i == 0 {
                Vec::new()
            } else {
                vec![names[i - 1].as_str()]
            };
            guest(
                i as u128 + 1,
                &names[i],
                Power::Running,
                &[&names[i]],
                &requires,
            )
        })
        .collect();
    let order = boot_order(&chain);
    assert!(order.refused.is_empty());
    assert_eq!(order.position[&id(n as u128)], u32::try_from(n).unwrap());
    // Close the chain into one cycle: every requirement of it is refused, and the reason stays
    // short.
    let mut ring = chain;
    ring[0].requires = vec![names[n - 1].clone()];
    let order = boot_order(&ring);
    assert_eq!(order.refused.len(), n);
    let reason = order.refused[0].reason();
    assert!(reason.len() <= crate::refused::MAX_REASON, "{reason}");
    assert!(reason.contains(&format!("and {} more", n - 4)), "{reason}");
    assert!(order.waits_on.is_empty());
}

#[test]
fn names_and_counts_are_bounded() {
    let ok = guest(1, "a", Power::Running, &["db", "x-1"], &["q0"]);
    assert!(validate(&ok, &|f| f.to_owned()).is_ok());
    for bad in ["", "-db", "DB", "d b", "d_b", &"x".repeat(33)] {
        let g = guest(1, "a", Power::Running, &[bad], &[]);
        assert!(validate(&g, &|f| f.to_owned()).is_err(), "{bad:?}");
    }
    let many: Vec<String> = (0..=MAX_REQUIRES).map(|i| format!("r{i}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let g = guest(1, "a", Power::Running, &[], &refs);
    assert!(validate(&g, &|f| f.to_owned()).is_err());
    let twice = guest(1, "a", Power::Running, &["db", "db"], &[]);
    let err = validate(&twice, &|f| format!("guests[0].{f}")).unwrap_err();
    assert!(err.to_string().contains("guests[0].provides[1]"), "{err}");
}
