//! The values the journal stores and hands back.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The id of one journaled operation (a UUIDv7, so ids sort by start time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(Uuid);

impl OpId {
    /// A fresh operation id.
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }

    /// The id as a UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl Default for OpId {
    fn default() -> Self {
        Self::new()
    }
}

impl From<Uuid> for OpId {
    fn from(id: Uuid) -> Self {
        Self(id)
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for OpId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(Self)
    }
}

/// Declares a closed string enum stored as text in the journal.
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The text stored in the journal.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses the stored text.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

text_enum! {
    /// Where an operation stands.
    OpStatus {
        /// Steps are still being taken (or the agent stopped mid-way: replay).
        Running => "running",
        /// Every step succeeded.
        Done => "done",
        /// It failed and nothing needed undoing (or undoing was impossible).
        Failed => "failed",
        /// It failed and what it had created was destroyed again.
        Compensated => "compensated",
    }
}

impl OpStatus {
    /// Whether the operation has ended.
    pub fn is_terminal(self) -> bool {
        !matches!(self, OpStatus::Running)
    }
}

text_enum! {
    /// Where one step of an operation stands.
    StepState {
        /// Written before the Proxmox call: the call may or may not have been sent.
        Intent => "intent",
        /// The call was accepted; for a task the UPID is recorded.
        Sent => "sent",
        /// The call (or its task) ended well, possibly with warnings.
        Ok => "ok",
        /// The call (or its task) failed.
        Failed => "failed",
    }
}

impl StepState {
    /// Whether the step has ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, StepState::Ok | StepState::Failed)
    }
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// Success; `warnings` counts a task's `WARNINGS: n` (0 for a clean end).
    Ok {
        /// Number of warnings the task reported.
        warnings: u32,
    },
    /// Failure, with the exit status or error text.
    Failed {
        /// What went wrong, as Proxmox or the client said it.
        error: String,
    },
}

/// What an operation is about, given when it begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOperation {
    /// What the operation does.
    pub kind: crate::ops::op_kind::OpKind,
    /// The hub's guest id, when the operation concerns one guest.
    pub guest_id: Option<String>,
    /// The Proxmox vmid, when known at the start.
    pub vmid: Option<u32>,
    /// The signed job that asked for it, if any.
    pub job_id: Option<String>,
    /// The request/correlation id forwarded from the hub or the local API.
    pub request_id: Option<String>,
}

/// One operation as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// Its id.
    pub op_id: OpId,
    /// Its kind's stored name ([`Operation::op_kind`] reads it).
    pub kind: String,
    /// Guest id, if any.
    pub guest_id: Option<String>,
    /// Vmid, if any.
    pub vmid: Option<u32>,
    /// Job id, if any.
    pub job_id: Option<String>,
    /// Request id, if any.
    pub request_id: Option<String>,
    /// The operator's correlation id of the desired-state generation that caused it.
    pub correlation_id: Option<String>,
    /// Where it stands.
    pub status: OpStatus,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// When it began.
    pub started_at: Timestamp,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
}

impl Operation {
    /// The operation's kind; `None` for a name no kind has (written by another version).
    pub fn op_kind(&self) -> Option<crate::ops::op_kind::OpKind> {
        crate::ops::op_kind::OpKind::parse(&self.kind)
    }
}

/// One step of an operation as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The operation it belongs to.
    pub op_id: OpId,
    /// Its position in the operation, from 1.
    pub seq: u32,
    /// A short name (`restore`, `set_net0`, `resize_rootfs`, `start`, `destroy`, …).
    pub name: String,
    /// JSON facts about the call (vmid, volid, sizes …), never a secret.
    pub detail: serde_json::Value,
    /// Where it stands.
    pub state: StepState,
    /// The Proxmox task id, once the call was accepted (task-returning calls only).
    pub upid: Option<String>,
    /// Warnings counted at the end of a successful task.
    pub warnings: Option<u32>,
    /// The failure text, if it failed.
    pub error: Option<String>,
    /// When the intent was written.
    pub intent_at: Timestamp,
    /// When the call was recorded as sent.
    pub sent_at: Option<Timestamp>,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
}

/// An operation the agent did not finish, with its last step: what replay on
/// start hands to the reconciler to resume or roll back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnfinishedOperation {
    /// The operation (status `running`).
    pub operation: Operation,
    /// Its last step, if it took any.
    pub last_step: Option<Step>,
}

/// A signed job the agent accepted to run, claimed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobClaim {
    /// The job's idempotency key.
    pub job_id: String,
    /// Its kind, as named in the job document.
    pub kind: String,
    /// Its anti-replay nonce.
    pub nonce: String,
    /// Its expiry; the nonce is kept at least until then.
    pub expires_at: Timestamp,
    /// The fingerprint of the key that signed it (`SHA256:…`).
    pub signer_fingerprint: String,
    /// The principals of the `allowed_signers` line that matched.
    pub principals: String,
    /// The signed timeout, seconds, counted from the claim.
    pub timeout_s: Option<u32>,
}

text_enum! {
    /// How a job run ended.
    JobOutcome {
        /// It did what it asked.
        Succeeded => "succeeded",
        /// It failed; it will not run again.
        Failed => "failed",
    }
}

