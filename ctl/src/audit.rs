//! `bosunctl audit`: the audit trail the hub keeps of what the agents did, newest first.

use bosun_proto::admin::{AuditPage, AuditRecord, MAX_AUDIT_PAGE};
use clap::Args;

use crate::client::{HubClient, decode};
use crate::error::CtlError;
use crate::table;

/// `bosunctl audit`
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this host: its id or its hostname.
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// Only entries about this guest of `--host`: its id or its name.
    #[arg(long, value_name = "GUEST", requires = "host")]
    pub guest: Option<String>,
    /// Only entries since then: a duration back from now (`30m`, `24h`, `7d`) or an RFC 3339
    /// time (`2026-11-20T10:00:00Z`).
    #[arg(long, value_name = "DURATION|TIME")]
    pub since: Option<String>,
    /// Entries older than the last one printed before (the cursor a page ends with).
    #[arg(long, value_name = "CURSOR")]
    pub before: Option<String>,
    /// Newest N entries (1 to 500).
    #[arg(long, default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_AUDIT_PAGE)))]
    pub limit: u32,
}

/// `--since`: an RFC 3339 time as is, a duration as that long before `now`.
pub fn since(text: &str, now: jiff::Timestamp) -> Result<jiff::Timestamp, CtlError> {
    if let Ok(at) = text.trim().parse::<jiff::Timestamp>() {
        return Ok(at);
    }
    let seconds = crate::duration::parse_duration("--since", text)?;
    now.checked_sub(jiff::SignedDuration::from_secs(i64::from(seconds)))
        .map_err(|_| CtlError::BadArgument {
            what: "--since",
            reason: format!("`{text}` reaches before the earliest time"),
        })
}

/// Prints a page of the audit trail.
pub async fn run(client: &HubClient, json: bool, args: &AuditArgs) -> Result<(), CtlError> {
    let mut path = format!("/v1/admin/audit?limit={}", args.limit);
    if let Some(host) = &args.host {
        let host = crate::resolve::host_id(client, host).await?;
        path.push_str(&format!("&host={host}"));
        if let Some(guest) = &args.guest {
            let guest = crate::resolve::guest_id(client, host, guest).await?;
            path.push_str(&format!("&guest={guest}"));
        }
    }
    if let Some(text) = &args.since {
        path.push_str(&format!("&since={}", since(text, jiff::Timestamp::now())?));
    }
    if let Some(cursor) = &args.before {
        if !cursor
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        {
            return Err(CtlError::BadArgument {
                what: "--before",
                reason: format!("`{cursor}` is not a cursor bosunctl audit printed"),
            });
        }
        path.push_str(&format!("&before={cursor}"));
    }
    let value = client.get(&path).await?;
    if json {
        return table::print_json(&value);
    }
    let page: AuditPage = decode("audit page", value)?;
    let rows: Vec<Vec<String>> = page
        .entries
        .iter()
        .map(|e| {
            vec![
                table::when(Some(e.at)),
                host_name(e),
                action(e),
                bosun_proto::audit_text::one_line(&e.detail),
            ]
        })
        .collect();
    table::print(&["AT", "HOST", "ACTION", "DETAIL"], &rows)?;
    if let Some(cursor) = page.next_before {
        table::line(format_args!("older entries: --before {cursor}"))?;
    }
    Ok(())
}

/// The action, and for an entry the hub counted more than once how often and until when:
/// `verify.failed ×228, last 2026-11-20 10:41:07`.
fn action(entry: &AuditRecord) -> String {
    match (entry.repeats, entry.last_at) {
        (1, _) => entry.action.clone(),
        (n, Some(last)) => format!("{} ×{n}, last {}", entry.action, table::when(Some(last))),
        (n, None) => format!("{} ×{n}", entry.action),
    }
}

fn host_name(entry: &AuditRecord) -> String {
    entry
        .hostname
        .clone()
        .unwrap_or_else(|| entry.host_id.to_string())
}

#[cfg(test)]
mod tests {
    use super::since;

    #[test]
    fn since_takes_a_time_or_a_duration_back_from_now() {
        let now: jiff::Timestamp = "2026-11-20T12:00:00Z".parse().unwrap();
        assert_eq!(
            since("2026-11-19T08:30:00Z", now).unwrap().to_string(),
            "2026-11-19T08:30:00Z"
        );
        assert_eq!(
            since("90m", now).unwrap().to_string(),
            "2026-11-20T10:30:00Z"
        );
        assert_eq!(
            since("2d", now).unwrap().to_string(),
            "2026-11-18T12:00:00Z"
        );
        assert!(since("yesterday", now).is_err());
        assert!(since("5y", now).is_err());
    }
}
