//! Where the hub keeps its state, and opening it there.

use super::error::StoreResult;
use super::traits::Store;
use super::{postgres, sqlite};

/// Which database the hub keeps its state in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StoreLocation {
    /// `hub.sqlite` in the data directory (the default).
    #[default]
    Sqlite,
    /// A PostgreSQL database shared by any number of hub replicas: a `postgres://` URL or a
    /// `key=value` connection string.
    Postgres(String),
}

impl StoreLocation {
    /// Parses `--store`: `sqlite`, or a `postgres://` / `postgresql://` URL.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "sqlite" {
            return Ok(Self::Sqlite);
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return text
                .parse::<tokio_postgres::Config>()
                .map(|_| Self::Postgres(text.to_owned()))
                .map_err(|e| format!("not a valid PostgreSQL connection URL: {e}"));
        }
        Err("expected `sqlite` or a postgres://user@host/db URL".to_owned())
    }

    /// Opens the store: SQLite in `data_dir`, or the PostgreSQL database.
    pub fn open(&self, data_dir: &std::path::Path) -> StoreResult<std::sync::Arc<dyn Store>> {
        self.open_with(data_dir, postgres::schema::PgSchema::default())
    }

    /// [`Self::open`], a PostgreSQL database brought to `schema`.
    pub fn open_with(
        &self,
        data_dir: &std::path::Path,
        schema: postgres::schema::PgSchema,
    ) -> StoreResult<std::sync::Arc<dyn Store>> {
        Ok(match self {
            Self::Sqlite => std::sync::Arc::new(sqlite::SqliteStore::open(data_dir)?),
            Self::Postgres(url) => std::sync::Arc::new(postgres::PgStore::open_with(url, schema)?),
        })
    }

    /// Where it is, for messages (a PostgreSQL password is left out).
    pub fn describe(&self, data_dir: &std::path::Path) -> String {
        match self {
            Self::Sqlite => data_dir.join(sqlite::DB_FILE).display().to_string(),
            Self::Postgres(url) => url
                .parse::<tokio_postgres::Config>()
                .map(|config| postgres::describe(&config))
                .unwrap_or_else(|_| "postgres (unparsable URL)".to_owned()),
        }
    }
}
