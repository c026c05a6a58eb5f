//! The escrow of K: a recovery code R, K wrapped under R, and the printed sheet.

pub mod code;
pub mod command;
pub mod record;
pub mod sheet;
pub mod wrap;
