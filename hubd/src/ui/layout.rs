//! The page shell (head, navigation, logout) and the small formatters every page uses.
//! Text goes into pages only through maud's `(…)` splices, which escape HTML; every page then
//! leaves here through [`inert`], which writes each control character a host's report may
//! have carried (an escape sequence, a bell, the C1 CSI) as visible text.

use axum::response::Html;
use bosun_proto::admin::{AlertKind, HostStatus, HostSummary, Liveness};
use bosun_proto::rollup::HealthLevel;
use jiff::Timestamp;
use maud::{DOCTYPE, Markup, html};

use super::assets::STYLESHEET_PATH;

/// Which navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    /// The fleet and host pages.
    Fleet,
    /// The alerts page.
    Alerts,
    /// The events page.
    Events,
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="referrer" content="no-referrer";
            title { (title) " · Bosun hub" }
            link rel="stylesheet" href=(STYLESHEET_PATH);
        }
    }
}

/// A page without navigation (login, errors).
pub(crate) fn bare(title: &str, body: Markup) -> Html<String> {
    inert(html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body { (body) }
        }
    })
}

/// A page as sent: every control character but a line feed written as visible text
/// ([`bosun_proto::inert`]), whatever splice it came through.
fn inert(page: Markup) -> Html<String> {
    let page = page.into_string();
    match bosun_proto::inert::escape_but_newlines(&page) {
        std::borrow::Cow::Borrowed(_) => Html(page),
        std::borrow::Cow::Owned(escaped) => Html(escaped),
    }
}

/// A page of the logged-in dashboard: navigation, the logout button, the hub's time.
pub(crate) fn page(title: &str, active: Nav, now: Timestamp, body: Markup) -> Html<String> {
    let entry = |nav: Nav, href: &str, label: &str| {
        html! {
            @if nav == active {
                a href=(href) aria-current="page" { (label) }
            } @else {
                a href=(href) { (label) }
            }
        }
    };
    inert(html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header class="top" {
                    span class="brand" { "Bosun hub" }
                    nav {
                        (entry(Nav::Fleet, "/ui/", "Fleet"))
                        (entry(Nav::Alerts, "/ui/alerts", "Alerts"))
                        (entry(Nav::Events, "/ui/events", "Events"))
                    }
                    form method="post" action="/ui/logout" class="logout" {
                        button type="submit" { "Log out" }
                    }
                }
                main { (body) }
                footer {
                    "View at " (when(now))
                    ". Alerts may be acknowledged and silenced here; every other change goes \
                     through bosunctl: the admin API and signed jobs."
                }
            }
        }
    })
}

/// `2026-11-23 09:30:12Z`.
pub(crate) fn when(at: Timestamp) -> String {
    at.strftime("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// `45s ago`, `12m ago`, `3h 5m ago`, `2d 4h ago`; `in the future` for a clock ahead of ours.
pub(crate) fn ago(at: Timestamp, now: Timestamp) -> String {
    let secs = now.as_second().saturating_sub(at.as_second());
    if secs < 0 {
        return "in the future".to_owned();
    }
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3_600 => format!("{}m ago", secs / 60),
        3_600..86_400 => format!("{}h {}m ago", secs / 3_600, secs % 3_600 / 60),
        _ => format!("{}d {}h ago", secs / 86_400, secs % 86_400 / 3_600),
    }
}

/// A time with its age and beside it the time itself in UTC, so a page saved and read later
/// still says when (its age is the age when the page was made), or a dash.
pub(crate) fn moment(at: Option<Timestamp>, now: Timestamp) -> Markup {
    html! {
        @if let Some(at) = at {
            time datetime=(at.to_string()) title=(when(at)) {
                (ago(at, now)) " " span class="abs" { "(" (when(at)) ")" }
            }
        } @else {
            span class="muted" { "never" }
        }
    }
}

/// A duration in seconds as `41s`, `2m 5s`, `1h 3m`.
pub(crate) fn took(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3_600 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3_600, secs % 3_600 / 60),
    }
}

