//! Who is acting: the name of the operator token behind the admin API call being served.
//!
//! The admin API's authentication layer runs each call inside [`scope`]; [`crate::Hub::store_call`]
//! carries the name onto the blocking thread that runs the store call ([`on_thread`]), where
//! the store's event log reads it ([`on_this_thread`]) and records it as `by` in every event
//! the call writes. No handler has to remember to pass it on; work outside an admin call
//! (polls, sweeps) has no actor and its events carry no `by`.

use std::cell::RefCell;
use std::future::Future;

tokio::task_local! {
    static CALLER: String;
}

thread_local! {
    static ON_THREAD: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `work` as the operator token `name`.
pub async fn scope<F: Future>(name: String, work: F) -> F::Output {
    CALLER.scope(name, work).await
}

/// The operator token the current task acts for, if any.
pub fn current() -> Option<String> {
    CALLER.try_with(Clone::clone).ok()
}

/// Runs `f` on this thread as `name` (none: as nobody), then restores what was there.
pub fn on_thread<R>(name: Option<String>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<String>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            ON_THREAD.with(|slot| *slot.borrow_mut() = before);
        }
    }
    let _restore = Restore(ON_THREAD.with(|slot| slot.replace(name)));
    f()
}

/// The operator token the store call on this thread acts for, if any.
pub fn on_this_thread() -> Option<String> {
    ON_THREAD.with(|slot| slot.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_name_follows_the_task_and_the_thread() {
        assert_eq!(current(), None);
        let seen = scope("alice".to_owned(), async { current() }).await;
        assert_eq!(seen.as_deref(), Some("alice"));
        assert_eq!(current(), None);
        let inner = on_thread(Some("bob".to_owned()), || {
            let nested = on_thread(None, on_this_thread);
            (on_this_thread(), nested)
        });
        assert_eq!(inner, (Some("bob".to_owned()), None));
        assert_eq!(on_this_thread(), None);
    }
}
