//! `bosun-agentd`: the non-root host agent.
//!
//! [`run`] starts in named phases (runtime/): open the journal (then `READY=1`), identify
//! the host (enrolling on first start), replay what a crash left unfinished, and spawn each
//! subsystem's tasks, which run until shutdown:
//!
//! ```text
//!                 ┌────────── PollTask (links/hub/) ─────────┐
//!   hub ◄─HTTPS──►│ fetch + route, backoff+jitter; reporter, │
//!   (no redirects,│ desired intake (cache), timings, job     │
//!    capped)      │ inbox (dedupe, acks, refusals)           │
//!                 └──┬───────────────▲──────────┬────────────┘
//!   watch<Desired>   │               │ watch<   │ a batch per poll ▲ mpsc<JobResult>
//!                    ▼               │ Status>  ▼                  │
//!   ReconcileTask (guests/reconcile/)│  JobRunner (ops/jobs/) ─────┘
//!           observe → plan → apply ──┘      check → claim → gate
//!                    │ (apply, compensate: the same gate, trust/gate.rs)
//!                    │                           │
//!                    ▼                           ▼
//!          GuestQueue (guests/queue.rs): serialized per guest, parallel across guests
//!                    │            ▲
//!                    ▼            └── local API (guests/localapi/) ◄── tokens, bootstraps
//!                                                      (guests/credentials/)
//!          Pve, GuestOps (bosun-pve) ──HTTPS──► pveproxy   Journal thread (ops/journal/)
//!
//!   watch<Desired> (data/desired/: the hub's document held to the data plan) also feeds:
//!
//!   StorageWatcher (data/storage/) ──watch<StorageFacts>──► PollTask's reporter, local API
//!   tiers feed ─► PolicyScheduler (data/backup/): due backups ─► BackupService ─► GuestQueue
//!   RestoreTester (data/restore_test/): scratch restores ─► RestoreTestBoard ─► local API
//!   GoldenBuildTask (guests/golden_build/), HealthTask (health/) ──watch<HealthFacts>──► reporter
//!
//!   metrics task (metrics/): /metrics on loopback; each scrape reads the journal, the
//!   queue, watch<ReconcileStatus> and watch<HubStatus> (runtime/metrics_sources.rs)
//! ```
//!
//! Every Proxmox mutation above is a journaled operation (ops/operation/: `OpJournal`, intent →
//! UPID → outcome). At start, `ops::operation::replay::sort` hands each unfinished operation to
//! the replayer its kind names in the closed kind table (ops/operation/op_kind.rs):
//! reconcile replay before the first pass (provisions and DR restores resumed or rolled
//! back); job resume, interrupted backups (data/backup/interrupted.rs) and snapshots or rollbacks
//! (guests/localapi/interrupted.rs) in their guests' queue slots; interrupted restore tests
//! (data/restore_test/interrupted.rs) before the tester's first pass.
//!
//! With a helper: `GoldenBuildTask` (guests/golden_build/) watches the desired state's signed golden
//! recipe and has the helper build a golden image of a version this host has no build of;
//! `ExpiryTask` (trust/break_glass/) closes the break-glass door the job runner opened for a signed
//! `break-glass-enable` at its deadline, on the clock seam.
//! Self-update (runtime/update/, ops/jobs/update_run.rs): a signed `agent-update` job downloads the
//! artifact, checks its digest and has the helper stage it; after every successful poll the
//! hub loop writes the poll mark the separate health gate (`bosun-update-gate`) reads, and the
//! gate's verdict is audited once.
//!
//! The data plan's gate (data/desired/plan_gate.rs, over data/plan/) sits between the intake and every
//! task above: it verifies the operator-signed `bosun.data-plan/v1` in the hub's document
//! (`PlanKeeper`, journaled, the newest serial) and publishes the `DesiredSnapshot` held to
//! it (data/desired/) on the `watch<Desired>` every task reads, so a storage target or tier the
//! plan does not name reaches no task (refused, audited once as `storage.refused`).
//!
//! The storage watcher (data/storage/) publishes a `watch<StorageFacts>`: the hub loop reports the
//! targets from it, and the local API answers each guest mount's class from it at every
//! `GET /v1/storage`, so the classes follow the targets as they come and go.
//!
//! The local API counts each connection for a guest before TLS (guests/localapi/slots.rs): every
//! reconcile pass's `watch<ReconcileStatus>` carries the static addresses of the agent's
//! guests, which a small follower task hands to the `SlotBook`.
//!
//! `StateLock` (runtime/state_lock.rs): held while the daemon runs, so one daemon or one offline
//! command (`rotate-local-api-cert`, guests/credentials/) uses a state directory at a time.
//!
//! The hub loop's `watch<HubStatus>` says where the hub link stands (connected, unreachable,
//! pending approval, refused, stopped); a follower task (links/hub/link.rs) keeps it in
//! `hub-link.json` for `bosun-agentctl status`, which never takes the lock. On shutdown
//! (SIGTERM) the loop's last poll tells the hub it is a planned stop, within 5 s.
//!
//! Controllers inside guests (guests/controller/): a signed `controller-update` job runs as a
//! journaled rollout (snapshot → announce → await health → commit or roll back) in its
//! guest's queue slot; the local API serves the digest and takes health reports on the
//! `ControllerBoard`; `HealTask` restarts a silent controller in place through the helper.
//! `HealthTask` (health/): node status against thresholds, SMART through the helper and the
//! tunnel's readiness, each on its cadence, into a `watch<HealthFacts>` the hub loop reports.
//!
//! `WatchdogTask` (runtime/watchdog.rs), under a systemd watchdog: a journal round trip
//! every `WATCHDOG_USEC / 2`, then `WATCHDOG=1`. `NoncePruneTask` (ops/nonce_prune.rs): at
//! start and hourly, forgets the nonces of signed jobs long expired (the check refuses their
//! bytes as expired; `job_runs` keeps their ids).
//!
//! Every task above runs under the `Supervisor` (runtime/supervisor.rs): a task that panics, or that
//! ends while the agent is not stopping, stops the agent with an error, so the process exits
//! non-zero and systemd restarts it rather than leaving it running without that task.
//!
//! Shutdown: one `CancellationToken` stops the loops, the queue refuses new
//! work and finishes what it holds, a `TaskTracker` waits for every task, and
//! the journal is closed last (`STOPPING=1` first).
//!
//! The modules are the agent's parts:
//!
//! - [`runtime`]: start and stop, the supervisor, the state lock, the watchdog, self-update
//!   and what the two programs share; [`config`] (`agent.toml`) and its man page
//!   ([`config_page`]);
//! - [`links`]: the hub (enrollment, the pinned client, the poll loop) and the root helper;
//! - [`guests`]: reconcile and provisioning, the per-guest queue, the controllers inside the
//!   guests and their golden image, the local API and the guests' credentials;
//! - [`data`]: the signed data plan and the desired state held to it, storage targets,
//!   backups, restores' identity and source, and restore tests;
//! - [`trust`]: signature checks, the reversibility gate, the host's own keys, break-glass;
//! - [`ops`]: the journal, the journaled operation protocol and its replay, signed jobs;
//! - [`health`] and [`metrics`]: what the agent reports about the host and about itself;
//! - the paper escrow of the host's backup key lives in its own crate, `bosun-agentctl`;
//! - [`clock`] and [`failpoint`]: the seams tests drive time and crashes through.

pub mod clock;
pub mod config;
pub mod config_page;
pub mod data;
pub mod failpoint;
pub mod guests;
pub mod health;
pub mod links;
pub mod metrics;
pub mod ops;
pub mod runtime;
pub mod trust;
pub mod tunnel;

pub use runtime::{AgentError, AgentHandles, LocalApiEndpoint, RunOptions, run, run_with};
