//! `bosunctl`'s exit codes (stable; scripts rely on them).

/// Success.
pub const OK: u8 = 0;
/// Command-line usage error (clap).
pub const USAGE: u8 = 2;
/// Missing or bad configuration (hub URL, fingerprint, admin token, config file).
pub const CONFIG: u8 = 3;
/// A local input file is unreadable or invalid.
pub const INPUT: u8 = 4;
/// The hub could not be reached (connection, TLS, pin mismatch, timeout).
pub const UNREACHABLE: u8 = 5;
/// The hub refused the request (4xx other than 401/404; 403: the token's role is too low).
pub const REFUSED: u8 = 6;
/// The operator token was refused (401).
pub const UNAUTHORIZED: u8 = 7;
/// The host, job or resource does not exist (404).
pub const NOT_FOUND: u8 = 8;
/// The hub failed (5xx) or answered something unreadable.
pub const HUB_ERROR: u8 = 9;
// 10 is not used: it was the demo's failed step while the demo was a `bosunctl`
// subcommand, before it became a program of its own (`bosun-demo`, which still exits 10
// then).
/// `bosunctl desired set --wait`: the host did not apply the generation (the timeout
/// passed, a guest failed for good, or the host refuses part of it); `bosunctl desired
/// diff`: the host refuses part of desired state (a field, a storage target, a tier). The
/// message says what and why.
pub const NOT_APPLIED: u8 = 11;
/// `bosunctl pve check`: the node answered, and at least one check failed (the report
/// says which and how to fix it).
pub const CHECK_FAILED: u8 = 12;
/// `bosunctl secret seal`: the host's sealing recipient is not pinned, or the hub reports
/// another than the pinned one; nothing was sealed (the message says how to confirm one).
pub const RECIPIENT_UNCONFIRMED: u8 = 13;
/// `bosunctl fleet rollout`: a host failed its job or its health gate (or did not end
/// within the wait), so the rollout stopped; the report names the hosts done, failed and
/// skipped, each with why.
pub const ROLLOUT_STOPPED: u8 = 14;
