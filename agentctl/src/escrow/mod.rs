//! The escrow of the host's keys: a recovery code R, K (and the keys rotations retired)
//! wrapped under R, and the printed sheet.

pub mod code;
pub mod command;
pub mod paper_key;
pub mod record;
pub mod recover;
pub mod rotate;
pub mod sheet;
pub mod wrap;
