//! How much a listing of the admin API answers, and in which order: at most [`MAX_LISTED`]
//! rows or the caller's `?limit=N`, newest first.

use super::error::ApiError;
use super::extract;

/// The most rows a listing of things that happened answers (jobs, artifacts, silences,
/// alerts, events).
pub const MAX_LISTED: u32 = 10_000;

/// A listing's `?limit=N`: at most `max`, and `max` when not given.
pub fn list_limit(query: Option<&str>, max: u32) -> Result<u32, ApiError> {
    Ok(extract::query_number::<u32>(query, "limit")?
        .unwrap_or(max)
        .min(max))
}

/// Every list the admin API answers is newest first (decision 0069). The store reads its
/// time-ordered rows oldest first (the dashboard's tables are built from them); a listing
/// handler turns them around here, in one place.
pub fn newest_first<T>(rows: &mut [T]) {
    rows.reverse();
}
