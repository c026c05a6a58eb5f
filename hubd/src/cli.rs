//! `bosun-hubd`'s command line. It lives in the library so the man page and the shell
//! completions are made from the same definition the binary parses.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config_file::{self, ConfigError, HubFile, Overrides};

/// `bosun-hubd`: the Bosun hub.
#[derive(Debug, Parser)]
#[command(name = "bosun-hubd", version, about = "Bosun hub")]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `bosun-hubd` commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the database, the admin token (printed once) and a self-signed certificate.
    Init(InitArgs),
    /// Serve the hub.
    Serve(ServeArgs),
    /// The hub's TLS key: its rotation's status, and the rotation itself.
    #[command(subcommand)]
    Cert(CertCommand),
    /// Copy a SQLite hub, live, into one archive: the database, the TLS files, the artifacts.
    Backup(BackupArgs),
    /// Bring a hub back from `backup`'s archive into an empty data directory (the hub
    /// stopped), or record a PostgreSQL hub's restore by pg_restore.
    Restore(RestoreArgs),
    /// Print the shell completion script (the package installs them).
    #[command(hide = true)]
    Completions(bosun_clidoc::CompletionsArgs),
    /// Write the man pages into a directory (the package installs them).
    #[command(hide = true)]
    Man(bosun_clidoc::ManArgs),
}

/// What `bosun-hubd`'s man pages say besides its options (each option's environment variable
/// is listed with the option).
pub fn man_extras() -> bosun_clidoc::ManExtras<'static> {
    bosun_clidoc::ManExtras {
        exit_status: &[
            (0, "done; for serve: stopped on SIGTERM or SIGINT"),
            (
                1,
                "failed; the message on stderr says why (a bad option or config file, a store that cannot be opened, a port in use, …)",
            ),
        ],
        environment: &[
            (
                "BOSUN_LOG",
                "what the hub logs (a tracing filter; default info); under systemd it logs to the journal",
            ),
            (
                "BOSUN_HUB_CONFIG, BOSUN_HUB_DATA, BOSUN_HUB_STORE, BOSUN_HUB_LISTEN, BOSUN_HUB_ADMIN_LISTEN, BOSUN_HUB_WEBHOOK",
                "as the options of the same names",
            ),
        ],
        files: &[
            (
                "/etc/bosun-hub/hub.toml",
                "the package's config file (every serve option but --store can live there; PostgreSQL is named with --store or BOSUN_HUB_STORE)",
            ),
            (
                "/var/lib/bosun-hub",
                "the package's data directory: hub.sqlite (with -wal and -shm), the TLS certificate and key",
            ),
        ],
        examples: &[
            (
                "bosun-hubd",
                &[
                    (
                        "bosun-hubd init --data /var/lib/bosun-hub --name hub.example",
                        "create the data directory, the certificate (its fingerprint printed) and the first admin token (shown once)",
                    ),
                    (
                        "bosun-hubd serve --config /etc/bosun-hub/hub.toml",
                        "run the hub",
                    ),
                    (
                        "bosun-hubd backup --config /etc/bosun-hub/hub.toml --out /var/backups/bosun-hub/hub.tar",
                        "copy the live hub (database, TLS key, artifacts) into one archive; bosun-hubd restore --from FILE brings it back into an empty data directory",
                    ),
                    (
                        "bosun-hubd cert rotate stage --config /etc/bosun-hub/hub.toml",
                        "stage a new key: agents learn it from their next poll; then cert status, cert rotate activate, cert rotate retire",
                    ),
                ],
            ),
            (
                "bosun-hubd-serve",
                &[
                    (
                        "bosun-hubd serve --data /var/lib/bosun-hub --listen 0.0.0.0:7443 --admin-listen 127.0.0.1:7444",
                        "agents on every address, the admin API, dashboard and metrics on loopback",
                    ),
                    (
                        "bosun-hubd serve --store postgres://bosun@db.example/bosun",
                        "one of several replicas sharing a PostgreSQL database",
                    ),
                ],
            ),
        ],
    }
}

/// `bosun-hubd init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Config file; its `data_dir` is used when --data is not given.
    #[arg(long, env = "BOSUN_HUB_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory.
    #[arg(long, env = "BOSUN_HUB_DATA", value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Extra DNS names or IPs for the self-signed certificate (repeatable).
    #[arg(long = "name", value_name = "NAME")]
    pub names: Vec<String>,
    /// Do not create a self-signed certificate (an operator certificate will be used).
    #[arg(long)]
    pub operator_cert: bool,
    /// Where the hub keeps its state: `sqlite` (the data directory's hub.sqlite, the
    /// default) or a PostgreSQL URL, `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, which any
    /// number of replicas may share.
    #[arg(long, env = "BOSUN_HUB_STORE", hide_env_values = true, value_name = "STORE", value_parser = crate::store::StoreLocation::parse)]
    pub store: Option<crate::store::StoreLocation>,
}

