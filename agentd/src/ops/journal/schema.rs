//! The journal's schema and its migrations.
//!
//! The schema version lives in SQLite's `user_version`. Each migration runs in
//! its own transaction together with the version bump, so a crash leaves the
//! database at one version or the next, never in between. A database newer
//! than this agent is refused rather than guessed at.

use rusqlite::Connection;

use super::error::JournalError;

/// Migrations in order; migration `i` brings the schema to version `i + 1`.
const MIGRATIONS: &[&str] = &[
    // Version 1.
    r#"
CREATE TABLE operations (
    op_id       TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    guest_id    TEXT,
    vmid        INTEGER,
    job_id      TEXT,
    request_id  TEXT,
    status      TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'compensated')),
    error       TEXT,
    started_ms  INTEGER NOT NULL,
    ended_ms    INTEGER
) STRICT;
CREATE INDEX operations_running ON operations (status) WHERE status = 'running';

CREATE TABLE op_steps (
    op_id       TEXT NOT NULL REFERENCES operations (op_id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    name        TEXT NOT NULL,
    detail      TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('intent', 'sent', 'ok', 'failed')),
    upid        TEXT,
    warnings    INTEGER,
    error       TEXT,
    intent_ms   INTEGER NOT NULL,
    sent_ms     INTEGER,
    ended_ms    INTEGER,
    PRIMARY KEY (op_id, seq)
) STRICT;

CREATE TABLE job_runs (
    job_id              TEXT PRIMARY KEY,
    kind                TEXT NOT NULL,
    op_id               TEXT REFERENCES operations (op_id),
    signer_fingerprint  TEXT NOT NULL,
    principals          TEXT NOT NULL,
    started_ms          INTEGER NOT NULL,
    ended_ms            INTEGER,
    outcome             TEXT CHECK (outcome IS NULL OR outcome IN ('succeeded', 'failed')),
    detail              TEXT
) STRICT;

CREATE TABLE nonces (
    nonce       TEXT PRIMARY KEY,
    job_id      TEXT NOT NULL,
    seen_ms     INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL
) STRICT;

CREATE TABLE guest_provenance (
    vmid            INTEGER PRIMARY KEY CHECK (vmid > 0),
    guest_id        TEXT,
    created_by_op   TEXT NOT NULL REFERENCES operations (op_id),
    scratch         INTEGER NOT NULL DEFAULT 0 CHECK (scratch IN (0, 1)),
    created_ms      INTEGER NOT NULL
) STRICT;

CREATE TABLE local_api_tokens (
    guest_id        TEXT PRIMARY KEY,
    vmid            INTEGER NOT NULL,
    token_sha256    BLOB NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    minted_ms       INTEGER NOT NULL
) STRICT;

CREATE TABLE desired_state (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    generation  INTEGER NOT NULL CHECK (generation >= 0),
    body        TEXT NOT NULL,
    stored_ms   INTEGER NOT NULL
) STRICT;

CREATE TABLE audit_log (
    seq         INTEGER PRIMARY KEY,
    at_ms       INTEGER NOT NULL,
    event       TEXT NOT NULL,
    op_id       TEXT,
    job_id      TEXT,
    guest_id    TEXT,
    vmid        INTEGER,
    request_id  TEXT,
    detail      TEXT NOT NULL,
    prev_hash   BLOB NOT NULL CHECK (length(prev_hash) = 32),
    hash        BLOB NOT NULL CHECK (length(hash) = 32)
) STRICT;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
    BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
    BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
"#,
    // Version 2: the job-result outbox. A result is written before it is
    // sent and marked delivered only once the hub acknowledged it, so a
    // result survives a crash between the job's end and its delivery.
    r#"
CREATE TABLE job_results (
    job_id        TEXT PRIMARY KEY,
    body          TEXT NOT NULL,
    created_ms    INTEGER NOT NULL,
    delivered_ms  INTEGER
) STRICT;
CREATE INDEX job_results_undelivered ON job_results (created_ms) WHERE delivered_ms IS NULL;
"#,
    // Version 3: how each backup ended, per guest and storage, for the hub's
    // "last backup" (recorded with the end of its operation). Backups journaled
    // before this version are carried over from their `vzdump` step, without an
    // archive or size (those were not recorded).
    r#"
