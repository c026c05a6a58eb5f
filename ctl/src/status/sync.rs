//! Whether a host is in sync with its desired state, as `bosunctl status` and `hosts show` say
//! it: in sync only when the host applied the current generation and refuses none of it; what it
//! refuses is listed with the agent's reason (decision 0065). The judgment is
//! [`bosun_proto::host_view::SyncView`]'s, the dashboard's too.

use bosun_proto::admin::{HostDetail, HostSummary};
use bosun_proto::host_view::{SyncState, SyncView};
use bosun_proto::refused::Refused;

/// What the host last reported refusing.
pub fn refused(host: &HostDetail) -> &[Refused] {
    host.last_report
        .as_ref()
        .map_or(&[], |r| r.refused.as_slice())
}

/// The one word of `hosts list`'s SYNC column: `yes` when the host applied the current
/// generation, else `no` (a host that refuses part of it never reports it applied; `hosts show`
/// and `status` say what and why).
pub fn word(summary: &HostSummary) -> &'static str {
    if SyncView::of_summary(summary).state == SyncState::InSync {
        "yes"
    } else {
        "no"
    }
}

/// The sync line, then one line per refusal (each escaped: it is the host's text).
pub fn lines(host: &HostDetail) -> Vec<String> {
    let mut out = vec![format!("  sync              {}", head(host))];
    out.extend(
        refused(host)
            .iter()
            .map(|r| format!("    refused         {}", r.line())),
    );
    out
}

/// Whether the host is in sync, in one sentence ([`SyncView::sentence`]).
pub fn head(host: &HostDetail) -> String {
    SyncView::of(host).sentence()
}
