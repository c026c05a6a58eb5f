//! The golden base in `bosunctl status`, `bosunctl hosts show` and `bosunctl hosts list`
//! (decision 0083): the build guests are provisioned from, a newer one awaiting (or having
//! failed) its verification, the archives kept, the last build's outcome and an old archive
//! the host could not remove. Every text is the host's: control characters print escaped.

use bosun_proto::admin::{HostDetail, HostSummary};
use bosun_proto::golden_report::{GoldenBase, GoldenOutcomeKind, GoldenReport};
use bosun_proto::inert::escape;
use jiff::Timestamp;

use crate::table;

/// `2026.11-1 1a2b3c4d5e6f built 3d ago, verified 3d ago (boot test 31s)`.
fn base_text(base: &GoldenBase, now: Timestamp) -> String {
    let verified = match (base.verified_at, base.verify_seconds) {
        (Some(at), Some(s)) => format!("verified {} (boot test {s}s)", table::ago(at, now)),
        (Some(at), None) => format!("verified {}", table::ago(at, now)),
        (None, _) => "NOT verified".to_owned(),
    };
    format!(
        "{} {} built {}, {verified}",
        escape(&base.version),
        base.short_sha256(),
        table::ago(base.built_at, now)
    )
}

/// The last build's outcome: `verified 2026.12-1 1h ago`, `VERIFY FAILED (boot_test_failed) …`.
fn outcome_text(golden: &GoldenReport, now: Timestamp) -> Option<String> {
    let last = golden.last_build.as_ref()?;
    let word = match last.outcome {
        GoldenOutcomeKind::Verified => "built and verified",
        GoldenOutcomeKind::VerifyFailed => "VERIFY FAILED",
        GoldenOutcomeKind::BuildFailed => "BUILD FAILED",
        GoldenOutcomeKind::Refused => "RECIPE REFUSED",
        GoldenOutcomeKind::Unknown => "unknown",
    };
    let mut text = word.to_owned();
    if let Some(reason) = &last.reason {
        text.push_str(&format!(" ({})", escape(reason)));
    }
    if let Some(version) = &last.version {
        text.push_str(&format!(" {}", escape(version)));
    }
    text.push_str(&format!(" {}", table::ago(last.at, now)));
    Some(text)
}

/// The `hosts show` fields of the host's golden base (none when it reports none).
pub fn fields(host: &HostDetail, now: Timestamp) -> Vec<(&'static str, String)> {
    let Some(golden) = host.last_report.as_ref().and_then(|r| r.golden.as_ref()) else {
        return Vec::new();
    };
    let mut fields = vec![(
        "golden",
        golden
            .current
            .as_ref()
            .map_or_else(|| "no verified base".to_owned(), |b| base_text(b, now)),
    )];
    if let Some(current) = &golden.current {
        fields.push(("golden archive", escape(&current.volid).into_owned()));
        fields.push((
            "golden controller",
            escape(&current.controller_digest).into_owned(),
        ));
    }
    if let Some(pending) = &golden.pending {
        fields.push(("golden pending", base_text(pending, now)));
    }
    fields.push(("golden archives", golden.archives.to_string()));
    if let Some(text) = outcome_text(golden, now) {
        fields.push(("golden last build", text));
    }
    if let Some(failed) = &golden.prune_failed {
        fields.push((
            "golden not removed",
            format!(
                "{} ({} tries, last {}): {}",
                escape(&failed.volid),
                failed.attempts,
                table::ago(failed.at, now),
                escape(&failed.error)
            ),
        ));
    }
    fields
}

/// The `bosunctl status` line: `golden base  2026.11-1 1a2b… built 3d ago, verified …; 1 archive`.
pub fn host_line(host: &HostDetail, now: Timestamp) -> Option<String> {
    let golden = host.last_report.as_ref()?.golden.as_ref()?;
    let mut text = golden
        .current
        .as_ref()
        .map_or_else(|| "no verified base".to_owned(), |b| base_text(b, now));
    if let Some(pending) = &golden.pending {
        text.push_str(&format!("; pending {}", base_text(pending, now)));
    }
    text.push_str(&format!("; {} archives kept", golden.archives));
    if let Some(outcome) = outcome_text(golden, now) {
        text.push_str(&format!("; last build {outcome}"));
    }
    if let Some(failed) = &golden.prune_failed {
        text.push_str(&format!(
            "; {} NOT REMOVED ({} tries)",
            escape(&failed.volid),
            failed.attempts
        ));
    }
    Some(format!("  golden base       {text}"))
}

/// The host list's `GOLDEN` cell: `2026.11-1 1a2b3c4d5e6f`, `-` without a verified base.
pub fn column(host: &HostSummary) -> String {
    host.golden.as_ref().map_or_else(
        || "-".to_owned(),
        |g| format!("{} {}", g.version, g.short_sha256()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bosun_proto::golden_report::{GoldenOutcome, GoldenPruneFailure};

    #[test]
    fn the_fields_say_the_base_its_verification_and_what_was_not_removed() {
        let now: Timestamp = "2026-11-20T12:00:00Z".parse().unwrap();
        let base = GoldenBase {
            version: "2026.11-1".into(),
            volid: "golden:backup/vzdump-lxc-9000.tar.zst".into(),
            sha256: "0123456789ab".repeat(5) + "cdef",
            controller_digest: "sha256:aa".into(),
            built_at: "2026-11-20T10:00:00Z".parse().unwrap(),
            verified_at: Some("2026-11-20T11:00:00Z".parse().unwrap()),
            verify_seconds: Some(31),
        };
        let golden = GoldenReport {
            current: Some(base),
            pending: None,
            archives: 2,
            last_build: Some(GoldenOutcome {
                at: "2026-11-20T11:00:00Z".parse().unwrap(),
                outcome: GoldenOutcomeKind::VerifyFailed,
                reason: Some("boot_test_failed".into()),
                version: Some("2026.12-1".into()),
            }),
            prune_failed: Some(GoldenPruneFailure {
                volid: "golden:backup/old.tar.zst".into(),
                at: "2026-11-20T11:30:00Z".parse().unwrap(),
                attempts: 3,
                error: "locked\u{1b}[2J".into(),
            }),
        };
        let mut report = bosun_proto::report::StateReport::empty(1, "0.1.0");
        report.golden = Some(golden);
        let host: HostDetail = serde_json::from_value(serde_json::json!({
            "host_id": uuid::Uuid::nil(), "hostname": "pve1", "status": "active",
            "liveness": "ok", "last_seen": null, "agent_version": null,
            "controller_version": null, "desired_generation": 0, "known_generation": 0,
            "applied_generation": 0, "pending_jobs": 0,
            "enrolled_at": "2026-11-01T00:00:00Z", "poll_interval_seconds": 30,
            "desired": null, "escrow_updated_at": null,
            "last_report": report,
        }))
        .unwrap();
        let fields = fields(&host, now);
        let text = |name: &str| fields.iter().find(|(n, _)| *n == name).unwrap().1.clone();
        assert_eq!(
            text("golden"),
            "2026.11-1 0123456789ab built 2h ago, verified 1h ago (boot test 31s)"
        );
        assert_eq!(
            text("golden last build"),
            "VERIFY FAILED (boot_test_failed) 2026.12-1 1h ago"
        );
        let not_removed = text("golden not removed");
        assert!(not_removed.contains("(3 tries"), "{not_removed}");
        assert!(!not_removed.contains('\u{1b}'), "{not_removed:?}");
        let line = host_line(&host, now).unwrap();
        assert!(line.contains("2 archives kept"), "{line}");
    }
}