CREATE TABLE backup_outcomes (
    op_id        TEXT PRIMARY KEY REFERENCES operations (op_id),
    guest_id     TEXT NOT NULL,
    vmid         INTEGER,
    storage      TEXT NOT NULL,
    ok           INTEGER NOT NULL CHECK (ok IN (0, 1)),
    archive      TEXT,
    size_bytes   INTEGER CHECK (size_bytes IS NULL OR size_bytes >= 0),
    finished_ms  INTEGER NOT NULL
) STRICT;
CREATE INDEX backup_outcomes_newest ON backup_outcomes (guest_id, storage, finished_ms);
INSERT INTO backup_outcomes (op_id, guest_id, vmid, storage, ok, finished_ms)
    SELECT o.op_id, o.guest_id, o.vmid, json_extract(s.detail, '$.storage'),
           o.status = 'done', o.ended_ms
    FROM operations o JOIN op_steps s ON s.op_id = o.op_id AND s.name = 'vzdump'
    WHERE o.kind = 'backup' AND o.status IN ('done', 'failed')
      AND o.guest_id IS NOT NULL AND o.ended_ms IS NOT NULL
      AND json_valid(s.detail) AND json_type(s.detail, '$.storage') = 'text';
"#,
    // Version 4: audit retention. The hub's acknowledged row and the pruned prefix of the
    // chain (the last pruned row and its hash, the anchor the rest is verified from). Rows
    // may be deleted only oldest first, up to the anchor, and never past what the hub acked.
    // Written to be re-runnable (a database whose version was set back by hand).
    r#"
CREATE TABLE IF NOT EXISTS audit_retention (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    acked_seq    INTEGER NOT NULL CHECK (acked_seq >= 0),
    pruned_seq   INTEGER NOT NULL CHECK (pruned_seq >= 0),
    pruned_hash  BLOB NOT NULL CHECK (length(pruned_hash) = 32)
) STRICT;
INSERT OR IGNORE INTO audit_retention (id, acked_seq, pruned_seq, pruned_hash) VALUES (1, 0, 0, zeroblob(32));
CREATE TRIGGER IF NOT EXISTS audit_retention_forward BEFORE UPDATE ON audit_retention
    WHEN NEW.acked_seq < OLD.acked_seq OR NEW.pruned_seq < OLD.pruned_seq
      OR NEW.pruned_seq > NEW.acked_seq
    BEGIN SELECT RAISE(ABORT, 'audit retention only moves forward, behind the acknowledged row'); END;
CREATE TRIGGER IF NOT EXISTS audit_retention_no_delete BEFORE DELETE ON audit_retention
    BEGIN SELECT RAISE(ABORT, 'audit_retention is kept'); END;
DROP TRIGGER IF EXISTS audit_log_no_delete;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
    WHEN OLD.seq > (SELECT pruned_seq FROM audit_retention WHERE id = 1)
    BEGIN SELECT RAISE(ABORT, 'audit_log is append-only; rows are pruned oldest first once acknowledged'); END;
"#,
    // Version 5: golden archives of known provenance, each with the SHA-256 the helper
    // computed by reading the file; provisioning restores nothing else.
    r#"
CREATE TABLE golden_archives (
    volid     TEXT PRIMARY KEY,
    sha256    TEXT NOT NULL CHECK (length(sha256) = 64 AND sha256 NOT GLOB '*[^0-9a-f]*'),
    source    TEXT NOT NULL CHECK (source IN ('built', 'signed')),
    built_ms  INTEGER NOT NULL
) STRICT;
"#,
    // Version 6: guest identity and tombstones (DESIGN §5). `identity` is the tag the
    // agent wrote into the guest's Proxmox config when it created it (its creating
    // operation's tag, `bosun-op-<op id>`, written by every provisioning restore since
    // version 1, so rows from before this version are filled in from `created_by_op`).
    // A decommissioned guest leaves a tombstone: a later job for it is refused and its
    // desired-state entry is never provisioned again.
    r#"
ALTER TABLE guest_provenance ADD COLUMN identity TEXT;
UPDATE guest_provenance SET identity = 'bosun-op-' || replace(created_by_op, '-', '')
    WHERE identity IS NULL;
