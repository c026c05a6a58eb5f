//! Guest provenance, local-API token hashes and the cached desired state.

use std::collections::BTreeSet;

use bosun_proto::desired::GuestKind;
use rusqlite::{OptionalExtension, params};

use super::audit::{self, AuditEvent};
use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::operations::require_running;
use super::records::{
    AdoptedAs, CacheOutcome, CachedDesiredState, GuestProvenance, GuestToken, OpId, TokenHash,
    TokenOwner, Tombstone, identity_tag,
};
use super::store::Store;
use super::store::{from_ms, opt_u32, parse_op_id, to_ms};

pub(super) fn query_err(operation: &'static str) -> impl Fn(rusqlite::Error) -> JournalError {
    move |source| JournalError::Query { operation, source }
}

/// A `guest_provenance` row: guest id, creating op, scratch, created ms, identity, its
/// adoption's bootstrap flag when a signed `adopt` job brought it in, and its kind.
type ProvenanceRow = (
    Option<String>,
    String,
    i64,
    i64,
    Option<String>,
    Option<i64>,
    Option<String>,
);

/// The kind a `guest_provenance` row records (every row has one since schema version 33).
fn kind_of_row(value: Option<String>) -> Result<GuestKind, JournalError> {
    match value.as_deref() {
        Some("lxc") => Ok(GuestKind::Lxc),
        Some("qemu") => Ok(GuestKind::Qemu),
        _ => Err(JournalError::Corrupt {
            table: "guest_provenance",
            column: "kind",
            value: value.unwrap_or_default(),
        }),
    }
}

fn provenance_in(
    tx: &rusqlite::Connection,
    vmid: u32,
) -> Result<Option<GuestProvenance>, JournalError> {
    // Cached: the reconciler reads provenance on every pass.
    let mut stmt = tx
        .prepare_cached(&format!("{SELECT_PROVENANCE} WHERE p.vmid = ?1"))
        .map_err(query_err("read guest provenance"))?;
    let row = stmt
        .query_row([vmid], provenance_row)
        .optional()
        .map_err(query_err("read guest provenance"))?;
    row.map(into_provenance).transpose()
}

/// A provenance row with its adoption, as [`provenance_row`] reads it.
const SELECT_PROVENANCE: &str =
    "SELECT p.vmid, p.guest_id, p.created_by_op, p.scratch, p.created_ms,
            p.identity, a.bootstrap, p.kind
     FROM guest_provenance p LEFT JOIN adopted_guests a ON a.guest_id = p.guest_id";

fn provenance_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(u32, ProvenanceRow)> {
    Ok((
        row.get(0)?,
        (
            row.get(1)?,
            row.get(2)?,
            row.get(3)?,
            row.get(4)?,
            row.get(5)?,
            row.get(6)?,
            row.get(7)?,
        ),
    ))
}

fn into_provenance(
    (vmid, (guest_id, created_by_op, scratch, created_ms, identity, bootstrap, kind)): (
        u32,
        ProvenanceRow,
    ),
) -> Result<GuestProvenance, JournalError> {
    const T: &str = "guest_provenance";
    let created_by_op = parse_op_id(created_by_op, T)?;
    let adopted = bootstrap.map(|b| {
        if b != 0 {
            AdoptedAs::WithBootstrap
        } else {
            AdoptedAs::WithoutBootstrap
        }
    });
    Ok(GuestProvenance {
        vmid,
        guest_id,
        created_by_op,
        scratch: scratch != 0,
        created_at: from_ms(created_ms, T, "created_ms")?,
        identity: identity.unwrap_or_else(|| identity_tag(created_by_op)),
        adopted,
        kind: kind_of_row(kind)?,
    })
}

