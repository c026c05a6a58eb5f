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
