//! Whether a host is in sync with its desired state, as `bosunctl status` and `hosts show` say
//! it: in sync only when the host applied the current generation and refuses none of it; what it
//! refuses is listed with the agent's reason (decision 0065).

use bosun_proto::admin::{HostDetail, HostSummary};
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
    if summary.applied_generation >= summary.desired_generation {
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

/// Whether the host is in sync, in one sentence.
pub fn head(host: &HostDetail) -> String {
    let s = &host.summary;
    let refused = refused(host);
    if !refused.is_empty() {
        format!(
            "NOT IN SYNC: the host refuses {} part{} of desired state (generation {} not applied)",
            refused.len(),
            if refused.len() == 1 { "" } else { "s" },
            s.desired_generation
        )
    } else if s.applied_generation >= s.desired_generation {
        format!("in sync: generation {} applied", s.desired_generation)
    } else {
        format!(
            "not in sync yet: generation {} not applied (last applied {})",
            s.desired_generation, s.applied_generation
        )
    }
}
