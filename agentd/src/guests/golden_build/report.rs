//! The golden base as the host's report carries it ([`GoldenReport`]): read from the journal
//! alone, so it survives restarts and says the same in every report until something changes.

use bosun_errchain::error_chain;
use bosun_proto::golden_report::{
    GoldenBase, GoldenOutcome, GoldenOutcomeKind, GoldenPruneFailure, GoldenReport,
};

use crate::ops::journal::{JournalHandle, KeptArchive};

fn base(archive: &KeptArchive) -> GoldenBase {
    GoldenBase {
        version: archive.version.clone(),
        volid: archive.volid.clone(),
        sha256: archive.sha256.clone(),
        controller_digest: archive.controller_digest.clone(),
        built_at: archive.built_at,
        verified_at: archive.verified_at,
        verify_seconds: archive.verify_ms.map(|ms| ms.div_ceil(1000)),
    }
}

/// The host's golden base, or `None` when it never built one (or the journal is unreadable,
/// or what it holds does not pass the report's checks: logged, the report goes without).
pub async fn report(journal: &JournalHandle) -> Option<GoldenReport> {
    let read = async {
        let kept = journal.golden_archives().await?;
        let outcome = journal.golden_outcome().await?;
        Ok::<_, crate::ops::journal::JournalError>((kept, outcome))
    };
    let (kept, outcome) = match read.await {
        Ok(read) => read,
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "golden builds unreadable; report sent without them");
            return None;
        }
    };
    if kept.is_empty() && outcome.is_none() {
        return None;
    }
    let current = kept.iter().find(|k| k.verified_at.is_some());
    let pending = kept
        .first()
        .filter(|newest| current.is_none_or(|c| c.volid != newest.volid));
    let prune_failed = kept
        .iter()
        .filter_map(|k| k.prune_failed.as_ref().map(|f| (k, f)))
        .max_by_key(|(_, (at, _))| *at)
        .map(|(k, (at, error))| GoldenPruneFailure {
            volid: k.volid.clone(),
            at: *at,
            attempts: k.prune_attempts,
            error: error.clone(),
        });
    let report = GoldenReport {
        current: current.map(base),
        pending: pending.map(base),
        archives: u32::try_from(kept.len()).unwrap_or(u32::MAX),
        last_build: outcome.map(|o| GoldenOutcome {
            at: o.at,
            outcome: GoldenOutcomeKind::parse(&o.outcome),
            reason: o.reason,
            version: o.version,
        }),
        prune_failed,
    };
    match report.validate() {
        Ok(()) => Some(report),
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "the journal's golden builds do not fit the report; sent without them");
            None
        }
    }
}
