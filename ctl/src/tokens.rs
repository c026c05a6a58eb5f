//! `bosunctl tokens create|list|revoke|rotate`: the hub's operator tokens (an admin token's
//! work). A token's secret is printed once, by `create` and `rotate`; `list` never shows one.

use bosun_proto::operator_token::{
    CreateOperatorToken, OperatorTokenCreated, OperatorTokenInfo, Role, validate_name,
};
use clap::Subcommand;
use reqwest::Method;

use crate::client::{HubClient, decode};
use crate::duration::parse_within;
use crate::error::CtlError;
use crate::table;

/// `bosunctl tokens ...`
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Create an operator token (its secret is printed once). Roles: `viewer` reads (the
    /// dashboard, every list and show); `operator` also sets desired state, makes enrollment
    /// tokens, submits signed jobs, uploads artifacts, acknowledges and silences alerts;
    /// `admin` also manages tokens and approves, revokes and removes hosts.
    Create {
        /// The token's name, unique on the hub (`a-z`, `0-9`, `.`, `_`, `-`; up to 63): what
        /// the audit trail records as `by`.
        #[arg(long)]
        name: String,
        /// What it may do.
        #[arg(long, value_parser = ["viewer", "operator", "admin"])]
        role: String,
        /// Lifetime: seconds, or a number with s/m/h/d (e.g. `90d`); without it the token
        /// does not expire.
        #[arg(long, value_name = "DURATION")]
        expires_in: Option<String>,
    },
    /// The hub's operator tokens (never a secret): name, role, created, expires, last used.
    List,
    /// Revoke a token by its name: it stops working at once, and so do the dashboard sessions
    /// it opened. The hub refuses to revoke its last unexpired admin token (exit 6).
    Revoke {
        /// The token's name.
        name: String,
    },
    /// Give a token a new secret (printed once), keeping its name, role and expiry; the old
    /// secret stops working at once.
    Rotate {
        /// The token's name.
        name: String,
    },
}

fn checked_name(name: &str) -> Result<&str, CtlError> {
    validate_name("NAME", name).map_err(|e| CtlError::BadArgument {
        what: "NAME",
        reason: e.to_string(),
    })?;
    Ok(name)
}

/// Prints a token whose secret the hub just made.
fn print_created(created: &OperatorTokenCreated, what: &str) -> Result<(), CtlError> {
    table::print_fields(&[
        ("token", created.token.expose().to_owned()),
        ("name", created.info.name.clone()),
        ("role", created.info.role.as_str().to_owned()),
        (
            "expires",
            created
                .info
                .expires_at
                .map_or_else(|| "never".to_owned(), |at| table::when(Some(at))),
        ),
    ])?;
    crate::errln!("The token is shown once; the hub keeps only its hash. {what}");
    Ok(())
}

/// Runs a `tokens` command.
pub async fn run(client: &HubClient, json: bool, command: &TokensCommand) -> Result<(), CtlError> {
    match command {
        TokensCommand::Create {
            name,
            role,
            expires_in,
        } => {
            let request = CreateOperatorToken {
                name: checked_name(name)?.to_owned(),
                role: Role::parse(role).ok_or_else(|| CtlError::BadArgument {
                    what: "--role",
                    reason: format!("`{role}` is not viewer, operator or admin"),
                })?,
                expires_in_seconds: expires_in
                    .as_deref()
                    .map(|text| {
                        parse_within(
                            "--expires-in",
                            text,
                            bosun_proto::operator_token::MIN_EXPIRES_IN_SECONDS,
                            bosun_proto::operator_token::MAX_EXPIRES_IN_SECONDS,
                        )
                    })
                    .transpose()?,
            };
            request.validate().map_err(|e| CtlError::BadArgument {
                what: "operator token",
                reason: e.to_string(),
            })?;
            let body = serde_json::to_vec(&request).map_err(|source| CtlError::Decode {
                what: "operator token request".to_owned(),
                source,
            })?;
            let value = client
                .call(Method::POST, "/v1/admin/tokens", Some(body), &[])
                .await?;
            if json {
                return table::print_json(&value);
            }
            let created: OperatorTokenCreated = decode("operator token", value)?;
            print_created(&created, "Give it to its holder over a channel you trust.")
        }
        TokensCommand::List => {
            let value = client.get("/v1/admin/tokens").await?;
            if json {
                return table::print_json(&value);
            }
            let tokens: Vec<OperatorTokenInfo> = decode("operator tokens", value)?;
            let rows: Vec<Vec<String>> = tokens
                .iter()
                .map(|t| {
                    vec![
                        t.name.clone(),
                        t.role.as_str().to_owned(),
                        table::when(Some(t.created_at)),
                        match t.expires_at {
                            None => "never".to_owned(),
                            Some(at) if t.expired => format!("{} (expired)", table::when(Some(at))),
                            Some(at) => table::when(Some(at)),
                        },
                        t.last_used_at
                            .map_or_else(|| "-".to_owned(), |at| table::when(Some(at))),
                        table::or_dash(t.created_by.as_deref()),
                    ]
                })
                .collect();
            table::print(
                &[
                    "NAME",
                    "ROLE",
                    "CREATED",
                    "EXPIRES",
                    "LAST USED",
                    "CREATED BY",
                ],
                &rows,
            )
        }
        TokensCommand::Revoke { name } => {
            let name = checked_name(name)?;
            let value = client
                .call(
                    Method::POST,
                    &format!("/v1/admin/tokens/{name}/revoke"),
                    None,
                    &[],
                )
                .await?;
            if json {
                return table::print_json(&value);
            }
            let info: OperatorTokenInfo = decode("operator token", value)?;
            crate::outln!(
                "operator token {} ({}) revoked: it no longer works",
                info.name,
                info.role
            )
        }
        TokensCommand::Rotate { name } => {
            let name = checked_name(name)?;
            let value = client
                .call(
                    Method::POST,
                    &format!("/v1/admin/tokens/{name}/rotate"),
                    None,
                    &[],
                )
                .await?;
            if json {
                return table::print_json(&value);
            }
            let created: OperatorTokenCreated = decode("operator token", value)?;
            print_created(&created, "The old secret no longer works.")
        }
    }
}