CREATE TABLE guest_tombstones (
    guest_id  TEXT PRIMARY KEY,
    vmid      INTEGER NOT NULL,
    op_id     TEXT NOT NULL REFERENCES operations (op_id),
    gone_ms   INTEGER NOT NULL
) STRICT;
"#,
    // Version 7: backup tiers and the signed retention floor. Each outcome names the
    // target it is reported under (a manifest `durable_id`; NULL: the storage id), its
    // tier, vzdump's warnings, whether the archive is encrypted, why it failed and when it
    // started. `retention_floor` holds the newest operator-signed floor the agent verified
    // (the exact signed bytes and signature, so it can be shown and checked again).
    r#"
ALTER TABLE backup_outcomes ADD COLUMN target TEXT;
ALTER TABLE backup_outcomes ADD COLUMN tier INTEGER CHECK (tier IS NULL OR tier >= 0);
ALTER TABLE backup_outcomes ADD COLUMN warnings INTEGER NOT NULL DEFAULT 0 CHECK (warnings >= 0);
ALTER TABLE backup_outcomes ADD COLUMN encrypted INTEGER NOT NULL DEFAULT 0 CHECK (encrypted IN (0, 1));
ALTER TABLE backup_outcomes ADD COLUMN error TEXT;
ALTER TABLE backup_outcomes ADD COLUMN started_ms INTEGER;
CREATE INDEX backup_outcomes_good ON backup_outcomes (guest_id, storage, ok, finished_ms);
CREATE TABLE retention_floor (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    document     BLOB NOT NULL,
    signature    TEXT NOT NULL,
    issued_ms    INTEGER NOT NULL,
    signer       TEXT NOT NULL,
    accepted_ms  INTEGER NOT NULL
) STRICT;
"#,
    // Version 8: restore tests (how each ended, per guest and tier storage) and the guests
    // found lost, with when they were first found so (the start of a DR's RTO). Re-runnable.
    r#"