/// `bosun-hubd serve`. Every option can also be set in the config file; an option given
/// here wins over the file.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Config file (the package's is /etc/bosun-hub/hub.toml). A named file must exist.
    #[arg(long, env = "BOSUN_HUB_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory.
    #[arg(long, env = "BOSUN_HUB_DATA", value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Address of the agent API (default 0.0.0.0:7443); also of everything else unless
    /// --admin-listen is given.
    #[arg(long, env = "BOSUN_HUB_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Address of the admin API, dashboard and metrics, kept off the agents' address.
    #[arg(long, env = "BOSUN_HUB_ADMIN_LISTEN", value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,
    /// Operator-provided certificate chain (PEM); needs --tls-key.
    #[arg(long, requires = "tls_key", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// Operator-provided private key (PEM); needs --tls-cert.
    #[arg(long, requires = "tls_cert", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Poll interval given to new hosts, seconds (default 30).
    #[arg(long, value_name = "SECS")]
    pub poll_interval: Option<u64>,
    /// POST alerts to this URL.
    #[arg(
        long,
        env = "BOSUN_HUB_WEBHOOK",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub webhook: Option<String>,
    /// How long an overdue alert is held to tell one silent host from a mass silence,
    /// seconds (also the sweep interval when shorter than its default; default 30).
    #[arg(long, value_name = "SECS")]
    pub silence_window: Option<u64>,
    /// How long a host whose agent announced a planned stop (SIGTERM) may stay silent before
    /// it is paged overdue, seconds (default 1800).
    #[arg(long, value_name = "SECS")]
    pub stopped_grace: Option<u64>,
    /// Where the hub keeps its state: `sqlite` (the data directory's hub.sqlite, the
    /// default) or a PostgreSQL URL, `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, which any
    /// number of replicas may share.
    #[arg(long, env = "BOSUN_HUB_STORE", hide_env_values = true, value_name = "STORE", value_parser = crate::store::StoreLocation::parse)]
    pub store: Option<crate::store::StoreLocation>,
}

/// Where `backup` and `restore` find the hub: its config file, data directory and store.
#[derive(Debug, Args)]
pub struct HubLocation {
    /// Config file (the package's is /etc/bosun-hub/hub.toml); its `data_dir` is used when
    /// --data is not given.
    #[arg(long, env = "BOSUN_HUB_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory.
    #[arg(long, env = "BOSUN_HUB_DATA", value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Where the hub keeps its state, as `serve --store`.
    #[arg(long, env = "BOSUN_HUB_STORE", hide_env_values = true, value_name = "STORE", value_parser = crate::store::StoreLocation::parse)]
    pub store: Option<crate::store::StoreLocation>,
}

impl HubLocation {
    /// The data directory these options and the config file name.
    pub fn data_dir(&self) -> Result<PathBuf, ConfigError> {
        file(self.config.as_ref())?.data_dir(self.data.clone())
    }
}

/// `bosun-hubd backup`.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Where the hub is.
    #[command(flatten)]
    pub hub: HubLocation,
    /// The archive to write (a new file, mode 0600: it holds the hub's TLS key).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// `bosun-hubd restore`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// Where the hub is to be.
    #[command(flatten)]
    pub hub: HubLocation,
    /// The archive `bosun-hubd backup` wrote.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "after_pg_restore"
    )]
    pub from: Option<PathBuf>,
    /// The PostgreSQL database was brought back with pg_restore: record the restore, so no
    /// desired state is numbered for a host before it has polled again.
    #[arg(long, conflicts_with = "from")]
    pub after_pg_restore: bool,
}

/// `bosun-hubd cert`.
#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Print the served key, the rotation's keys, and how many live hosts hold each.
    Status(CertArgs),
    /// Rotate the hub's key: stage a new one, activate it once every live host holds it,
    /// retire the old one.
    #[command(subcommand)]
    Rotate(RotateStep),
}

/// A step of `bosun-hubd cert rotate`.
#[derive(Debug, Subcommand)]
pub enum RotateStep {
    /// Make a new key (it is not served yet) and, with --document, write the unsigned pin set
    /// naming it for the operator to sign; agents learn it once the signed set is published.
    Stage(StageArgs),
    /// Serve the staged key (every replica within seconds); the old key keeps being announced
    /// until it is retired.
    Activate(ActivateArgs),
    /// Stop announcing the old key and drop its private key; hosts that never learned the new
    /// key are listed: they must be enrolled again. With --document, write the unsigned pin set
    /// naming the keys left.
    Retire(RetireArgs),
    /// Write the unsigned pin set (`bosun.hub-pins/v1`) naming the keys announced now, under
    /// the next serial, for the operator to sign with `ssh-keygen -Y sign -n bosun-policy@v1`.
    Document(DocumentArgs),
    /// Publish the operator's signed pin set: every hub serving this store carries it in its
    /// poll answers, and agents whose allowed_signers trust its signer take it.
    Publish(PublishArgs),
}

