use super::*;

const ED25519: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrAsKmOJHqtIFg4iUWCxW/iCF63k3IM0oiEv25WH7JH op@desk";
const ED25519_BARE: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrAsKmOJHqtIFg4iUWCxW/iCF63k3IM0oiEv25WH7JH";
const ED25519_FINGERPRINT: &str = "SHA256:/KBlLGwupR4VLRsZAf8MwXRQIpwy0gtAL5aROWSY63w";
const RSA_1024: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC1Dki3g7UEeQwfOo+0DCFwzpPp6K+BwDCCD9x0THMFmV6pda1NlIJTJOhf4T5rArXLp46MryVfyHd9CfHJ1eq955jZNQOl/mZt1h2uf8rruqGSHgsdzZ7DlHYiBLAwy3Ie4zGZ81ciQfx+ioNoYnsIoGdfb4+fUTMirV6KGn54Vw== root@vm";
const ECDSA: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBftrSouNFZNaVGtlqbFlaQr6YFtzRNQyz4OFozvK0nJmIerLiUV1/c6SlhuHU9bRufFIweit7sLaBeTDXeOfBc= x";

#[test]
fn a_key_is_kept_in_canonical_form_without_its_comment() {
    let key = SshPublicKey::new(ED25519).unwrap();
    assert_eq!(key.as_str(), ED25519_BARE);
    assert_eq!(key.fingerprint(), ED25519_FINGERPRINT);
    let spaced = SshPublicKey::new(&format!("  {ED25519_BARE}   ")).unwrap();
    assert_eq!(spaced, key);
    assert!(SshPublicKey::new(ECDSA).is_ok());
    let json = serde_json::to_string(&key).unwrap();
    assert_eq!(json, format!("\"{ED25519_BARE}\""));
}

#[test]
fn options_second_keys_lines_and_weak_keys_are_refused() {
    let cases = [
        format!("command=\"/bin/sh\" {ED25519_BARE}"),
        format!("no-pty,{ED25519_BARE}"),
        format!("{ED25519}\n{ECDSA}"),
        format!("{ED25519_BARE}\nssh-ed25519 AAAA"),
        format!("{ED25519_BARE} comment\rwith a return"),
        format!("{ED25519_BARE}\0"),
        "ssh-ed25519".to_owned(),
        "ssh-ed25519 AAAAnotbase64!!".to_owned(),
        "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAAAgQC1".to_owned(),
        RSA_1024.to_owned(),
        format!("ssh-ed25519 {}", "A".repeat(MAX_PUBLIC_KEY_BYTES)),
        String::new(),
    ];
    for case in cases {
        assert!(SshPublicKey::new(&case).is_err(), "accepted {case:?}");
    }
    // A mismatched algorithm name in front of the blob is not a key either.
    let swapped = ED25519_BARE.replace("ssh-ed25519", "ssh-rsa");
    assert!(SshPublicKey::new(&swapped).is_err());
}

fn params(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    value.as_object().unwrap().clone()
}

#[test]
fn params_need_a_key_a_bounded_duration_and_a_reason() {
    let good = params(serde_json::json!({
        "ssh_public_key": ED25519, "duration_seconds": 3600, "reason": "poll loop wedged",
    }));
    let parsed = BreakGlassParams::from_params(&good).unwrap();
    assert_eq!(parsed.duration_seconds, 3600);
    assert_eq!(parsed.ssh_public_key.as_str(), ED25519_BARE);
    let longest = params(serde_json::json!({
        "ssh_public_key": ED25519, "duration_seconds": 86_400, "reason": "r",
    }));
    assert!(BreakGlassParams::from_params(&longest).is_ok());
    let text = params(serde_json::json!({
        "ssh_public_key": ED25519, "duration_seconds": "900", "reason": "r",
    }));
    assert_eq!(
        BreakGlassParams::from_params(&text)
            .unwrap()
            .duration_seconds,
        900
    );

    let bad = [
        (
            serde_json::json!({ "ssh_public_key": ED25519, "duration_seconds": 86_401, "reason": "r" }),
            "params.duration_seconds",
        ),
        (
            serde_json::json!({ "ssh_public_key": ED25519, "duration_seconds": 59, "reason": "r" }),
            "params.duration_seconds",
        ),
        (
            serde_json::json!({ "ssh_public_key": ED25519, "duration_seconds": -5, "reason": "r" }),
            "params.duration_seconds",
        ),
        (
            serde_json::json!({ "ssh_public_key": ED25519, "duration_seconds": "3600s", "reason": "r" }),
            "params.duration_seconds",
        ),
        (
            serde_json::json!({ "ssh_public_key": ED25519, "duration_seconds": 3600 }),
            "params.reason",
        ),
        (
            serde_json::json!({ "ssh_public_key": ED25519, "duration_seconds": 3600, "reason": " " }),
            "params.reason",
        ),
        (
            serde_json::json!({ "ssh_public_key": ED25519, "duration_seconds": 3600, "reason": "a\nb" }),
            "params.reason",
        ),
        (
            serde_json::json!({ "ssh_public_key": RSA_1024, "duration_seconds": 3600, "reason": "r" }),
            "params.ssh_public_key",
        ),
        (
            serde_json::json!({ "duration_seconds": 3600, "reason": "r" }),
            "params.ssh_public_key",
        ),
        (
            serde_json::json!({ "ssh_public_key": ED25519, "duration_seconds": 3600, "reason": "r", "user": "root" }),
            "params.user",
        ),
    ];
    for (value, field) in bad {
        let err = BreakGlassParams::from_params(&params(value.clone())).unwrap_err();
        assert_eq!(err.field(), field, "{value}");
    }
}

#[test]
fn the_line_carries_the_utc_expiry_restrict_and_the_job() {
    let key = SshPublicKey::new(ED25519).unwrap();
    let at: Timestamp = "2026-11-23T13:05:09Z".parse().unwrap();
    let job = uuid::Uuid::from_u128(7);
    let line = authorized_keys_line(&key, at, job);
    assert_eq!(
        line,
        format!(
            "expiry-time=\"20261123130509Z\",restrict,pty,\
             command=\"/usr/libexec/bosun/bosun-support --session {job}\" \
             {ED25519_BARE} bosun-break-glass {job}\n"
        )
    );
    assert_eq!(line.matches('\n').count(), 1);
}