/// How a host stands, in one word, and the badge class it is shown with.
pub(crate) fn host_state(host: &HostSummary) -> (&'static str, &'static str) {
    match (host.status, host.liveness) {
        (HostStatus::Revoked, _) => ("revoked", "muted"),
        (HostStatus::PendingApproval, _) => ("pending approval", "warn"),
        (HostStatus::Active, Liveness::Overdue) => ("overdue", "danger"),
        (HostStatus::Active, Liveness::Never) => ("never polled", "warn"),
        // A planned stop: the host said so; it is paged only if it does not come back.
        (HostStatus::Active, Liveness::Stopped) => ("stopped", "warn"),
        (HostStatus::Active, Liveness::Ok) => ("ok", "ok"),
        (HostStatus::Active, Liveness::Unknown) => ("unknown", "warn"),
    }
}

/// A badge.
pub(crate) fn badge(text: &str, class: &str) -> Markup {
    html! { span class={ "badge " (class) } { (text) } }
}

/// The badge class of an alert kind: recoveries are good news; the rest by the level an open
/// alert of the kind gives its host ([`HealthLevel::of_alert`]).
pub(crate) fn alert_class(kind: AlertKind) -> &'static str {
    match HealthLevel::of_alert(kind) {
        None | Some(HealthLevel::Ok) => "ok",
        Some(HealthLevel::Warning) => "warn",
        Some(HealthLevel::Critical) => "danger",
    }
}

/// How a host is shown in one word and a badge class: the word every view gives its state
/// ([`bosun_proto::host_view::state_word`]): `revoked` and `pending approval` as they are,
/// otherwise the hub's one health roll-up ([`crate::health::roll_up`]) — `ok`, `warning` or
/// `critical` — the very level `bosunctl status`, `status --check`, `hosts list` and `/metrics`
/// show.
pub(crate) fn rolled_state(host: &HostSummary) -> (&'static str, &'static str) {
    let (word, level) = bosun_proto::host_view::state_word(host);
    let class = match (host.status, level) {
        (HostStatus::PendingApproval, _) => "warn",
        (_, None) => "muted",
        (_, Some(HealthLevel::Ok)) => "ok",
        (_, Some(HealthLevel::Warning)) => "warn",
        (_, Some(HealthLevel::Critical)) => "danger",
    };
    (word, class)
}

/// The wire name of an enum value (`running`, `pbs`, `succeeded`), or `-`.
pub(crate) fn wire<T: serde::Serialize>(value: Option<&T>) -> String {
    match value.map(serde_json::to_value) {
        Some(Ok(serde_json::Value::String(name))) => name,
        _ => "-".to_owned(),
    }
}

/// A link to a host's page.
pub(crate) fn host_link(host_id: uuid::Uuid, name: &str) -> Markup {
    html! { a href={ "/ui/hosts/" (host_id) } { (name) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_naturally() {
        let now = Timestamp::from_second(1_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let back = |s: i64| Timestamp::from_second(1_000_000 - s).unwrap_or(Timestamp::UNIX_EPOCH);
        assert_eq!(ago(back(5), now), "5s ago");
        assert_eq!(ago(back(125), now), "2m ago");
        assert_eq!(ago(back(3 * 3600 + 300), now), "3h 5m ago");
        assert_eq!(ago(back(2 * 86_400 + 4 * 3600), now), "2d 4h ago");
        assert_eq!(ago(back(-10), now), "in the future");
        assert_eq!(took(125), "2m 5s");
    }

    #[test]
    fn spliced_text_is_escaped() {
        let page = bare("<t>", html! { p { ("<script>alert(1)</script>") } }).0;
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!page.contains("<script>"));
        assert!(page.contains("&lt;t&gt;"));
    }
}
