//! `bosun-demo --scenario host-loss`: a whole host lost and brought back on a new box with
//! the customer's recovery code (`docs/decisions/0014-escrow-and-host-loss.md`), with the
//! real binaries of this build.
//!
//! Box a (simulated node a, agent a) runs two guests and backs them up to an offsite PBS,
//! encrypted with its key K. With the customer present the operator makes the escrow: a
//! recovery code of 12 words, printed on a one-page sheet the agent renders itself, and K wrapped
//! under it at the hub. Box a dies; the PBS survives. The operator revokes the host and makes
//! a restore-mode enrollment token; box b (a fresh simulated node that reaches the same PBS, a
//! fresh agent) enrolls with it, takes over the host's identity and waits: no key of its own,
//! no blank guest. The operator reseals the PBS password to box b, the customer types the
//! words, and both guests come back from PBS with their data; the hub reports RPO and RTO.
//! Last, the hub's data and every log are searched: neither the words nor K are in them.
//!
//! Steps 1–4 (box a) are in `old_box.rs`, 5–9 (box b) in `new_box.rs`, the search in
//! `zero_knowledge.rs`; `bosun-tests`' `demo_scenario` asserts on [`HostLossOutcome`].

use std::path::{Path, PathBuf};

use uuid::Uuid;
use zeroize::Zeroizing;

use super::children::Children;
use super::zero_knowledge::{self, Needle, ScanResult};
use super::{DemoError, Narrator, new_box, old_box};

/// Where the marker file is written in each guest before its backup.
pub const MARKER: &str = "/root/customer-data.txt";

/// What the host-loss walk established, for the summary and the integration test.
#[derive(Debug, Clone, Default)]
pub struct HostLossOutcome {
    /// The host, on box a and then on box b.
    pub host_id: Option<Uuid>,
    /// The host id box b holds after its restore-mode enrollment.
    pub new_box_host_id: Option<Uuid>,
    /// Whether the agents ran as an unprivileged user (its uid).
    pub agent_uid: Option<u32>,
    /// The guests of box a, each with its marker and its PBS backup.
    pub guests: Vec<LostGuest>,
    /// The recovery sheet's PDF (kept in the demo folder).
    pub sheet: Option<PathBuf>,
    /// Its first page as PNG.
    pub sheet_png: Option<PathBuf>,
    /// Its page count and size, as `pdfinfo` shows them.
    pub sheet_pages: Option<(u32, String)>,
    /// The escrow's state at the hub after `escrow create` (`verified`).
    pub escrow_state: Option<String>,
    /// The exit code of the second `escrow create` (75: refused).
    pub second_create_exit: Option<i32>,
    /// The hub's complaint when asked for a restore token while the host was active.
    pub restore_token_refused: Option<String>,
    /// The reason box b gave for waiting (its log line).
    pub waiting_reason: Option<String>,
    /// Containers created on node b while box b waited (none).
    pub creates_while_waiting: Option<usize>,
    /// Whether box b held a PBS key before the words were typed (it must not).
    pub key_before_recover: Option<bool>,
    /// `reseal_required_since` at the hub while box b waited.
    pub reseal_required_since: Option<String>,
    /// Whether putting the resealed desired state cleared it.
    pub reseal_cleared: bool,
    /// K's fingerprint on box a (what `escrow create` printed).
    pub fingerprint_old: Option<String>,
    /// K's fingerprint `escrow recover` printed on box b.
    pub fingerprint_recovered: Option<String>,
    /// The guests as they came back on box b.
    pub restored: Vec<RestoredGuest>,
    /// The hub's `guest_restored` alerts (RPO and RTO), one per guest.
    pub restored_alerts: Vec<String>,
    /// The search of the hub's data and the logs.
    pub scan: Option<ScanResult>,
    /// The helpers' private prefixes (removed when the demo ends).
    pub helper_prefixes: Vec<PathBuf>,
}

/// A guest of box a.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostGuest {
    /// Its id.
    pub guest_id: Uuid,
    /// Its hostname.
    pub name: String,
    /// Its vmid on node a.
    pub vmid: u32,
    /// What its marker file holds.
    pub marker: String,
    /// Its backup on the PBS (`<storage>:backup/ct/<vmid>/<time>`).
    pub archive: String,
}

/// A guest as it came back on box b.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredGuest {
    /// Its id.
    pub guest_id: Uuid,
    /// Its vmid on node b.
    pub vmid: u32,
    /// The archive node b was asked to restore it from.
    pub archive: String,
    /// Whether its marker file came back with the same bytes.
    pub marker_back: bool,
    /// Whether Proxmox shows it running.
    pub running: bool,
}

