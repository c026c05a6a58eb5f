//! Schemas the `utoipa` derives cannot spell from a field's type (feature `openapi`): each
//! document's `schema` field admits exactly its schema name, taken from the constant the
//! document's `validate` compares against, so the OpenAPI document and the check never drift.

use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

/// A string schema admitting only `name`.
pub fn schema_name(name: &'static str) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([name]))
        .description(Some(format!("Always `{name}`.")))
        .build()
}

/// One `fn() -> Object` per schema name, for `#[schema(schema_with = …)]`.
macro_rules! schema_names {
    ($($name:ident = $constant:path;)*) => {
        $(
            #[doc = concat!("The `schema` field of a document named [`", stringify!($constant), "`].")]
            pub fn $name() -> Object {
                schema_name($constant)
            }
        )*
    };
}

schema_names! {
    data_plan = crate::schema_ids::DATA_PLAN;
    report_delta = crate::schema_ids::REPORT_DELTA;
    desired = crate::schema_ids::DESIRED;
    enroll_request = crate::schema_ids::ENROLL_REQUEST;
    enroll_response = crate::schema_ids::ENROLL_RESPONSE;
    escrow = crate::schema_ids::ESCROW;
    job_envelope = crate::schema_ids::JOB_ENVELOPE;
    job_result = crate::schema_ids::JOB_RESULT;
    poll_request = crate::schema_ids::POLL_REQUEST;
    poll_response = crate::schema_ids::POLL_RESPONSE;
    state_report = crate::schema_ids::STATE_REPORT;
}
