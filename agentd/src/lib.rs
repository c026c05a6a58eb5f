//! `bosun-agentd`: the non-root host agent.
//!
//! [`run`] starts in named phases (runtime/): open the journal (then `READY=1`), identify
//! the host (enrolling on first start), replay what a crash left unfinished, and spawn each
//! subsystem's tasks, which run until shutdown:
//!
//! ```text
//!                 ┌──────────── PollTask (hub/) ─────────────┐
//!   hub ◄─HTTPS──►│ fetch + route, backoff+jitter; reporter, │
//!   (no redirects,│ desired intake (cache), timings, job     │
//!    capped)      │ inbox (dedupe, acks, refusals)           │
//!                 └──┬───────────────▲──────────┬────────────┘
//!   watch<Desired>   │               │ watch<   │ a batch per poll ▲ mpsc<JobResult>
//!                    ▼               │ Status>  ▼                  │
//!          ReconcileTask (reconcile/)│     JobRunner (jobs/) ──────┘
//!           observe → plan → apply ──┘      check → claim → gate
//!                    │ (apply, compensate: the same gate, gate.rs)
//!                    │                           │
//!                    ▼                           ▼
//!          GuestQueue (queue.rs): serialized per guest, parallel across guests
//!                    │            ▲
//!                    ▼            └── local API (localapi/) ◄── tokens, bootstraps (credentials/)
//!          Pve, GuestOps (bosun-pve) ──HTTPS──► pveproxy   Journal thread (journal/)
//!
//!   watch<Desired> (desired/: the hub's document held to the data plan) also feeds:
//!
//!   StorageWatcher (storage/) ──watch<StorageFacts>──► PollTask's reporter, local API
//!   tiers feed ─► PolicyScheduler (backup/): due backups ─► BackupService ─► GuestQueue
//!   RestoreTester (restore_test/): scratch restores ─► RestoreTestBoard ─► local API
//!   GoldenBuildTask (golden_build/), HealthTask (health/) ──watch<HealthFacts>──► reporter
//!
//!   metrics task (metrics/): /metrics on loopback; each scrape reads the journal, the
//!   queue, watch<ReconcileStatus> and watch<HubStatus> (runtime/metrics_sources.rs)
//! ```
//!
//! Every Proxmox mutation above is a journaled operation (operation/: `OpJournal`, intent →
//! UPID → outcome). At start, `operation::replay::sort` hands each unfinished operation to
//! the replayer its kind names in the closed kind table (operation/op_kind.rs):
//! reconcile replay before the first pass (provisions and DR restores resumed or rolled
//! back); job resume, interrupted backups (backup/interrupted.rs) and snapshots or rollbacks
//! (localapi/interrupted.rs) in their guests' queue slots; interrupted restore tests
//! (restore_test/interrupted.rs) before the tester's first pass.
//!
//! With a helper: `GoldenBuildTask` (golden_build/) watches the desired state's signed golden
//! recipe and has the helper build a golden image of a version this host has no build of;
//! `ExpiryTask` (break_glass/) closes the break-glass door the job runner opened for a signed
//! `break-glass-enable` at its deadline, on the clock seam.
//! Self-update (update/, jobs/update_run.rs): a signed `agent-update` job downloads the
//! artifact, checks its digest and has the helper stage it; after every successful poll the
//! hub loop writes the poll mark the separate health gate (`bosun-update-gate`) reads, and the
//! gate's verdict is audited once.
//!
//! The data plan's gate (desired/gate.rs, over data_plan/) sits between the intake and every
//! task above: it verifies the operator-signed `bosun.data-plan/v1` in the hub's document
//! (`PlanKeeper`, journaled, the newest serial) and publishes the `DesiredSnapshot` held to
//! it (desired/) on the `watch<Desired>` every task reads, so a storage target or tier the
//! plan does not name reaches no task (refused, audited once as `storage.refused`).
//!
//! The storage watcher (storage/) publishes a `watch<StorageFacts>`: the hub loop reports the
//! targets from it, and the local API answers each guest mount's class from it at every
//! `GET /v1/storage`, so the classes follow the targets as they come and go.
//!
//! The local API counts each connection for a guest before TLS (localapi/slots.rs): every
//! reconcile pass's `watch<ReconcileStatus>` carries the static addresses of the agent's
//! guests, which a small follower task hands to the `SlotBook`.
//!
//! `StateLock` (state_lock.rs): held while the daemon runs, so one daemon or one offline
//! command (`rotate-local-api-cert`, credentials/) uses a state directory at a time.
//!
//! The hub loop's `watch<HubStatus>` says where the hub link stands (connected, unreachable,
//! pending approval, refused, stopped); a follower task (hub/link.rs) keeps it in
//! `hub-link.json` for `bosun-agentctl status`, which never takes the lock. On shutdown
//! (SIGTERM) the loop's last poll tells the hub it is a planned stop, within 5 s.
//!
//! Controllers inside guests (controller/): a signed `controller-update` job runs as a
//! journaled rollout (snapshot → announce → await health → commit or roll back) in its
//! guest's queue slot; the local API serves the digest and takes health reports on the
//! `ControllerBoard`; `HealTask` restarts a silent controller in place through the helper.
//! `HealthTask` (health/): node status against thresholds, SMART through the helper and the
//! tunnel's readiness, each on its cadence, into a `watch<HealthFacts>` the hub loop reports.
//!
//! `WatchdogTask` (watchdog_task.rs), under a systemd watchdog: a journal round trip
//! every `WATCHDOG_USEC / 2`, then `WATCHDOG=1`. `NoncePruneTask` (nonce_prune_task.rs): at
//! start and hourly, forgets the nonces of signed jobs long expired (the check refuses their
//! bytes as expired; `job_runs` keeps their ids).
//!
//! Every task above runs under the `Supervisor` (supervisor.rs): a task that panics, or that
//! ends while the agent is not stopping, stops the agent with an error, so the process exits
//! non-zero and systemd restarts it rather than leaving it running without that task.
//!
//! Shutdown: one `CancellationToken` stops the loops, the queue refuses new
//! work and finishes what it holds, a `TaskTracker` waits for every task, and
//! the journal is closed last (`STOPPING=1` first).

pub mod backup;
pub mod break_glass;
pub mod clock;
pub mod config;
pub mod config_page;
pub mod controller;
pub mod credentials;
pub mod data_plan;
pub mod desired;
pub mod failpoint;
pub mod gate;
pub mod golden_build;
pub mod health;
pub mod helper_client;
pub mod hub;
pub mod jobs;
pub mod journal;
pub mod keys;
pub mod localapi;
pub mod metrics;
pub mod nonce_prune_task;
pub mod operation;
pub mod program;
pub mod queue;
pub mod reconcile;
pub mod recovery;
pub mod restore_test;
pub mod runtime;
pub mod signing;
pub mod state_lock;
pub mod storage;
pub mod supervisor;
pub mod update;
pub mod watchdog_task;

pub use runtime::{AgentError, AgentHandles, LocalApiEndpoint, RunOptions, run, run_with};
