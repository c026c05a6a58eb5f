//! Schema migrations, applied in order inside one transaction each; `PRAGMA user_version`
//! records how many ran. Never edit a released migration: append a new one.

/// The migrations; index + 1 is the schema version each produces.
pub const MIGRATIONS: &[&str] = &[
    // 1: the initial schema. Times are Unix milliseconds; secrets are SHA-256 hashes.
    r"
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value BLOB NOT NULL
    );
    CREATE TABLE enroll_tokens (
        token_hash       BLOB PRIMARY KEY,
        created_ms       INTEGER NOT NULL,
        expires_ms       INTEGER NOT NULL,
        require_approval INTEGER NOT NULL,
        note             TEXT,
        used_ms          INTEGER,
        used_by          TEXT
    );
    CREATE TABLE hosts (
        host_id            TEXT PRIMARY KEY,
        hostname           TEXT NOT NULL,
        key_hash           BLOB NOT NULL,
        status             TEXT NOT NULL,
        enrolled_ms        INTEGER NOT NULL,
        poll_interval_s    INTEGER NOT NULL,
        last_seen_ms       INTEGER,
        overdue_since_ms   INTEGER,
        alert_state        TEXT NOT NULL DEFAULT 'none',
        agent_version      TEXT,
        controller_version TEXT,
        pve_version        TEXT,
        known_generation   INTEGER NOT NULL DEFAULT 0,
        applied_generation INTEGER NOT NULL DEFAULT 0,
        report             TEXT,
        audit_seq          INTEGER
    );
    CREATE TABLE desired (
        host_id    TEXT PRIMARY KEY REFERENCES hosts(host_id),
        generation INTEGER NOT NULL,
        document   TEXT NOT NULL,
        updated_ms INTEGER NOT NULL
    );
    CREATE TABLE idempotency (
        host_id      TEXT NOT NULL,
        key          TEXT NOT NULL,
        request_hash BLOB NOT NULL,
        generation   INTEGER NOT NULL,
        created_ms   INTEGER NOT NULL,
        PRIMARY KEY (host_id, key)
    );
    CREATE TABLE jobs (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id       TEXT NOT NULL UNIQUE,
        host_id      TEXT NOT NULL REFERENCES hosts(host_id),
        kind         TEXT NOT NULL,
        document     BLOB NOT NULL,
        signature    TEXT NOT NULL,
        state        TEXT NOT NULL,
        submitted_ms INTEGER NOT NULL,
        acked_ms     INTEGER,
        finished_ms  INTEGER,
        result       TEXT
    );
    CREATE INDEX jobs_by_host_state ON jobs (host_id, state);
    CREATE TABLE escrow (
        host_id    TEXT PRIMARY KEY REFERENCES hosts(host_id),
        blob       TEXT NOT NULL,
        updated_ms INTEGER NOT NULL
    );
    CREATE TABLE audit (
        host_id TEXT NOT NULL,
        seq     INTEGER NOT NULL,
        at_ms   INTEGER NOT NULL,
        action  TEXT NOT NULL,
        detail  TEXT NOT NULL,
        PRIMARY KEY (host_id, seq)
    );
    CREATE TABLE events (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms   INTEGER NOT NULL,
        host_id TEXT,
        kind    TEXT NOT NULL,
        detail  TEXT NOT NULL
    );
    CREATE INDEX events_by_host ON events (host_id, seq);
    CREATE TABLE alerts (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms    INTEGER NOT NULL,
        kind     TEXT NOT NULL,
        host_id  TEXT,
        hostname TEXT,
        message  TEXT NOT NULL
    );
    ",
    // 2: change-only reports. `report_seq` numbers the stored report; a delta applies on top
    // of exactly that number, or of the report before it (`prev_report`, `prev_seq`): the
    // agent builds on the last report it saw acknowledged, which may be one behind when it
    // abandoned a held poll.
    r"
    ALTER TABLE hosts ADD COLUMN report_seq INTEGER;
    ALTER TABLE hosts ADD COLUMN prev_report TEXT;
    ALTER TABLE hosts ADD COLUMN prev_seq INTEGER;
    ",
    // 3: storage and backup watch. `last_good` is the newest good backup per guest per target
    // the hub has heard of (never moved backwards); `watch_alerts` the open storage and backup
    // alerts, one per (host, kind, subject); their history is in `events`.
    r"
    CREATE TABLE last_good (
        host_id  TEXT NOT NULL REFERENCES hosts(host_id),
        guest_id TEXT NOT NULL,
        target   TEXT NOT NULL,
        tier     INTEGER,
        at_ms    INTEGER NOT NULL,
        PRIMARY KEY (host_id, guest_id, target)
    );
    CREATE TABLE watch_alerts (
        host_id   TEXT NOT NULL REFERENCES hosts(host_id),
        kind      TEXT NOT NULL,
        subject   TEXT NOT NULL,
        opened_ms INTEGER NOT NULL,
        message   TEXT NOT NULL,
        PRIMARY KEY (host_id, kind, subject)
    );
    ",
    // 4: restore-test watch. `last_passed` is the newest passing restore test per guest per
    // tier the hub has heard of (never moved backwards; `tier` is '' when the agent named
    // none); `restore_test_clock` when the hub began expecting each guest's restore tests (the
    // first judgment of the guest under an enabled policy; dropped when the policy is off or
    // the guest gone), which a guest that never passed is measured from.
    r"
    CREATE TABLE last_passed (
        host_id  TEXT NOT NULL REFERENCES hosts(host_id),
        guest_id TEXT NOT NULL,
        tier     TEXT NOT NULL,
        at_ms    INTEGER NOT NULL,
        PRIMARY KEY (host_id, guest_id, tier)
    );
    CREATE TABLE restore_test_clock (
        host_id  TEXT NOT NULL REFERENCES hosts(host_id),
        guest_id TEXT NOT NULL,
        since_ms INTEGER NOT NULL,
        PRIMARY KEY (host_id, guest_id)
    );
    ",
    // 5: escrow status and host loss. `escrow.key_fingerprint` is the fingerprint the stored
    // blob says it wraps (filled in from the blobs already stored); a host's escrow is verified
    // when it equals the `pbs_key_fingerprint` of the host's stored report. A restore-mode
    // token names the revoked host the enrolling box takes over (`enroll_tokens.restore_host`);
    // the host row then records when (`replaced_ms`) and since when its sealed storage
    // credentials must be resealed to the new box (`reseal_required_ms`). The lost box's audit
    // entries move to `replaced_audit` (the new box numbers its audit log from 1 again).
    // `full_report_wanted`: an escrow blob arrived that the stored report could not verify; the
    // next delta is answered with a request for a full report (keys travel only in those).
    r"
    ALTER TABLE escrow ADD COLUMN key_fingerprint TEXT;
    UPDATE escrow SET key_fingerprint = json_extract(blob, '$.key_fingerprint')
        WHERE json_valid(blob);
    ALTER TABLE enroll_tokens ADD COLUMN restore_host TEXT;
    ALTER TABLE hosts ADD COLUMN replaced_ms INTEGER;
    ALTER TABLE hosts ADD COLUMN reseal_required_ms INTEGER;
    ALTER TABLE hosts ADD COLUMN full_report_wanted INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE replaced_audit (
        host_id     TEXT NOT NULL REFERENCES hosts(host_id),
        replaced_ms INTEGER NOT NULL,
        seq         INTEGER NOT NULL,
        at_ms       INTEGER NOT NULL,
        action      TEXT NOT NULL,
        detail      TEXT NOT NULL,
        PRIMARY KEY (host_id, replaced_ms, seq)
    );
    ",
    // 6: the documents behind the generations. `desired_history` keeps each host's recent
    // generations (the current one, the one the host last applied, and a few before; older
    // ones are pruned in the transaction that writes a new one) with the correlation id the
    // operator sent; the generations already stored are carried over. `host_operations` holds
    // the newest operation-journal records each agent reported (`bosunctl explain` through the
    // hub), bounded per host.
    r"
    CREATE TABLE desired_history (
        host_id        TEXT NOT NULL REFERENCES hosts(host_id),
        generation     INTEGER NOT NULL,
        document       TEXT NOT NULL,
        correlation_id TEXT,
        stored_ms      INTEGER NOT NULL,
        PRIMARY KEY (host_id, generation)
    );
    INSERT INTO desired_history (host_id, generation, document, correlation_id, stored_ms)
        SELECT host_id, generation, document, NULL, updated_ms FROM desired;
    CREATE TABLE host_operations (
        host_id        TEXT NOT NULL REFERENCES hosts(host_id),
        op_id          TEXT NOT NULL,
        correlation_id TEXT,
        started_ms     INTEGER NOT NULL,
        record         TEXT NOT NULL,
        PRIMARY KEY (host_id, op_id)
    );
    CREATE INDEX host_operations_by_correlation ON host_operations (host_id, correlation_id);
    CREATE INDEX host_operations_by_start ON host_operations (host_id, started_ms);
    ",
    // 7: artifacts operators upload for agents to fetch (agent self-update): opaque bytes
    // under their SHA-256, the newest few kept.
    r"
    CREATE TABLE artifacts (
        sha256    TEXT PRIMARY KEY,
        size      INTEGER NOT NULL,
        data      BLOB NOT NULL,
        stored_ms INTEGER NOT NULL
    );
    ",
    // 8: the dead-man's switch finds overdue and silent hosts in an index instead of reading
    // every host row (rows hold the stored reports: a scan of 100,000 hosts reads ~400 MB).
    r"
    CREATE INDEX hosts_liveness ON hosts (status, last_seen_ms, poll_interval_s, overdue_since_ms);
    ",
    // 9: planned stops. `stopped_ms` is when a host's last poll said it was stopping on purpose
    // (NULL: it did not, or it has polled since); the dead-man's switch gives such a host its
    // stop bound instead of its grace window.
    r"
    ALTER TABLE hosts ADD COLUMN stopped_ms INTEGER;
    ",
    // 10: retention. The sweeper prunes what is past its bound oldest first, in batches; these
    // indexes let each batch find its rows without reading the table (an audit trail of
    // 100,000 hosts holds up to 50 million rows). The audit trail is also read newest first
    // in (time, host, number) order, a page at a time.
    r"
    CREATE INDEX audit_by_time ON audit (at_ms, host_id, seq);
    CREATE INDEX replaced_audit_by_time ON replaced_audit (replaced_ms);
    CREATE INDEX events_by_time ON events (at_ms);
    CREATE INDEX alerts_by_time ON alerts (at_ms);
    CREATE INDEX jobs_by_finish ON jobs (finished_ms) WHERE finished_ms IS NOT NULL;
    CREATE INDEX idempotency_by_time ON idempotency (created_ms);
    CREATE INDEX enroll_tokens_by_expiry ON enroll_tokens (expires_ms);
    CREATE INDEX enroll_tokens_by_use ON enroll_tokens (used_ms) WHERE used_ms IS NOT NULL;
    ",
    // 11: when an operator revoked an enrollment token (`bosunctl enroll-token revoke`).
    r"
    ALTER TABLE enroll_tokens ADD COLUMN revoked_ms INTEGER;
    ",
    // 12: operators triage open alerts. `alert_acks` holds one acknowledgement per open
    // condition, valid for the opening it was made on (`since_ms`: a condition that resolves
    // and opens again starts unacknowledged); `alert_silences` the bounded silences of a host's
    // alerts (`kind`, `subject` NULL: any); `alerts.silenced_by` the silence an alert fell
    // under when it was raised (it was not sent to the webhook).
    r"
    CREATE TABLE alert_acks (
        host_id  TEXT NOT NULL REFERENCES hosts(host_id),
        kind     TEXT NOT NULL,
        subject  TEXT NOT NULL,
        since_ms INTEGER NOT NULL,
        acked_ms INTEGER NOT NULL,
        note     TEXT NOT NULL,
        PRIMARY KEY (host_id, kind, subject)
    );
    CREATE TABLE alert_silences (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        host_id    TEXT NOT NULL REFERENCES hosts(host_id),
        kind       TEXT,
        subject    TEXT,
        created_ms INTEGER NOT NULL,
        until_ms   INTEGER NOT NULL,
        reason     TEXT NOT NULL,
        removed_ms INTEGER
    );
    CREATE INDEX alert_silences_by_host ON alert_silences (host_id, until_ms);
    ALTER TABLE alerts ADD COLUMN silenced_by INTEGER;
    ",
    // 13: agent artifacts live as files beside the database (`artifacts/<sha256>`, decision
    // 0041); the table keeps their metadata, and `data` only the bytes of a row stored before
    // (the store moves them out to files when it opens) or, on PostgreSQL, every row's.
    // SQLite cannot drop a NOT NULL, so the table is rebuilt, its insertion order kept.
    r"
    CREATE TABLE artifacts_new (
        sha256    TEXT PRIMARY KEY,
        size      INTEGER NOT NULL,
        data      BLOB,
        stored_ms INTEGER NOT NULL
    );
    INSERT INTO artifacts_new (rowid, sha256, size, data, stored_ms)
        SELECT rowid, sha256, size, data, stored_ms FROM artifacts;
    DROP TABLE artifacts;
    ALTER TABLE artifacts_new RENAME TO artifacts;
    ",
    // 14: the hub's keys through a rotation (staged, active, retiring, retired; a retired key's
    // private half is dropped), shared by every replica of the store; and the key pins each host
    // says it holds (a JSON array of `spki:` pins, from its polls).
    r"
    CREATE TABLE hub_keys (
        pin        TEXT PRIMARY KEY,
        state      TEXT NOT NULL CHECK (state IN ('staged', 'active', 'retiring', 'retired')),
        cert_pem   TEXT NOT NULL,
        key_pem    TEXT,
        created_ms INTEGER NOT NULL,
        changed_ms INTEGER NOT NULL
    );
    ALTER TABLE hosts ADD COLUMN hub_pins TEXT;
    ",
    // 15: named operator tokens with roles (decision 0043). The admin token `init` made
    // becomes the token `admin` with the role `admin`, its hash and creation time carried over;
    // `meta` keeps only `initialized_ms`. `desired_history.set_by` names the token that set
    // each generation (NULL for those stored before).
    r"
    CREATE TABLE operator_tokens (
        name         TEXT PRIMARY KEY,
        role         TEXT NOT NULL,
        token_hash   BLOB NOT NULL UNIQUE,
        created_ms   INTEGER NOT NULL,
        created_by   TEXT,
        expires_ms   INTEGER,
        rotated_ms   INTEGER,
        last_used_ms INTEGER
    );
    INSERT INTO operator_tokens (name, role, token_hash, created_ms)
        SELECT 'admin', 'admin', value,
               COALESCE((SELECT CAST(CAST(value AS TEXT) AS INTEGER) FROM meta
                         WHERE key = 'initialized_ms'), 0)
        FROM meta WHERE key = 'admin_token_hash';
    DELETE FROM meta WHERE key = 'admin_token_hash';
    ALTER TABLE desired_history ADD COLUMN set_by TEXT;
    ",
    // 16: host keys rotate (decision 0044). `next_key_hash` is the hash of the key the host's
    // agent made to replace its current one, valid beside it until first presented;
    // `key_issued_ms` is when the current key was issued (NULL: before rotation existed, due at
    // once and never expiring until rotated); `key_rotate_ms` is when an operator asked for a
    // rotation not yet done.
    r"
    ALTER TABLE hosts ADD COLUMN next_key_hash BLOB;
    ALTER TABLE hosts ADD COLUMN key_issued_ms INTEGER;
    ALTER TABLE hosts ADD COLUMN key_rotate_ms INTEGER;
    ",
    // 17: the backup sweep judges only the hosts due (`judge_due_ms`: when a time-driven alert
    // of the host may open next, at most an hour after its last judgment; NULL: nothing to
    // judge until it reports). Every host with a report is due once, at the first sweep.
    r"
    ALTER TABLE hosts ADD COLUMN judge_due_ms INTEGER;
    UPDATE hosts SET judge_due_ms = 0 WHERE report IS NOT NULL;
    CREATE INDEX hosts_judge_due ON hosts (judge_due_ms);
    ",
    // 18: a host's report in two parts (`store/stored_report.rs`), so a live host's poll
    // rewrites only what moved: the base in `host_reports` (written by full reports and judged
    // deltas), the sections that move on every poll in `hosts.live` (NULL: the base's are
    // current). The previous report keeps its live part in `prev_live` and its base in
    // `host_reports.prev_report` when `prev_base` is 1 (else it shares the current base).
    // `base_digest` identifies the current base's content (NULL: not known), so a full report
    // that repeats it rewrites only the live part.
    // `report_seq` is set whenever a report is stored. The dead-man's sweep reads the host
    // rows instead of the `hosts_liveness` index, which every poll had to move.
    r"
    CREATE TABLE host_reports (
        host_id     TEXT PRIMARY KEY REFERENCES hosts(host_id),
        report      TEXT,
        prev_report TEXT
    );
    INSERT INTO host_reports (host_id, report, prev_report)
        SELECT host_id, report, prev_report FROM hosts WHERE report IS NOT NULL;
    ALTER TABLE hosts ADD COLUMN live TEXT;
    ALTER TABLE hosts ADD COLUMN prev_live TEXT;
    ALTER TABLE hosts ADD COLUMN prev_base INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE hosts ADD COLUMN base_digest BLOB;
    UPDATE hosts SET report_seq = 0 WHERE report IS NOT NULL AND report_seq IS NULL;
    UPDATE hosts SET prev_base = 1 WHERE report IS NOT NULL AND prev_report IS NOT NULL;
    UPDATE hosts SET prev_seq = NULL WHERE report IS NULL OR prev_report IS NULL;
    DROP INDEX hosts_liveness;
    ALTER TABLE hosts DROP COLUMN report;
    ALTER TABLE hosts DROP COLUMN prev_report;
    ",
    // 19: a queued job's priority (decision 0072), read from its signed document at
    // submission: a poll hands a host's queued jobs highest priority first, then oldest first.
    r"
    ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
    ",
    // 20: desired state has no `controller_version` any more (decision 0074: only a
    // signature chooses the controller a guest runs); stored documents lose it, so each
    // still parses and is served as before.
    r"
    UPDATE desired SET document = json_remove(document, '$.controller_version')
        WHERE json_valid(document) AND json_type(document, '$.controller_version') IS NOT NULL;
    UPDATE desired_history SET document = json_remove(document, '$.controller_version')
        WHERE json_valid(document) AND json_type(document, '$.controller_version') IS NOT NULL;
    ",
    // 21: a host's history (`store/history.rs`): one row per host and five-minute bucket,
    // sums and highs so that parts of a bucket add up; the retention sweeper removes rows past
    // `history_days` host by host through the key (an index by time would cost a third more).
    r"
    CREATE TABLE host_history (
        host_id        TEXT NOT NULL,
        bucket_ms      INTEGER NOT NULL,
        polls          INTEGER NOT NULL,
        samples        INTEGER NOT NULL,
        cpu_sum        REAL NOT NULL,
        cpu_max        REAL NOT NULL,
        memory_sum     REAL NOT NULL,
        disk_sum       REAL NOT NULL,
        pool_samples   INTEGER NOT NULL,
        pool_max       REAL NOT NULL,
        backups        INTEGER NOT NULL,
        backup_bytes   INTEGER NOT NULL,
        backup_seconds INTEGER NOT NULL,
        poll_us_sum    INTEGER NOT NULL,
        poll_us_max    INTEGER NOT NULL,
        PRIMARY KEY (host_id, bucket_ms)
    ) WITHOUT ROWID;
    ",
    // 22: what each host says it is and has (`host_capabilities`, the document as its last poll
    // carried it, and `host_capability_tags`, the words `hosts list --capability` matches), and
    // the labels operators give hosts (`host_labels`; decision 0077).
    r"
    CREATE TABLE host_capabilities (
        host_id    TEXT PRIMARY KEY REFERENCES hosts(host_id),
        document   TEXT NOT NULL,
        updated_ms INTEGER NOT NULL
    );
    CREATE TABLE host_capability_tags (
        host_id TEXT NOT NULL REFERENCES hosts(host_id),
        tag     TEXT NOT NULL,
        PRIMARY KEY (host_id, tag)
    );
    CREATE INDEX host_capability_tags_by_tag ON host_capability_tags (tag);
    CREATE TABLE host_labels (
        host_id TEXT NOT NULL REFERENCES hosts(host_id),
        key     TEXT NOT NULL,
        value   TEXT NOT NULL,
        PRIMARY KEY (host_id, key)
    );
    CREATE INDEX host_labels_by_label ON host_labels (key, value);
    ",
    // 23: an audit entry that repeats its subject's newest row is counted on it (decision
    // 0106): how many times, the last one's sequence number and time, and the subject that
    // finds the row. A replaced host's archive keeps the count too.
    r"
    ALTER TABLE audit ADD COLUMN repeats INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE audit ADD COLUMN last_seq INTEGER;
    ALTER TABLE audit ADD COLUMN last_at_ms INTEGER;
    ALTER TABLE audit ADD COLUMN subject TEXT;
    CREATE INDEX audit_by_subject ON audit (host_id, subject, seq);
    ALTER TABLE replaced_audit ADD COLUMN repeats INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE replaced_audit ADD COLUMN last_seq INTEGER;
    ALTER TABLE replaced_audit ADD COLUMN last_at_ms INTEGER;
    ",
    // 24: the judge-due index holds only hosts with a due time (decision 0111): a host's
    // first judgment adds its entry near the index's end instead of also removing one from
    // among the entries of every host not yet judged.
    r"
    DROP INDEX hosts_judge_due;
    CREATE INDEX hosts_judge_due ON hosts (judge_due_ms) WHERE judge_due_ms IS NOT NULL;
    ",
];