CREATE TABLE IF NOT EXISTS restore_tests (
    op_id        TEXT PRIMARY KEY REFERENCES operations (op_id),
    guest_id     TEXT NOT NULL,
    storage      TEXT NOT NULL,
    archive      TEXT,
    outcome      TEXT NOT NULL CHECK (outcome IN ('passed', 'failed', 'interrupted')),
    duration_ms  INTEGER NOT NULL CHECK (duration_ms >= 0),
    detail       TEXT,
    finished_ms  INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS restore_tests_newest ON restore_tests (guest_id, storage, finished_ms);
CREATE TABLE IF NOT EXISTS lost_guests (
    guest_id     TEXT PRIMARY KEY,
    vmid         INTEGER NOT NULL,
    detected_ms  INTEGER NOT NULL
) STRICT;
"#,
    // Version 9: correlation ids. The operator's id of a desired-state generation (sent by the
    // hub with the document) is cached with the document and recorded on the operations the
    // generation causes; NULL for everything before, and for work no generation caused. The
    // hub is sent the newest operations, hence the index by start.
    r#"
ALTER TABLE operations ADD COLUMN correlation_id TEXT;
ALTER TABLE desired_state ADD COLUMN correlation_id TEXT;
CREATE INDEX operations_by_start ON operations (started_ms);
"#,
    // Version 10: the controller each guest should run, as the last signed controller-update
    // job left it (`digest`: announced to the guest; `running_digest`: the last one that
    // reported healthy), and the in-place restarts since its last healthy report.
    r#"
CREATE TABLE IF NOT EXISTS controllers (
    guest_id        TEXT PRIMARY KEY,
    vmid            INTEGER NOT NULL,
    digest          TEXT,
    running_digest  TEXT,
    state           TEXT NOT NULL CHECK (state IN ('rolling_out', 'running', 'rolled_back', 'broken')),
    op_id           TEXT,
    restarts        INTEGER NOT NULL DEFAULT 0 CHECK (restarts >= 0),
    updated_ms      INTEGER NOT NULL
) STRICT;
"#,
    // Version 11: break-glass doors (each signed `break-glass-enable` that opened the
    // emergency SSH door, for which key and until when, and how the door closed) and the
    // provenance of golden builds: a build's size, the golden (recipe) version it was built
    // for and the controller digest baked into it; NULL for archives recorded before and
    // for signed archives.
    r#"
ALTER TABLE golden_archives ADD COLUMN size INTEGER CHECK (size IS NULL OR size >= 0);
ALTER TABLE golden_archives ADD COLUMN recipe_version TEXT;
ALTER TABLE golden_archives ADD COLUMN controller_digest TEXT;
CREATE INDEX golden_archives_by_version ON golden_archives (recipe_version, built_ms);
CREATE TABLE break_glass_doors (
    job_id       TEXT PRIMARY KEY,
    fingerprint  TEXT NOT NULL,
    reason       TEXT NOT NULL,
    signer       TEXT NOT NULL,
    opened_ms    INTEGER NOT NULL,
    expires_ms   INTEGER NOT NULL,
    closed_ms    INTEGER,
    closed_by    TEXT CHECK (closed_by IS NULL OR closed_by IN ('expiry', 'disable', 'replaced'))
) STRICT;
"#,
    // Version 12: the newest operator-signed data plan the agent verified (DESIGN §5): the
    // exact signed bytes and signature, its serial (only a higher one replaces it) and who
    // signed it.
    r#"
CREATE TABLE data_plan (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    document     BLOB NOT NULL,
    signature    TEXT NOT NULL,
    serial       INTEGER NOT NULL CHECK (serial >= 1),
    signer       TEXT NOT NULL,
    accepted_ms  INTEGER NOT NULL
) STRICT;
"#,
    // Version 13: what proves an archive is the one a backup wrote (its SHA-256, or for PBS
    // the key it is encrypted with and the binding in its notes), recorded when the backup
    // ended and checked before every restore; and each guest's MAC address as its last
    // backup saw it (a restored guest keeps an archive's MAC only if it is this one).
    r#"
ALTER TABLE backup_outcomes ADD COLUMN proof TEXT CHECK (proof IS NULL OR json_valid(proof));
CREATE TABLE guest_macs (
    guest_id     TEXT PRIMARY KEY,
    mac          TEXT NOT NULL,
    recorded_ms  INTEGER NOT NULL
) STRICT;
"#,
    // Version 14: the signature behind each golden archive an operator named (DESIGN §5: a
    // signed golden archive is restored only while its signer is still in allowed_signers).
    // The exact signed bytes and signature, with the signing key's fingerprint and
    // principals when it was admitted, so every later use verifies it again. Signed archives
    // journaled before this version carry none of it and are forgotten: the next provisioning
    // whose desired state carries their signed document admits them again, under the
    // allowed_signers of that moment. A built archive has no signature; a signed one must.
    r#"
DELETE FROM golden_archives WHERE source = 'signed';
ALTER TABLE golden_archives ADD COLUMN signed_document BLOB;
ALTER TABLE golden_archives ADD COLUMN signature TEXT;
ALTER TABLE golden_archives ADD COLUMN signer_fingerprint TEXT;
ALTER TABLE golden_archives ADD COLUMN signer_principals TEXT
    CHECK ((source = 'signed') = (signed_document IS NOT NULL AND signature IS NOT NULL
        AND signer_fingerprint IS NOT NULL AND signer_principals IS NOT NULL));
"#,
    // Version 15: restores whose answer was lost and whose landing window passed with no
    // sign of them. Proxmox may still carry one out; the row keeps its vmid reserved and
    // names the operation whose tag the guest would carry, so a later pass destroys it as
    // that operation's own creation.
    r#"
CREATE TABLE IF NOT EXISTS late_landings (
    vmid            INTEGER PRIMARY KEY,
    op_id           TEXT NOT NULL REFERENCES operations (op_id),
    guest_id        TEXT,
    asked_ms        INTEGER NOT NULL,
    watch_until_ms  INTEGER NOT NULL CHECK (watch_until_ms >= asked_ms)
) STRICT;
"#,
    // Version 16: a restore test may end `not_checked` (booted, but the guest installs no
    // restore check or no helper runs it: never a pass). SQLite cannot change a CHECK, so the
    // table is copied into one whose CHECK allows it, in its rows' order (ties in
    // `finished_ms` are broken by rowid); every stored result reads as before.
    r#"
DROP TABLE IF EXISTS restore_tests_v16;
CREATE TABLE restore_tests_v16 (
    op_id        TEXT PRIMARY KEY REFERENCES operations (op_id),
    guest_id     TEXT NOT NULL,
    storage      TEXT NOT NULL,
    archive      TEXT,
    outcome      TEXT NOT NULL
        CHECK (outcome IN ('passed', 'failed', 'interrupted', 'not_checked')),
    duration_ms  INTEGER NOT NULL CHECK (duration_ms >= 0),
    detail       TEXT,
    finished_ms  INTEGER NOT NULL
) STRICT;
INSERT INTO restore_tests_v16
    SELECT op_id, guest_id, storage, archive, outcome, duration_ms, detail, finished_ms
    FROM restore_tests ORDER BY rowid;
DROP TABLE restore_tests;
ALTER TABLE restore_tests_v16 RENAME TO restore_tests;
CREATE INDEX IF NOT EXISTS restore_tests_newest ON restore_tests (guest_id, storage, finished_ms);
"#,
    // Version 17: a guest's page of its audit log (`GET /v1/audit`) reads its own rows and
    // the host-wide break-glass rows through an index each, newest first, instead of walking
    // the whole log.
    r#"
CREATE INDEX IF NOT EXISTS audit_log_by_guest ON audit_log (guest_id, seq);
CREATE INDEX IF NOT EXISTS audit_log_by_event ON audit_log (event, seq);
"#,
    // Version 18: how far the agent has read the break-glass support shell's spool
    // (decision 0035); the commands read and the new offset are written in one transaction,
    // so each command becomes exactly one audit row.
    r#"
CREATE TABLE IF NOT EXISTS break_glass_spool (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    offset  INTEGER NOT NULL CHECK (offset >= 0)
) STRICT;
"#,
    // Version 19: a signed job's timeout, kept beside its claim so a job resumed after a
    // restart keeps its deadline (decision 0072); and the reconciler's failure counts per guest, so a
    // guest that keeps failing to start reaches `broken` across restarts and republished
    // generations (`spec` is the digest of the guest's desired spec the count was made under).
    r#"
CREATE TABLE IF NOT EXISTS job_timeouts (
    job_id      TEXT PRIMARY KEY REFERENCES job_runs (job_id),
    timeout_s   INTEGER NOT NULL CHECK (timeout_s > 0)
) STRICT;
CREATE TABLE IF NOT EXISTS guest_failures (
    guest_id    TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('start', 'recover')),
    spec        TEXT NOT NULL,
    count       INTEGER NOT NULL CHECK (count >= 0),
    updated_ms  INTEGER NOT NULL,
    PRIMARY KEY (guest_id, kind)
) STRICT;
"#,
    // Version 20: desired state has no `controller_version` any more (decision 0074: only a
    // signature chooses the controller a guest runs); a cached document that still carries
    // it loses it, so the agent keeps acting on its cache offline.
    r#"
