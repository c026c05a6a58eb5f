use bosun_proto::desired::Power;
use uuid::Uuid;

use super::super::plan::tests::{desired, facts, seen, spec};
use super::super::plan::{Action, Finding, ObservedPower, plan};
use super::*;

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

/// db (1) ← app (2) ← web (3), all `power`.
fn chain(power: Power) -> bosun_proto::desired::DesiredState {
    let mut db = spec(1, power);
    db.provides = vec!["db".into()];
    let mut app = spec(2, power);
    app.provides = vec!["app".into()];
    app.requires = vec!["db".into()];
    let mut web = spec(3, power);
    web.requires = vec!["app".into()];
    // Listed the wrong way round: the order is the requirements', not the list's.
    desired(vec![web, app, db])
}

fn power_actions(p: &super::super::plan::Plan) -> Vec<(Uuid, &'static str)> {
    p.actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::Provision { .. } | Action::Start { .. } | Action::Stop { .. }
            )
        })
        .map(|a| (a.guest_id(), a.name()))
        .collect()
}

fn waiting(p: &super::super::plan::Plan) -> Vec<(Uuid, Vec<Uuid>, bool)> {
    p.findings
        .iter()
        .filter_map(|f| match f {
            Finding::Waiting {
                guest_id,
                on,
                stopping,
            } => Some((*guest_id, on.clone(), *stopping)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_chain_is_provisioned_link_by_link_and_each_waits_on_the_one_before() {
    let want = chain(Power::Running);
    let p = plan(&want, &[], &facts());
    assert_eq!(power_actions(&p), vec![(id(1), "provision")]);
    assert_eq!(
        waiting(&p),
        vec![(id(2), vec![id(1)], false), (id(3), vec![id(2)], false)]
    );
    assert!(!p.is_converged());
    // db runs: app is provisioned, web still waits.
    let mut seen_db = seen(1, 101, ObservedPower::Running);
    seen_db.startup = Some("order=1,up=0,down=60".into());
    let p = plan(&want, std::slice::from_ref(&seen_db), &facts());
    assert_eq!(power_actions(&p), vec![(id(2), "provision")]);
    assert_eq!(waiting(&p), vec![(id(3), vec![id(2)], false)]);
}

#[test]
fn stopped_guests_start_in_order_and_running_ones_stop_in_reverse() {
    let stopped: Vec<_> = (1u32..=3)
        .map(|v| {
            let n = u128::from(v);
            let mut s = seen(n, 100 + v, ObservedPower::Stopped);
            s.startup = startup_of(
                &bosun_proto::desired::order::boot_order(&chain(Power::Running).guests),
                id(n),
            )
            .map(|s| s.to_string());
            s
        })
        .collect();
    let p = plan(&chain(Power::Running), &stopped, &facts());
    assert_eq!(power_actions(&p), vec![(id(1), "start")]);
    assert!(p.actions.iter().all(|a| a.name() == "start"), "{p:?}");

    let running: Vec<_> = stopped
        .iter()
        .cloned()
        .map(|mut s| {
            s.power = ObservedPower::Running;
            s
        })
        .collect();
    let p = plan(&chain(Power::Stopped), &running, &facts());
    assert_eq!(power_actions(&p), vec![(id(3), "stop")]);
    assert_eq!(
        waiting(&p),
        vec![(id(1), vec![id(2)], true), (id(2), vec![id(3)], true)]
    );
    // web is down: app stops; db still waits on it.
    let mut some = running.clone();
    some[2].power = ObservedPower::Stopped;
    let p = plan(&chain(Power::Stopped), &some, &facts());
    assert_eq!(power_actions(&p), vec![(id(2), "stop")]);
}

#[test]
fn each_ordered_guest_gets_its_startup_place_and_an_unordered_one_keeps_its_own() {
    let mut want = chain(Power::Running);
    want.guests.push(spec(4, Power::Running));
    let observed: Vec<_> = (1u32..=4)
        .map(|v| {
            let mut s = seen(u128::from(v), 100 + v, ObservedPower::Running);
            s.startup = Some("order=9".into());
            s
        })
        .collect();
    let p = plan(&want, &observed, &facts());
    let startups: Vec<(Uuid, String)> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::SetSpec {
                guest_id,
                startup: Some(s),
                ..
            } => Some((*guest_id, s.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(
        startups,
        vec![
            (id(3), "order=3,up=0,down=60".to_owned()),
            (id(2), "order=2,up=0,down=60".to_owned()),
            (id(1), "order=1,up=0,down=60".to_owned()),
        ]
    );
    let third = StartupOrder::parse("order=3,up=0,down=60").unwrap();
    assert!(!startup_drifted(Some("3,down=60,up=0"), third));
    assert!(startup_drifted(Some("order=3,up=0"), third));
    assert!(startup_drifted(
        None,
        StartupOrder::parse("order=1").unwrap()
    ));
}

#[test]
fn a_cycle_or_a_missing_provider_is_refused_and_no_running_guest_is_held_or_stopped() {
    let mut a = spec(1, Power::Running);
    a.provides = vec!["a".into()];
    a.requires = vec!["b".into()];
    let mut b = spec(2, Power::Running);
    b.provides = vec!["b".into()];
    b.requires = vec!["a".into()];
    let mut c = spec(3, Power::Running);
    c.requires = vec!["nobody".into()];
    let want = desired(vec![a, b, c]);
    // Two of them are stopped (the host rebooted): both start at once, as does the third.
    let observed = [
        seen(1, 101, ObservedPower::Stopped),
        seen(2, 102, ObservedPower::Running),
    ];
    let p = plan(&want, &observed, &facts());
    assert_eq!(
        power_actions(&p),
        vec![(id(1), "start"), (id(3), "provision")]
    );
    assert!(waiting(&p).is_empty(), "{p:?}");
    let refused: Vec<(Uuid, &str, &str)> = p
        .findings
        .iter()
        .filter_map(|f| match f {
            Finding::OrderRefused {
                guest_id,
                requirement,
                refusal,
                ..
            } => Some((*guest_id, requirement.as_str(), *refusal)),
            _ => None,
        })
        .collect();
    assert_eq!(
        refused,
        vec![
            (id(1), "b", "cycle"),
            (id(2), "a", "cycle"),
            (id(3), "nobody", "nobody_provides"),
        ]
    );
    assert!(!p.is_converged());
    let reported = super::super::refusals::of(&want.guests, &p.findings, &[], None);
    assert_eq!(reported.len(), 3, "{reported:?}");
    assert_eq!(reported[0].field.as_deref(), Some("requires.b"));
    assert!(
        reported[0].reason.contains("cycle through g1, g2"),
        "{reported:?}"
    );
    assert!(bosun_proto::refused::check("refused", &reported).is_ok());
}

#[test]
fn a_dr_restore_is_never_held_by_the_order() {
    let want = chain(Power::Running);
    let mut f = facts();
    f.lost.insert(id(2), 102);
    let observed = [seen(3, 103, ObservedPower::Running)];
    let p = plan(&want, &observed, &f);
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, Action::Recover { spec, .. } if spec.guest_id == id(2))),
        "{p:?}"
    );
}
