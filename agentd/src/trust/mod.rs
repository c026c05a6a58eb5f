//! What the agent trusts and what it refuses: operators' SSH [`signing`] checks, the
//! reversibility [`gate`] every destroy or overwrite asks first, the host's own [`keys`]
//! (the backup encryption key and the sealing identity), and the [`break_glass`] door an
//! operator opens with a signed job.

pub mod break_glass;
pub mod gate;
pub mod keys;
pub mod signing;
