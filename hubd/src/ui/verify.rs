//! The host page's verification table (decisions 0079, 0103): the newest verification of each
//! guest's backups on each tier (PBS's verify, or a file tier's re-hash), newest first, with
//! the last one that passed.

use bosun_proto::admin::HostDetail;
use bosun_proto::verify::{VerifyOutcome, VerifyReport};
use jiff::Timestamp;
use maud::{Markup, html};

use super::backups::{guest_name, target_label};
use super::layout;

/// The newest verification per guest and tier.
pub(crate) fn section(host: &HostDetail, now: Timestamp) -> Markup {
    let mut rows: Vec<&VerifyReport> = host
        .last_report
        .as_ref()
        .map(|r| r.verifications.iter().collect())
        .unwrap_or_default();
    rows.sort_by_key(|v| std::cmp::Reverse(v.finished_at));
    html! {
        @if rows.is_empty() {
            p class="empty" id="verifications" { "No verifications reported." }
        } @else {
            div class="scroll" {
                table class="stack" id="verifications" {
                    thead { tr {
                        th { "Guest" } th { "Tier" } th { "Outcome" } th { "Finished" }
                        th { "Took" } th { "Last ok" } th { "Detail" }
                    } }
                    tbody {
                        @for v in &rows {
                            @let (word, class) = match v.outcome {
                                VerifyOutcome::Ok => ("ok", "ok"),
                                VerifyOutcome::Failed => ("failed", "danger"),
                                VerifyOutcome::Error if v.judged_failed() => ("could not run (last failed)", "danger"),
                                VerifyOutcome::Error => ("could not run", "warn"),
                                VerifyOutcome::Unknown => ("unknown", "warn"),
                            };
                            tr {
                                td data-label="Guest" { (guest_name(host, v.guest_id)) }
                                td data-label="Tier" title=(v.tier) { (target_label(host, &v.tier)) }
                                td data-label="Outcome" { (layout::badge(word, class)) }
                                td data-label="Finished" { (layout::moment(Some(v.finished_at), now)) }
                                td data-label="Took" { (v.duration_ms) " ms" }
                                td data-label="Last ok" { (layout::moment(v.last_ok_at, now)) }
                                td data-label="Detail" class="detail" { (v.detail) }
                            }
                        }
                    }
                }
            }
        }
    }
}
