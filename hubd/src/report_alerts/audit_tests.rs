use bosun_proto::admin::AlertKind;

use super::judge;

#[test]
fn break_glass_audit_rows_raise_open_and_closed_with_their_facts() {
    let opened = serde_json::json!({
        "job_id": "j-outer",
        "detail": {
            "job_id": "0190f5a0-0000-7000-8000-000000000001",
            "fingerprint": "SHA256:/KBlLGwupR4VLRsZAf8MwXRQIpwy0gtAL5aROWSY63w",
            "reason": "poll loop wedged",
            "signer": "SHA256:operator",
            "account": "bosun-breakglass",
            "expires_at": "2026-11-23T14:00:00Z",
        },
    });
    let found = judge("pve1", None, "break_glass.opened", &opened).unwrap();
    let (kind, message) = found.alert.unwrap();
    assert_eq!(kind, AlertKind::BreakGlassOpen);
    for part in [
        "host pve1",
        "account bosun-breakglass",
        "SHA256:/KBlLGwupR4VLRsZAf8MwXRQIpwy0gtAL5aROWSY63w",
        "until 2026-11-23T14:00:00Z",
        "0190f5a0-0000-7000-8000-000000000001",
        "poll loop wedged",
    ] {
        assert!(message.contains(part), "`{part}` missing from: {message}");
    }
    for (closed_by, says) in [
        ("expiry", "its expiry"),
        ("disable", "a signed break-glass-disable"),
        ("replaced", "a newer door"),
        ("something else", "?"),
    ] {
        let closed = serde_json::json!({ "detail": {
            "job_id": "j1", "fingerprint": "SHA256:k", "closed_by": closed_by,
        }});
        let (kind, message) = judge("pve1", None, "break_glass.closed", &closed)
            .unwrap()
            .alert
            .unwrap();
        assert_eq!(kind, AlertKind::BreakGlassClosed);
        assert!(message.ends_with(&format!("closed by {says}")), "{message}");
    }
    // A hostile reason is cut short.
    let long = serde_json::json!({ "detail": { "reason": "r".repeat(100_000) } });
    let (_, message) = judge("pve1", None, "break_glass.opened", &long)
        .unwrap()
        .alert
        .unwrap();
    assert!(message.len() < 1_000, "{}", message.len());
}

#[test]
fn a_refused_placement_raises_an_alert_naming_the_volume_its_storage_and_why() {
    let hot = serde_json::json!({
        "guest_id": "0190f5a0-0000-7000-8000-0000000000aa",
        "detail": {
            "volume": "db", "hot": true, "class": "fast", "storage": "hdd",
            "reason": "storage_not_fast",
            "why": "its storage is not of class fast in the signed data plan",
        },
    });
    let (kind, message) = judge("pve1", None, "guest.placement_refused", &hot)
        .unwrap()
        .alert
        .unwrap();
    assert_eq!(kind, AlertKind::PlacementRefused);
    for part in [
        "host pve1",
        "guest 0190f5a0-0000-7000-8000-0000000000aa",
        "hot volume db (storage hdd)",
        "not of class fast",
    ] {
        assert!(message.contains(part), "`{part}` missing from: {message}");
    }
    let bulk = serde_json::json!({ "detail": {
        "volume": "media", "class": "fast", "reason": "no_target_of_class",
        "why": "no attached bulk-data target of class fast",
    }});
    let (_, message) = judge("pve1", None, "guest.placement_refused", &bulk)
        .unwrap()
        .alert
        .unwrap();
    assert!(
        message.contains("bulk volume media: no attached"),
        "{message}"
    );
}
