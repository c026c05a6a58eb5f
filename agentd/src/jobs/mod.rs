//! Signed one-shot jobs and the reversibility gate.

pub mod gate;
pub mod signature;