UPDATE desired_state SET body = json_remove(body, '$.controller_version')
    WHERE json_valid(body) AND json_type(body, '$.controller_version') IS NOT NULL;
"#,
    // Version 21: guests a signed `adopt` job brought under the agent (decision 0073), by
    // guest id (it survives a DR restore to another vmid), and whether that job asked for a
    // bootstrap: one adopted without is never bootstrapped by a reconcile pass.
    r#"
CREATE TABLE IF NOT EXISTS adopted_guests (
    guest_id    TEXT PRIMARY KEY,
    op_id       TEXT NOT NULL,
    bootstrap   INTEGER NOT NULL CHECK (bootstrap IN (0, 1)),
    adopted_ms  INTEGER NOT NULL
) STRICT;
"#,
    // Version 22: the newest PBS verification of each guest's backup group per tier
    // (decision 0079), with when the group first and last verified ok.
    r#"
CREATE TABLE IF NOT EXISTS verifications (
    guest_id    TEXT NOT NULL,
    tier        TEXT NOT NULL,
    outcome     TEXT NOT NULL CHECK (outcome IN ('ok', 'failed', 'error')),
    duration_ms INTEGER NOT NULL,
    detail      TEXT NOT NULL,
    finished_ms INTEGER NOT NULL,
    last_ok_ms  INTEGER,
    last_failed_ms INTEGER,
    first_ms    INTEGER NOT NULL,
    PRIMARY KEY (guest_id, tier)
) STRICT;
"#,
    // Version 23: when a golden build passed its verification (a boot in a scratch guest);
    // guests are provisioned only from verified builds. Builds journaled before this version
    // were already in use and count as verified when they were built.
    r#"
