//! Ids typed back as prefixes (issue 45 item 3, [`bosun_proto::ids`]): the hub resolves an
//! unambiguous prefix of a host's or a job's id to the whole id, as git does with commit
//! hashes. One statement per kind, written once for both backends; the kinds are a closed
//! table ([`IdKind`]).
//!
//! A prefix shorter than [`bosun_proto::ids::MIN_TYPED`] hex digits is refused before the
//! database is asked; an ambiguous one is refused listing at most
//! [`bosun_proto::ids::MAX_CANDIDATES`] candidates (the rest counted), each with a name an
//! operator recognises (a host's hostname, a job's kind and host).

use bosun_proto::ids;
use uuid::Uuid;

pub use super::id_kind::{IdCandidate, IdKind};

use super::codec::uuid;
use super::error::{StoreError, StoreResult};
use super::tx::Tx;

/// The one id of `kind` that `text` names: a whole id as is (`UnknownId` when the hub holds
/// none such), or an unambiguous prefix of one (`BadIdPrefix` when `text` is neither,
/// `UnknownId` for a prefix of none, `AmbiguousId` for a prefix of several).
pub(super) fn resolve(tx: Tx<'_, '_>, kind: IdKind, text: &str) -> StoreResult<Uuid> {
    let prefix = match Uuid::try_parse(text.trim()) {
        Ok(id) => id.to_string(),
        Err(_) => {
            ids::hyphenated(
                &ids::as_prefix(text).ok_or_else(|| StoreError::BadIdPrefix {
                    kind,
                    text: shorten(text),
                })?,
            )
        }
    };
    // The prefix holds only hex digits and hyphens: nothing `LIKE` reads as a wildcard.
    let pattern = format!("{prefix}%");
    let limit = i64::try_from(ids::MAX_CANDIDATES + 1).unwrap_or(i64::MAX);
    let rows: Vec<(String, String)> = tx.query_map(
        "resolve id prefix",
        kind.statement(),
        &[&pattern, &limit],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let mut candidates = rows
        .into_iter()
        .map(|(id, name)| {
            Ok(IdCandidate {
                id: uuid(&id)?,
                name,
            })
        })
        .collect::<StoreResult<Vec<_>>>()?;
    match candidates.len() {
        0 => Err(StoreError::UnknownId {
            kind,
            prefix: shorten(text),
        }),
        1 => Ok(candidates.remove(0).id),
        found => {
            let more = found > ids::MAX_CANDIDATES;
            candidates.truncate(ids::MAX_CANDIDATES);
            Err(StoreError::AmbiguousId {
                kind,
                prefix: shorten(text),
                candidates,
                more,
            })
        }
    }
}

/// `text` as an error quotes it: at most 64 characters.
fn shorten(text: &str) -> String {
    text.chars().take(64).collect()
}
