//! `restart_controller` with a signed digest (a controller rollout, decision 0102): the real
//! `bosun-helper` against a recording `pct` that keeps each guest as a directory. The image is
//! placed only from the configured archive hashing to the signed digest, only in a guest with
//! this host's stamp, and what the guest holds afterwards is measured by the helper itself.
// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod common;

use bosun_proto::helper::{GUEST_CONTROLLER_DIGEST, GUEST_CONTROLLER_IMAGE, Output, Response};
use common::*;

/// The guest's programs as `pct exec` runs them: Docker loads and names the image, systemctl
/// restarts; `on_load` is shell text run when the image is loaded (a guest that misbehaves).
fn guest_programs(install: &Install, on_load: &str) {
    install.guest_pct(&format!(
        r#"case "$1 $2" in
"/usr/bin/docker load") {on_load}
  echo "Loaded image: bosun/controller:1.5" ;;
"/usr/bin/docker tag"|"/usr/bin/systemctl restart") ;;
*) echo "unexpected $*" >&2; exit 9 ;;
esac"#
    ));
}

fn place(vmid: u32, image: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "verb": "restart_controller",
        "args": { "vmid": vmid, "image": image },
    }))
    .unwrap()
}

#[test]
fn places_the_signed_image_restarts_on_it_and_measures_it() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    guest_programs(&install, "");
    install.stamp_guest(101, Some(DOC_GUEST));
    let signed = sha256_hex(IMAGE_ARCHIVE_BYTES);
    let started = std::time::Instant::now();
    let call = install.run_as_sudo(&["restart_controller"], uid, &place(101, &signed));
    let Response::Ok { output } = call.response() else {
        panic!("placing failed: {call:?}");
    };
    let Output::ControllerRestarted { vmid, measured, .. } = output else {
        panic!("{output:?}");
    };
    println!(
        "restart_controller placing a {}-byte image: {} ms",
        IMAGE_ARCHIVE_BYTES.len(),
        started.elapsed().as_millis()
    );
    assert_eq!(vmid.get(), 101);
    assert_eq!(measured, Some(format!("sha256:{signed}")));
    assert_eq!(
        install.guest_file(101, GUEST_CONTROLLER_IMAGE).as_deref(),
        Some(IMAGE_ARCHIVE_BYTES)
    );
    assert_eq!(
        install.guest_file(101, GUEST_CONTROLLER_DIGEST),
        Some(format!("sha256:{signed}\n").into_bytes())
    );
    let acting = install.acting_calls();
    let image = install.image_archive.display();
    assert_eq!(
        acting[..3],
        [
            format!("pct [push] [101] [{image}] [{GUEST_CONTROLLER_IMAGE}] [--perms] [0600]"),
            format!("pct [exec] [101] [--] [/usr/bin/docker] [load] [--input] [{GUEST_CONTROLLER_IMAGE}]"),
            "pct [exec] [101] [--] [/usr/bin/docker] [tag] [bosun/controller:1.5] [bosun/controller:golden]".to_owned(),
        ],
        "{acting:?}"
    );
    assert!(acting[3].starts_with("pct [push] [101] ["), "{acting:?}");
    assert!(
        acting[3].contains(&format!("[{GUEST_CONTROLLER_DIGEST}]")),
        "{acting:?}"
    );
    assert_eq!(
        acting[4..],
        [
            "pct [exec] [101] [--] [/usr/bin/systemctl] [restart] [bosun-bootstrap.service]"
                .to_owned()
        ]
    );
    // A restart in place afterwards measures the same image, from the guest's own bytes.
    let restart = serde_json::to_vec(&serde_json::json!({
        "verb": "restart_controller", "args": { "vmid": 101 },
    }))
    .unwrap();
    let call = install.run_as_sudo(&["restart_controller"], uid, &restart);
    let Response::Ok {
        output: Output::ControllerRestarted { measured, .. },
    } = call.response()
    else {
        panic!("{call:?}");
    };
    assert_eq!(measured, Some(format!("sha256:{signed}")));
}

#[test]
fn an_archive_that_is_not_the_signed_digest_or_a_guest_not_ours_is_refused_untouched() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    guest_programs(&install, "");
    install.stamp_guest(101, Some(DOC_GUEST));
    // The node's archive is not the image the operator signed.
    let other = sha256_hex(b"the image the operator signed");
    let call = install.run_as_sudo(&["restart_controller"], uid, &place(101, &other));
    let message = expect_refused(&call, "conflict");
    assert!(message.contains("controller image archive"), "{message}");
    assert!(install.acting_calls().is_empty(), "{:?}", install.calls());
    assert_eq!(install.guest_file(101, GUEST_CONTROLLER_IMAGE), None);

    // A guest without this host's stamp (one the agent's token could reach) is never entered.
    install.stamp_guest_with(102, b"another-host-s-guest-stamp-key!!", None);
    let signed = sha256_hex(IMAGE_ARCHIVE_BYTES);
    let call = install.run_as_sudo(&["restart_controller"], uid, &place(102, &signed));
    expect_refused(&call, "conflict");
    assert!(install.acting_calls().is_empty(), "{:?}", install.calls());
    assert_eq!(install.guest_file(102, GUEST_CONTROLLER_IMAGE), None);
}

#[test]
fn a_guest_that_swaps_the_image_it_was_given_fails_the_measurement() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    // The guest's root replaces the archive while Docker loads it.
    guest_programs(
        &install,
        r#"printf 'a forged controller' > "$g/$v/etc/bosun-bootstrap/controller-image.tar";"#,
    );
    install.stamp_guest(101, Some(DOC_GUEST));
    let signed = sha256_hex(IMAGE_ARCHIVE_BYTES);
    let call = install.run_as_sudo(&["restart_controller"], uid, &place(101, &signed));
    let Response::Failed { message } = call.response() else {
        panic!("a swapped image passed: {call:?}");
    };
    let forged = sha256_hex(b"a forged controller");
    assert!(
        message.contains(&format!("holds sha256:{forged}")),
        "{message}"
    );
    assert!(message.contains(&signed), "{message}");
}

#[test]
fn a_load_that_names_no_image_fails_before_the_restart() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    install.guest_pct(
        r#"case "$1 $2" in
"/usr/bin/docker load") echo "Loaded image: \$(reboot)" ;;
*) exit 0 ;;
esac"#,
    );
    install.stamp_guest(101, Some(DOC_GUEST));
    let signed = sha256_hex(IMAGE_ARCHIVE_BYTES);
    let call = install.run_as_sudo(&["restart_controller"], uid, &place(101, &signed));
    let Response::Failed { message } = call.response() else {
        panic!("{call:?}");
    };
    assert!(message.contains("docker load named no image"), "{message}");
    let calls = install.acting_calls();
    assert!(
        !calls
            .iter()
            .any(|c| c.contains("[tag]") || c.contains("[restart]")),
        "{calls:?}"
    );
}
