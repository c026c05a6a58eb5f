//! Setting up a data directory and running the hub until it is told to stop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bosun_proto::secret::SecretToken;

use crate::config::HubConfig;
use crate::error::HubError;
use crate::hub::{self, Hub};
use crate::store;
use crate::tls;
use crate::{clock, secret};

/// What `init` created.
#[derive(Debug)]
pub struct InitReport {
    /// The admin token, shown once.
    pub admin_token: SecretToken,
    /// Fingerprint of the generated self-signed certificate (when no operator certificate).
    pub fingerprint: Option<String>,
    /// The key pin of that certificate (`spki:…`), which outlives a renewal of the same key.
    pub key_pin: Option<String>,
    /// The database file.
    pub database: PathBuf,
}

/// Creates the database, the admin token and (unless `operator_cert`) a self-signed
/// certificate for `names`. Fails if the hub is already initialized.
pub fn init(
    data_dir: &Path,
    names: Vec<String>,
    operator_cert: bool,
) -> Result<InitReport, HubError> {
    init_store(
        data_dir,
        names,
        operator_cert,
        &store::StoreLocation::Sqlite,
    )
}

/// [`init`] with the state kept in `store` (the data directory still holds the certificate,
/// which every replica of a PostgreSQL-backed hub serves).
pub fn init_store(
    data_dir: &Path,
    names: Vec<String>,
    operator_cert: bool,
    location: &store::StoreLocation,
) -> Result<InitReport, HubError> {
    std::fs::create_dir_all(data_dir).map_err(|source| HubError::DataDir {
        path: data_dir.to_owned(),
        source,
    })?;
    // The certificate first: the admin token is the commit point, so a failure before it
    // leaves a directory `init` can simply be run on again. The certificate file is the
    // pair's own commit point (`tls::create_self_signed`): without it, both are made again.
    let pins = if operator_cert {
        None
    } else {
        let (cert, _) = tls::self_signed_paths(data_dir);
        if !cert.exists() {
            tls::create_self_signed(data_dir, names).map_err(HubError::Tls)?;
        }
        let identity = tls::load(&tls::TlsSource::SelfSigned, data_dir).map_err(HubError::Tls)?;
        Some((identity.fingerprint, identity.key_pin))
    };
    let (admin_token, hash) = secret::mint(secret::SecretKind::Operator);
    // On a thread of its own: `init` may be called from async code, and the PostgreSQL store
    // blocks on a runtime of its own.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let store = location.open(data_dir)?;
                store.init_admin(hash, jiff::Timestamp::now().as_millisecond())
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
    .map_err(HubError::Store)?;
    let (fingerprint, key_pin) = pins.unzip();
    Ok(InitReport {
        admin_token,
        fingerprint,
        key_pin,
        database: PathBuf::from(location.describe(data_dir)),
    })
}

/// Runs the hub on `config.listen` (and `config.admin_listen`) until `shutdown` resolves.
/// `serving` is called once the hub is open, before it answers, with the hub: what it tells
/// (`bosun-hubd serve` prints the fingerprint and key pin) is what the listeners present,
/// since both come from the one served key ([`Hub::fingerprint`], [`Hub::key_pin`]).
pub async fn run(
    config: HubConfig,
    serving: impl FnOnce(&Hub),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), HubError> {
    let bind = |addr: SocketAddr| {
        std::net::TcpListener::bind(addr).map_err(|source| HubError::Serve {
            addr: addr.to_string(),
            source,
        })
    };
    let listeners = hub::serve::Listeners {
        agent: bind(config.listen)?,
        admin: config.admin_listen.map(bind).transpose()?,
    };
    let hub = Hub::open(config, Arc::new(clock::SystemClock)).await?;
    tracing::info!(
        fingerprint = hub.fingerprint(),
        key_pin = hub.key_pin(),
        "tls certificate"
    );
    serving(&hub);
    notify_systemd(sd_notify::NotifyState::Ready);
    let outcome = hub.serve(listeners, shutdown).await;
    notify_systemd(sd_notify::NotifyState::Stopping);
    outcome
}

/// Tells systemd about a state change when running under it (`NOTIFY_SOCKET` set).
fn notify_systemd(state: sd_notify::NotifyState<'_>) {
    if std::env::var_os("NOTIFY_SOCKET").is_some()
        && let Err(err) = sd_notify::notify(&[state])
    {
        tracing::warn!(error = %err, "could not notify systemd");
    }
}
