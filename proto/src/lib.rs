//! Bosun wire contracts: data only, no I/O.
//!
//! Every document carries a `schema` field naming its version (`bosun.<name>/v1`) and has a
//! `validate()` method that returns a [`ValidationError`] naming the offending field.
//! Security-relevant documents (signed jobs, desired state, bootstrap) reject unknown fields;
//! reports from agents tolerate them so an older hub accepts a newer agent.
//!
//! | module | documents |
//! |---|---|
//! | [`enroll`] | `bosun.enroll/v1`, `bosun.enrolled/v1` |
//! | [`poll`] | `bosun.poll/v1`, `bosun.poll-response/v1`, agent config |
//! | [`report`] | `bosun.report/v1`, the host-domain state report inside a poll |
//! | [`delta`] | `bosun.report-delta/v1`, what changed since the acknowledged report |
//! | [`refused`] | what a host refuses of its desired state, with why |
//! | [`history`] | a host's history: one point per host and five minutes |
//! | [`capabilities`] | what a host is and has, and the labels operators give hosts |
//! | [`health`] | host health inside a report: gauges against thresholds, SMART readings |
//! | [`ids`] | ids shown as their shortest unique prefix, and prefixes typed back |
//! | [`desired`] | `bosun.desired/v1` |
//! | [`desired_kinds`] | a desired guest of a kind this version does not know, refused alone |
//! | [`desired_status`] | admin views of a host's current, last-applied and observed state |
//! | [`oplog`] | the agent's operation journal tail, as polls carry it |
//! | [`job`] | `bosun.job/v1`, `bosun.signed-job/v1`, `bosun.job-result/v1` |
//! | [`escrow`] | `bosun.escrow/v1` |
//! | [`controller`] | the controller image digest a signed `controller-update` job names |
//! | [`golden`] | `bosun.golden/v1`, an operator's signed choice of golden archive |
//! | [`data_plan`] | `bosun.data-plan/v1`, where a host's customer data may go, as the operator signed it |
//! | [`retention`] | `bosun.retention-floor/v1`, the least retention an operator signed for a host |
//! | [`tunnel`] | the tunnel's signed routes (in the data plan) and its state in a report |
//! | [`sealed_credential`] | `bosun.sealed-credential/v1`, a storage or tunnel secret bound to its host and target or tunnel |
//! | [`signed`] | the wrapper every operator-signed document travels in |
//! | [`bootstrap`] | `bosun.bootstrap/v1` |
//! | [`guest_access`] | the SSH keys a guest trusts, as the operator's data plan signs them |
//! | [`admin`] | admin API bodies (enrollment tokens, host views, alerts, events, errors) |
//! | [`operator_token`] | operator tokens: names, roles, expiry |
//! | [`helper`] | requests to and answers from `bosun-helper` |
//! | [`protection`] | a guest's own protection as the local API tells its customer, and the one overdue rule |
//! | [`update`] | `bosun.update/v1`, agent self-update slots and the health gate's record |

pub mod admin;
pub mod adopt;
pub mod alert_kind;
pub mod alert_triage;
pub mod audit_text;
pub mod bootstrap;
pub mod break_glass;
pub mod calendar;
pub mod capabilities;
pub mod census;
pub mod controller;
pub mod data_plan;
pub mod delta;
pub mod desired;
pub mod desired_kinds;
pub mod desired_status;
pub mod enroll;
pub mod escrow;
pub mod fingerprint;
pub mod golden;
pub mod golden_recipe;
pub mod golden_report;
pub mod guest_access;
pub mod guest_thresholds;
pub mod hardware;
pub mod health;
pub mod helper;
pub mod history;
pub mod host_view;
pub mod hub_pins;
pub mod ids;
pub mod inert;
pub mod job;
pub mod job_log;
pub mod json_body;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod operator_token;
pub mod oplog;
pub mod poll;
pub mod protection;
pub mod refused;
pub mod report;
mod report_bulk;
mod report_text;
pub mod retention;
pub mod rollup;
pub mod schema_ids;
pub mod sealed_credential;
pub mod secret;
pub mod share;
pub mod signed;
pub mod ssh_public_key;
pub mod tunnel;
pub mod update;
pub mod validate;
pub mod verify;

pub use validate::ValidationError;

#[cfg(test)]
mod tests;