/// A new guest's provenance row of `kind`, inside `tx`: refused if the vmid already has one.
/// `event` is audited with the op, vmid, guest and kind filled in.
#[expect(
    clippy::too_many_arguments,
    reason = "the row's columns and its audit event, as they are"
)]
pub(super) fn insert_provenance(
    tx: &rusqlite::Transaction<'_>,
    now: jiff::Timestamp,
    op_id: OpId,
    vmid: u32,
    guest_id: Option<&str>,
    scratch: bool,
    kind: GuestKind,
    mut event: AuditEvent,
    what: &'static str,
) -> Result<(), JournalError> {
    require_running(tx, op_id)?;
    if let Some(existing) = provenance_in(tx, vmid)? {
        return Err(JournalError::VmidAlreadyRecorded {
            vmid,
            created_by_op: existing.created_by_op,
        });
    }
    tx.execute(
        "INSERT INTO guest_provenance
             (vmid, guest_id, created_by_op, scratch, created_ms, identity, kind)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            vmid,
            guest_id,
            op_id.to_string(),
            i64::from(scratch),
            to_ms(now),
            identity_tag(op_id),
            kind.as_str()
        ],
    )
    .map_err(query_err(what))?;
    event.op_id = Some(op_id);
    event.vmid = Some(vmid);
    event.guest_id = guest_id.map(str::to_owned);
    if let Some(detail) = event.detail.as_object_mut() {
        detail.insert("kind".into(), kind.as_str().into());
    } else if event.detail.is_null() {
        event.detail = serde_json::json!({ "kind": kind.as_str() });
    }
    audit::append(tx, now, &event)?;
    Ok(())
}

impl Store {
    /// Records that operation `op_id` is creating guest `vmid`, a guest of `kind`. Call it
    /// at the create step's intent, *before* the Proxmox call: a guest that never
    /// appears costs a stale row; a guest that appears without a row could
    /// never be cleaned up without an operator signature.
    pub fn record_created(
        &mut self,
        op_id: OpId,
        vmid: u32,
        guest_id: Option<&str>,
        kind: GuestKind,
    ) -> Result<(), JournalError> {
        let now = self.now();
        self.write("record guest provenance", |tx| {
            let event = AuditEvent::new("guest.create_recorded");
            insert_provenance(
                tx,
                now,
                op_id,
                vmid,
                guest_id,
                false,
                kind,
                event,
                "record guest provenance",
            )
        })
    }

    /// Records that running operation `op_id` is about to create scratch guest `vmid` (a
    /// restore test's) of `kind`, scratch from its first moment: no pass ever sees it as a
    /// guest of its own, and only this record lets the agent destroy it unsigned.
    pub fn record_scratch(
        &mut self,
        op_id: OpId,
        vmid: u32,
        kind: GuestKind,
    ) -> Result<(), JournalError> {
        let now = self.now();
        self.write("record scratch guest", |tx| {
            let event = AuditEvent::new("guest.marked_scratch");
            insert_provenance(
                tx,
                now,
                op_id,
                vmid,
                None,
                true,
                kind,
                event,
                "record scratch guest",
            )
        })
    }

    /// Moves lost guest `guest_id`'s record from `lost_vmid` to `vmid`, which running
    /// operation `op_id` (a DR restore of an archive of `kind`) is about to create: the new
    /// guest is the same customer guest, bound to this operation's identity. The lost note
    /// stays until the restore has finished ([`Store::clear_lost`]), so a DR that fails and
    /// rolls back leaves the guest lost, never free to be provisioned blank. A guest is
    /// never recovered as the other kind: refused when the journal records the lost guest as
    /// another kind than `kind`.
    pub fn record_recovered(
        &mut self,
        op_id: OpId,
        guest_id: &str,
        lost_vmid: u32,
        vmid: u32,
        kind: GuestKind,
    ) -> Result<(), JournalError> {
        let now = self.now();
        self.write("record recovered guest", |tx| {
            require_running(tx, op_id)?;
            if let Some(old) = provenance_in(tx, lost_vmid)?
                && old.guest_id.as_deref() == Some(guest_id)
            {
                if old.kind != kind {
                    return Err(JournalError::KindChanged {
                        guest_id: guest_id.to_owned(),
                        recorded: old.kind.as_str(),
                        asked: kind.as_str(),
                    });
                }
                tx.execute("DELETE FROM guest_provenance WHERE vmid = ?1", [lost_vmid])
                    .map_err(query_err("record recovered guest"))?;
            }
            let mut event = AuditEvent::new("guest.recovery_recorded");
            event.detail = serde_json::json!({ "lost_vmid": lost_vmid });
            insert_provenance(
                tx,
                now,
                op_id,
                vmid,
                Some(guest_id),
                false,
                kind,
                event,
                "record recovered guest",
            )
        })
    }