ALTER TABLE golden_archives ADD COLUMN verified_ms INTEGER;
UPDATE golden_archives SET verified_ms = built_ms WHERE source = 'built';
"#,
    // Version 24: the golden base in the report and its pruning (decision 0083). How long a
    // build's verification took; when its archive was removed from the golden storage (the
    // row stays, as the provenance of the guests built from it) and the last failed try to;
    // the build task's last outcome.
    r#"
ALTER TABLE golden_archives ADD COLUMN verify_duration_ms INTEGER
    CHECK (verify_duration_ms IS NULL OR verify_duration_ms >= 0);
ALTER TABLE golden_archives ADD COLUMN removed_ms INTEGER;
ALTER TABLE golden_archives ADD COLUMN prune_attempts INTEGER NOT NULL DEFAULT 0
    CHECK (prune_attempts >= 0);
ALTER TABLE golden_archives ADD COLUMN prune_error TEXT;
ALTER TABLE golden_archives ADD COLUMN prune_failed_ms INTEGER;
CREATE TABLE IF NOT EXISTS golden_outcome (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    outcome  TEXT NOT NULL,
    reason   TEXT,
    version  TEXT,
    at_ms    INTEGER NOT NULL
) STRICT;
"#,
    // Version 25: each bulk volume's newest archive and newest failed attempt (decision
    // 0090), one row per (guest, volume).
    r#"
CREATE TABLE IF NOT EXISTS bulk_archives (
    guest_id    TEXT NOT NULL,
    volume      TEXT NOT NULL,
    target      TEXT,
    name        TEXT,
    size_bytes  INTEGER CHECK (size_bytes IS NULL OR size_bytes >= 0),
    sha256      TEXT,
    archived_ms INTEGER,
    error       TEXT,
    failed_ms   INTEGER,
    PRIMARY KEY (guest_id, volume)
) STRICT;
"#,
    // Version 26: the newest operator-signed credential accepted for each of the plan's
    // targets and its tunnel (decision 0095), still sealed: opened when used.
    r#"
CREATE TABLE IF NOT EXISTS held_credentials (
    subject     TEXT PRIMARY KEY,
    sealed      TEXT NOT NULL,
    issued_ms   INTEGER NOT NULL,
    digest      BLOB NOT NULL CHECK (length(digest) = 32),
    signer      TEXT NOT NULL,
    accepted_ms INTEGER NOT NULL
) STRICT;
"#,
    // Version 27: signed golden documents and recipes carry a serial that only rises
    // (decision 0092). The highest of each kind this host holds, and the serial of the
    // recipe each build was made for (builds from before this version count as serial 0).
    r#"
CREATE TABLE IF NOT EXISTS golden_serials (
    kind      TEXT PRIMARY KEY CHECK (kind IN ('golden', 'golden_recipe')),
    serial    INTEGER NOT NULL CHECK (serial >= 0),
    raised_ms INTEGER NOT NULL
) STRICT;
ALTER TABLE golden_archives ADD COLUMN recipe_serial INTEGER
    CHECK (recipe_serial IS NULL OR recipe_serial >= 0);
"#,
    // Version 28: the newest generation a reconcile pass converged to, so an agent restarted
    // while part of the current generation is refused reports what it had applied, not none.
    r#"
CREATE TABLE IF NOT EXISTS applied_generation (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    generation  INTEGER NOT NULL CHECK (generation >= 0),
    applied_ms  INTEGER NOT NULL
) STRICT;
"#,
    // Version 29: which SSH keys each guest's bootstrap carries (their SHA-256), so a plan
    // that changes a guest's keys has its bootstrap delivered again (decision 0107).
    r#"
CREATE TABLE IF NOT EXISTS guest_access (
    guest_id     TEXT PRIMARY KEY,
    keys_sha256  BLOB NOT NULL CHECK (length(keys_sha256) = 32),
    delivered_ms INTEGER NOT NULL
) STRICT;
"#,
    // Version 30: which address went to which guest (decision 0101): one per guest and family,
    // each address held by one guest only.
    r#"
