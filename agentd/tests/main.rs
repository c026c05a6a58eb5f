//! The agent's local API, journal and job suites, built as one test binary: every `*.rs` file beside this one
//! is a suite module, and `localapi_support/` the harness they share.
//! One binary instead of one per suite keeps a clean build's target directory small and links
//! once (decision 0089). Run one suite with a filter on its module:
//! `cargo nextest run -p bosun-agentd archive_proof::`.

#[path = "localapi_support/guest_check.rs"]
mod guest_check;
mod localapi_support;
#[path = "localapi_support/raw_tls.rs"]
mod raw_tls;
#[path = "localapi_support/two_tiers.rs"]
mod two_tiers;

mod archive_proof;
mod backup_scheduler;
mod backup_tiers;
mod break_glass;
mod dr_identity;
mod golden_boot_test;
mod golden_build;
mod jobs_signature;
mod journal_crash;
mod localapi_backup;
mod localapi_bodies;
mod localapi_bootstrap;
mod localapi_conn_bench;
mod localapi_connections;
mod localapi_consent;
mod localapi_controller;
mod localapi_endpoints;
mod localapi_fuzz;
mod localapi_openapi;
mod localapi_refusals;
mod localapi_schemathesis;
mod localapi_share_bench;
mod localapi_stale_bootstrap;
mod log_output;
mod network_guard;
mod recovery_bench;
mod restore_tests;
mod vm_archive_proof;