    /// Marks guest `vmid` scratch (a restore-test guest). Only the running
    /// operation that created it may do so: no other path, and nothing the hub
    /// or Proxmox says, can make a guest scratch.
    pub fn mark_scratch(&mut self, op_id: OpId, vmid: u32) -> Result<(), JournalError> {
        let now = self.now();
        self.write("mark guest scratch", |tx| {
            require_running(tx, op_id)?;
            match provenance_in(tx, vmid)? {
                None => {
                    return Err(JournalError::ScratchRefused {
                        vmid,
                        op_id,
                        created_by_op: None,
                    });
                }
                Some(p) if p.created_by_op != op_id => {
                    return Err(JournalError::ScratchRefused {
                        vmid,
                        op_id,
                        created_by_op: Some(p.created_by_op),
                    });
                }
                Some(_) => {}
            }
            tx.execute(
                "UPDATE guest_provenance SET scratch = 1 WHERE vmid = ?1",
                [vmid],
            )
            .map_err(query_err("mark guest scratch"))?;
            let mut event = AuditEvent::new("guest.marked_scratch");
            event.op_id = Some(op_id);
            event.vmid = Some(vmid);
            audit::append(tx, now, &event)?;
            Ok(())
        })
    }

    /// What the journal knows about guest `vmid`; `None` for a guest the agent
    /// did not create (treat it as holding customer data).
    pub fn provenance(&self, vmid: u32) -> Result<Option<GuestProvenance>, JournalError> {
        provenance_in(&self.conn, vmid)
    }

