//! `stage_agent_update`: the agent's new binary into the inactive slot, then the trial
//! record, then `current` flipped to it (DESIGN §11, decision 0018). The health gate
//! (`bosun-update-gate`) restarts the agent and decides; this verb never does.
//!
//! The binary comes from the agent's own inbox file, which the agent could change at any
//! moment: it is opened without following symlinks, taken only as a regular file of the
//! agent user with one link and at most [`MAX_ARTIFACT_BYTES`], and the SHA-256 checked is
//! that of the very bytes written into the slot. Every write is a new file renamed into
//! place, in the order binary, record, link: a crash leaves the old state or a record the
//! gate converges from.

use std::io::{Read, Write};
use std::path::Path;

use bosun_proto::helper::{Output, StageAgentUpdate};
use bosun_proto::update::{CURRENT_LINK, MAX_ARTIFACT_BYTES, RECORD_FILE, SLOT_BINARY};
use bosun_proto::update::{Slot, UpdatePhase, UpdateRecord};
use rustix::fs::{FileType, OFlags};

use crate::config::Config;
use crate::error::{HelperError, io_error};
use crate::fsops::{Dir, open_file, open_root};

use super::archive::Hashing;

const STAGING: &str = ".bosun-agentd.staging";

/// Stages the inbox file as `args.version` if it hashes to `args.sha256`.
pub fn stage(args: &StageAgentUpdate, config: &Config) -> Result<Output, HelperError> {
    let slots = open_root(&config.slots_root)?;
    let link = rustix::fs::readlinkat(&slots.fd, CURRENT_LINK, Vec::new()).unwrap_or_default();
    let no_slot = || format!("{CURRENT_LINK} in {} names no slot", slots.path.display());
    let current = Slot::parse(&link.to_string_lossy());
    let current = current.ok_or_else(|| HelperError::UpdateConflict(no_slot()))?;
    if let Some(rec) = read_record(&slots)? {
        let same = rec.update_id == args.update_id && rec.sha256 == args.sha256.as_str();
        if same && rec.phase == UpdatePhase::Trial && rec.trial == current {
            return Ok(staged(&rec, 0, true));
        }
        if rec.open() || rec.update_id == args.update_id {
            let state = if rec.open() {
                "open and the health gate has not decided"
            } else {
                "already decided"
            };
            let (id, version) = (rec.update_id, &rec.version);
            let conflict = format!("update {id} ({version}) is {state}");
            return Err(HelperError::UpdateConflict(conflict));
        }
    }
    let agent_uid = crate::config::lookup_uid(&config.agent_user, Path::new("/etc/passwd"))
        .map_err(HelperError::Config)?;
    let inbox = open_inbox(&config.update_inbox, agent_uid)?;
    let (slot, _) = slots.ensure_child(current.other().as_str(), 0o755, false)?;
    let mut out = slot.create(STAGING, 0o755, false)?;
    // One byte past the limit tells an oversized artifact from one of exactly the limit.
    let mut read = Hashing::new((&inbox).take(MAX_ARTIFACT_BYTES + 1));
    let copied = std::io::copy(&mut read, &mut out).and_then(|_| out.sync_all());
    copied.map_err(io_error(
        "copy the update artifact into",
        slot.path.join(STAGING),
    ))?;
    let (sha256, size) = read.digest();
    if sha256 != args.sha256.as_str() || size > MAX_ARTIFACT_BYTES {
        let _ = slot.remove(STAGING);
        let (what, signed) = ("update artifact", args.sha256.to_string());
        return Err(HelperError::DigestMismatch(what, signed, sha256));
    }
    slot.rename(STAGING, SLOT_BINARY, false)?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let now = now.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let version = args.version.to_string();
    let record = UpdateRecord::trial(args.update_id, version, sha256, current, now);
    let text = serde_json::to_vec_pretty(&record).unwrap_or_default();
    let mut file = slots.create(".update.json.new", 0o644, false)?;
    let written = file.write_all(&text).and_then(|()| file.sync_all());
    written.map_err(io_error("write", slots.path.join(RECORD_FILE)))?;
    slots.rename(".update.json.new", RECORD_FILE, false)?;
    slots.remove(".current.new")?;
    rustix::fs::symlinkat(record.trial.as_str(), &slots.fd, ".current.new")
        .map_err(io_error("symlink", slots.path.join(CURRENT_LINK)))?;
    slots.rename(".current.new", CURRENT_LINK, false)?;
    Ok(staged(&record, size, false))
}

fn staged(record: &UpdateRecord, size: u64, already_staged: bool) -> Output {
    Output::AgentUpdateStaged {
        slot: record.trial.as_str().into(),
        previous: record.good.as_str().into(),
        version: record.version.clone(),
        sha256: record.sha256.clone(),
        size,
        already_staged,
    }
}

/// The update record, if there is one (at most 64 KiB).
fn read_record(slots: &Dir) -> Result<Option<UpdateRecord>, HelperError> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK;
    let file = match open_file(Some(slots), Path::new(RECORD_FILE), flags) {
        Err(HelperError::NotFound(..)) => return Ok(None),
        other => other?.0,
    };
    let mut text = Vec::new();
    let read = file.take(64 * 1024).read_to_end(&mut text);
    read.map_err(io_error("read", slots.path.join(RECORD_FILE)))?;
    let unreadable = |e| HelperError::UpdateConflict(format!("{RECORD_FILE} is unreadable: {e}"));
    serde_json::from_slice(&text).map(Some).map_err(unreadable)
}

fn open_inbox(path: &Path, agent_uid: u32) -> Result<std::fs::File, HelperError> {
    let reject = |reason: String| HelperError::ArtifactRejected(path.into(), reason);
    let (file, st) = open_file(None, path, OFlags::RDONLY | OFlags::NONBLOCK)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(reject("not a regular file".into()));
    }
    if st.st_uid != agent_uid {
        return Err(reject(format!(
            "owned by uid {}, not the agent (uid {agent_uid})",
            st.st_uid
        )));
    }
    if st.st_nlink != 1 {
        return Err(reject(format!("has {} links, not 1", st.st_nlink)));
    }
    if u64::try_from(st.st_size).unwrap_or(u64::MAX) > MAX_ARTIFACT_BYTES {
        return Err(reject(format!("larger than {MAX_ARTIFACT_BYTES} bytes")));
    }
    Ok(file)
}
