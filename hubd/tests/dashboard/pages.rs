//! What the fleet and host pages say, read as an operator reads them: every host's id, typed
//! back; a time that still says when on a page saved and read later; a chart's newest point
//! named as the bucket it is (a bucket's CPU peak is not the CPU now); one sample drawn and
//! said as one; a PBS tier named by its label, so the guest beside it never breaks.

use bosun_hubd::clock::Clock as _;
use bosun_proto::report::{BackupReport, GuestReport, GuestStatus, StateReport, TierReport};
use reqwest::StatusCode;
use uuid::Uuid;

use super::{get, login, ui_client};
use crate::common::{TestHub, full, report, send};

/// The text of the element whose opening tag contains `marker`, up to its first child tag.
fn cell<'a>(page: &'a str, marker: &str) -> &'a str {
    let at = page
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker}: {page}"));
    let rest = &page[at..];
    let open_end = rest.find('>').unwrap() + 1;
    rest[open_end..].split('<').next().unwrap()
}

/// A chart's caption on the host page.
fn caption<'a>(page: &'a str, id: &str) -> &'a str {
    let marker = format!(r#"id="chart-{id}""#);
    let at = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no chart {id}: {page}"));
    let rest = &page[at..];
    let muted = rest.find(r#"<span class="muted">"#).unwrap() + r#"<span class="muted">"#.len();
    rest[muted..].split('<').next().unwrap()
}

/// The chart's markup, from its figure to the figure's end.
fn chart<'a>(page: &'a str, id: &str) -> &'a str {
    let marker = format!(r#"id="chart-{id}""#);
    let at = page.find(&marker).unwrap();
    let rest = &page[at..];
    &rest[..rest.find("</figure>").unwrap()]
}

fn with_cpu(seq: u64, cpu: f64) -> StateReport {
    let mut r = report();
    r.seq = seq;
    if let Some(host) = r.host.as_mut() {
        host.cpu_usage = cpu;
    }
    r
}