/// What every `bosun-hubd cert` command reads: where the hub keeps its state and its key.
#[derive(Debug, Args)]
pub struct CertArgs {
    /// Config file (the package's is /etc/bosun-hub/hub.toml).
    #[arg(long, env = "BOSUN_HUB_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory.
    #[arg(long, env = "BOSUN_HUB_DATA", value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// The certificate chain the hub serves from a file (PEM), as `serve --tls-cert`.
    #[arg(long, requires = "tls_key", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key the hub serves from a file (PEM), as `serve --tls-key`.
    #[arg(long, requires = "tls_cert", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Where the hub keeps its state, as `serve --store`.
    #[arg(long, env = "BOSUN_HUB_STORE", hide_env_values = true, value_name = "STORE", value_parser = crate::store::StoreLocation::parse)]
    pub store: Option<crate::store::StoreLocation>,
}

/// `bosun-hubd cert rotate stage`.
#[derive(Debug, Args)]
pub struct StageArgs {
    /// Where the hub's state and key are.
    #[command(flatten)]
    pub hub: CertArgs,
    /// DNS names or IPs of the new self-signed certificate (repeatable; `localhost` and
    /// `127.0.0.1` are always added). Agents trust the key, not the names.
    #[arg(long = "name", value_name = "NAME", conflicts_with = "new_cert")]
    pub names: Vec<String>,
    /// Stage this certificate chain (PEM) instead of a new self-signed one; needs --new-key.
    #[arg(long, requires = "new_key", value_name = "FILE")]
    pub new_cert: Option<PathBuf>,
    /// The private key (PEM) of --new-cert.
    #[arg(long, requires = "new_cert", value_name = "FILE")]
    pub new_key: Option<PathBuf>,
    /// Write the unsigned pin set naming the staged key beside the active one here.
    #[arg(long, value_name = "FILE")]
    pub document: Option<PathBuf>,
}

/// `bosun-hubd cert rotate retire`.
#[derive(Debug, Args)]
pub struct RetireArgs {
    /// Where the hub's state and key are.
    #[command(flatten)]
    pub hub: CertArgs,
    /// Write the unsigned pin set naming the keys left (the active one) here.
    #[arg(long, value_name = "FILE")]
    pub document: Option<PathBuf>,
}

/// `bosun-hubd cert rotate document`.
#[derive(Debug, Args)]
pub struct DocumentArgs {
    /// Where the hub's state and key are.
    #[command(flatten)]
    pub hub: CertArgs,
    /// Where to write it.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Bind the set to this host (default: the whole fleet).
    #[arg(long, value_name = "HOST_ID")]
    pub host: Option<uuid::Uuid>,
}

/// `bosun-hubd cert rotate publish`.
#[derive(Debug, Args)]
pub struct PublishArgs {
    /// Where the hub's state and key are.
    #[command(flatten)]
    pub hub: CertArgs,
    /// The pin set as signed (the exact bytes).
    #[arg(long, value_name = "FILE")]
    pub document: PathBuf,
    /// Its armored signature (default: the document's path with `.sig` added, as
    /// `ssh-keygen -Y sign` writes it).
    #[arg(long, value_name = "FILE")]
    pub signature: Option<PathBuf>,
}

/// `bosun-hubd cert rotate activate`.
#[derive(Debug, Args)]
pub struct ActivateArgs {
    /// Where the hub's state and key are.
    #[command(flatten)]
    pub hub: CertArgs,
    /// Activate although some live hosts do not hold the staged key yet: they lose contact
    /// until they are enrolled again.
    #[arg(long)]
    pub force: bool,
}

impl CertArgs {
    /// The hub's settings these options and the config file give (its data directory, key
    /// files and store).
    pub fn hub_config(&self) -> Result<crate::HubConfig, ConfigError> {
        let mut config = file(self.config.as_ref())?.resolve(Overrides {
            data_dir: self.data.clone(),
            listen: None,
            admin_listen: None,
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            poll_interval_secs: None,
            webhook: None,
            silence_window_secs: None,
            stopped_grace_secs: None,
        })?;
        config.store = self.store.clone().unwrap_or_default();
        Ok(config)
    }
}

/// The config file `--config` names, or an empty one.
fn file(config: Option<&PathBuf>) -> Result<HubFile, ConfigError> {
    config.map_or_else(|| Ok(HubFile::default()), |path| HubFile::load(path))
}

impl InitArgs {
    /// The data directory `init` creates.
    pub fn data_dir(&self) -> Result<PathBuf, ConfigError> {
        file(self.config.as_ref())?.data_dir(self.data.clone())
    }
}

impl ServeArgs {
    /// The hub's settings: these options over the config file over the defaults.
    pub fn hub_config(self) -> Result<crate::HubConfig, ConfigError> {
        let file = file(self.config.as_ref())?;
        let store = self.store.unwrap_or_default();
        let mut config = file.resolve(Overrides {
            data_dir: self.data,
            listen: self.listen,
            admin_listen: self.admin_listen,
            tls_cert: self.tls_cert,
            tls_key: self.tls_key,
            poll_interval_secs: self.poll_interval,
            webhook: self.webhook,
            silence_window_secs: self.silence_window,
            stopped_grace_secs: self.stopped_grace,
        })?;
        config.store = store;
        Ok(config)
    }
}

/// The default config path, for documentation.
pub const DEFAULT_CONFIG: &str = config_file::DEFAULT_PATH;
