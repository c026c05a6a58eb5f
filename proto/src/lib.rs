//! Bosun wire contracts: data only, no I/O.
pub mod helper;
