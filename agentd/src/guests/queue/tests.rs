use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::*;

/// Counts operations running at once and remembers the highest count.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_guest_runs_in_submission_order_without_overlap() {
    let queue = GuestQueue::new(8);
    let gauge = Arc::new(Gauge::default());
    let order = Arc::new(Mutex::new(Vec::new()));
    let key = GuestKey::guest("a");
    let mut ops = Vec::new();
    for i in 0..20u64 {
        let gauge = Arc::clone(&gauge);
        let order = Arc::clone(&order);
        ops.push(
            queue
                .submit(key.clone(), async move {
                    gauge.enter();
                    // Later ops sleep less, so any overlap would reorder them.
                    tokio::time::sleep(Duration::from_millis(20 - i)).await;
                    order.lock().push(i);
                    gauge.leave();
                    i
                })
                .expect("queue open"),
        );
    }
    for (i, op) in ops.into_iter().enumerate() {
        assert_eq!(op.await.expect("op ran"), i as u64);
    }
    assert_eq!(gauge.peak(), 1, "two operations of one guest overlapped");
    assert_eq!(*order.lock(), (0..20).collect::<Vec<_>>());
    assert!(!queue.is_busy(&key));
    assert_eq!(queue.pending(&key), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_guests_run_in_parallel_up_to_the_bound() {
    let queue = GuestQueue::new(3);
    let gauge = Arc::new(Gauge::default());
    let mut ops = Vec::new();
    for i in 0..10 {
        let gauge = Arc::clone(&gauge);
        ops.push(
            queue
                .submit(GuestKey::guest(i), async move {
                    gauge.enter();
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    gauge.leave();
                })
                .expect("queue open"),
        );
    }
    for op in ops {
        op.await.expect("op ran");
    }
    assert_eq!(
        gauge.peak(),
        3,
        "parallelism should reach the bound and not pass it"
    );
}

#[tokio::test]
async fn a_busy_guest_does_not_hold_a_permit_others_need() {
    // One permit; guest A has a long op and a second op queued behind it. Guest
    // B's op must run as soon as A's first op ends, not after A's second.
    let queue = GuestQueue::new(1);
    let release_a = Arc::new(Notify::new());
    let order = Arc::new(Mutex::new(Vec::new()));
    let a1 = {
        let release_a = Arc::clone(&release_a);
        let order = Arc::clone(&order);
        queue
            .submit(GuestKey::guest("a"), async move {
                release_a.notified().await;
                order.lock().push("a1");
            })
            .expect("open")
    };
    tokio::task::yield_now().await;
    let a2 = {
        let order = Arc::clone(&order);
        queue
            .submit(GuestKey::guest("a"), async move { order.lock().push("a2") })
            .expect("open")
    };
    let b = {
        let order = Arc::clone(&order);
        queue
            .submit(GuestKey::guest("b"), async move { order.lock().push("b") })
            .expect("open")
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        order.lock().is_empty(),
        "nothing may pass the running op's permit"
    );
    release_a.notify_one();
    a1.await.expect("a1");
    a2.await.expect("a2");
    b.await.expect("b");
    // b waited on the permit while a2 waited on a1; the permit goes to b.
    assert_eq!(*order.lock(), vec!["a1", "b", "a2"]);
}

#[tokio::test]
async fn a_panicking_operation_releases_its_guest() {
    let queue = GuestQueue::new(2);
    let key = GuestKey::vmid(101);
    let failed = queue
        .run(key.clone(), async {
            panic!("boom");
        })
        .await;
    assert!(matches!(failed, Err(QueueError::Panicked { guest }) if guest == key));
    let next = tokio::time::timeout(Duration::from_secs(5), queue.run(key.clone(), async { 7 }))
        .await
        .expect("the guest's line must not stay blocked after a panic");
    assert_eq!(next.expect("ran"), 7);
    assert!(!queue.is_busy(&key));
}

#[tokio::test]
async fn dropping_the_waiter_does_not_cancel_the_operation() {
    let queue = GuestQueue::new(2);
    let ran = Arc::new(AtomicUsize::new(0));
    let key = GuestKey::guest("c");
    {
        let ran = Arc::clone(&ran);
        let op = queue
            .submit(key.clone(), async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .expect("open");
        drop(op);
    }
    // A later op of the same guest sees the first one's effect.
    let seen = {
        let ran = Arc::clone(&ran);
        queue
            .run(key, async move { ran.load(Ordering::SeqCst) })
            .await
            .expect("ran")
    };
    assert_eq!(seen, 1);
}

#[tokio::test]
async fn close_refuses_new_work_and_waits_for_queued_work() {
    let queue = GuestQueue::new(2);
    let ran = Arc::new(AtomicUsize::new(0));
    for i in 0..4 {
        let ran = Arc::clone(&ran);
        drop(
            queue
                .submit(GuestKey::guest(i % 2), async move {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ran.fetch_add(1, Ordering::SeqCst);
                })
                .expect("open"),
        );
    }
    queue.close();
    let refused = queue.run(GuestKey::guest("late"), async {}).await;
    assert!(matches!(refused, Err(QueueError::Closed { .. })));
    tokio::time::timeout(Duration::from_secs(5), queue.wait_idle())
        .await
        .expect("queued work finishes");
    assert_eq!(ran.load(Ordering::SeqCst), 4);
}

#[test]
fn guest_and_vmid_keys_never_collide() {
    assert_ne!(GuestKey::guest(101), GuestKey::vmid(101));
    assert_eq!(GuestKey::guest("x").as_str(), "guest:x");
    assert_eq!(GuestQueue::new(0).max_parallel(), 1);
}
