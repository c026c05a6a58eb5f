//! Bosun's workspace integration suites, built as one test binary: every `*.rs` file
//! beside this one is a suite module, the `*_support` folders are the harness they share.
//! One binary instead of one per suite keeps a clean build's target directory a few
//! gigabytes rather than twenty, and links once instead of seventy times (decision 0089).
//!
//! Run one suite with a filter on its module: `cargo nextest run -p bosun-tests agent_tunnel::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The shared harness.
mod agent_support;
#[path = "tunnel_support/cloudflared.rs"]
mod cloudflared;
mod escrow_support;
#[path = "../../agentd/tests/localapi_support/guest_check.rs"]
mod guest_check;
#[path = "../../hubd/tests/metrics/promtool.rs"]
mod promtool;
mod pve_support;
#[path = "../../agentd/tests/localapi_support/raw_tls.rs"]
mod raw_tls;
#[path = "../../agentd/tests/localapi_support/two_tiers.rs"]
mod two_tiers;
#[path = "update_support/stack.rs"]
mod update_stack;
mod update_support;

// The suites.
mod agent_addresses;
mod agent_adopt;
mod agent_alerts;
mod agent_archive_proof;
mod agent_backups;
mod agent_bench;
mod agent_break_glass;
mod agent_break_glass_console;
mod agent_break_glass_crash;
mod agent_bulk_backups;
mod agent_bulk_restore_crash;
mod agent_capabilities;
mod agent_census;
mod agent_cluster;
mod agent_config_reads;
mod agent_controller;
mod agent_controller_golden;
mod agent_controller_update;
mod agent_correlation;
mod agent_crash;
mod agent_crash_guest_ops;
mod agent_data_plan;
mod agent_dr;
mod agent_e2e;
mod agent_escrow;
mod agent_escrow_enroll;
mod agent_escrow_rotation;
mod agent_faults;
mod agent_file_verify;
mod agent_golden_builds;
mod agent_golden_provenance;
mod agent_golden_prune;
mod agent_golden_serials;
mod agent_guest_access;
mod agent_guest_failures;
mod agent_guest_identity;
mod agent_hardware;
mod agent_health;
mod agent_host_key_pacing;
mod agent_host_key_rotation;
mod agent_host_loss;
mod agent_hostile_hub;
mod agent_hot_volumes;
mod agent_hub_key_rotation;
mod agent_hub_link;
mod agent_hub_pin_trust;
mod agent_job_results;
mod agent_jobs;
mod agent_layout;
mod agent_lifecycle;
mod agent_local_api;
mod agent_metrics;
mod agent_nonce_prune;
mod agent_order;
mod agent_outcome;
mod agent_placement;
mod agent_protection;
mod agent_remote_targets;
mod agent_retention_floor;
mod agent_sealed_secrets;
mod agent_shares;
mod agent_storage;
mod agent_storage_detach;
mod agent_storage_refusals;
mod agent_storage_wipe;
mod agent_task_panic;
mod agent_tier_bench;
mod agent_tunnel;
mod agent_update;
mod agent_update_bench;
mod agent_verify;
mod agent_vm_adopt;
mod agent_vm_backup;
mod agent_vm_crash;
mod agent_vm_dr;
mod agent_vm_dr_crash;
mod agent_vm_host_loss;
mod agent_vm_hostile_hub;
mod agent_vm_jobs;
mod agent_vm_local_api;
mod agent_vm_provision;
mod agent_vm_reconcile;
mod agent_vm_restore_now_crash;
mod agent_vm_restore_test;
mod agent_vm_shares;
mod agent_vm_volumes;
mod command_census;
mod demo_scenario;
mod fleet_rollout;
mod hub_backup_restore;
mod hub_day_two;
mod packages_target;
mod packaging;
mod pve_check;
mod pve_client_faults;
mod pve_client_legacy;
mod pve_client_ops;
mod pve_conformance;
mod pve_setup;
mod pve_token_doc;
mod suites_declared;
mod systemd_units;
mod update_gate;
mod watchdog;

/// Not a test of its own: the agent process a suite starts with
/// `agent_support::process::AgentProcess` (does nothing in an ordinary run).
#[test]
fn agent_child() {
    agent_support::process::child_main();
}

/// Not a test of its own: the agent process a crash suite starts with
/// `agent_support::crash::spawn_agent` (does nothing in an ordinary run).
#[test]
fn crash_child() {
    agent_support::crash::child_main();
}
