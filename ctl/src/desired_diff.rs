//! `bosunctl desired diff`: desired vs last-applied vs current, per guest and per field that
//! matters (presence, hostname, power, cores, memory, root disk, golden archive, bulk volumes),
//! and the host-wide sections (storage, backup and restore-test policy, DR policy, controller
//! version) between desired and last applied. A row is shown only where the three disagree.
//!
//! What the host reports it refuses (a root-disk shrink, a storage target or tier the signed
//! data plan does not allow) is listed with the agent's reason, keeps the host out of sync, and
//! makes the command exit 11 (`NOT_APPLIED`) after printing the diff (decision 0065).
//!
//! Text: a table of the guests' fields and the refusals (desired, applied, current, progress),
//! then each differing host-wide section's desired and applied values, one a line. JSON
//! (`--output json`): [`Diff`], stable and whole.

use std::collections::BTreeSet;

use bosun_proto::desired::{DesiredState, GuestSpec};
use bosun_proto::desired_status::{DesiredStatus, GuestProgress, ProgressState};
use bosun_proto::refused::{Refused, RefusedKind};
use bosun_proto::report::{GuestReport, GuestStatus};
use serde::Serialize;
use uuid::Uuid;

use crate::error::CtlError;
use crate::{outln, table};

/// The diff as `--output json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// The host.
    pub host_id: Uuid,
    /// The current generation (0: none).
    pub desired_generation: u64,
    /// The operator token that set the current generation, when the hub recorded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_set_by: Option<String>,
    /// The generation the host last applied (0: none).
    pub applied_generation: u64,
    /// The operator token that set the last-applied generation, when the hub still keeps it
    /// and recorded who set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_set_by: Option<String>,
    /// The generation the host holds.
    pub known_generation: u64,
    /// Whether nothing differs: the host applied the current generation, refuses none of it
    /// and reports every guest as it asks.
    pub in_sync: bool,
    /// The differing fields.
    pub changes: Vec<Change>,
    /// What the host refuses of desired state, with why (also among `changes`).
    pub refused: Vec<Refused>,
}

/// One field where desired, last-applied and current disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The guest, or `None` for a host-wide section.
    pub guest_id: Option<Uuid>,
    /// The guest's hostname (desired, else applied, else reported), or `host`.
    pub name: String,
    /// The field.
    pub field: String,
    /// In the current document (`None`: not there).
    pub desired: Option<String>,
    /// In the last-applied document (`None`: not there, or the document is not kept).
    pub applied: Option<String>,
    /// What the host reports (`None`: not reported, or not observable).
    pub current: Option<String>,
    /// The guest's progress toward the current generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressState>,
    /// Why the field is not applied, when the hub knows (a refused root-disk shrink, a failed
    /// operation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Prints the diff of `status`; a refusal is then an error ([`CtlError::NotApplied`], exit 11)
/// naming each refused part and why.
pub fn print(status: &DesiredStatus, json: bool) -> Result<(), CtlError> {
    let diff = diff(status);
    if json {
        let value = serde_json::to_value(&diff).map_err(|source| CtlError::Decode {
            what: "output".to_owned(),
            source,
        })?;
        table::print_json(&value)?;
    } else {
        print_text(&diff)?;
    }
    if diff.refused.is_empty() {
        return Ok(());
    }
    Err(CtlError::NotApplied {
        host: diff.host_id,
        generation: diff.desired_generation,
        reason: format!(
            "the host refuses {} part{} of desired state: {}",
            diff.refused.len(),
            if diff.refused.len() == 1 { "" } else { "s" },
            diff.refused
                .iter()
                .map(Refused::line)
                .collect::<Vec<_>>()
                .join("; ")
        ),
    })
}