CREATE TABLE IF NOT EXISTS guest_addresses (
    guest_id     TEXT NOT NULL,
    family       TEXT NOT NULL CHECK (family IN ('ipv4', 'ipv6')),
    address      TEXT NOT NULL UNIQUE,
    prefix       INTEGER NOT NULL CHECK (prefix BETWEEN 1 AND 128),
    gateway      TEXT,
    assigned_ms  INTEGER NOT NULL,
    PRIMARY KEY (guest_id, family)
) STRICT;
"#,
    // Version 31: the digest the helper last measured of each guest's controller image
    // (decision 0102), so a restarted agent reports the measurement, never the controller's
    // own word, until the next one.
    r#"
ALTER TABLE controllers ADD COLUMN measured TEXT;
"#,
    // Version 32: every bulk archive still on its target (the newest `keep_last` of each
    // volume, as the helper keeps them), so a signed `restore-bulk` may name an older one
    // (decision 0108). Seeded with each volume's newest archive.
    r#"
CREATE TABLE IF NOT EXISTS bulk_archive_history (
    guest_id    TEXT NOT NULL,
    volume      TEXT NOT NULL,
    name        TEXT NOT NULL,
    target      TEXT NOT NULL,
    size_bytes  INTEGER NOT NULL CHECK (size_bytes >= 0),
    sha256      TEXT NOT NULL,
    archived_ms INTEGER NOT NULL,
    PRIMARY KEY (guest_id, volume, name)
) STRICT;
INSERT OR IGNORE INTO bulk_archive_history
    (guest_id, volume, name, target, size_bytes, sha256, archived_ms)
    SELECT guest_id, volume, name, target, size_bytes, sha256, archived_ms FROM bulk_archives
    WHERE name IS NOT NULL AND target IS NOT NULL AND size_bytes IS NOT NULL
      AND sha256 IS NOT NULL AND archived_ms IS NOT NULL;
"#,
    // Version 33: the kind of each guest (`lxc` or `qemu`), recorded when the agent creates,
    // recovers or adopts it, so what moves data or keeps protection (the backup tiers, the
    // signed jobs) never takes it from desired state (decision 0123). Rows from before are
    // filled from the journal's own record of the operation that created the guest: a VM is
    // created by a `provision_vm` operation, whose steps name it (`check_golden` with
    // `"kind": "qemu"`, `restore_vm`); every other creation of these versions (a container's
    // provisioning, DR, adoption, a restore test's scratch guest) made a container.
    r#"
ALTER TABLE guest_provenance ADD COLUMN kind TEXT CHECK (kind IS NULL OR kind IN ('lxc', 'qemu'));
UPDATE guest_provenance SET kind = CASE
    WHEN EXISTS (
        SELECT 1 FROM operations o WHERE o.op_id = guest_provenance.created_by_op
          AND o.kind = 'provision_vm')
      OR EXISTS (
        SELECT 1 FROM op_steps s WHERE s.op_id = guest_provenance.created_by_op
          AND (s.name = 'restore_vm'
               OR (json_valid(s.detail) AND json_extract(s.detail, '$.kind') = 'qemu')))
    THEN 'qemu' ELSE 'lxc' END
    WHERE kind IS NULL;
"#,
];

/// The schema version this agent writes (the number of migrations; a test
/// keeps the two in step).
pub const SCHEMA_VERSION: i64 = 33;

/// Brings the database to [`SCHEMA_VERSION`].
pub(super) fn migrate(conn: &mut Connection) -> Result<(), JournalError> {
    let found: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|source| JournalError::Query {
            operation: "read schema version",
            source,
        })?;
    if found > SCHEMA_VERSION {
        return Err(JournalError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let version = i64::try_from(index).unwrap_or(i64::MAX).saturating_add(1);
        if version <= found {
            continue;
        }
        let migrate_err = |source| JournalError::Migrate { version, source };
        let tx = conn.transaction().map_err(migrate_err)?;
        tx.execute_batch(sql).map_err(migrate_err)?;
        tx.pragma_update(None, "user_version", version)
            .map_err(migrate_err)?;
        tx.commit().map_err(migrate_err)?;
        tracing::info!(version, "journal schema migrated");
    }
    Ok(())
}