#[tokio::test]
async fn the_fleet_shows_every_hosts_id_and_a_saved_page_still_says_when() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (one, one_key) = hub.enroll("pve-one").await;
    let (two, _) = hub.enroll("pve-two").await;
    send(&hub, one, &one_key, &full(&report())).await;
    let session = login(&hub, &client).await;
    let fleet = get(&hub, &client, "/ui/", Some(&session))
        .await
        .text()
        .await
        .unwrap();
    for host in [one, two] {
        let shown = cell(&fleet, &format!(r#"class="mono host-id" title="{host}""#)).trim();
        assert!(
            shown.len() >= 8 && host.to_string().starts_with(shown),
            "{shown} of {host}"
        );
        // What the page shows, the page takes back.
        let page = get(&hub, &client, &format!("/ui/hosts/{shown}"), Some(&session)).await;
        assert_eq!(page.status(), StatusCode::OK, "{shown}");
    }
    // A time says its age and, beside it, itself: a page saved now and read tomorrow still
    // says when the host was last seen.
    let seen = hub.clock.now().strftime("%Y-%m-%d %H:%M:%SZ").to_string();
    assert!(
        fleet.contains(&format!(r#"0s ago <span class="abs">({seen})</span>"#)),
        "{fleet}"
    );
    let host = get(&hub, &client, &format!("/ui/hosts/{one}"), Some(&session))
        .await
        .text()
        .await
        .unwrap();
    let facts = &host[host.find(r#"id="host-facts""#).unwrap()..];
    let last_seen = &facts[facts.find("Last seen").unwrap()..];
    assert!(
        last_seen[..last_seen.find("</dd>").unwrap()].contains(&format!("({seen})")),
        "{last_seen}"
    );
}

#[tokio::test]
async fn a_buckets_cpu_peak_is_never_said_to_be_the_cpu_now_and_one_sample_is_a_dot() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, key) = hub.enroll("pve-load").await;
    // A load spike and its end within one bucket: the host now runs at 5%.
    send(&hub, host, &key, &full(&with_cpu(1, 0.97))).await;
    send(&hub, host, &key, &full(&with_cpu(2, 0.05))).await;
    let session = login(&hub, &client).await;
    let path = format!("/ui/hosts/{host}");
    let page = get(&hub, &client, &path, Some(&session))
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("5% used"), "{page}");
    let peak = caption(&page, "cpu-peak");
    assert!(
        !peak.contains("now"),
        "the peak is no reading of now: {peak}"
    );
    assert_eq!(peak, "1 sample: 97% (last 5 min)");
    assert_eq!(caption(&page, "cpu"), "1 sample: 51% (last 5 min)");
    // One sample: a dot inside the chart, no line.
    let drawn = chart(&page, "cpu");
    assert!(drawn.contains(r#"class="dot""#), "{drawn}");
    assert!(!drawn.contains(r#"class="line""#), "{drawn}");

    // The next bucket at 5%: two samples, a line, and the newest named as its bucket.
    hub.clock.advance(std::time::Duration::from_secs(300));
    send(&hub, host, &key, &full(&with_cpu(3, 0.05))).await;
    let page = get(&hub, &client, &path, Some(&session))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(caption(&page, "cpu-peak"), "high 97%, last 5 min 5%");
    assert_eq!(caption(&page, "cpu"), "mean 28%, high 51%, last 5 min 5%");
    // Two points a bucket apart are a pixel of line across a day: each is a dot as well.
    let drawn = chart(&page, "cpu");
    assert!(drawn.contains(r#"class="line""#), "{drawn}");
    assert_eq!(drawn.matches(" l0 0").count(), 2, "{drawn}");
}

#[tokio::test]
async fn a_pbs_tier_is_named_by_its_label_and_the_guest_beside_it_never_breaks() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, key) = hub.enroll("pve-tiers").await;
    let charlie = Uuid::new_v4();
    let fingerprint = ["ab"; 32].join(":");
    let pbs = format!("bosun@pbs:pbs.example:8007:store1#{fingerprint}");
    let now = hub.clock.now();
    let mut r = report();
    r.guests = vec![GuestReport {
        guest_id: Some(charlie),
        vmid: 103,
        kind: bosun_proto::desired::GuestKind::Lxc,
        hostname: "charlie".into(),
        status: GuestStatus::Running,
        resources: None,
        controller_digest: None,
        controller_expected: None,
        addresses: Vec::new(),
    }];
    r.tiers = vec![TierReport {
        tier: 2,
        target: pbs.clone(),
        storage_id: "bosun-pbs".into(),
        schedule: "hourly".into(),
        extra_schedule: None,
        desired: Default::default(),
        applied: Default::default(),
        held: None,
    }];
    r.last_backups = vec![BackupReport {
        guest_id: charlie,
        target: pbs.clone(),
        finished_at: now,
        ok: true,
        tier: Some(2),
        ..BackupReport::default()
    }];
    send(&hub, host, &key, &full(&r)).await;
    let session = login(&hub, &client).await;
    let page = get(&hub, &client, &format!("/ui/hosts/{host}"), Some(&session))
        .await
        .text()
        .await
        .unwrap();
    let backups = &page[page.find(r#"id="backups""#).unwrap()..];
    let tier = cell(backups, r#"data-label="Tier""#);
    assert_eq!(tier, "2 · bosun@pbs:pbs.example:8007:store1", "{backups}");
    assert!(
        backups.contains(&format!(r#"data-label="Tier" title="{pbs}""#)),
        "the whole identity on hover: {backups}"
    );
    assert_eq!(
        cell(backups, r#"<td data-label="Guest" class="name""#),
        "charlie"
    );
    let css = get(&hub, &client, "/ui/static/dashboard.css", None)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        css.contains("td.name, td.host-id, .nowrap { white-space: nowrap;"),
        "{css}"
    );
}

#[tokio::test]
async fn the_host_page_shows_each_guests_kind_and_address_and_warns_of_a_host_without_a_pool() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, key) = hub.enroll("pve-pool").await;
    let guest = |vmid: u32, name: &str, addresses: &[&str]| GuestReport {
        guest_id: Some(Uuid::new_v4()),
        vmid,
        kind: bosun_proto::desired::GuestKind::Lxc,
        hostname: name.into(),
        status: GuestStatus::Running,
        resources: None,
        controller_digest: None,
        controller_expected: None,
        addresses: addresses.iter().map(|a| (*a).to_owned()).collect(),
    };
    let mut r = report();
    r.guests = vec![
        guest(101, "alpha", &["192.0.2.101"]),
        guest(102, "dual", &["192.0.2.102", "2001:db8::102"]),
        // A DHCP guest from before the pool has no address Bosun assigned.
        guest(103, "legacy", &[]),
    ];
    r.guests[1].kind = bosun_proto::desired::GuestKind::Qemu;
    let mut body = full(&r);
    body["capabilities"] = serde_json::json!({ "arch": "x86_64", "address_pool": false });
    send(&hub, host, &key, &body).await;
    let session = login(&hub, &client).await;
    let page = get(&hub, &client, &format!("/ui/hosts/{host}"), Some(&session))
        .await
        .text()
        .await
        .unwrap();
    let guests = &page[page.find(r#"id="guests""#).unwrap()..];
    let guests = &guests[..guests.find("</table>").unwrap()];
    let rows: Vec<&str> = guests.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 3, "{guests}");
    let address = |row: &str| cell(row, r#"data-label="Address""#).to_owned();
    let kinds: Vec<&str> = rows
        .iter()
        .map(|row| cell(row, r#"data-label="Kind""#))
        .collect();
    assert_eq!(kinds, ["lxc", "qemu", "lxc"], "{guests}");
    assert_eq!(address(rows[0]), "192.0.2.101", "{}", rows[0]);
    assert_eq!(
        address(rows[1]),
        "192.0.2.102, 2001:db8::102",
        "{}",
        rows[1]
    );
    assert!(
        rows[2].contains(r#"data-label="Address" class="mono"><span class="muted">-</span>"#),
        "{}",
        rows[2]
    );
    let banner = &page[page.find(r#"id="addresses""#).expect("a warning banner")..];
    assert!(
        banner.contains("no address pool: new guests get DHCP"),
        "{banner}"
    );

    // Once the agent has a pool, no warning.
    r.seq += 1;
    let mut body = full(&r);
    body["capabilities"] = serde_json::json!({ "arch": "x86_64", "address_pool": true });
    send(&hub, host, &key, &body).await;
    let page = get(&hub, &client, &format!("/ui/hosts/{host}"), Some(&session))
        .await
        .text()
        .await
        .unwrap();
    assert!(!page.contains(r#"id="addresses""#), "{page}");
}
