//! Key pins against the real binary: `init` prints the certificate's key pin beside its
//! fingerprint, and a client pinned by the key keeps reaching a hub whose certificate was
//! renewed over the same key, while a client pinned by the old certificate's fingerprint, or
//! by a key the hub does not hold, is refused in the handshake.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::common;

use common::field;

const HUBD: &str = env!("CARGO_BIN_EXE_bosun-hubd");

/// Kills the hub when the test ends, however it ends.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Serves `data` (with `cert` and `key` when given); returns the hub, the address it bound and
/// the `key pin:` line it printed.
fn serve(data: &Path, files: Option<(&Path, &Path)>) -> (Served, String, String) {
    let mut command = Command::new(HUBD);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("BOSUN_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((cert, key)) = files {
        command
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key);
    }
    let mut child = command.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    for _ in 0..2 {
        stdout.read_line(&mut printed).unwrap();
    }
    let key_pin = field(&printed, "key pin:").to_owned();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let addr = stderr
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            line.split("addr=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next().map(str::to_owned))
        })
        .expect("serve logs its address");
    (Served(child), addr, key_pin)
}

/// What a client pinned by `pin` gets from `/v1/health`: its status, or the error's text.
async fn health(addr: &str, pin: &str) -> Result<u16, String> {
    let tls = bosun_hubd::tls::pinned_client_config(pin).expect("a valid pin");
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .build()
        .unwrap();
    client
        .get(format!("https://{addr}/v1/health"))
        .send()
        .await
        .map(|resp| resp.status().as_u16())
        .map_err(|err| format!("{:?}", anyhow::Error::from(err)))
}

#[tokio::test]
async fn a_key_pin_outlives_a_renewal_of_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = Command::new(HUBD)
        .args(["init", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let fingerprint = field(&text, "fingerprint:").to_owned();
    let key_pin = field(&text, "key pin:").to_owned();
    assert!(
        key_pin.starts_with("spki:") && key_pin.len() == 5 + 64,
        "{text}"
    );

    let (hub, addr, served_pin) = serve(&data, None);
    assert_eq!(served_pin, key_pin, "serve prints the same key pin");
    assert_eq!(health(&addr, &fingerprint).await, Ok(200));
    assert_eq!(health(&addr, &key_pin).await, Ok(200));
    drop(hub);

    // The certificate is renewed over the same key (a new serial, new dates, the same names).
    let key_pem = std::fs::read_to_string(data.join("tls/key.pem")).unwrap();
    let key = rcgen::KeyPair::from_pem(&key_pem).unwrap();
    let renewed = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cert_file = dir.path().join("renewed.pem");
    std::fs::write(&cert_file, renewed.pem()).unwrap();
    let key_file = data.join("tls/key.pem");

    let (_hub, addr, served_pin) = serve(&data, Some((&cert_file, &key_file)));
    assert_eq!(served_pin, key_pin, "a renewal keeps the key pin");
    assert_eq!(
        health(&addr, &key_pin).await,
        Ok(200),
        "a client pinned by the key carries on"
    );
    let refused = health(&addr, &fingerprint)
        .await
        .expect_err("the old certificate's fingerprint names the old certificate only");
    assert!(refused.contains("matches none of the pinned"), "{refused}");

    // A key the hub does not hold is refused, whatever certificate it presents.
    let stranger = rcgen::KeyPair::generate().unwrap();
    let stranger_cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&stranger)
        .unwrap();
    let stranger_pin = bosun_pin::Pin::of_key(stranger_cert.der())
        .unwrap()
        .to_string();
    let refused = health(&addr, &stranger_pin)
        .await
        .expect_err("an unknown key");
    assert!(refused.contains("matches none of the pinned"), "{refused}");
}