/// Test support: turns the journal on `conn` back into what an agent of schema `version`
/// left behind, keeping its rows. The tables, columns, indexes and triggers of that version
/// are the migrations' own (run up to `version` beside it); what later migrations added is
/// dropped, so a migration test never lists what came after the version it starts from.
#[cfg(test)]
pub(super) fn rewind(conn: &Connection, version: i64) -> rusqlite::Result<()> {
    let count = usize::try_from(version).expect("a schema version");
    let old = Connection::open_in_memory()?;
    for sql in &MIGRATIONS[..count] {
        old.execute_batch(sql)?;
    }
    let tables = |c: &Connection| schema_objects(c, "table");
    let (old_tables, new_tables) = (tables(&old)?, tables(conn)?);
    conn.execute_batch("PRAGMA foreign_keys = OFF; PRAGMA legacy_alter_table = ON;")?;
    for kind in ["trigger", "index"] {
        for name in schema_objects(conn, kind)?.keys() {
            conn.execute_batch(&format!("DROP {kind} \"{name}\";"))?;
        }
    }
    for (name, sql) in &new_tables {
        match old_tables.get(name) {
            None => conn.execute_batch(&format!("DROP TABLE \"{name}\";"))?,
            Some(old_sql) if old_sql == sql => {}
            Some(old_sql) => {
                let kept: Vec<String> = columns(conn, name)?
                    .into_iter()
                    .filter(|c| columns(&old, name).is_ok_and(|old| old.contains(c)))
                    .map(|c| format!("\"{c}\""))
                    .collect();
                let kept = kept.join(", ");
                conn.execute_batch(&format!(
                    "ALTER TABLE \"{name}\" RENAME TO \"{name}__newer\";
                     {old_sql};
                     INSERT INTO \"{name}\" ({kept}) SELECT {kept} FROM \"{name}__newer\";
                     DROP TABLE \"{name}__newer\";"
                ))?;
            }
        }
    }
    for kind in ["index", "trigger"] {
        for sql in schema_objects(&old, kind)?.values() {
            conn.execute_batch(sql)?;
        }
    }
    conn.execute_batch(&format!(
        "PRAGMA user_version = {version}; PRAGMA legacy_alter_table = OFF; PRAGMA foreign_keys = ON;"
    ))
}

/// The schema's own objects of one kind (`table`, `index`, `trigger`): name → SQL.
#[cfg(test)]
fn schema_objects(
    conn: &Connection,
    kind: &str,
) -> rusqlite::Result<std::collections::BTreeMap<String, String>> {
    let mut statement = conn.prepare(
        "SELECT name, sql FROM sqlite_master
         WHERE type = ?1 AND sql IS NOT NULL AND name NOT LIKE 'sqlite_%'",
    )?;
    let rows = statement.query_map([kind], |row| Ok((row.get(0)?, row.get(1)?)))?;
    rows.collect()
}

/// A table's column names.
#[cfg(test)]
fn columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut statement = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
    let rows = statement.query_map([table], |row| row.get(0))?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema of a journal migrated to the end and rewound to each version is the one
    /// the migrations up to that version make.
    #[test]
    fn rewinding_gives_each_version_its_own_schema() {
        let schema = |c: &Connection| {
            ["table", "index", "trigger"].map(|kind| schema_objects(c, kind).unwrap())
        };
        for version in 1..=SCHEMA_VERSION {
            let mut newest = Connection::open_in_memory().unwrap();
            migrate(&mut newest).unwrap();
            rewind(&newest, version).unwrap();
            let old = Connection::open_in_memory().unwrap();
            for sql in &MIGRATIONS[..usize::try_from(version).unwrap()] {
                old.execute_batch(sql).unwrap();
            }
            assert_eq!(schema(&newest), schema(&old), "version {version}");
            let found: i64 = newest
                .query_row("PRAGMA user_version", [], |row| row.get(0))
                .unwrap();
            assert_eq!(found, version);
        }
    }

    #[test]
    fn schema_version_counts_the_migrations() {
        assert_eq!(usize::try_from(SCHEMA_VERSION).unwrap(), MIGRATIONS.len());
    }
}
