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
    data_plan = crate::data_plan::PLAN_SCHEMA;
    report_delta = crate::delta::SCHEMA;
    desired = crate::desired::SCHEMA;
    enroll_request = crate::enroll::REQUEST_SCHEMA;
    enroll_response = crate::enroll::RESPONSE_SCHEMA;
    escrow = crate::escrow::SCHEMA;
    job_envelope = crate::job::ENVELOPE_SCHEMA;
    job_result = crate::job::RESULT_SCHEMA;
    poll_request = crate::poll::REQUEST_SCHEMA;
    poll_response = crate::poll::RESPONSE_SCHEMA;
    state_report = crate::report::SCHEMA;
}
