//! `POST /_sim/pct`: what `pct set` run by root on the node does, for `bosun-helper`'s
//! `attach_bind_mount` and the demo (there is no `pct` here).
//!
//! On a real host `pct set <vmid> -mp0 /dir,mp=/path,ro=1` changes the guest's config as
//! `root@pam`; bind mount points are allowed to nobody else, API tokens included. This route
//! takes the same arguments, runs them through `PUT /nodes/{node}/lxc/{vmid}/config` with
//! that route's schema validation and handler under the identity `root@pam`, and logs the
//! call in the request log as a `root@pam` (non-token) request. `/api2` itself is unchanged:
//! no token can become root through it.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::LoggedRequest;
use crate::api::{ApiError, Ctx, Reply};
use crate::request::Decoded;
use crate::routes::lookup;
use crate::schema::RawValue;
use crate::server::{dispatch, validate};
use crate::state::Shared;

/// The body of `POST /_sim/pct`: `pct`'s own argument vector.
#[derive(Debug, Deserialize)]
pub(crate) struct PctCommand {
    /// e.g. `["set", "101", "-mp0", "/var/lib/bosun-helper/guests/101/bootstrap,mp=/etc/bosun,ro=1"]`.
    pub(crate) args: Vec<String>,
}

/// A parsed `pct set`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PctSet {
    pub(crate) vmid: u32,
    pub(crate) options: Vec<(String, String)>,
}

/// Parses `set <vmid> (-key value | --key value)…`; other `pct` commands are refused.
pub(crate) fn parse(args: &[String]) -> Result<PctSet, String> {
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("set") => {}
        Some(other) => return Err(format!("pct {other}: only `pct set` is simulated")),
        None => return Err("pct: no command".to_owned()),
    }
    let vmid = it
        .next()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|v| (100..=999_999_999).contains(v))
        .ok_or_else(|| "pct set: a numeric vmid must follow `set`".to_owned())?;
    let mut options = Vec::new();
    while let Some(flag) = it.next() {
        let key = flag
            .strip_prefix("--")
            .or_else(|| flag.strip_prefix('-'))
            .filter(|k| !k.is_empty())
            .ok_or_else(|| format!("pct set: unexpected argument {flag:?}"))?;
        let value = it
            .next()
            .ok_or_else(|| format!("pct set: option -{key} needs a value"))?;
        options.push((key.to_owned(), value.clone()));
    }
    if options.is_empty() {
        return Err("pct set: no option given".to_owned());
    }
    Ok(PctSet { vmid, options })
}

/// Applies a `pct set` as `root@pam`, logging it like an API call.
pub(crate) async fn apply(shared: &Arc<Shared>, set: &PctSet) -> Result<Value, ApiError> {
    let path = format!("/nodes/{}/lxc/{}/config", shared.node(), set.vmid);
    let mut log = LoggedRequest {
        method: "PUT".to_owned(),
        path: path.clone(),
        params: set.options.clone(),
        token_id: None,
        status: 0,
    };
    let result = run(shared, &path, set).await;
    log.status = match &result {
        Ok(_) => 200,
        Err(e) => e.status,
    };
    tracing::info!(
        vmid = set.vmid,
        status = log.status,
        "pct set applied as root@pam"
    );
    shared.state.lock().requests.push(log);
    result
}

async fn run(shared: &Arc<Shared>, path: &str, set: &PctSet) -> Result<Value, ApiError> {
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let matched = lookup("PUT", &segments)
        .ok_or_else(|| ApiError::internal("the config route is missing from the simulator"))?;
    let mut params = Decoded::default();
    for (key, value) in &set.options {
        params.push(key.clone(), RawValue::One(value.clone()));
    }
    let validated = validate(&matched, &params)?;
    let ctx = Ctx {
        shared: shared.clone(),
        authid: "root@pam".to_owned(),
        params: validated,
        explicit: set
            .options
            .iter()
            .map(|(k, _)| k.clone())
            .collect::<BTreeSet<_>>(),
    };
    match dispatch(matched.spec.handler, &ctx).await? {
        Reply::Data(v) | Reply::DataWithTotal(v, _) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_set_with_single_and_double_dash_options() {
        let set = parse(&args(&[
            "set",
            "101",
            "-mp0",
            "/a,mp=/b,ro=1",
            "--onboot",
            "1",
        ]))
        .expect("valid");
        assert_eq!(set.vmid, 101);
        assert_eq!(
            set.options,
            [
                ("mp0".to_owned(), "/a,mp=/b,ro=1".to_owned()),
                ("onboot".to_owned(), "1".to_owned())
            ]
        );
    }

    #[test]
    fn refuses_other_commands_and_malformed_arguments() {
        for bad in [
            &["destroy", "101"][..],
            &[],
            &["set"],
            &["set", "abc", "-mp0", "x"],
            &["set", "101"],
            &["set", "101", "-mp0"],
            &["set", "101", "mp0", "x"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