/// Runs the walk; children it starts stay in `children` for the caller to stop.
pub async fn run(
    n: &mut Narrator,
    children: &mut Children,
    bins: &Path,
    out: &Path,
    time_scale: f64,
    outcome: &mut HostLossOutcome,
) -> Result<(), DemoError> {
    n.say("Bosun demo: a whole host lost, and brought back on a new box with the customer's recovery code");
    n.say("two simulated Proxmox VE nodes (box a, lost; box b, its replacement), an offsite PBS, the hub, each box's agent and the operator's tools");
    n.say("");
    let place = (bins, out);
    let mut a = n
        .step(
            "box a: the operator initialises the hub and makes an enrollment token; agent a enrolls on simulated node a",
            async |n| old_box::enroll(n, children, place, time_scale, outcome).await,
        )
        .await?;
    n.step(
        "two guests and an offsite PBS tier: each guest gets a marker file and a signed force-backup to PBS, encrypted with the host's key K",
        async |n| old_box::guests_backed_up(n, children, place, &mut a, outcome).await,
    )
    .await?;
    let code = n
        .step(
            "with the customer present: escrow create prints the recovery sheet, the hub holds a verified escrow, a second create is refused",
            async |n| old_box::escrow(n, children, place, &a, outcome).await,
        )
        .await?;
    let store = n
        .step(
            "box a dies: its agent stops, the offsite PBS's store is kept, node a is gone for good",
            async |n| old_box::host_dies(n, children, place, &a, outcome).await,
        )
        .await?;
    let token = n
        .step(
            "the operator: no restore token while the host is active; the host is revoked, then a restore-mode token is made",
            async |n| new_box::restore_token(n, place, &a).await.map(|(refusal, token)| {
                outcome.restore_token_refused = Some(refusal);
                token
            }),
        )
        .await?;
    let b = n
        .step(
            "box b: a fresh node with the PBS's store and a fresh agent enroll with the restore token, take over the host id and wait: no key, no blank guest",
            async |n| new_box::takes_over(n, children, place, time_scale, &a, (&store, &token), outcome).await,
        )
        .await?;
    n.step(
        "the operator reseals the PBS password to box b and puts the desired state again: the guests still wait for K",
        async |n| new_box::reseal(n, children, place, &a, &b, outcome).await,
    )
    .await?;
    let typed_at = n
        .step(
            "the customer types the 12 words: escrow recover brings K back, with the fingerprint it had on box a",
            async |n| new_box::recover(n, place, &a, &b, &code, outcome).await,
        )
        .await?;
    n.step(
        "both guests come back on box b from PBS with their markers, running, at their vmids; the hub reports RPO and RTO",
        async |n| new_box::guests_back(n, children, out, &a, &b, typed_at, outcome).await,
    )
    .await?;
    n.step(
        "zero knowledge: neither the words (nor any two of them in a row) nor K are in the hub's data or in any log",
        async |n| {
            let mut needles = zero_knowledge::phrase_needles(&code.phrase());
            let k = zero_knowledge::key_data(&a.files.state_dir.join("pbs-encryption-key.json"))?;
            needles.push(Needle {
                what: "K (the key file's data)".to_owned(),
                bytes: Zeroizing::new(k.as_bytes().to_vec()),
            });
            let control = outcome.fingerprint_old.clone().unwrap_or_default();
            let roots = [out.join("hub"), out.join("logs"), out.join("transcript.txt")];
            let scan = zero_knowledge::scan(&roots, &needles, &control)?;
            n.detail(format!(
                "searched {} files ({} KiB): the hub's data directory (SQLite database, WAL) and every log in logs/, and the transcript",
                scan.files,
                scan.bytes / 1024
            ));
            n.detail(format!(
                "looked for {} secrets: the 12-word phrase, each of its 11 pairs of consecutive words, and K's data from box a's key file",
                scan.needles
            ));
            super::scenario::check(scan.control_hits > 0, || {
                "the control (K's public fingerprint, which the hub keeps) was not found: the scan reads nothing".to_owned()
            })?;
            n.detail(format!(
                "control: K's public fingerprint is found in {} of the files, so the search reads what the hub stores",
                scan.control_hits
            ));
            let found = scan.found.clone();
            outcome.scan = Some(scan);
            super::scenario::check(found.is_empty(), || {
                let places: Vec<String> = found
                    .iter()
                    .map(|(path, what)| format!("{what} in {}", path.display()))
                    .collect();
                format!("secrets found: {}", places.join("; "))
            })?;
            n.detail("found: nothing. The hub holds only the wrapped key; the words exist on the sheet alone");
            Ok(())
        },
    )
    .await?;
    Ok(())
}
