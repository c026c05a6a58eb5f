//! The dashboard walked through in headless Chromium over a live fleet
//! ([`super::fixture`]), keeping the screenshots as `target/test-artifacts/dashboard-*.png`.

use std::path::{Path, PathBuf};

use bosun_hubd::ui::COOKIE_NAME;

use super::browser::{self, eval, eval_string, screenshot, text, viewport, wait_for_path};
use super::fixture;

/// `target/test-artifacts` of the workspace (or of `CARGO_TARGET_DIR`).
fn artifacts_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // hubd/ is one level below the workspace root.
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
            manifest.parent().unwrap_or(manifest).join("target")
        });
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Logs in (after a refused token), reads every page, checks the cookie and the phone width,
/// keeps the screenshots and logs out.
pub async fn run() {
    let fleet = fixture::fleet().await;
    let hub = &fleet.hub;
    let artifacts = artifacts_dir();
    let chromium = browser::Chromium::launch().await;

    // Not logged in: any page lands on the login form.
    let page = chromium
        .open(&format!("{}/ui/hosts/{}", hub.url, fleet.alpha))
        .await;
    wait_for_path(&page, "/ui/login").await;
    assert!(text(&page).await.contains("Operator token"));

    // A wrong token: the form again, with a message, and no session.
    submit_login(&page, "bsa_wrong").await;
    wait_for_path(&page, "/ui/login").await;
    let refused = text(&page).await;
    assert!(
        refused.contains("That is not a valid operator token of this hub."),
        "{refused}"
    );

    // The right token: the fleet.
    submit_login(&page, &hub.admin).await;
    wait_for_path(&page, "/ui/").await;
    let fleet_text = text(&page).await;
    for wanted in [
        "pve-alpha",
        "pve-beta",
        "pve-gamma",
        "overdue",
        "never polled",
    ] {
        assert!(
            fleet_text.contains(wanted),
            "fleet lacks {wanted}: {fleet_text}"
        );
    }
    let state_of = |host: uuid::Uuid| {
        format!("document.querySelector('tr[data-host=\"{host}\"] .badge').innerText")
    };
    // Alpha polls on time, but its USB target is gone (an open storage_lost alert): its state
    // rolls up to critical, never a green ok beside an open alert.
    assert_eq!(eval(&page, &state_of(fleet.alpha)).await, "critical");
    assert_eq!(eval(&page, &state_of(fleet.beta)).await, "overdue");
    assert_eq!(eval(&page, &state_of(fleet.gamma)).await, "never polled");
    assert!(
        eval(&page, "document.getElementById('overdue').innerText")
            .await
            .as_str()
            .unwrap()
            .contains("pve-beta")
    );

    // The session cookie as the browser holds it.
    let cookies = browser::bounded("reading cookies", page.get_cookies()).await;
    let session = cookies
        .iter()
        .find(|c| c.name == COOKIE_NAME)
        .expect("a session cookie");
    assert!(session.http_only && session.secure, "{session:?}");
    assert_eq!(
        session.same_site,
        Some(chromiumoxide::cdp::browser_protocol::network::CookieSameSite::Strict)
    );
    assert!(!session.session, "the cookie expires by itself");
    assert_eq!(
        eval(&page, "document.cookie").await,
        "",
        "scripts cannot read it"
    );
    screenshot(&page, &artifacts.join("dashboard-fleet-desktop.png")).await;

    // A host page: guests, backups with ages, restore tests, alerts, jobs, events.
    browser::goto(&page, &format!("{}/ui/hosts/{}", hub.url, fleet.alpha)).await;
    let host_text = text(&page).await;
    for wanted in [
        "acme-app",
        "sha256:abababababab",
        "Acme Bakery Ltd",
        "running",
        "old-staging",
        "not in desired state",
        "last applied",
        "3h 0m ago",
        "datastore full",
        "1.5 GiB",
        "passed",
        "41s",
        "usb-backup-1",
        "disconnected",
        "storage_lost",
        "backup_failed",
        "force-backup",
        "succeeded",
        "backup done in 52s",
        "queued",
        "enrolled",
        "desired_changed",
    ] {
        assert!(
            host_text.contains(wanted),
            "host page lacks {wanted}: {host_text}"
        );
    }
    // Each guest's kind in its own column: the desired container, the VM no one desires.
    let kinds = eval_string(
        &page,
        "Array.from(document.querySelectorAll('#guests td[data-label=\"Kind\"]'))\
         .map(c => c.innerText).join(',')",
    )
    .await;
    assert_eq!(kinds, "lxc,qemu", "{host_text}");
    let job = fleet.job.simple().to_string();
    assert!(host_text.contains(&job[..8]), "the finished job is listed");
    let job_rows = eval(&page, "document.querySelectorAll('#jobs tbody tr').length").await;
    assert_eq!(job_rows, 2);
    history_charts_drawn(&page).await;
    screenshot(&page, &artifacts.join("dashboard-host-desktop.png")).await;

    browser::goto(&page, &format!("{}/ui/alerts", hub.url)).await;
    let alerts = text(&page).await;
    for wanted in ["host_overdue", "pve-beta", "storage_lost", "backup_failed"] {
        assert!(alerts.contains(wanted), "alerts lack {wanted}: {alerts}");
    }
    browser::goto(&page, &format!("{}/ui/events", hub.url)).await;
    let events = text(&page).await;
    for wanted in ["enrolled", "job_queued", "job_finished", "overdue"] {
        assert!(events.contains(wanted), "events lack {wanted}: {events}");
    }

    // A phone: no page scrolls sideways. (A full-page screenshot resets the emulated
    // device, so it is set again for each page.)
    for path in [
        "/ui/".to_owned(),
        format!("/ui/hosts/{}", fleet.alpha),
        "/ui/alerts".to_owned(),
        "/ui/events".to_owned(),
    ] {
        viewport(&page, 390, 844, true).await;
        browser::goto(&page, &format!("{}{path}", hub.url)).await;
        let fits = eval(
            &page,
            "[document.documentElement.scrollWidth, window.innerWidth]",
        )
        .await;
        let (scroll, inner) = (fits[0].as_i64().unwrap(), fits[1].as_i64().unwrap());
        // A mobile viewport widens itself to fit content that overflows, so the width is
        // checked as well as the scroll width.
        assert_eq!(inner, 390, "{path} is wider than the phone");
        assert!(scroll <= inner, "{path} overflows: {scroll} > {inner}");
        if path == "/ui/" {
            screenshot(&page, &artifacts.join("dashboard-fleet-phone.png")).await;
        } else if path.starts_with("/ui/hosts/") {
            history_charts_drawn(&page).await;
            screenshot(&page, &artifacts.join("dashboard-host-phone.png")).await;
        }
    }

    // Logout ends the session: the pages send the browser back to the login form.
    browser::mark_stale(&page).await;
    browser::bounded("clicking logout", async {
        page.find_element("form.logout button")
            .await?
            .click()
            .await?;
        Ok::<_, chromiumoxide::error::CdpError>(())
    })
    .await;
    wait_for_path(&page, "/ui/login").await;
    browser::goto(&page, &format!("{}/ui/", hub.url)).await;
    wait_for_path(&page, "/ui/login").await;
    let cookies = browser::bounded("reading cookies", page.get_cookies()).await;
    assert!(cookies.iter().all(|c| c.name != COOKIE_NAME), "{cookies:?}");
    chromium.close().await;
    for name in [
        "dashboard-fleet-desktop.png",
        "dashboard-host-desktop.png",
        "dashboard-fleet-phone.png",
        "dashboard-host-phone.png",
    ] {
        let size = std::fs::metadata(artifacts.join(name)).unwrap().len();
        assert!(size > 10_000, "{name} is only {size} bytes");
    }
}

