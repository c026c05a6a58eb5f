use super::*;

#[test]
fn the_serial_is_the_operators_or_the_signing_second_and_stays_in_bounds() {
    let now: Timestamp = "2026-11-27T04:00:00Z".parse().unwrap();
    assert_eq!(serial(None, now).unwrap(), 1_795_752_000);
    let later = now + SignedDuration::from_secs(1);
    assert!(
        serial(None, later).unwrap() > serial(None, now).unwrap(),
        "successive signings rise without counting"
    );
    assert_eq!(serial(Some(3), now).unwrap(), 3, "a rollback names its own");
    assert_eq!(
        serial(Some(MAX_GOLDEN_SERIAL), now).unwrap(),
        MAX_GOLDEN_SERIAL
    );
    let err = serial(Some(MAX_GOLDEN_SERIAL + 1), now).unwrap_err();
    assert!(err.to_string().contains("--serial"), "{err}");
}
