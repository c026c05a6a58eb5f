//! Debian's Chromium, headless, driven over the DevTools protocol (chromiumoxide). The binary
//! is `BOSUN_CHROMIUM` or `chromium` on PATH (`scripts/install-deps` installs it); nothing is
//! downloaded. Every wait is bounded; the browser is killed when [`Chromium`] is dropped.

use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::emulation::SetDeviceMetricsOverrideParams;
use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::{Browser, BrowserConfig, Page};
use futures::StreamExt as _;
use tempfile::TempDir;
use tokio::task::JoinHandle;

/// The longest any one browser step may take.
pub const STEP: Duration = Duration::from_secs(20);

/// Runs `step` within [`STEP`], panicking with `what` when it errs or runs over.
pub async fn bounded<T, E: std::fmt::Debug>(
    what: &str,
    step: impl Future<Output = Result<T, E>>,
) -> T {
    match tokio::time::timeout(STEP, step).await {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => panic!("{what}: {error:?}"),
        Err(_) => panic!("{what}: no answer within {STEP:?}"),
    }
}

fn chromium_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BOSUN_CHROMIUM") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("chromium"))
        .find(|candidate| candidate.is_file())
        .expect("Chromium is needed for the dashboard test: run scripts/install-deps")
}

/// A headless Chromium with its own throwaway profile.
pub struct Chromium {
    browser: Browser,
    handler: JoinHandle<()>,
    _profile: TempDir,
}

impl Chromium {
    /// Starts the browser. The hub's certificate is self-signed for the test, so certificate
    /// errors are ignored (this browser talks to nothing else).
    pub async fn launch() -> Self {
        let profile = tempfile::tempdir().unwrap();
        let mut config = BrowserConfig::builder()
            .chrome_executable(chromium_binary())
            .new_headless_mode()
            .user_data_dir(profile.path())
            .window_size(1280, 900)
            .viewport(None)
            .launch_timeout(STEP)
            .request_timeout(STEP)
            .args([
                "--ignore-certificate-errors",
                "--disable-gpu",
                "--no-first-run",
                "--disable-component-update",
            ]);
        // Chromium's sandbox refuses to run as root; it is wanted everywhere else.
        if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() == Some(0) {
            config = config.no_sandbox();
        }
        let config = config.build().unwrap();
        let (browser, mut handler) = bounded("launching Chromium", Browser::launch(config)).await;
        let handler = tokio::spawn(async move { while handler.next().await.is_some() {} });
        Self {
            browser,
            handler,
            _profile: profile,
        }
    }

    /// A new tab at `url`.
    pub async fn open(&self, url: &str) -> Page {
        let page = bounded("opening a tab", self.browser.new_page("about:blank")).await;
        goto(&page, url).await;
        page
    }

    /// Closes the browser and waits for it to exit.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(STEP, self.browser.close()).await;
        let _ = tokio::time::timeout(STEP, self.browser.wait()).await;
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        self.handler.abort();
        // The child was spawned with kill-on-drop: dropping `browser` ends it.
    }
}

/// Navigates and waits for the load.
pub async fn goto(page: &Page, url: &str) {
    bounded(&format!("loading {url}"), page.goto(url)).await;
}

/// Marks the document now shown, so [`wait_for_path`] waits for the next one.
pub async fn mark_stale(page: &Page) {
    eval(page, "document.documentElement.dataset.stale = 'yes'").await;
}

/// Waits until the tab shows a document at `expected_path` that is fully loaded and not the
/// one [`mark_stale`] marked.
pub async fn wait_for_path(page: &Page, expected_path: &str) {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        // Mid-navigation the old context may be gone: an error is just "not there yet".
        let js = "[location.pathname, document.readyState, document.documentElement?.dataset.stale || '']";
        let state = match tokio::time::timeout(STEP, page.evaluate(js)).await {
            Ok(Ok(result)) => result.value().cloned().unwrap_or_default(),
            _ => serde_json::Value::Null,
        };
        let field = |i: usize| state[i].as_str().unwrap_or_default().to_owned();
        if field(0) == expected_path && field(1) == "complete" && field(2).is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still at {state}, expected a new document at {expected_path}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Evaluates `js` in the page and returns its value as JSON.
pub async fn eval(page: &Page, js: &str) -> serde_json::Value {
    let result = bounded(&format!("evaluating {js}"), page.evaluate(js)).await;
    result.value().cloned().unwrap_or(serde_json::Value::Null)
}

/// Evaluates `js` to a string.
pub async fn eval_string(page: &Page, js: &str) -> String {
    eval(page, js).await.as_str().unwrap_or_default().to_owned()
}

/// The rendered text of the page (what a reader sees, escaped markup shown as text).
pub async fn text(page: &Page) -> String {
    eval_string(page, "document.body.innerText").await
}

/// Emulates a device of `width`×`height` CSS pixels (a phone when `mobile`).
pub async fn viewport(page: &Page, width: i64, height: i64, mobile: bool) {
    let scale = if mobile { 2.0 } else { 1.0 };
    bounded(
        "setting the viewport",
        page.execute(SetDeviceMetricsOverrideParams::new(
            width, height, scale, mobile,
        )),
    )
    .await;
}

/// Saves a full-page PNG screenshot to `path`.
pub async fn screenshot(page: &Page, path: &std::path::Path) {
    let params = ScreenshotParams::builder()
        .format(CaptureScreenshotFormat::Png)
        .full_page(true)
        .build();
    let png = bounded("taking a screenshot", page.screenshot(params)).await;
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    std::fs::write(path, png).unwrap();
}
