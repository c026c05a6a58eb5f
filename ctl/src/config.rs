//! Where `bosunctl` finds the hub: flags, then environment (`BOSUN_HUB_URL`,
//! `BOSUN_HUB_FINGERPRINT`, `BOSUN_ADMIN_TOKEN`), then the config file written by
//! `bosunctl hub init` (`$BOSUN_CTL_CONFIG`, else `$XDG_CONFIG_HOME/bosun/ctl.json`, else
//! `~/.config/bosun/ctl.json`, mode 0600).

use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret as _, SecretString};
use serde::{Deserialize, Serialize};

use crate::cli::GlobalArgs;
use crate::error::CtlError;

/// Resolved connection settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `https://host:port`, no trailing slash.
    pub url: String,
    /// Pinned leaf SHA-256, 64 lowercase hex digits.
    pub fingerprint: String,
    /// The admin token.
    pub token: SecretString,
}

#[derive(Debug, Deserialize)]
struct FileSettings {
    hub_url: Option<String>,
    fingerprint: Option<String>,
    admin_token: Option<SecretString>,
}

#[derive(Serialize)]
struct FileSettingsOut<'a> {
    hub_url: &'a str,
    fingerprint: &'a str,
    admin_token: &'a str,
}

/// The config file path.
pub fn path(args: &GlobalArgs) -> Option<PathBuf> {
    if let Some(path) = &args.config {
        return Some(path.clone());
    }
    if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(xdg).join("bosun/ctl.json"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config/bosun/ctl.json"))
}

fn read_file(path: &Path) -> Result<Option<FileSettings>, CtlError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| CtlError::ConfigSyntax {
                    path: path.to_owned(),
                    source,
                })
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CtlError::ConfigFile {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Checks and normalizes a hub URL.
pub fn normalize_url(url: &str) -> Result<String, CtlError> {
    let trimmed = url.trim().trim_end_matches('/');
    if !trimmed.starts_with("https://") || trimmed.len() <= "https://".len() {
        return Err(CtlError::BadUrl {
            url: url.to_owned(),
        });
    }
    Ok(trimmed.to_owned())
}

/// Checks and normalizes a fingerprint.
pub fn normalize_fingerprint(value: &str) -> Result<String, CtlError> {
    bosun_proto::fingerprint::normalize(value).ok_or_else(|| CtlError::BadFingerprint {
        value: value.to_owned(),
    })
}

/// Reads the admin token from `--admin-token-file`, or takes it from flag/env.
fn token_from_args(args: &GlobalArgs) -> Result<Option<SecretString>, CtlError> {
    if let Some(file) = &args.admin_token_file {
        let text = std::fs::read_to_string(file).map_err(|source| CtlError::ReadInput {
            path: file.clone(),
            source,
        })?;
        return Ok(Some(SecretString::from(text.trim().to_owned())));
    }
    Ok(args.admin_token.clone().map(SecretString::from))
}

/// Resolves settings from flags/env, falling back to the config file.
pub fn resolve(args: &GlobalArgs) -> Result<Settings, CtlError> {
    let file = match path(args) {
        Some(path) => read_file(&path)?,
        None => None,
    };
    let (file_url, file_fp, file_token) = match file {
        Some(f) => (f.hub_url, f.fingerprint, f.admin_token),
        None => (None, None, None),
    };
    let url = args
        .hub_url
        .clone()
        .or(file_url)
        .ok_or(CtlError::MissingSetting {
            setting: "hub URL",
            flag: "--hub-url",
            env: "BOSUN_HUB_URL",
        })?;
    let fingerprint = args
        .fingerprint
        .clone()
        .or(file_fp)
        .ok_or(CtlError::MissingSetting {
            setting: "hub fingerprint",
            flag: "--fingerprint",
            env: "BOSUN_HUB_FINGERPRINT",
        })?;
    let token = token_from_args(args)?
        .or(file_token)
        .ok_or(CtlError::MissingSetting {
            setting: "admin token",
            flag: "--admin-token-file",
            env: "BOSUN_ADMIN_TOKEN",
        })?;
    Ok(Settings {
        url: normalize_url(&url)?,
        fingerprint: normalize_fingerprint(&fingerprint)?,
        token,
    })
}

/// Resolves settings for `hub init`: only flags and environment count.
pub fn resolve_for_init(args: &GlobalArgs) -> Result<Settings, CtlError> {
    let url = args.hub_url.as_deref().ok_or(CtlError::MissingSetting {
        setting: "hub URL",
        flag: "--hub-url",
        env: "BOSUN_HUB_URL",
    })?;
    let fingerprint = args
        .fingerprint
        .as_deref()
        .ok_or(CtlError::MissingSetting {
            setting: "hub fingerprint",
            flag: "--fingerprint",
            env: "BOSUN_HUB_FINGERPRINT",
        })?;
    let token = token_from_args(args)?.ok_or(CtlError::MissingSetting {
        setting: "admin token",
        flag: "--admin-token-file",
        env: "BOSUN_ADMIN_TOKEN",
    })?;
    Ok(Settings {
        url: normalize_url(url)?,
        fingerprint: normalize_fingerprint(fingerprint)?,
        token,
    })
}

/// Writes the config file with mode 0600.
pub fn save(path: &Path, settings: &Settings) -> Result<(), CtlError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let err = |source| CtlError::ConfigFile {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let body = serde_json::to_vec_pretty(&FileSettingsOut {
        hub_url: &settings.url,
        fingerprint: &settings.fingerprint,
        admin_token: settings.token.expose_secret(),
    })
    .map_err(|source| CtlError::ConfigSyntax {
        path: path.to_owned(),
        source,
    })?;
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    file.write_all(&body)
        .and_then(|()| file.sync_all())
        .map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(config: &Path) -> GlobalArgs {
        GlobalArgs {
            hub_url: None,
            fingerprint: None,
            admin_token: None,
            admin_token_file: None,
            config: Some(config.to_owned()),
            json: false,
        }
    }

    #[test]
    fn flags_win_over_the_config_file_and_values_are_normalized() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.json");
        let saved = Settings {
            url: "https://file.example:7443".into(),
            fingerprint: "ab".repeat(32),
            token: SecretString::from("bsa_from_file".to_owned()),
        };
        save(&path, &saved).unwrap();

        let from_file = resolve(&args(&path)).unwrap();
        assert_eq!(from_file.url, "https://file.example:7443");
        assert_eq!(from_file.token.expose_secret(), "bsa_from_file");

        let mut flags = args(&path);
        flags.hub_url = Some("https://flag.example/".into());
        flags.fingerprint = Some(format!("SHA256:{}", "CD".repeat(32)));
        let resolved = resolve(&flags).unwrap();
        assert_eq!(resolved.url, "https://flag.example");
        assert_eq!(resolved.fingerprint, "cd".repeat(32));
        assert_eq!(resolved.token.expose_secret(), "bsa_from_file");
    }

    #[test]
    fn bad_settings_are_config_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = resolve(&args(&dir.path().join("none.json"))).unwrap_err();
        assert!(matches!(
            missing,
            CtlError::MissingSetting {
                setting: "hub URL",
                ..
            }
        ));
        assert_eq!(missing.exit_code(), crate::error::exit::CONFIG);
        assert!(matches!(
            normalize_url("http://hub"),
            Err(CtlError::BadUrl { .. })
        ));
        assert!(matches!(
            normalize_fingerprint("abc"),
            Err(CtlError::BadFingerprint { .. })
        ));
        let garbage = dir.path().join("garbage.json");
        std::fs::write(&garbage, "{not json").unwrap();
        let err = resolve(&args(&garbage)).unwrap_err();
        assert!(matches!(err, CtlError::ConfigSyntax { .. }));
        // The error text never carries the token.
        assert!(!format!("{err:?}").contains("bsa_"));
    }
}
