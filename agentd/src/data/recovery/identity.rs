//! Identity per scenario (DESIGN §8): one function decides, from why a guest is being
//! restored, which identity it keeps and which it gets fresh.
//!
//! | scenario | MAC | machine id, SSH host keys | hostname | network | mounts, bulk volumes | bootstrap |
//! |---|---|---|---|---|---|---|
//! | provision (golden) | fresh | fresh (the golden carries none; its first boot makes them) | desired | up | per manifest | fresh token, pushed |
//! | guest-loss DR | kept, fresh if the source may still be live | kept, reset in the guest if the source may still be live | desired | up (down until the reset is done) | per manifest | as in the backup |
//! | restore test | fresh | the archive's (its links never come up) | scratch name | every link down | none | none pushed |
//!
//! A reset in the guest happens before the restored guest first runs connected: it is
//! started with every link down, the helper's `reset_guest_identity` removes its SSH host
//! keys and empties its machine id (as the golden image leaves them), it is shut down, its
//! links come up, and its next boot makes its own ([`crate::guests::reconcile::provision::dr_identity`];
//! `docs/decisions/0027-dr-identity-reset.md`). Without a source that may still run, the
//! restored guest keeps both: nothing else holds them, and the customer's SSH clients know
//! its host keys.

/// Why an archive is being restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// A new guest from the golden archive.
    Provision,
    /// A lost guest brought back from its own backup.
    GuestLossDr {
        /// Whether the guest the backup was taken of may still run somewhere (its vmid
        /// holds a container that does not carry the agent's identity): two guests with
        /// one MAC on a bridge would fight over it, and two with one machine id or one set
        /// of SSH host keys would pass for each other.
        source_may_be_live: bool,
    },
    /// A restore test: a scratch copy that must never reach anything.
    RestoreTest,
}

/// The hostname a restored guest gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostnameRule {
    /// The desired hostname.
    Desired,
    /// A scratch name of its own (`restore-test-<vmid>`), never the customer's.
    Scratch,
}

/// What identity the restored guest gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentityPlan {
    /// Fresh MAC addresses (`unique=1` and `hwaddr` dropped), else the archive's.
    pub fresh_mac: bool,
    /// The archive's machine id and SSH host keys reset inside the guest, with every link
    /// down, before it first runs connected (its next boot makes new ones); `false`: the
    /// guest keeps what the archive holds.
    pub reset_in_guest: bool,
    /// The hostname.
    pub hostname: HostnameRule,
    /// Every network interface's link down.
    pub links_down: bool,
    /// Storage mounts and bulk volumes attached per the manifest; `false`: every mount
    /// point of the archive is removed before the guest starts.
    pub mounts: bool,
    /// A fresh local-API token and bootstrap pushed once it runs; `false`: the guest keeps
    /// the bootstrap its backup holds (or none, for a scratch guest).
    pub fresh_bootstrap: bool,
    /// Start the guest when the host boots.
    pub onboot: bool,
}

/// The identity rules of `scenario`.
pub const fn identity_for(scenario: Scenario) -> IdentityPlan {
    match scenario {
        Scenario::Provision => IdentityPlan {
            fresh_mac: true,
            reset_in_guest: false,
            hostname: HostnameRule::Desired,
            links_down: false,
            mounts: true,
            fresh_bootstrap: true,
            onboot: true,
        },
        Scenario::GuestLossDr { source_may_be_live } => IdentityPlan {
            fresh_mac: source_may_be_live,
            reset_in_guest: source_may_be_live,
            hostname: HostnameRule::Desired,
            links_down: false,
            mounts: true,
            fresh_bootstrap: false,
            onboot: true,
        },
        Scenario::RestoreTest => IdentityPlan {
            fresh_mac: true,
            reset_in_guest: false,
            hostname: HostnameRule::Scratch,
            links_down: true,
            mounts: false,
            fresh_bootstrap: false,
            onboot: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{HostnameRule, IdentityPlan, Scenario, identity_for};

    #[test]
    fn each_scenario_gets_its_identity() {
        let fresh_everything = IdentityPlan {
            fresh_mac: true,
            reset_in_guest: false,
            hostname: HostnameRule::Desired,
            links_down: false,
            mounts: true,
            fresh_bootstrap: true,
            onboot: true,
        };
        let continuity = IdentityPlan {
            fresh_mac: false,
            reset_in_guest: false,
            hostname: HostnameRule::Desired,
            links_down: false,
            mounts: true,
            fresh_bootstrap: false,
            onboot: true,
        };
        let unreachable = IdentityPlan {
            fresh_mac: true,
            reset_in_guest: false,
            hostname: HostnameRule::Scratch,
            links_down: true,
            mounts: false,
            fresh_bootstrap: false,
            onboot: false,
        };
        let table = [
            (Scenario::Provision, fresh_everything),
            (
                Scenario::GuestLossDr {
                    source_may_be_live: false,
                },
                continuity,
            ),
            (
                Scenario::GuestLossDr {
                    source_may_be_live: true,
                },
                // Nothing it shares with a source that may still run is kept.
                IdentityPlan {
                    fresh_mac: true,
                    reset_in_guest: true,
                    ..continuity
                },
            ),
            (Scenario::RestoreTest, unreachable),
        ];
        for (scenario, want) in table {
            assert_eq!(identity_for(scenario), want, "{scenario:?}");
        }
    }

    #[test]
    fn a_scratch_guest_can_reach_nothing_and_carries_no_customer_name() {
        let plan = identity_for(Scenario::RestoreTest);
        assert!(plan.links_down && !plan.mounts && !plan.fresh_bootstrap && !plan.onboot);
        assert_eq!(plan.hostname, HostnameRule::Scratch);
        // Only a restore test takes links down: a customer's guest never comes back cut off.
        for scenario in [
            Scenario::Provision,
            Scenario::GuestLossDr {
                source_may_be_live: true,
            },
            Scenario::GuestLossDr {
                source_may_be_live: false,
            },
        ] {
            assert!(!identity_for(scenario).links_down, "{scenario:?}");
        }
    }
}