    /// Every guest the journal knows the agent created, by vmid.
    pub fn all_provenance(&self) -> Result<Vec<GuestProvenance>, JournalError> {
        // One statement for every row (the reconciler and the report read this each pass).
        let mut stmt = self
            .conn
            .prepare_cached(&format!("{SELECT_PROVENANCE} ORDER BY p.vmid"))
            .map_err(query_err("list guest provenance"))?;
        let rows = stmt
            .query_map([], provenance_row)
            .map_err(query_err("list guest provenance"))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(into_provenance(
                row.map_err(query_err("list guest provenance"))?,
            )?);
        }
        Ok(out)
    }

    /// Drops guest `vmid`'s provenance after operation `op_id` destroyed it,
    /// so a later guest reusing the vmid starts with none.
    pub fn forget_guest(&mut self, op_id: OpId, vmid: u32) -> Result<bool, JournalError> {
        let now = self.now();
        self.write("forget guest", |tx| {
            require_running(tx, op_id)?;
            let removed = tx
                .execute("DELETE FROM guest_provenance WHERE vmid = ?1", [vmid])
                .map_err(query_err("forget guest"))?;
            // An adoption this operation recorded goes with its row (a failed adopt job).
            tx.execute(
                "DELETE FROM adopted_guests WHERE op_id = ?1",
                [op_id.to_string()],
            )
            .map_err(query_err("forget guest"))?;
            if removed > 0 {
                let mut event = AuditEvent::new("guest.forgotten");
                event.op_id = Some(op_id);
                event.vmid = Some(vmid);
                audit::append(tx, now, &event)?;
            }
            Ok(removed > 0)
        })
    }

    /// Drops guest `vmid`'s provenance after a signed decommission (operation `op_id`)
    /// destroyed it, and leaves a tombstone for its guest id in the same transaction:
    /// a later job for that guest is refused, never re-targeted to whatever holds the
    /// vmid next, and desired state never provisions it again. Its addresses go back to the
    /// pool.
    pub fn retire_guest(&mut self, op_id: OpId, vmid: u32) -> Result<bool, JournalError> {
        let now = self.now();
        self.write("retire guest", |tx| {
            require_running(tx, op_id)?;
            let guest_id = provenance_in(tx, vmid)?.and_then(|p| p.guest_id);
            let removed = tx
                .execute("DELETE FROM guest_provenance WHERE vmid = ?1", [vmid])
                .map_err(query_err("retire guest"))?;
            if let Some(guest_id) = &guest_id {
                tx.execute(
                    "INSERT INTO guest_tombstones (guest_id, vmid, op_id, gone_ms)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (guest_id) DO NOTHING",
                    params![guest_id, vmid, op_id.to_string(), to_ms(now)],
                )
                .map_err(query_err("retire guest"))?;
                // Its addresses go back to the pool (decision 0101).
                tx.execute(
                    "DELETE FROM guest_addresses WHERE guest_id = ?1",
                    params![guest_id],
                )
                .map_err(query_err("retire guest"))?;
            }
            let mut event = AuditEvent::new("guest.retired");
            event.op_id = Some(op_id);
            event.vmid = Some(vmid);
            event.guest_id.clone_from(&guest_id);
            audit::append(tx, now, &event)?;
            Ok(removed > 0)
        })
    }

    /// Every guest a signed decommission destroyed.
    pub fn tombstones(&self) -> Result<Vec<Tombstone>, JournalError> {
        const T: &str = "guest_tombstones";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT guest_id, vmid, op_id, gone_ms FROM guest_tombstones ORDER BY gone_ms",
            )
            .map_err(query_err("list tombstones"))?;
        let rows: Vec<(String, i64, String, i64)> = stmt
            .query_map([], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .map_err(query_err("list tombstones"))?
            .collect::<Result<_, _>>()
            .map_err(query_err("list tombstones"))?;
        rows.into_iter()
            .map(|(guest_id, vmid, op_id, gone_ms)| {
                Ok(Tombstone {
                    guest_id,
                    vmid: opt_u32(Some(vmid), T, "vmid")?.unwrap_or_default(),
                    op_id: parse_op_id(op_id, T)?,
                    gone_at: from_ms(gone_ms, T, "gone_ms")?,
                })
            })
            .collect()
    }

    /// Stores the hash of guest `guest_id`'s local-API token, replacing any
    /// earlier one (one token per guest, last write wins).
    pub fn store_token_hash(
        &mut self,
        guest_id: &str,
        vmid: u32,
        hash: &TokenHash,
    ) -> Result<(), JournalError> {
        let now = self.now();
        self.write("store token hash", |tx| {
            let owner: Option<String> = tx
                .query_row(
                    "SELECT guest_id FROM local_api_tokens WHERE token_sha256 = ?1",
                    [hash.as_bytes().as_slice()],
                    |row| row.get(0),
                )
                .optional()
                .map_err(query_err("store token hash"))?;
            if let Some(owner) = owner
                && owner != guest_id
            {
                return Err(JournalError::TokenCollision {
                    guest_id: guest_id.to_owned(),
                });
            }
            tx.execute(
                "INSERT INTO local_api_tokens (guest_id, vmid, token_sha256, minted_ms)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (guest_id) DO UPDATE SET
                     vmid = excluded.vmid,
                     token_sha256 = excluded.token_sha256,
                     minted_ms = excluded.minted_ms",
                params![guest_id, vmid, hash.as_bytes().as_slice(), to_ms(now)],
            )
            .map_err(query_err("store token hash"))?;
            let mut event = AuditEvent::new("token.minted");
            event.guest_id = Some(guest_id.to_owned());
            event.vmid = Some(vmid);
            audit::append(tx, now, &event)?;
            Ok(())
        })
    }

    /// The guest a token hash belongs to, if any.
    pub fn token_owner(&self, hash: &TokenHash) -> Result<Option<TokenOwner>, JournalError> {
        let row: Option<(String, i64)> = self
            .conn
            .query_row(
                "SELECT guest_id, vmid FROM local_api_tokens WHERE token_sha256 = ?1",
                [hash.as_bytes().as_slice()],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(query_err("read token owner"))?;
        row.map(|(guest_id, vmid)| {
            let vmid = opt_u32(Some(vmid), "local_api_tokens", "vmid")?.unwrap_or_default();
            Ok(TokenOwner { guest_id, vmid })
        })
        .transpose()
    }

    /// The token guest `guest_id` holds, if any: when it was minted and for which vmid.
    pub fn token_of_guest(&self, guest_id: &str) -> Result<Option<GuestToken>, JournalError> {
        const T: &str = "local_api_tokens";
        let row: Option<(i64, i64)> = self
            .conn
            .query_row(
                "SELECT vmid, minted_ms FROM local_api_tokens WHERE guest_id = ?1",
                [guest_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(query_err("read guest token"))?;
        row.map(|(vmid, minted_ms)| {
            Ok(GuestToken {
                vmid: opt_u32(Some(vmid), T, "vmid")?.unwrap_or_default(),
                minted_at: from_ms(minted_ms, T, "minted_ms")?,
            })
        })
        .transpose()
    }

    /// The guests that hold a token: one read for a whole reconcile pass, however many guests
    /// it looks at.
    pub fn guests_with_tokens(&self) -> Result<BTreeSet<String>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT guest_id FROM local_api_tokens")
            .map_err(query_err("list guests with tokens"))?;
        let rows = stmt
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(query_err("list guests with tokens"))?;
        rows.collect::<Result<_, _>>()
            .map_err(query_err("list guests with tokens"))
    }

    /// Revokes guest `guest_id`'s token; returns whether it had one.
    pub fn revoke_token(&mut self, guest_id: &str) -> Result<bool, JournalError> {
        let now = self.now();
        self.write("revoke token", |tx| {
            let removed = tx
                .execute(
                    "DELETE FROM local_api_tokens WHERE guest_id = ?1",
                    [guest_id],
                )
                .map_err(query_err("revoke token"))?;
            // The keys went with the bootstrap the token was in.
            tx.execute("DELETE FROM guest_access WHERE guest_id = ?1", [guest_id])
                .map_err(query_err("revoke token"))?;
            if removed > 0 {
                let mut event = AuditEvent::new("token.revoked");
                event.guest_id = Some(guest_id.to_owned());
                audit::append(tx, now, &event)?;
            }
            Ok(removed > 0)
        })
    }

    /// Caches the desired state the agent is about to act on, whatever the cached
    /// generation: what the agent acts on and what it caches are the same document (a
    /// lower generation is a hub reset, see [`CacheOutcome::Reset`]). `body` is kept
    /// exactly as received.
    pub fn cache_desired_state(
        &mut self,
        generation: u64,
        body: &str,
    ) -> Result<CacheOutcome, JournalError> {
        self.cache_correlated_desired_state(generation, body, None)
    }

    /// Caches a desired state with the operator's correlation id the hub sent with it (see
    /// [`Store::cache_desired_state`]).
    pub fn cache_correlated_desired_state(
        &mut self,
        generation: u64,
        body: &str,
        correlation_id: Option<&str>,
    ) -> Result<CacheOutcome, JournalError> {
        let now = self.now();
        let generation_sql = i64::try_from(generation)
            .map_err(|_| JournalError::GenerationTooLarge { generation })?;
        self.write("cache desired state", |tx| {
            let cached: Option<i64> = tx
                .query_row(
                    "SELECT generation FROM desired_state WHERE id = 1",
                    [],
                    |row| row.get(0),
                )
                .optional()
                .map_err(query_err("cache desired state"))?;
            let outcome = match cached {
                Some(cached) if cached > generation_sql => CacheOutcome::Reset {
                    previous: u64::try_from(cached).unwrap_or_default(),
                },
                _ => CacheOutcome::Stored,
            };
            tx.execute(
                "INSERT INTO desired_state (id, generation, body, stored_ms, correlation_id)
                 VALUES (1, ?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET
                     generation = excluded.generation,
                     body = excluded.body,
                     stored_ms = excluded.stored_ms,
                     correlation_id = excluded.correlation_id",
                params![generation_sql, body, to_ms(now), correlation_id],
            )
            .map_err(query_err("cache desired state"))?;
            Ok(outcome)
        })
    }

    /// The cached desired state, if any was ever received.
    pub fn cached_desired_state(&self) -> Result<Option<CachedDesiredState>, JournalError> {
        const T: &str = "desired_state";
        let row: Option<(i64, String, i64, Option<String>)> = self
            .conn
            .query_row(
                "SELECT generation, body, stored_ms, correlation_id FROM desired_state WHERE id = 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )
            .optional()
            .map_err(query_err("read desired state"))?;
        row.map(|(generation, body, stored_ms, correlation_id)| {
            Ok(CachedDesiredState {
                generation: u64::try_from(generation).map_err(|_| JournalError::Corrupt {
                    table: T,
                    column: "generation",
                    value: generation.to_string(),
                })?,
                body,
                correlation_id,
                stored_at: from_ms(stored_ms, T, "stored_ms")?,
            })
        })
        .transpose()
    }
}

journal_calls! {
    /// See [`Store::record_scratch`].
    fn record_scratch(op_id: OpId, vmid: u32, kind: GuestKind) -> ()
        = |s| s.record_scratch(op_id, vmid, kind);
    /// See [`Store::mark_scratch`].
    fn mark_scratch(op_id: OpId, vmid: u32) -> () = |s| s.mark_scratch(op_id, vmid);
    /// See [`Store::provenance`].
    fn provenance(vmid: u32) -> Option<GuestProvenance> = |s| s.provenance(vmid);
    /// See [`Store::all_provenance`].
    fn all_provenance() -> Vec<GuestProvenance> = |s| s.all_provenance();
    /// See [`Store::tombstones`].
    fn tombstones() -> Vec<Tombstone> = |s| s.tombstones();
    /// See [`Store::store_token_hash`].
    fn store_token_hash(guest_id: String, vmid: u32, hash: TokenHash) -> ()
        = |s| s.store_token_hash(&guest_id, vmid, &hash);
    /// See [`Store::token_owner`].
    fn token_owner(hash: TokenHash) -> Option<TokenOwner> = |s| s.token_owner(&hash);
    /// See [`Store::token_of_guest`].
    fn token_of_guest(guest_id: String) -> Option<GuestToken> = |s| s.token_of_guest(&guest_id);
    /// See [`Store::guests_with_tokens`].
    fn guests_with_tokens() -> BTreeSet<String> = |s| s.guests_with_tokens();
    /// See [`Store::revoke_token`].
    fn revoke_token(guest_id: String) -> bool = |s| s.revoke_token(&guest_id);
    /// See [`Store::cache_desired_state`].
    fn cache_desired_state(generation: u64, body: String) -> CacheOutcome
        = |s| s.cache_desired_state(generation, &body);
    /// See [`Store::cached_desired_state`].
    fn cached_desired_state() -> Option<CachedDesiredState> = |s| s.cached_desired_state();
    /// See [`Store::cache_correlated_desired_state`].
    fn cache_correlated_desired_state(
        generation: u64,
        body: String,
        correlation_id: Option<String>,
    ) -> CacheOutcome
        = |s| s.cache_correlated_desired_state(generation, &body, correlation_id.as_deref());
}
