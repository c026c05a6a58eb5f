//! The hub's HTTP, store and dashboard suites, built as one test binary: every `*.rs` file beside this one
//! is a suite module, `openapi/` one more, and `common/` the harness they share.
//! One binary instead of one per suite keeps a clean build's target directory small and links
//! once (decision 0089). Run one suite with a filter on its module:
//! `cargo nextest run -p bosun-hubd admin_auth::`.

mod common;

mod admin_auth;
mod alert_triage;
mod artifacts;
mod audit_trail;
mod auth_limits;
mod bad_input;
mod binary;
mod bulk_alerts;
mod connection_timeouts;
mod dashboard;
mod dashboard_text;
mod deadman;
mod desired_history;
mod desired_jobs;
mod enrollment;
mod escrow;
mod failover;
mod group_commit;
mod guest_alerts;
mod guide;
mod health_rollup;
mod history;
mod host_key_rotation;
mod host_labels;
mod host_removal;
mod host_replacement;
mod key_pins;
mod key_rotation;
mod listeners;
mod longpoll;
mod metrics;
#[path = "openapi/main.rs"]
mod openapi;
mod operator_cert;
mod operator_tokens;
mod replicas;
mod report_deltas;
mod request_bodies;
mod restart;
mod restore_test_alerts;
mod schemathesis;
mod storage_backup_alerts;
