//! Operator tokens in the store, on both backends: an older hub's single admin token becomes
//! the admin token `admin` when the store is migrated; the bound, the unique names and the
//! last unexpired admin token hold.

use bosun_proto::operator_token::Role;
use rusqlite::{Connection, params};

use super::super::operator_tokens::{INIT_TOKEN_NAME, MAX_TOKENS, NewOperatorToken};
use super::super::postgres::schema as pg_schema;
use super::super::sqlite::schema;
use super::super::sqlite::{DB_FILE, SqliteStore};
use super::super::{Store, StoreError};
use super::{NOW, pg};
use crate::secret::SecretHash;

const OLD_SECRET: &str = "bsa_an-older-hubs-admin-token";

/// What an older hub's store must say once migrated: its admin token is `admin`, an admin
/// token created when the hub was initialized, and nothing else changed about it.
fn migrated_admin_token_works(store: &dyn Store) {
    store.check_initialized().unwrap();
    let token = store
        .operator_token(SecretHash::of(OLD_SECRET))
        .unwrap()
        .expect("the old admin token is an operator token");
    assert_eq!(
        (token.name.as_str(), token.role, token.expires_ms),
        (INIT_TOKEN_NAME, Role::Admin, None)
    );
    let listed = store.list_operator_tokens(NOW).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].created_at.as_millisecond(), NOW - 1_000);
    assert_eq!(listed[0].created_by, None);
    assert!(
        matches!(
            store.revoke_operator_token(INIT_TOKEN_NAME, NOW),
            Err(StoreError::LastAdminToken { .. })
        ),
        "the migrated token is the last admin token"
    );
}

#[test]
fn an_older_sqlite_hubs_admin_token_becomes_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    {
        // A database at schema 14, initialized with the single admin token of the time.
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        for migration in &schema::MIGRATIONS[..14] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", 14).unwrap();
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('admin_token_hash', ?1), ('initialized_ms', ?2)",
            params![
                SecretHash::of(OLD_SECRET).0.as_slice(),
                (NOW - 1_000).to_string()
            ],
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    migrated_admin_token_works(&store);
    drop(store);
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    let kept: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM meta WHERE key = 'admin_token_hash'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, 0, "the old hash is not a second way in");
}

#[test]
fn an_older_postgresql_hubs_admin_token_becomes_the_admin_token() {
    let db = pg::Database::create();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // The schema one migration before operator tokens, initialized the old way.
        let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        // PostgreSQL's migration 9 brought operator tokens.
        let before = 8;
        for migration in &pg_schema::MIGRATIONS[..before] {
            client.batch_execute(migration).await.unwrap();
        }
        client
            .batch_execute(&format!(
                "CREATE TABLE bosun_schema (version BIGINT NOT NULL);
                 INSERT INTO bosun_schema (version) VALUES ({before})"
            ))
            .await
            .unwrap();
        let hash = SecretHash::of(OLD_SECRET).0.to_vec();
        let initialized = (NOW - 1_000).to_string().into_bytes();
        client
            .execute(
                "INSERT INTO meta (key, value) VALUES ('admin_token_hash', $1), ('initialized_ms', $2)",
                &[&hash, &initialized],
            )
            .await
            .unwrap();
    });
    migrated_admin_token_works(&db.open());
}

fn token(name: &str, role: Role, expires_ms: Option<i64>) -> NewOperatorToken {
    NewOperatorToken {
        name: name.to_owned(),
        role,
        hash: SecretHash::of(&format!("bsa_{name}")),
        created_by: Some(INIT_TOKEN_NAME.to_owned()),
        expires_ms,
        now_ms: NOW,
    }
}

/// Names are unique, the count is bounded, a rotated token answers only to its new secret,
/// and the last unexpired admin token stays (an expired one does not count).
fn tokens_hold_their_rules(store: &dyn Store) {
    store.init_admin(SecretHash::of("bsa_first"), NOW).unwrap();
    assert!(matches!(
        store.init_admin(SecretHash::of("bsa_again"), NOW),
        Err(StoreError::AlreadyInitialized)
    ));
    store
        .create_operator_token(token("ops", Role::Operator, None))
        .unwrap();
    assert!(matches!(
        store.create_operator_token(token("ops", Role::Viewer, None)),
        Err(StoreError::OperatorTokenNameTaken { .. })
    ));
    for n in 2..MAX_TOKENS {
        store
            .create_operator_token(token(&format!("v{n}"), Role::Viewer, None))
            .unwrap();
    }
    assert!(matches!(
        store.create_operator_token(token("one-too-many", Role::Viewer, None)),
        Err(StoreError::TooManyOperatorTokens { limit: MAX_TOKENS })
    ));
    store.revoke_operator_token("v2", NOW).unwrap();
    assert!(matches!(
        store.revoke_operator_token("v2", NOW),
        Err(StoreError::UnknownOperatorToken { .. })
    ));

    let new_hash = SecretHash::of("bsa_ops-rotated");
    let rotated = store.rotate_operator_token("ops", new_hash, NOW).unwrap();
    assert_eq!(rotated.role, Role::Operator);
    assert!(
        store
            .operator_token(SecretHash::of("bsa_ops"))
            .unwrap()
            .is_none()
    );
    assert_eq!(store.operator_token(new_hash).unwrap().unwrap().name, "ops");

    // An admin token that expires soon is no stand-in for the last one that does not.
    store
        .create_operator_token(token("brief", Role::Admin, Some(NOW + 60_000)))
        .unwrap();
    store.revoke_operator_token(INIT_TOKEN_NAME, NOW).unwrap();
    let later = NOW + 120_000;
    assert!(
        !store
            .operator_token(SecretHash::of("bsa_brief"))
            .unwrap()
            .unwrap()
            .live_at(later)
    );
    store
        .create_operator_token(token("keeper", Role::Admin, None))
        .unwrap();
    assert!(matches!(
        store.revoke_operator_token("keeper", later),
        Err(StoreError::LastAdminToken { .. })
    ));
    // The expired one may go.
    store.revoke_operator_token("brief", later).unwrap();
    let listed = store.list_operator_tokens(later).unwrap();
    assert_eq!(listed.len(), MAX_TOKENS - 1);
    assert!(listed.windows(2).all(|w| w[0].name < w[1].name));
}

#[test]
fn operator_tokens_hold_their_rules_on_both_stores() {
    let dir = tempfile::tempdir().unwrap();
    tokens_hold_their_rules(&SqliteStore::open(dir.path()).unwrap());
    let db = pg::Database::create();
    tokens_hold_their_rules(&db.open());
}
