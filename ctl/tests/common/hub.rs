//! The hub both `bosunctl` suites run against: a real hub on 127.0.0.1:0, its pin and admin
//! token, in a temporary directory that also serves as `HOME`.

use std::sync::Arc;

use bosun_hubd::{Hub, HubConfig};
use tempfile::TempDir;

pub struct Fixture {
    pub url: String,
    pub fingerprint: String,
    pub admin: String,
    pub dir: TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn start_hub() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("hub");
    let report = bosun_hubd::init(&data, vec!["localhost".into()], false).unwrap();
    let mut config = HubConfig::new(&data, "127.0.0.1:0".parse().unwrap());
    config.dead_man.sweep_interval = None;
    let hub = Hub::open(config, Arc::new(bosun_hubd::clock::SystemClock))
        .await
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = hub.clone();
    tokio::spawn(async move {
        server
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await
    });
    Fixture {
        url,
        fingerprint: hub.fingerprint().to_owned(),
        admin: report.admin_token.expose().to_owned(),
        dir,
        _stop: stop,
    }
}
