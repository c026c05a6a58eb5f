use super::*;

fn ordered() -> DesiredState {
    serde_json::from_str(include_str!("../../docs/proto/desired-ordered.json")).unwrap()
}

fn id_of(d: &DesiredState, name: &str) -> Uuid {
    d.guests
        .iter()
        .find(|g| g.hostname == name)
        .unwrap()
        .guest_id
}

#[test]
fn the_order_is_printed_first_up_first_with_what_each_waits_on_now() {
    let desired = ordered();
    let order = boot_order(&desired.guests);
    let status = BTreeMap::from([
        (id_of(&desired, "acme-db"), GuestStatus::Running),
        (id_of(&desired, "acme-app"), GuestStatus::Stopped),
    ]);
    let view = View {
        desired: &desired,
        order: &order,
        status: &status,
    };
    let lines = view.lines();
    assert_eq!(
        lines[1],
        "  1. acme-db (running; desired running) provides db; requires -"
    );
    assert_eq!(
        lines[2],
        "  2. acme-app (stopped; desired running) provides app; requires db"
    );
    assert_eq!(lines[3], "     waits on acme-db");
    // acme-app's own wait is over (acme-db runs): no line says it is held.
    assert_eq!(
        lines[4],
        "  3. acme-web (not built; desired running) provides web; requires app"
    );
    assert_eq!(lines[5], "     waits on acme-app");
    assert_eq!(
        lines[6],
        "     now held: starts once these run: acme-app (stopped)"
    );
    assert_eq!(lines.len(), 7, "{lines:#?}");
    let json = view.json();
    assert_eq!(
        json["order"][2]["held"],
        "starts once these run: acme-app (stopped)"
    );
    assert_eq!(json["order"][0]["place"], 1);
}

#[test]
fn a_stop_waits_on_what_still_runs_and_a_cycle_is_named_refused() {
    let mut desired = ordered();
    for g in &mut desired.guests {
        g.power = Power::Stopped;
    }
    let status: BTreeMap<Uuid, GuestStatus> = desired
        .guests
        .iter()
        .map(|g| (g.guest_id, GuestStatus::Running))
        .collect();
    let order = boot_order(&desired.guests);
    let view = View {
        desired: &desired,
        order: &order,
        status: &status,
    };
    let lines = view.lines();
    assert!(
        lines.contains(
            &"     now held: stops once these are stopped: acme-app (running)".to_owned()
        ),
        "{lines:#?}"
    );
    // acme-db now requires web: a cycle through all three.
    let db = desired
        .guests
        .iter_mut()
        .find(|g| g.hostname == "acme-db")
        .unwrap();
    db.requires = vec!["web".to_owned()];
    let order = boot_order(&desired.guests);
    let view = View {
        desired: &desired,
        order: &order,
        status: &status,
    };
    let lines = view.lines();
    let refused: Vec<&String> = lines.iter().filter(|l| l.starts_with("refused:")).collect();
    assert_eq!(refused.len(), 3, "{lines:#?}");
    assert!(
        refused[0].contains("closes a cycle through acme-app, acme-db, acme-web"),
        "{refused:?}"
    );
}
