//! The `schema` names of the wire documents the OpenAPI document spells out: a leaf, so
//! the OpenAPI schemas (`openapi.rs`) read them without importing the documents' modules, which each
//! re-export theirs beside the document (`report::SCHEMA`, `poll::REQUEST_SCHEMA`, …).

/// Schema of `data_plan::DataPlan`.
pub const DATA_PLAN: &str = "bosun.data-plan/v1";

/// The schema name of `delta::ReportDelta`.
pub const REPORT_DELTA: &str = "bosun.report-delta/v1";

/// The schema name of `desired::DesiredState`.
pub const DESIRED: &str = "bosun.desired/v1";

/// The schema name of `enroll::EnrollRequest`.
pub const ENROLL_REQUEST: &str = "bosun.enroll/v1";

/// The schema name of `enroll::EnrollResponse`.
pub const ENROLL_RESPONSE: &str = "bosun.enrolled/v1";

/// The schema name of `escrow::EscrowBlob`.
pub const ESCROW: &str = "bosun.escrow/v1";

/// The schema name of `job::SignedJob`.
pub const JOB_ENVELOPE: &str = "bosun.signed-job/v1";

/// The schema name of `job::JobResult`.
pub const JOB_RESULT: &str = "bosun.job-result/v1";

/// The schema name of `poll::PollRequest`.
pub const POLL_REQUEST: &str = "bosun.poll/v1";

/// The schema name of `poll::PollResponse`.
pub const POLL_RESPONSE: &str = "bosun.poll-response/v1";

/// The schema name of `report::StateReport`.
pub const STATE_REPORT: &str = "bosun.report/v1";
