//! `docs/pve-token.md`, the agent's own list (`bosun_pve::BOSUN_AGENT_PRIVILEGES`, which
//! `bosunctl pve check` checks a token against) and the simulator grant the `BosunAgent` role the
//! same privileges.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn the_documented_role_matches_the_simulator() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/pve-token.md");
    let doc = std::fs::read_to_string(&doc_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", doc_path.display()));
    let line = doc
        .lines()
        .find(|l| l.starts_with("pveum role add BosunAgent --privs "))
        .expect("the doc has the pveum role add command");
    let privs = line.split('"').nth(1).expect("privileges are quoted");
    let documented: BTreeSet<&str> = privs.split(',').map(str::trim).collect();
    let simulated: BTreeSet<&str> = bosun_pvesim::BOSUN_AGENT_PRIVILEGES
        .iter()
        .copied()
        .collect();
    assert_eq!(documented, simulated);
    let agent: BTreeSet<&str> = bosun_pve::BOSUN_AGENT_PRIVILEGES.iter().copied().collect();
    assert_eq!(
        agent.len(),
        bosun_pve::BOSUN_AGENT_PRIVILEGES.len(),
        "the agent's list has no duplicate"
    );
    assert_eq!(documented, agent, "the doc and the agent's list differ");
    assert_eq!(bosun_pve::BOSUN_AGENT_ROLE, "BosunAgent");
    assert!(doc.contains(&format!(
        "pveum user token add {} agent",
        bosun_pve::BOSUN_AGENT_USER
    )));
    for p in &documented {
        assert!(
            bosun_pvesim::ALL_PRIVILEGES.contains(p),
            "{p} is a PVE privilege"
        );
    }
    assert!(doc.contains("--tokens 'bosun@pve!agent' --roles BosunAgent --propagate 1"));
    assert!(doc.contains("--users bosun@pve --roles BosunAgent --propagate 1"));
    assert!(doc.contains("--privsep 1"));
}

#[test]
fn the_documented_guest_role_on_the_pool_matches_the_agent_and_the_simulator() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/pve-token.md");
    let doc = std::fs::read_to_string(&doc_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", doc_path.display()));
    let privileges_of = |prefix: &str| -> BTreeSet<String> {
        let line = doc
            .lines()
            .map(str::trim_start)
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("the doc has `{prefix}`"));
        line.split('"')
            .nth(1)
            .expect("privileges are quoted")
            .split(',')
            .map(|p| p.trim().to_owned())
            .collect()
    };
    let pve9 = privileges_of("pveum role add BosunGuest --privs ");
    let pve8 = privileges_of("#   pveum role add BosunGuest --privs ");
    let set = |l: &[&str]| {
        l.iter()
            .map(|p| (*p).to_owned())
            .collect::<BTreeSet<String>>()
    };
    assert_eq!(pve9, set(bosun_pve::BOSUN_GUEST_PRIVILEGES));
    assert_eq!(pve8, set(bosun_pve::BOSUN_GUEST_PRIVILEGES_PVE8));
    assert_eq!(pve9, set(bosun_pvesim::BOSUN_GUEST_PRIVILEGES));
    assert_eq!(bosun_pve::BOSUN_GUEST_ROLE, "BosunGuest");
    assert_eq!(bosun_pve::BOSUN_POOL, bosun_pvesim::BOSUN_POOL);
    for p in &pve9 {
        assert!(
            bosun_pvesim::ALL_PRIVILEGES.contains(&p.as_str()),
            "{p} is a PVE 9 privilege"
        );
        assert!(
            bosun_pve::GUEST_REACH_PRIVILEGES.contains(&p.as_str()),
            "pve check looks for {p} outside the pool"
        );
    }
    for p in bosun_pve::GUEST_REACH_PRIVILEGES {
        assert!(
            !bosun_pve::BOSUN_AGENT_PRIVILEGES.contains(p),
            "{p} reaches inside a VM: never in the role on /"
        );
    }
    for line in [
        "pveum acl modify /pool/bosun --users bosun@pve --roles BosunGuest --propagate 1",
        "pveum acl modify /pool/bosun --tokens 'bosun@pve!agent' --roles BosunGuest --propagate 1",
    ] {
        assert!(
            doc.contains(line),
            "the doc grants the role on the pool: {line}"
        );
    }
    let grants: Vec<&str> = doc
        .lines()
        .filter(|l| l.contains("--roles BosunGuest"))
        .collect();
    assert_eq!(grants.len(), 2, "{grants:?}");
    assert!(
        grants
            .iter()
            .all(|l| l.starts_with("pveum acl modify /pool/bosun ")),
        "the role is granted on the pool only: {grants:?}"
    );
}