fn print_text(diff: &Diff) -> Result<(), CtlError> {
    let by = |who: &Option<String>| {
        who.as_ref()
            .map_or_else(String::new, |name| format!(" (set by {name})"))
    };
    outln!(
        "host {}: desired generation {}{}, last applied {}{}, held {}",
        diff.host_id,
        diff.desired_generation,
        by(&diff.desired_set_by),
        diff.applied_generation,
        by(&diff.applied_set_by),
        diff.known_generation
    )?;
    if diff.in_sync {
        return outln!(
            "no differences: the host applied the current generation and reports every guest as desired"
        );
    }
    // The host-wide sections (a document's storage, policies: JSON) are printed after the
    // table, each value on its own lines, so the table keeps its columns.
    let (sections, changes): (Vec<&Change>, Vec<&Change>) = diff
        .changes
        .iter()
        .partition(|c| c.guest_id.is_none() && c.name == "host");
    let cell = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    let rows: Vec<Vec<String>> = changes
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                c.field.clone(),
                cell(&c.desired),
                cell(&c.applied),
                cell(&c.current),
                match (c.progress, &c.reason) {
                    (Some(p), Some(why)) => format!("{}: {why}", progress_word(p)),
                    (Some(p), None) => progress_word(p).to_owned(),
                    (None, _) => String::new(),
                },
            ]
        })
        .collect();
    if rows.is_empty() && sections.is_empty() {
        return outln!(
            "no field differs; the host has not reported generation {} applied yet",
            diff.desired_generation
        );
    }
    if !rows.is_empty() {
        table::print(
            &[
                "GUEST", "FIELD", "DESIRED", "APPLIED", "CURRENT", "PROGRESS",
            ],
            &rows,
        )?;
    }
    for section in sections {
        outln!("host {}:", section.field)?;
        // Each sealed secret as its size and fingerprint (whole in `--output json`).
        let shown = |v: &Option<String>| v.as_deref().map_or_else(|| "-".to_owned(), sealed_shown);
        outln!("  desired  {}", shown(&section.desired))?;
        outln!("  applied  {}", shown(&section.applied))?;
    }
    Ok(())
}

/// The armor an age ciphertext starts with.
const AGE_ARMOR: &str = "-----BEGIN AGE ENCRYPTED FILE-----";

/// A section's JSON text as the text output shows it (unless `--wide`): each armored age
/// ciphertext in it as `age, N bytes, sha256 PREFIX…` (the SHA-256 of the armored text), and a
/// space after each `,` and `:` between items so that it wraps; text that is not JSON as it is.
fn sealed_shown(text: &str) -> String {
    if crate::width::limit().is_none() {
        return text.to_owned();
    }
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(text) else {
        return text.to_owned();
    };
    summarize_sealed(&mut value);
    spaced(&value)
}

/// JSON on one line with a space after each `,` and `:` between items, so that it wraps.
fn spaced(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Array(items) => {
            let items: Vec<String> = items.iter().map(spaced).collect();
            format!("[{}]", items.join(", "))
        }
        serde_json::Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{}: {}", serde_json::Value::from(k.as_str()), spaced(v)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        other => other.to_string(),
    }
}

fn summarize_sealed(value: &mut serde_json::Value) {
    use sha2::Digest as _;
    match value {
        serde_json::Value::String(s) if s.starts_with(AGE_ARMOR) => {
            let digest = hex::encode(sha2::Sha256::digest(s.as_bytes()));
            *s = format!("age, {} bytes, sha256 {}…", s.len(), &digest[..12]);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(summarize_sealed),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(summarize_sealed),
        _ => {}
    }
}

fn progress_word(state: ProgressState) -> &'static str {
    match state {
        ProgressState::Pending => "pending",
        ProgressState::Applied => "applied",
        ProgressState::Failed => "failed",
        ProgressState::Refused => "refused",
        ProgressState::Unknown => "unknown",
    }
}