/// A job run as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRun {
    /// The job's idempotency key.
    pub job_id: String,
    /// Its kind.
    pub kind: String,
    /// The operation that carried it out, once linked.
    pub op_id: Option<OpId>,
    /// Fingerprint of the signing key.
    pub signer_fingerprint: String,
    /// Principals of the matching signer line.
    pub principals: String,
    /// When it was claimed.
    pub started_at: Timestamp,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// How it ended.
    pub outcome: Option<JobOutcome>,
    /// Failure text or a short result note.
    pub detail: Option<String>,
    /// The signed timeout, seconds, counted from `started_at`.
    pub timeout_s: Option<u32>,
}

/// What the agent's own journal knows about where a guest came from. Only the
/// journal builds it (the fields are private); the gate reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestProvenance {
    pub(super) vmid: u32,
    pub(super) guest_id: Option<String>,
    pub(super) created_by_op: OpId,
    pub(super) scratch: bool,
    pub(super) created_at: Timestamp,
    pub(super) identity: String,
    pub(super) adopted: Option<AdoptedAs>,
    pub(super) kind: bosun_proto::desired::GuestKind,
}

/// How a guest came to be the agent's through a signed `adopt` job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdoptedAs {
    /// The job asked for a bootstrap: the guest is bootstrapped as a provisioned guest is
    /// (and a reconcile pass delivers it when the job's push did not).
    WithBootstrap,
    /// The job asked for none: nothing is ever pushed into the guest on its behalf.
    WithoutBootstrap,
}

impl GuestProvenance {
    /// The guest's vmid.
    pub fn vmid(&self) -> u32 {
        self.vmid
    }

    /// The hub's guest id, if the guest was created for one.
    pub fn guest_id(&self) -> Option<&str> {
        self.guest_id.as_deref()
    }

    /// The operation that created the guest.
    pub fn created_by_op(&self) -> OpId {
        self.created_by_op
    }

    /// Whether the agent itself marked the guest scratch (a restore-test guest).
    pub fn is_scratch(&self) -> bool {
        self.scratch
    }

    /// When the creation was recorded.
    pub fn created_at(&self) -> Timestamp {
        self.created_at
    }

    /// The identity the agent wrote into the guest's Proxmox config (a tag) when it
    /// created it: the guest at this vmid is this guest only if its config carries it.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether a signed `adopt` job brought the guest in (and how), rather than the agent
    /// creating it.
    pub fn adopted(&self) -> Option<AdoptedAs> {
        self.adopted
    }

    /// The kind of guest the agent created, recovered or adopted at this vmid (a container
    /// or a VM), as it recorded it then: what the backups and signed jobs act on, whatever
    /// kind desired state names for the guest now (decision 0123).
    pub fn kind(&self) -> bosun_proto::desired::GuestKind {
        self.kind
    }
}

/// The identity tag a guest created by operation `op_id` carries in its Proxmox
/// config (`tags`): written by the restore that creates it, so it exists from the
/// guest's first moment and survives vzdump and restore with the rest of the config.
pub fn identity_tag(op_id: OpId) -> String {
    format!("bosun-op-{}", op_id.as_uuid().simple())
}

/// A guest a signed decommission destroyed: jobs for it are refused and desired
/// state never brings it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    /// The hub's guest id.
    pub guest_id: String,
    /// The vmid it had.
    pub vmid: u32,
    /// The operation that destroyed it.
    pub op_id: OpId,
    /// When it was destroyed.
    pub gone_at: Timestamp,
}

/// The SHA-256 of a local-API bearer token: the only form the journal keeps.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// Hashes a token.
    pub fn of(token: &SecretString) -> Self {
        Self(Sha256::digest(token.expose_secret().as_bytes()).into())
    }

    /// Wraps an already computed digest.
    pub fn from_digest(digest: [u8; 32]) -> Self {
        Self(digest)
    }

    /// The digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A prefix is enough to tell hashes apart in logs.
        write!(f, "TokenHash({}…)", hex::encode(&self.0[..4]))
    }
}

/// The guest a local-API token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenOwner {
    /// The hub's guest id.
    pub guest_id: String,
    /// Its vmid.
    pub vmid: u32,
}

/// The local-API token a guest holds, as the journal knows it (never the token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestToken {
    /// The guest's vmid when the token was stored.
    pub vmid: u32,
    /// When the token was minted (stored after its bootstrap reached the guest).
    pub minted_at: Timestamp,
}

/// The last desired state received from the hub, as cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedDesiredState {
    /// The hub's generation number.
    pub generation: u64,
    /// The document, exactly as received (JSON).
    pub body: String,
    /// The operator's correlation id the hub sent with it.
    pub correlation_id: Option<String>,
    /// When it was stored.
    pub stored_at: Timestamp,
}

/// What [`Store::cache_desired_state`](super::Store::cache_desired_state) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// The document replaced the cached one (or was the first).
    Stored,
    /// The document replaced a cached one of a higher generation: the hub was reset
    /// (or a hostile hub had sent a generation it could not keep).
    Reset {
        /// The generation replaced.
        previous: u64,
    },
}
