//! Failpoints for the crash tests: with the `failpoints` feature, a step whose
//! name equals the `BOSUN_FAILPOINT` environment variable aborts the process on
//! the spot (no destructors, no flush: what a `SIGKILL` or power loss leaves), or,
//! at a [`panic_at`] point, panics in its task, or at a [`stall_at`] point, waits for good.
//! Without the feature [`hit`], [`panic_at`] and [`stall_at`] compile to nothing.
//!
//! Names are `<operation kind>.<step>.<phase>`, e.g. `provision.restore.sent` or
//! `localapi.snapshot.snapshot.sent` (the kinds are [`crate::ops::operation::OpKind`]'s names);
//! the phases are `intent` (written, not yet called), `sent` (called, task
//! running) and `done` (finished, next step not begun).

/// The environment variable naming the failpoint to trip.
pub const ENV: &str = "BOSUN_FAILPOINT";

/// Aborts the process if `name` is the armed failpoint.
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) {
    if std::env::var(ENV).is_ok_and(|armed| armed == name) {
        eprintln!("failpoint {name} tripped");
        std::process::abort();
    }
}

/// Aborts the process if `name` is the armed failpoint (compiled out).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &str) {}

/// Panics if `name` is the armed failpoint: a bug in a task rather than a crash, which the
/// [`crate::runtime::supervisor`] turns into the agent's exit. Names are `<task>.<place>.panic`.
#[cfg(feature = "failpoints")]
pub fn panic_at(name: &str) {
    if std::env::var(ENV).is_ok_and(|armed| armed == name) {
        panic!("failpoint {name} tripped");
    }
}

/// Never returns if `name` is the armed failpoint: a task wedged on an await that never ends
/// (the watchdog suite's hub loop). Names are `<task>.<place>.stall`.
#[cfg(feature = "failpoints")]
pub async fn stall_at(name: &str) {
    if std::env::var(ENV).is_ok_and(|armed| armed == name) {
        eprintln!("failpoint {name} tripped: stalled for good");
        std::future::pending::<()>().await;
    }
}

/// Never returns if `name` is the armed failpoint (compiled out).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub async fn stall_at(_name: &str) {}

/// Panics if `name` is the armed failpoint (compiled out).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn panic_at(_name: &str) {}