/// What differs.
pub fn diff(status: &DesiredStatus) -> Diff {
    let desired = status.desired.as_ref().map(|r| &r.document);
    let applied = status.applied.as_ref().map(|r| &r.document);
    let observed: Vec<&GuestReport> = status
        .guests
        .iter()
        .filter_map(|g| g.observed.as_ref())
        .chain(status.unmanaged.iter())
        .collect();
    let mut ids: BTreeSet<Uuid> = BTreeSet::new();
    let mut order: Vec<Uuid> = Vec::new();
    let all = desired
        .into_iter()
        .chain(applied)
        .flat_map(|d| d.guests.iter().map(|g| g.guest_id))
        .chain(observed.iter().filter_map(|g| g.guest_id));
    for id in all {
        if ids.insert(id) {
            order.push(id);
        }
    }
    let mut changes = sections(desired, applied);
    for id in order {
        let want = spec(desired, id);
        let had = spec(applied, id);
        let seen = observed.iter().copied().find(|g| g.guest_id == Some(id));
        let progress: Option<&GuestProgress> = status.guests.iter().find(|g| g.guest_id == id);
        let name = want
            .or(had)
            .map(|s| s.hostname.clone())
            .or_else(|| seen.map(|g| g.hostname.clone()))
            .unwrap_or_else(|| id.to_string());
        if want.is_none() && had.is_none() {
            // Neither document names it: not desired state (`status` lists it as unmanaged).
            continue;
        }
        for (field, d, a, c) in fields(want, had, seen) {
            // A guest the current document drops is only shown as going (the agent leaves it
            // orphaned, it never destroys one for desired state).
            if want.is_none() && field != "present" {
                continue;
            }
            let differs = d != a || !same_as_observed(field, &d, &c);
            if differs {
                changes.push(Change {
                    guest_id: Some(id),
                    name: name.clone(),
                    field: field.to_owned(),
                    desired: d,
                    applied: a,
                    current: c,
                    progress: progress.map(|p| p.state),
                    reason: progress
                        .filter(|p| p.state != ProgressState::Applied)
                        .and_then(|p| p.reason.clone()),
                });
            }
        }
    }
    let more: Vec<Change> = status
        .refused
        .iter()
        .filter_map(|r| refused_change(r, &changes))
        .collect();
    changes.extend(more);
    let desired_generation = status.desired.as_ref().map_or(0, |r| r.generation);
    let in_sync = changes.is_empty()
        && status.refused.is_empty()
        && status.applied_generation >= desired_generation;
    Diff {
        host_id: status.host_id,
        desired_generation,
        desired_set_by: status.desired.as_ref().and_then(|r| r.set_by.clone()),
        applied_generation: status.applied_generation,
        applied_set_by: status
            .applied
            .as_ref()
            .filter(|r| r.generation == status.applied_generation)
            .and_then(|r| r.set_by.clone()),
        known_generation: status.known_generation,
        in_sync,
        changes,
        refused: status.refused.clone(),
    }
}

/// The row of a refusal the guest rows do not already show (a refused root-disk shrink is
/// there, with its progress and reason): a storage target or tier, a bulk volume.
fn refused_change(r: &Refused, changes: &[Change]) -> Option<Change> {
    let field = match (r.kind, &r.field) {
        (RefusedKind::GuestField, Some(field)) => field.clone(),
        (RefusedKind::StorageTarget, _) => "storage".to_owned(),
        (RefusedKind::Tier, _) => "backup_policy".to_owned(),
        (_, field) => field.clone().unwrap_or_else(|| r.kind.as_str().to_owned()),
    };
    let shown = changes.iter().any(|c| {
        c.guest_id.is_some()
            && c.guest_id == r.guest_id
            && c.field == field
            && c.progress == Some(ProgressState::Refused)
    });
    (!shown).then(|| Change {
        guest_id: r.guest_id,
        name: match r.kind {
            RefusedKind::GuestField => r.name.clone(),
            kind => format!("{} {}", kind.as_str(), r.name),
        },
        field,
        desired: Some(r.name.clone()),
        applied: None,
        current: Some("refused".to_owned()),
        progress: Some(ProgressState::Refused),
        reason: Some(r.reason.clone()),
    })
}

fn spec(doc: Option<&DesiredState>, id: Uuid) -> Option<&GuestSpec> {
    doc.and_then(|d| d.guests.iter().find(|g| g.guest_id == id))
}

