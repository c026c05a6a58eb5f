use super::*;

fn opened(dir: &Path, key: &str) -> HostKey {
    HostKey::open(dir, SecretString::from(key.to_owned()), None, None).unwrap()
}

/// The pace `secs` seconds after a fixed start, an hour between rotations.
fn at(secs: i64) -> Pace {
    Pace {
        now: Timestamp::from_second(1_700_000_000 + secs).unwrap(),
        min_interval: Duration::from_secs(3600),
    }
}

fn seed(dir: &Path, key: &str) {
    let identity = identity::HostIdentity {
        host_id: uuid::Uuid::new_v4(),
        host_key: HostKey::in_memory(SecretString::from(key.to_owned())),
        replaces: None,
        enrolled_at: None,
    };
    identity.store(dir).unwrap();
}

fn reloaded(dir: &Path) -> HostKey {
    identity::HostIdentity::load(dir).unwrap().unwrap().host_key
}

#[test]
fn a_rotation_survives_a_restart_at_every_step() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), "bsh_old");
    let keys = opened(dir.path(), "bsh_old");
    let old = keys.presented();
    assert_eq!(keys.answered(&old, false, None, at(0)).unwrap(), None);

    // Asked: a key is made and kept before its hash goes anywhere.
    assert_eq!(
        keys.answered(&old, true, None, at(0)).unwrap(),
        Some(KeyStep::Made)
    );
    let hash = keys.next_to_send().unwrap();
    let again = reloaded(dir.path());
    assert_eq!(again.next_to_send().as_deref(), Some(hash.as_str()));
    assert_eq!(again.presented().expose_secret(), "bsh_old");
    // Asked again before the hub holds it: the same key, not another.
    assert_eq!(keys.answered(&old, true, None, at(0)).unwrap(), None);
    assert_eq!(keys.next_to_send().as_deref(), Some(hash.as_str()));

    // The hub names it: present it from now on, after a restart too.
    assert_eq!(
        keys.answered(&old, false, Some(&hash), at(0)).unwrap(),
        Some(KeyStep::Confirmed)
    );
    let new = keys.presented();
    assert_ne!(new.expose_secret(), "bsh_old");
    assert_eq!(key_hash(&new), hash);
    assert_eq!(keys.next_to_send(), None);
    let again = reloaded(dir.path());
    assert_eq!(again.presented().expose_secret(), new.expose_secret());
    assert_eq!(again.current().expose_secret(), "bsh_old");

    // Accepted: host.json holds the new key, the next-key file is gone.
    assert_eq!(
        keys.answered(&new, false, None, at(0)).unwrap(),
        Some(KeyStep::Rotated)
    );
    assert_eq!(keys.current().expose_secret(), new.expose_secret());
    assert!(!dir.path().join(NEXT_FILE).exists());
    let again = reloaded(dir.path());
    assert_eq!(again.presented().expose_secret(), new.expose_secret());
    assert_eq!(again.next_to_send(), None);
    assert_eq!(again.previous().unwrap().expose_secret(), "bsh_old");
}

#[test]
fn a_hub_restored_from_before_the_rotation_gets_the_previous_key_then_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), "bsh_old");
    let keys = opened(dir.path(), "bsh_old");
    let old = keys.presented();
    keys.answered(&old, true, None, at(0)).unwrap();
    let hash = keys.next_to_send().unwrap();
    keys.answered(&old, false, Some(&hash), at(0)).unwrap();
    let new = keys.presented();
    keys.answered(&new, false, None, at(0)).unwrap();

    // The restored hub refuses the new key: the previous one is tried, and taken back.
    assert!(keys.refused(&new).unwrap());
    assert_eq!(keys.presented().expose_secret(), "bsh_old");
    assert_eq!(
        keys.answered(&old, false, None, at(60)).unwrap(),
        Some(KeyStep::FellBack)
    );
    assert_eq!(reloaded(dir.path()).current().expose_secret(), "bsh_old");
    assert!(keys.previous().is_none());
    // ...and a new rotation is owed, made once the pace allows (an hour after the last one
    // completed), even when the hub does not ask: a new key, not the one the live hub had.
    assert_eq!(keys.next_to_send(), None);
    assert_eq!(keys.answered(&old, false, None, at(3599)).unwrap(), None);
    assert_eq!(keys.next_to_send(), None);
    assert_eq!(
        keys.answered(&old, false, None, at(3600)).unwrap(),
        Some(KeyStep::Made)
    );
    let fresh = keys.next_to_send().unwrap();
    assert_ne!(fresh, hash);

    // Refused with both, the keys take turns under the loop's backoff.
    let lone = HostKey::in_memory(SecretString::from("bsh_lone".to_owned()));
    assert!(!lone.refused(&lone.presented()).unwrap());
}

