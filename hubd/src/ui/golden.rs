//! The host page's golden base (decision 0083): the build guests are provisioned from, a newer
//! one waiting for (or having failed) its verification, the archives kept, the last build's
//! outcome and an old archive the host could not remove. Every text is the host's, escaped.

use bosun_proto::admin::HostDetail;
use bosun_proto::golden_report::{GoldenBase, GoldenOutcomeKind};
use jiff::Timestamp;
use maud::{Markup, html};

use super::layout;

/// The golden base section.
pub(crate) fn section(host: &HostDetail, now: Timestamp) -> Markup {
    let Some(golden) = host.last_report.as_ref().and_then(|r| r.golden.as_ref()) else {
        return html! { p class="empty" id="golden" { "No golden base reported." } };
    };
    html! {
        div id="golden" {
            dl class="facts" {
                div { dt { "Archives kept" } dd { (golden.archives) } }
                @if let Some(last) = &golden.last_build {
                    @let (word, class) = match last.outcome {
                        GoldenOutcomeKind::Verified => ("built and verified", "ok"),
                        GoldenOutcomeKind::VerifyFailed => ("verification failed", "danger"),
                        GoldenOutcomeKind::BuildFailed => ("build failed", "danger"),
                        GoldenOutcomeKind::Refused => ("recipe refused", "danger"),
                        GoldenOutcomeKind::Unknown => ("unknown", "warn"),
                    };
                    div { dt { "Last build" } dd {
                        (layout::badge(word, class)) " "
                        @if let Some(version) = &last.version { (version) " " }
                        @if let Some(reason) = &last.reason { "(" (reason) ") " }
                        (layout::moment(Some(last.at), now))
                    } }
                }
                @if let Some(failed) = &golden.prune_failed {
                    div { dt { "Not removed" } dd class="detail" {
                        (layout::badge("removal failed", "warn")) " " (failed.volid)
                        " (" (failed.attempts) " tries, last " (layout::moment(Some(failed.at), now)) "): "
                        (failed.error)
                    } }
                }
            }
            div class="scroll" {
                table class="stack" {
                    thead { tr {
                        th { "Base" } th { "Version" } th { "Archive" } th { "SHA-256" }
                        th { "Controller" } th { "Built" } th { "Verified" } th { "Boot test" }
                    } }
                    tbody {
                        @if let Some(base) = &golden.current { (row("current", base, now)) }
                        @if let Some(base) = &golden.pending { (row("pending", base, now)) }
                    }
                }
            }
        }
    }
}

fn row(which: &str, base: &GoldenBase, now: Timestamp) -> Markup {
    html! {
        tr data-golden=(which) {
            td data-label="Base" { (which) }
            td data-label="Version" { (base.version) }
            td data-label="Archive" class="detail" { (base.volid) }
            td data-label="SHA-256" title=(base.sha256) { (base.short_sha256()) }
            td data-label="Controller" class="detail" { (base.controller_digest) }
            td data-label="Built" { (layout::moment(Some(base.built_at), now)) }
            td data-label="Verified" {
                @if base.verified_at.is_some() { (layout::moment(base.verified_at, now)) }
                @else { (layout::badge("not verified", "warn")) }
            }
            td data-label="Boot test" {
                @if let Some(s) = base.verify_seconds { (s) " s" } @else { "-" }
            }
        }
    }
}