/// The host page's history as the browser lays it out: a chart per series the host reported
/// (CPU, its peak, memory, root disk, poll time, backups; alpha names no pool), each an inline
/// SVG at least 200 px wide and never past the page's right edge, captioned in words; the page
/// runs no script. Alpha polled over 200 s of the hub's clock: one five-minute bucket or two.
/// Each sample is a round dot inside the chart (a stroke from a lone one to the bucket's end
/// ran off the right edge, and the chart looked empty); one is captioned `1 sample`, two are
/// joined by a line and captioned with their mean, high and the newest bucket's figure, never
/// "now".
async fn history_charts_drawn(page: &chromiumoxide::Page) {
    let charts = eval(
        page,
        "Array.from(document.querySelectorAll('#history figure.chart')).map(f => { \
           const svg = f.querySelector('svg'); const r = svg.getBoundingClientRect(); \
           const line = svg.querySelector('path.line'); \
           const dot = svg.querySelector('path.dot'); const box = dot ? dot.getBBox() : null; \
           const style = dot ? getComputedStyle(dot) : null; \
           return { id: f.id, width: r.width, height: r.height, right: r.right, \
                    length: line ? line.getTotalLength() : 0, \
                    dot_x: box ? box.x : -1, dot_y: box ? box.y : -1, \
                    dot_width: style ? parseFloat(style.strokeWidth) : 0, \
                    dot_cap: style ? style.strokeLinecap : '', \
                    caption: f.querySelector('figcaption').innerText, \
                    title: svg.querySelector('title').textContent, \
                    axis: Array.from(f.querySelectorAll('.axis span')).map(a => a.textContent).join('|') }; })",
    )
    .await;
    let charts = charts.as_array().unwrap();
    let ids: Vec<&str> = charts.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "chart-cpu",
            "chart-cpu-peak",
            "chart-memory",
            "chart-disk",
            "chart-poll",
            "chart-backups"
        ]
    );
    let page_width = eval(page, "document.documentElement.clientWidth")
        .await
        .as_f64()
        .unwrap();
    let one_sample = charts[0]["caption"].as_str().unwrap().contains("1 sample");
    for chart in charts {
        let number = |key: &str| chart[key].as_f64().unwrap();
        let caption = chart["caption"].as_str().unwrap();
        // Each of a few samples is a round dot inside the chart, whatever line joins them.
        assert!(
            (0.0..=288.0).contains(&number("dot_x")) && (0.0..=48.0).contains(&number("dot_y")),
            "the sample's dot is not inside the chart: {chart}"
        );
        assert!(
            number("dot_width") >= 4.0 && chart["dot_cap"] == "round",
            "the dot would not show: {chart}"
        );
        if one_sample {
            assert_eq!(number("length"), 0.0, "one sample is no line: {chart}");
            assert!(caption.contains("1 sample: "), "{chart}");
        } else {
            assert!(number("length") > 0.0, "two samples are a line: {chart}");
            assert!(
                caption.contains("high") && caption.contains("last 5 min"),
                "{chart}"
            );
        }
        assert!(!caption.contains("now"), "{chart}");
        assert!(
            number("width") >= 200.0 && number("height") >= 30.0,
            "too small to read: {chart}"
        );
        assert!(number("right") <= page_width, "past the edge: {chart}");
        let said = if one_sample { "1 sample" } else { "high" };
        assert!(chart["title"].as_str().unwrap().contains(said), "{chart}");
        assert_eq!(chart["axis"], "24h ago|now", "{chart}");
    }
    // alpha reported 10% CPU in every poll.
    let cpu = charts[0]["caption"].as_str().unwrap();
    assert!(
        cpu.ends_with("1 sample: 10% (last 5 min)")
            || cpu.ends_with("mean 10%, high 10%, last 5 min 10%"),
        "{cpu}"
    );
    assert_eq!(eval(page, "document.scripts.length").await, 0);
}

/// Types `token` into the login form and submits it with a click.
async fn submit_login(page: &chromiumoxide::Page, token: &str) {
    browser::mark_stale(page).await;
    browser::bounded("submitting the login form", async {
        let input = page.find_element("#token").await?;
        input.click().await?;
        input.type_str(token).await?;
        page.find_element("form button[type=submit]")
            .await?
            .click()
            .await?;
        Ok::<_, chromiumoxide::error::CdpError>(())
    })
    .await;
}
