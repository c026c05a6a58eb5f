//! `bosunctl enroll-token create|list|revoke`.

use bosun_proto::admin::{CreateEnrollToken, EnrollTokenCreated, EnrollTokenInfo};
use clap::Subcommand;
use reqwest::Method;

use crate::client::{HubClient, decode};
use crate::duration::parse_within;
use crate::error::CtlError;
use crate::table;

/// `bosunctl enroll-token ...`
#[derive(Debug, Subcommand)]
pub enum EnrollTokenCommand {
    /// Create a one-time, expiring enrollment token (shown once).
    Create {
        /// Lifetime: seconds, or a number with s/m/h/d (e.g. `30m`, `24h`).
        #[arg(long, default_value = "1h")]
        ttl: String,
        /// Hosts enrolled with this token wait for `bosunctl hosts approve`.
        #[arg(long)]
        require_approval: bool,
        /// A note kept with the token.
        #[arg(long)]
        note: Option<String>,
        /// Restore mode: the box that enrolls takes over this host's identity (its id,
        /// desired state, storage manifest, jobs and escrow blob). Revoke the lost host
        /// first (`bosunctl hosts revoke`); the hub refuses a host that is not revoked.
        /// The host is given by its id or its hostname.
        #[arg(long, value_name = "HOST")]
        restore_host: Option<String>,
    },
    /// The enrollment tokens the hub keeps (never a token itself): id, state, expiry, note,
    /// and the host a used one enrolled; newest first.
    List {
        /// Newest N (the hub answers at most 500).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: u32,
    },
    /// Revoke an unused token by its id (from `create` or `list`): no box can enroll with
    /// it any more. A used token is refused (exit 6): revoke the host it enrolled.
    Revoke {
        /// The token's id (16 hex digits).
        token_id: String,
    },
}

/// Parses `90`, `90s`, `30m`, `24h`, `7d` into seconds, 1 minute to 30 days.
pub fn parse_ttl(text: &str) -> Result<u32, CtlError> {
    parse_within(
        "--ttl",
        text,
        bosun_proto::admin::MIN_TOKEN_TTL_SECONDS,
        bosun_proto::admin::MAX_TOKEN_TTL_SECONDS,
    )
}

/// Runs an `enroll-token` command.
pub async fn run(
    client: &HubClient,
    json: bool,
    command: &EnrollTokenCommand,
) -> Result<(), CtlError> {
    match command {
        EnrollTokenCommand::Create {
            ttl,
            require_approval,
            note,
            restore_host,
        } => {
            create(
                client,
                json,
                (ttl, *require_approval, note),
                restore_host.as_deref(),
            )
            .await
        }
        EnrollTokenCommand::List { limit } => list(client, json, *limit).await,
        EnrollTokenCommand::Revoke { token_id } => revoke(client, json, token_id).await,
    }
}

/// `enroll-token create`: a token shown once, for one host (or to take over `restore_host`).
async fn create(
    client: &HubClient,
    json: bool,
    (ttl, require_approval, note): (&str, bool, &Option<String>),
    restore_host: Option<&str>,
) -> Result<(), CtlError> {
    let restore_host = match restore_host {
        Some(host) => Some(crate::resolve::host_id(client, host).await?),
        None => None,
    };
    let request = CreateEnrollToken {
        ttl_seconds: parse_ttl(ttl)?,
        require_approval,
        note: note.clone(),
        restore_host,
    };
    request.validate().map_err(|e| CtlError::BadArgument {
        what: "enrollment token",
        reason: e.to_string(),
    })?;
    let body = serde_json::to_vec(&request).map_err(|source| CtlError::Decode {
        what: "enrollment token request".to_owned(),
        source,
    })?;
    let value = client
        .call(Method::POST, "/v1/admin/enrollment-tokens", Some(body), &[])
        .await?;
    if json {
        return table::print_json(&value);
    }
    let created: EnrollTokenCreated = decode("enrollment token", value)?;
    let mut fields = vec![
        ("token", created.token.expose().to_owned()),
        ("id", created.token_id.clone()),
        ("expires", table::when(Some(created.expires_at))),
        (
            "approval",
            if created.require_approval {
                "required"
            } else {
                "not required"
            }
            .to_owned(),
        ),
    ];
    if let Some(host) = created.restore_host {
        fields.push(("restores host", host.to_string()));
    }
    table::print_fields(&fields)?;
    match created.restore_host {
        Some(host) => crate::errln!(
            "The token is shown once. The box that enrolls with it takes over host {host}: \
             its desired state, storage manifest, jobs and escrow blob. Reseal the host's \
             storage credentials once the new box has reported (`bosunctl hosts show`)."
        ),
        None => crate::errln!("The token is shown once and works for one host."),
    }
    Ok(())
}

/// `enroll-token list`: the newest `limit` tokens.
async fn list(client: &HubClient, json: bool, limit: u32) -> Result<(), CtlError> {
    let value = client
        .get(&format!("/v1/admin/enrollment-tokens?limit={limit}"))
        .await?;
    let value = crate::client::newest(value, limit);
    if json {
        return table::print_json(&value);
    }
    let tokens: Vec<EnrollTokenInfo> = decode("enrollment tokens", value)?;
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            vec![
                t.token_id.clone(),
                serde_json::to_value(t.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                table::when(Some(t.created_at)),
                table::when(Some(t.expires_at)),
                t.used_by
                    .or(t.restore_host)
                    .map_or_else(|| "-".to_owned(), |h| h.to_string()),
                t.note.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    table::print(
        &["ID", "STATE", "CREATED", "EXPIRES", "HOST", "NOTE"],
        &rows,
    )
}

/// `enroll-token revoke`: no box can enroll with the token any more.
async fn revoke(client: &HubClient, json: bool, token_id: &str) -> Result<(), CtlError> {
    if token_id.len() != 16 || !token_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CtlError::BadArgument {
            what: "TOKEN_ID",
            reason: "an enrollment token's id is 16 hex digits (`enroll-token list`)".to_owned(),
        });
    }
    client
        .call(
            Method::POST,
            &format!("/v1/admin/enrollment-tokens/{token_id}/revoke"),
            None,
            &[],
        )
        .await?;
    if json {
        return table::print_json(&serde_json::json!({"token_id": token_id, "result": "revoked"}));
    }
    crate::outln!("enrollment token {token_id} revoked: no box can enroll with it")
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttls_parse_with_units() {
        for (text, seconds) in [
            ("90", 90),
            ("90s", 90),
            ("30m", 1800),
            ("24h", 86_400),
            ("7d", 604_800),
        ] {
            assert_eq!(parse_ttl(text).unwrap(), seconds, "{text}");
        }
        for bad in ["", "h", "10w", "-5m", "99999999999d", "1.5h", "30s", "31d"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }
}