type Row = (&'static str, Option<String>, Option<String>, Option<String>);

/// Each field of a guest: desired, applied and current. A field the host does not report
/// (the golden archive, bulk volumes, a pinned vmid) has no current value and is compared
/// between desired and applied only.
fn fields(
    want: Option<&GuestSpec>,
    had: Option<&GuestSpec>,
    seen: Option<&GuestReport>,
) -> Vec<Row> {
    let of = |s: Option<&GuestSpec>, f: &dyn Fn(&GuestSpec) -> String| s.map(f);
    let present = |s: Option<&GuestSpec>| Some(if s.is_some() { "yes" } else { "no" }.to_owned());
    let size = seen.and_then(|g| g.resources);
    vec![
        (
            "present",
            present(want),
            present(had),
            Some(
                if seen
                    .is_some_and(|g| !matches!(g.status, GuestStatus::Lost | GuestStatus::Migrated))
                {
                    "yes"
                } else {
                    "no"
                }
                .to_owned(),
            ),
        ),
        (
            "hostname",
            of(want, &|s| s.hostname.clone()),
            of(had, &|s| s.hostname.clone()),
            seen.map(|g| g.hostname.clone()).filter(|h| !h.is_empty()),
        ),
        (
            "power",
            of(want, &|s| power(s)),
            of(had, &|s| power(s)),
            seen.map(|g| status_text(g.status)),
        ),
        (
            "cores",
            of(want, &|s| s.resources.cores.to_string()),
            of(had, &|s| s.resources.cores.to_string()),
            size.map(|r| r.cores.to_string()),
        ),
        (
            "memory_mib",
            of(want, &|s| s.resources.memory_mib.to_string()),
            of(had, &|s| s.resources.memory_mib.to_string()),
            size.map(|r| r.memory_mib.to_string()),
        ),
        (
            "rootfs_gib",
            of(want, &|s| s.resources.rootfs_gib.to_string()),
            of(had, &|s| s.resources.rootfs_gib.to_string()),
            size.map(|r| r.rootfs_gib.to_string()),
        ),
        (
            "golden",
            of(want, &golden_name),
            of(had, &golden_name),
            None,
        ),
        (
            "bulk_volumes",
            of(want, &|s| bulk(s)),
            of(had, &|s| bulk(s)),
            None,
        ),
        (
            "vmid",
            of(want, &|s| {
                s.vmid.map_or_else(|| "any".to_owned(), |v| v.to_string())
            }),
            of(had, &|s| {
                s.vmid.map_or_else(|| "any".to_owned(), |v| v.to_string())
            }),
            None,
        ),
    ]
}

/// Whether the current value agrees with the desired one. Fields the host does not report
/// agree; an unpinned vmid agrees with any. A root disk larger than asked does not: Bosun never
/// shrinks one, so the hub reports the guest `refused` with why, and the row stays until the
/// operator asks for at least the guest's size.
fn same_as_observed(field: &str, desired: &Option<String>, current: &Option<String>) -> bool {
    match (field, desired, current) {
        ("golden" | "bulk_volumes" | "vmid", _, _) => true,
        ("hostname", Some(_), None) => true,
        // A guest running without size facts (still provisioning) is judged by power alone.
        ("cores" | "memory_mib" | "rootfs_gib", Some(_), None) => false,
        (_, d, c) => d == c,
    }
}

fn power(spec: &GuestSpec) -> String {
    format!("{:?}", spec.power).to_lowercase()
}

fn status_text(status: GuestStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn bulk(spec: &GuestSpec) -> String {
    if spec.bulk_volumes.is_empty() {
        return "none".to_owned();
    }
    spec.bulk_volumes
        .iter()
        .map(|v| format!("{}:{}G", v.name, v.size_gib))
        .collect::<Vec<_>>()
        .join(",")
}

/// The host-wide sections, desired vs applied (the host reports them in other shapes).
fn sections(desired: Option<&DesiredState>, applied: Option<&DesiredState>) -> Vec<Change> {
    let parts = |d: Option<&DesiredState>| -> Vec<(&'static str, Option<String>)> {
        let json = |v: serde_json::Result<serde_json::Value>| v.unwrap_or_default().to_string();
        vec![
            ("storage", d.map(|d| json(serde_json::to_value(&d.storage)))),
            (
                "backup_policy",
                d.map(|d| json(serde_json::to_value(&d.backup_policy))),
            ),
            (
                "restore_test_policy",
                d.map(|d| json(serde_json::to_value(d.restore_test_policy))),
            ),
            (
                "dr_policy",
                d.map(|d| json(serde_json::to_value(d.dr_policy))),
            ),
        ]
    };
    parts(desired)
        .into_iter()
        .zip(parts(applied))
        .filter(|((_, d), (_, a))| d != a)
        .map(|((field, d), (_, a))| Change {
            guest_id: None,
            name: "host".to_owned(),
            field: field.to_owned(),
            desired: d,
            applied: a,
            current: None,
            progress: None,
            reason: None,
        })
        .collect()
}

#[cfg(test)]
#[path = "desired_diff_tests.rs"]
mod tests;

/// A guest's golden archive as the diff shows it: its volid, or `version <v>`.
fn golden_name(spec: &bosun_proto::desired::GuestSpec) -> String {
    match &spec.golden.version {
        Some(version) => format!("version {version}"),
        None => spec.golden.volid.clone(),
    }
}
