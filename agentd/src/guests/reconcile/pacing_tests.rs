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

#[test]
fn passes_that_keep_progressing_pause_after_a_streak() {
    let mut pacing = Pacing {
        interval: Duration::from_secs(30),
        failures: 0,
        streak: 0,
    };
    for pass in 1..PROGRESS_STREAK {
        assert_eq!(pacing.after(PassEnd::Progressed), None, "pass {pass}");
    }
    assert_eq!(pacing.after(PassEnd::Progressed), Some(BACKOFF_FIRST));
    // The streak starts again after the pause, and any other end breaks it.
    assert_eq!(pacing.after(PassEnd::Progressed), None);
    assert_eq!(
        pacing.after(PassEnd::Settled),
        Some(Duration::from_secs(30))
    );
    for _ in 1..PROGRESS_STREAK {
        assert_eq!(pacing.after(PassEnd::Progressed), None);
    }
    assert_eq!(pacing.after(PassEnd::Failed), Some(BACKOFF_FIRST));
    assert_eq!(pacing.after(PassEnd::Failed), Some(BACKOFF_FIRST * 2));
    assert_eq!(pacing.after(PassEnd::Partly), Some(BACKOFF_FIRST));
    assert_eq!(pacing.after(PassEnd::Failed), Some(BACKOFF_FIRST * 2));
    pacing.reset();
    assert_eq!(pacing.after(PassEnd::Failed), Some(BACKOFF_FIRST));
}
