//! A throwaway PostgreSQL cluster for the hub's tests and benchmarks: `initdb` and `pg_ctl` from
//! Debian's `postgresql` package in a temporary directory, listening only on a unix socket
//! there, stopped and removed on drop. PostgreSQL refuses to run as root, so as root the
//! cluster runs as the unprivileged `bosun-test` user (`scripts/install-deps` creates it).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian installs the server binaries (`/usr/lib/postgresql/<major>/bin`).
pub const DEBIAN_ROOT: &str = "/usr/lib/postgresql";

/// The user a cluster runs as when the caller is root.
pub const UNPRIVILEGED_USER: &str = "bosun-test";

/// Why a cluster could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No `initdb` under `/usr/lib/postgresql`.
    #[error(
        "no PostgreSQL server binaries under {DEBIAN_ROOT} (install Debian's `postgresql`: scripts/install-deps)"
    )]
    NoServer,
    /// A file-system step failed.
    #[error("{what}")]
    Io {
        /// The step.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A PostgreSQL program failed.
    #[error("`{program}` failed ({status}): {output}")]
    Program {
        /// The program.
        program: String,
        /// Its exit status.
        status: String,
        /// What it printed.
        output: String,
    },
}

/// A running throwaway cluster.
#[derive(Debug)]
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_user: Option<&'static str>,
}

/// The newest `/usr/lib/postgresql/<major>/bin` holding `initdb`.
pub fn server_bin() -> Option<PathBuf> {
    let mut majors: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_ROOT)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((major, bin))
        })
        .collect();
    majors.sort();
    majors.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    // `/proc/self` belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

impl PgCluster {
    /// Creates and starts a cluster (a few seconds); its superuser is `bosun`, trusted on the
    /// socket, which only the cluster's owner can reach (the directory is 0700).
    pub fn start() -> Result<Self, ClusterError> {
        let bin = server_bin().ok_or(ClusterError::NoServer)?;
        let dir = tempfile::Builder::new()
            .prefix("bosun-pg-")
            .tempdir()
            .map_err(|source| ClusterError::Io {
                what: "creating the cluster directory".into(),
                source,
            })?;
        let as_user = is_root().then_some(UNPRIVILEGED_USER);
        if let Some(user) = as_user {
            run(Command::new("chown").arg(user).arg(dir.path()), "chown")?;
        }
        let cluster = Self { dir, bin, as_user };
        let data = cluster.data_dir();
        cluster.run_pg(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "bosun".as_ref(),
                "-A".as_ref(),
                "trust".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--no-sync".as_ref(),
                "--no-instructions".as_ref(),
            ],
        )?;
        let options = format!(
            "-k {} -p 5432 -c listen_addresses='' -c max_connections=200 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off",
            cluster.socket_dir().display()
        );
        let log = cluster.dir.path().join("server.log");
        cluster.run_pg(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-o".as_ref(),
                options.as_ref(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "start".as_ref(),
            ],
        )?;
        Ok(cluster)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The directory holding the server's socket.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Creates database `name` and returns its URL.
    pub fn create_database(&self, name: &str) -> Result<String, ClusterError> {
        let socket = self.socket_dir().to_path_buf();
        self.run_pg(
            "createdb",
            &[
                "-h".as_ref(),
                socket.as_os_str(),
                "-U".as_ref(),
                "bosun".as_ref(),
                name.as_ref(),
            ],
        )?;
        Ok(self.url(name))
    }

    /// The URL of database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        url(self.socket_dir(), name)
    }

    fn run_pg(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<(), ClusterError> {
        let path = self.bin.join(program);
        let mut command = match self.as_user {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.arg("-u").arg(user).arg("--").arg(&path);
                command
            }
            None => Command::new(&path),
        };
        command.args(args).current_dir(self.dir.path());
        run(&mut command, program)
    }
}

/// Creates database `name` on the server whose socket is in `socket_dir` (a cluster of
/// `scripts/with-postgres`, whose superuser is `bosun`) and returns its URL.
pub fn create_database_on(socket_dir: &Path, name: &str) -> Result<String, ClusterError> {
    let bin = server_bin().ok_or(ClusterError::NoServer)?;
    run(
        Command::new(bin.join("createdb"))
            .arg("-h")
            .arg(socket_dir)
            .args(["-U", "bosun", name]),
        "createdb",
    )?;
    Ok(url(socket_dir, name))
}

/// The URL of database `name` on a server whose socket is in `socket_dir`.
pub fn url(socket_dir: &Path, name: &str) -> String {
    let encoded: String = socket_dir
        .display()
        .to_string()
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                char::from(b).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect();
    format!("postgres://bosun@{encoded}/{name}")
}

fn run(command: &mut Command, program: &str) -> Result<(), ClusterError> {
    let output = command.output().map_err(|source| ClusterError::Io {
        what: format!("running {program}"),
        source,
    })?;
    if output.status.success() {
        return Ok(());
    }
    Err(ClusterError::Program {
        program: program.to_owned(),
        status: output.status.to_string(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    })
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.data_dir();
        let stopped = self.run_pg(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                "immediate".as_ref(),
                "-w".as_ref(),
                "stop".as_ref(),
            ],
        );
        if let Err(err) = stopped {
            tracing::warn!(error = %err, "stopping the throwaway PostgreSQL cluster failed");
        }
    }
}