#[test]
fn a_refused_key_falls_back_to_the_other_and_a_lone_key_does_not() {
    let keys = HostKey::in_memory(SecretString::from("bsh_old".to_owned()));
    let old = keys.presented();
    assert!(!keys.refused(&old).unwrap(), "no other key to try");
    keys.answered(&old, true, None, at(0)).unwrap();
    let hash = keys.next_to_send().unwrap();
    keys.answered(&old, false, Some(&hash), at(0)).unwrap();
    let new = keys.presented();
    // The new key refused (the hub lost it): back to the old one, its hash sent again.
    assert!(keys.refused(&new).unwrap());
    assert_eq!(keys.presented().expose_secret(), "bsh_old");
    assert_eq!(keys.next_to_send().as_deref(), Some(hash.as_str()));
    // The old key refused (the hub had taken the new one): present the new one.
    assert!(keys.refused(&old).unwrap());
    assert_eq!(keys.presented().expose_secret(), new.expose_secret());
}

#[test]
fn a_next_key_the_hub_forgot_or_never_had_is_sent_again() {
    let keys = HostKey::in_memory(SecretString::from("bsh_old".to_owned()));
    let old = keys.presented();
    // The hub names a next key this agent does not hold: a key is made to replace it.
    let strange = "a".repeat(64);
    assert_eq!(
        keys.answered(&old, false, Some(&strange), at(0)).unwrap(),
        Some(KeyStep::Made)
    );
    let hash = keys.next_to_send().unwrap();
    assert_ne!(hash, strange);
    // An answer to a poll sent before the hub held it changes nothing.
    assert_eq!(keys.answered(&old, true, None, at(0)).unwrap(), None);
    assert_eq!(keys.next_to_send().as_deref(), Some(hash.as_str()));
    assert_eq!(
        keys.answered(&old, false, Some(&hash), at(0)).unwrap(),
        Some(KeyStep::Confirmed)
    );
    assert_eq!(key_hash(&keys.presented()), hash);
}

#[test]
fn a_next_key_file_holding_the_current_key_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), "bsh_new");
    let body = serde_json::to_vec(&NextOnDisk {
        key: "bsh_new".into(),
        confirmed: true,
    })
    .unwrap();
    identity::replace_private(&dir.path().join(NEXT_FILE), &body).unwrap();
    let keys = opened(dir.path(), "bsh_new");
    assert_eq!(keys.next_to_send(), None);
    assert_eq!(keys.presented().expose_secret(), "bsh_new");
    assert!(!dir.path().join(NEXT_FILE).exists());
}

#[test]
fn debug_shows_no_key() {
    let keys = HostKey::in_memory(SecretString::from("bsh_secret".to_owned()));
    assert!(!format!("{keys:?}").contains("bsh_secret"));
}

