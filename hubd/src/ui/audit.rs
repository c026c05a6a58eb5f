//! The host page's audit trail: the host's newest audit entries, a page at a time
//! (`/ui/hosts/{id}?audit_before=CURSOR` for older ones).

use bosun_proto::admin::AuditRecord;
use jiff::Timestamp;
use maud::{Markup, html};
use uuid::Uuid;

use super::error::UiError;
use super::layout;
use crate::store::{AuditCursor, AuditQuery};

/// Entries the host page shows at a time.
pub(crate) const PAGE: u32 = 20;

/// The query reading a page of `host_id`'s trail: one entry more than shown, to tell whether
/// an older page follows. `before` is the page's `audit_before` parameter, if any.
pub(crate) fn query(host_id: Uuid, before: Option<&str>) -> Result<AuditQuery, UiError> {
    let before = before
        .map(|raw| {
            AuditCursor::decode(raw).ok_or_else(|| UiError::BadRequest {
                message: format!("audit_before {raw:?} is not a position in the audit trail"),
            })
        })
        .transpose()?;
    Ok(AuditQuery {
        host_id: Some(host_id),
        guest_id: None,
        since_ms: None,
        before,
        limit: PAGE + 1,
    })
}

/// The section: the entries, newest first, and a link to the older ones when there are any.
pub(crate) fn section(
    host_id: Uuid,
    entries: &[AuditRecord],
    paged: bool,
    now: Timestamp,
) -> Markup {
    let shown = &entries[..entries.len().min(PAGE as usize)];
    let older = (entries.len() > shown.len())
        .then(|| shown.last().map(|last| AuditCursor::after(last).encode()))
        .flatten();
    html! {
        @if shown.is_empty() {
            p class="empty" id="audit" { "No audit entries." }
        } @else {
            div class="scroll" {
                table class="stack" id="audit" {
                    thead { tr { th { "When" } th { "Seq" } th { "Action" } th { "Detail" } } }
                    tbody {
                        @for entry in shown {
                            tr {
                                td data-label="When" { (layout::moment(Some(entry.at), now)) }
                                td data-label="Seq" class="mono" { (entry.seq) }
                                td data-label="Action" {
                                    (entry.action)
                                    @if entry.repeats > 1 {
                                        " " (layout::badge(&format!("×{}", entry.repeats), "muted"))
                                        @if let Some(last) = entry.last_at {
                                            " " span class="muted" { "last " (layout::moment(Some(last), now)) }
                                        }
                                    }
                                }
                                td data-label="Detail" class="detail mono" {
                                    (bosun_proto::audit_text::one_line(&entry.detail))
                                }
                            }
                        }
                    }
                }
            }
        }
        p {
            @if paged {
                a href={ "/ui/hosts/" (host_id) "#audit" } { "Newest entries" }
                @if older.is_some() { " · " }
            }
            @if let Some(cursor) = older {
                a href={ "/ui/hosts/" (host_id) "?audit_before=" (cursor) "#audit" } { "Older entries" }
            }
        }
    }
}
