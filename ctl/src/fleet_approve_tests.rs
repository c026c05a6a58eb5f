use serde_json::json;

use super::*;

/// A host as the hub lists it, claiming `ring=canary`.
fn claimed(name: &str) -> HostSummary {
    serde_json::from_value(json!({
        "host_id": Uuid::new_v4(), "hostname": name, "status": "active", "liveness": "ok",
        "last_seen": null, "agent_version": "0.2.0", "controller_version": null,
        "desired_generation": 0, "known_generation": 0, "applied_generation": 0,
        "pending_jobs": 0, "enrolled_at": "2026-11-01T00:00:00Z", "poll_interval_seconds": 30,
        "labels": { "ring": "canary" },
    }))
    .unwrap()
}

/// The whole fleet, each host claimed for the canary ring.
fn fleet(n: usize) -> Vec<HostSummary> {
    (0..n).map(|i| claimed(&format!("pve-{i}"))).collect()
}

fn refused(result: Result<Vec<Uuid>, CtlError>) -> String {
    match result {
        Err(err @ CtlError::NotApproved { .. }) => {
            assert_eq!(err.exit_code(), crate::error::exit::INPUT);
            err.to_string()
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn without_a_bound_a_rollout_is_its_canary_and_must_be_confirmed() {
    let ask = Ask::new(&[], None, 1).unwrap();
    assert!(ask.needs_confirmation());
    assert_eq!(ask.max(), 1);
    assert_eq!(ask.check(&fleet(1)).unwrap(), Vec::<Uuid>::new());
    let why = refused(ask.check(&fleet(20)));
    assert!(
        why.contains("20 hosts") && why.contains("the canary's 1"),
        "{why}"
    );
    // A larger canary, asked for, is the bound.
    let ask = Ask::new(&[], None, 3).unwrap();
    assert!(ask.check(&fleet(3)).is_ok());
    assert!(ask.check(&fleet(4)).is_err());
}

#[test]
fn a_hub_claiming_more_than_max_hosts_gets_nothing() {
    let ask = Ask::new(&[], Some(5), 1).unwrap();
    assert!(!ask.needs_confirmation(), "a typed bound needs no prompt");
    assert!(ask.check(&fleet(5)).is_ok());
    let why = refused(ask.check(&fleet(6)));
    assert!(
        why.contains("6 hosts") && why.contains("--max-hosts 5"),
        "{why}"
    );
    assert!(ask.check(&fleet(500)).is_err());
}

#[test]
fn hosts_lists_the_only_hosts_a_hub_may_name() {
    let all = fleet(4);
    let mine: Vec<Uuid> = all[..2].iter().map(|h| h.host_id).collect();
    let ask = Ask::new(&mine, None, 1).unwrap();
    assert!(!ask.needs_confirmation());
    assert_eq!(ask.max(), 2);
    // The hub names every host: more than listed.
    let why = refused(ask.check(&all));
    assert!(why.contains("4 hosts"), "{why}");
    // As many as listed, but one is a stranger.
    let swapped = vec![all[0].clone(), all[3].clone()];
    let why = refused(ask.check(&swapped));
    assert!(
        why.contains(&all[3].host_id.to_string()) && why.contains("does not list"),
        "{why}"
    );
    // A listed host the hub leaves out is reported.
    assert_eq!(ask.check(&all[..1]).unwrap(), vec![all[1].host_id]);
    // --max-hosts narrows a list further; a repeated id counts once.
    let ask = Ask::new(&[mine[0], mine[1], mine[0]], Some(1), 1).unwrap();
    assert_eq!(ask.max(), 1);
    assert!(ask.check(&all[..2]).is_err());
}

#[test]
fn hosts_is_bounded() {
    let many: Vec<Uuid> = (0..=MAX_HOSTS).map(|_| Uuid::new_v4()).collect();
    assert!(matches!(
        Ask::new(&many, None, 1),
        Err(CtlError::BadArgument {
            what: "--hosts",
            ..
        })
    ));
}

#[test]
fn only_yes_on_a_terminal_confirms() {
    assert!(confirm(1, 1, true, &b"yes\n"[..]).is_ok());
    assert!(confirm(1, 1, true, &b"  yes  \n"[..]).is_ok());
    for answer in [&b"y\n"[..], b"no\n", b"", b"YES\n", b"yes please\n"] {
        assert!(
            matches!(
                confirm(1, 1, true, answer),
                Err(CtlError::NotApproved { .. })
            ),
            "{answer:?}"
        );
    }
    // A long line is read no further than the bound: it is not `yes`.
    let long = format!("{}yes\n", " ".repeat(100));
    assert!(confirm(1, 1, true, long.as_bytes()).is_err());
    // Without a terminal nothing is read and nothing confirmed, even a `yes` in the pipe.
    let Err(CtlError::NotApproved { reason }) = confirm(3, 3, false, &b"yes\n"[..]) else {
        panic!("confirmed without a terminal");
    };
    assert!(
        reason.contains("--hosts") && reason.contains("--max-hosts"),
        "{reason}"
    );
}

#[test]
fn an_approval_admits_its_hosts_only() {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let approval = Approval::new([a]);
    assert!(approval.admits(a) && !approval.admits(b));
    assert_eq!(approval.len(), 1);
    assert!(!approval.is_empty() && Approval::default().is_empty());
}