/// A hub that asks for a new key in every answer and confirms and takes each one at once, for
/// `hours` of answers every `every` seconds: how many rotations completed, and how many times
/// the next-key file and `host.json` were written.
fn churn(dir: &Path, keys: &HostKey, hours: i64, every: i64) -> (usize, usize, usize) {
    let (mut rotations, mut next_writes, mut host_writes) = (0, 0, 0);
    let mut named: Option<String> = None;
    let mut t = 0;
    while t < hours * 3600 {
        let presented = keys.presented();
        let read = |name: &str| std::fs::read(dir.join(name)).ok();
        let (before_next, before_host) = (read(NEXT_FILE), read(identity::FILE));
        let sent = keys.next_to_send();
        // The hostile hub names back whatever hash it was sent, and asks again every time.
        if sent.is_some() {
            named = sent;
        }
        let step = keys
            .answered(&presented, true, named.as_deref(), at(t))
            .unwrap();
        if step == Some(KeyStep::Rotated) {
            rotations += 1;
            named = None;
        }
        // Every write changes the file: a new key, a confirmation, or a new rotation time.
        let (after_next, after_host) = (read(NEXT_FILE), read(identity::FILE));
        if after_next.is_some() && after_next != before_next {
            next_writes += 1;
        }
        if after_host != before_host {
            host_writes += 1;
        }
        // An answer that carries a step on is followed at once; otherwise the poll interval.
        t += if step.is_some_and(KeyStep::carries_on) {
            0
        } else {
            every
        };
    }
    (rotations, next_writes, host_writes)
}

#[test]
fn a_hub_asking_in_every_answer_gets_one_rotation_an_hour_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), "bsh_old");
    let keys = opened(dir.path(), "bsh_old");
    // A day of answers every 30 s, each asking for a new key: one rotation an hour (the first
    // at once: no rotation before), and three writes per rotation.
    let (rotations, next_writes, host_writes) = churn(dir.path(), &keys, 24, 30);
    assert_eq!(rotations, 24, "rotations in 24 h");
    assert_eq!(
        next_writes, 48,
        "next-key writes: made and confirmed, per rotation"
    );
    assert_eq!(host_writes, 24, "host.json writes: one per rotation");

    // The pace survives a restart: host.json says when the last rotation completed.
    let last = keys.rotated_at().unwrap();
    let restarted = reloaded(dir.path());
    assert_eq!(restarted.rotated_at(), Some(last));
    let old = restarted.presented();
    let step = restarted.answered(&old, true, None, Pace { now: last, ..at(0) });
    assert!(
        matches!(step.unwrap(), Some(KeyStep::Deferred { .. })),
        "asked right after a restart"
    );
    assert_eq!(restarted.next_to_send(), None);
}

#[test]
fn an_operator_request_that_comes_too_early_is_served_at_the_allowed_moment() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), "bsh_old");
    let keys = opened(dir.path(), "bsh_old");
    let old = keys.presented();
    keys.answered(&old, true, None, at(0)).unwrap();
    let hash = keys.next_to_send().unwrap();
    keys.answered(&old, false, Some(&hash), at(0)).unwrap();
    let new = keys.presented();
    assert_eq!(
        keys.answered(&new, false, None, at(0)).unwrap(),
        Some(KeyStep::Rotated)
    );

    // The operator asks ten minutes later: one answer asks, then the hub stops asking.
    let until = Timestamp::from_second(1_700_000_000 + 3600).unwrap();
    assert_eq!(
        keys.answered(&new, true, None, at(600)).unwrap(),
        Some(KeyStep::Deferred { until })
    );
    assert_eq!(
        keys.answered(&new, true, None, at(630)).unwrap(),
        None,
        "reported once"
    );
    assert_eq!(keys.answered(&new, false, None, at(3599)).unwrap(), None);
    assert_eq!(keys.next_to_send(), None);
    // Remembered, not dropped: made at the first answer after the allowed moment.
    assert_eq!(
        keys.answered(&new, false, None, at(3600)).unwrap(),
        Some(KeyStep::Made)
    );
    assert!(keys.next_to_send().is_some());
}

#[test]
fn the_pace_is_never_below_ten_poll_intervals() {
    let now = Timestamp::from_second(1_700_000_000).unwrap();
    let pace = Pace::new(now, Duration::from_secs(10), Duration::from_secs(300));
    assert_eq!(pace.min_interval, Duration::from_secs(3000));
    let pace = Pace::new(now, Duration::from_secs(3600), Duration::from_secs(30));
    assert_eq!(pace.min_interval, Duration::from_secs(3600));
}
