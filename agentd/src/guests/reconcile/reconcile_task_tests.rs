use super::*;

#[test]
fn only_a_pass_where_every_action_failed_lengthens_the_pause() {
    let table = [
        // (actions remain, succeeded, failed) → end
        ((false, 0, 0), PassEnd::Settled),
        ((false, 2, 1), PassEnd::Settled),
        ((true, 3, 0), PassEnd::Progressed),
        ((true, 0, 2), PassEnd::Failed),
        ((true, 3, 1), PassEnd::Partly),
    ];
    for ((remaining, succeeded, failed), want) in table {
        assert_eq!(
            pass_end(remaining, succeeded, failed),
            want,
            "{remaining} {succeeded} {failed}"
        );
    }
    assert_eq!(backoff(1), BACKOFF_FIRST);
    assert_eq!(backoff(2), BACKOFF_FIRST * 2);
    assert_eq!(backoff(30), BACKOFF_CAP);
}
