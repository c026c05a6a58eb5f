//! Shared support for Bosun's workspace integration tests.

pub mod pve_schema;
pub mod raw_http;
pub mod schemathesis;
