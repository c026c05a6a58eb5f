//! A provisioned guest's bootstrap (DESIGN §8, the provisioning "back half"): once a
//! provisioned guest runs, give its controller what it needs to reach the agent and the hub.
//!
//! ```text
//!  has_token? ──yes (and not asked to rotate)──► kept
//!      │ no
//!  mint token ─► push_bootstrap (helper, root) ─────────────► store SHA-256
//!  (256 bits,    pct push <vmid> <staged> /etc/bosun-bootstrap/  (journal;
//!   in memory)   bootstrap.json --perms 0600 --user 0 --group 0  token.minted audited)
//! ```
//!
//! - `pct push` needs a running container, so the bootstrap is issued **after** `start`
//!   (a post-start provisioning extension); a guest that did not start gets it from a
//!   later reconcile pass once it runs (a running provisioned guest without a token).
//! - The file lives in the guest's root filesystem, so snapshots and backups carry it and
//!   the guest can be snapshotted (a bind mount point would forbid that, decision 0008).
//! - The plaintext token exists only between minting and the helper's push; the journal
//!   keeps its hash, and the hash is stored only **after** the push succeeded, so "the
//!   journal knows a token" always means "the guest's bootstrap carries it". A crash between
//!   the two leaves no hash, and the next pass mints and pushes again.
//! - A re-run keeps an existing guest's token ([`TokenPolicy::KeepExisting`]); only an
//!   explicit [`TokenPolicy::Rotate`] (certificate rotation) replaces it, revoking the old
//!   one first so a crash mid-way leaves a guest without a token (which reconcile fixes)
//!   rather than one whose file and journal disagree.
//! - Each piece is a journaled step of the provisioning operation ([`OpJournal::local`]).
//! - Certificate rotation ([`BootstrapIssuer::rotate_certificate`]) re-issues every bootstrap with
//!   the new fingerprint and fresh tokens.
//! - The bootstrap carries the SSH keys the signed data plan in force trusts for the guest and
//!   its customer (`guest_access`, decision 0107), never keys from unsigned desired state. The
//!   SHA-256 of those keys is journaled after the token; a guest holding a token whose keys
//!   differ from the plan's is issued a new bootstrap (and token), as on a rotation.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use bosun_proto::bootstrap::{self, Bootstrap, LocalApi as BootstrapLocalApi, PinnedEndpoint};
use bosun_proto::break_glass::SshPublicKey;
use bosun_proto::desired::CustomerIdentity;
use bosun_proto::helper::{BootstrapDocument, PushBootstrap, Request};
use bosun_proto::secret::SecretToken;
use bosun_pve::Vmid;
use futures::future::BoxFuture;
use parking_lot::RwLock;
use secrecy::ExposeSecret;
use serde_json::json;
use uuid::Uuid;
use zeroize::Zeroize;

use crate::guests::credentials::cert::{CertError, LocalApiCert};
use crate::guests::credentials::token::mint_token;
use crate::links::helper::{HelperClient, HelperClientError};
use crate::ops::journal::{JournalError, JournalHandle, NewOperation, OpStatus, TokenHash};
use crate::ops::operation::OpKind;
use crate::ops::operation::StepName;
use crate::ops::operation::{OpJournal, StepError};

/// The helper verbs issuing a bootstrap needs, as a seam so tests can run a helper that is not
/// root. [`HelperClient`] is the production implementation.
pub trait BootstrapHelper: Send + Sync + fmt::Debug {
    /// Sends one request to the helper.
    fn call<'a>(
        &'a self,
        request: &'a Request,
    ) -> BoxFuture<'a, Result<bosun_proto::helper::Output, HelperClientError>>;
}

impl BootstrapHelper for HelperClient {
    fn call<'a>(
        &'a self,
        request: &'a Request,
    ) -> BoxFuture<'a, Result<bosun_proto::helper::Output, HelperClientError>> {
        Box::pin(HelperClient::call(self, request))
    }
}

/// Writes a bootstrap document into a VM through its guest agent (`agent/file-write`,
/// decision 0114): a VM has no root-side way in, so the API writes it. An implementation
/// writes only into the one VM it was made for, and refuses any other vmid.
pub trait BootstrapWriter: Send + Sync {
    /// Writes `document` at `path` inside VM `vmid`.
    fn write<'a>(
        &'a self,
        vmid: Vmid,
        path: &'a str,
        document: &'a [u8],
    ) -> BoxFuture<'a, Result<(), String>>;
}

/// How a bootstrap document reaches its guest.
#[derive(Clone, Copy)]
pub enum Delivery<'a> {
    /// `pct push` through the helper: a container.
    Helper,
    /// The guest agent's `file-write`: a VM.
    GuestAgent(&'a dyn BootstrapWriter),
}

impl fmt::Debug for Delivery<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Helper => "Helper",
            Self::GuestAgent(_) => "GuestAgent",
        })
    }
}

/// Whether a guest that already has a token gets a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenPolicy {
    /// Keep it (a re-run of provisioning).
    KeepExisting,
    /// Mint a new one and re-issue the bootstrap.
    Rotate,
}

/// What the bootstrap points the controller at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapEndpoints {
    /// The hub and its certificate pin.
    pub hub: PinnedEndpoint,
    /// `https://<bridge ip>:8443`.
    pub local_api_url: String,
    /// The local API leaf's SHA-256 (64 lowercase hex digits).
    pub local_api_fingerprint: String,
}

/// The guest a bootstrap is issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueTarget {
    /// The hub's guest id.
    pub guest_id: Uuid,
    /// Its vmid.
    pub vmid: Vmid,
    /// Its customer.
    pub customer: CustomerIdentity,
}

/// What one back-half run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootstrapIssuerOutcome {
    /// A token was minted and the bootstrap pushed.
    pub issued: bool,
}

/// Issues guests' tokens and bootstraps. Cheap to clone.
#[derive(Debug, Clone)]
pub struct BootstrapIssuer {
    helper: Arc<dyn BootstrapHelper>,
    journal: JournalHandle,
    endpoints: Arc<RwLock<BootstrapEndpoints>>,
    /// This host's id at the hub: a stored data plan naming another host trusts no key here.
    host_id: Uuid,
}

/// Why issuing failed (outside a provisioning operation).
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// The certificate could not be rotated.
    #[error("failed to rotate the local api certificate")]
    Certificate(#[source] CertError),
    /// The journal failed.
    #[error("failed to journal the re-issue of guest {guest_id}'s bootstrap")]
    Journal {
        /// The guest.
        guest_id: Uuid,
        /// The cause.
        #[source]
        source: JournalError,
    },
    /// A step failed.
    #[error("failed to re-issue guest {guest_id}'s bootstrap")]
    Step {
        /// The guest.
        guest_id: Uuid,
        /// The cause.
        #[source]
        source: StepError,
    },
}

impl IssueError {
    /// The guest the error is about (nil for a certificate failure).
    pub fn guest_id(&self) -> Uuid {
        match self {
            Self::Certificate(_) => Uuid::nil(),
            Self::Journal { guest_id, .. } | Self::Step { guest_id, .. } => *guest_id,
        }
    }
}

impl BootstrapIssuer {
    /// An issuer pushing through `helper`, on the host the hub knows as `host_id`.
    pub fn new(
        helper: Arc<dyn BootstrapHelper>,
        journal: JournalHandle,
        endpoints: BootstrapEndpoints,
        host_id: Uuid,
    ) -> Self {
        Self {
            helper,
            journal,
            endpoints: Arc::new(RwLock::new(endpoints)),
            host_id,
        }
    }

    /// The endpoints bootstraps currently carry.
    pub fn endpoints(&self) -> BootstrapEndpoints {
        self.endpoints.read().clone()
    }

    /// Issues `target`'s token and bootstrap as steps of operation `op`, pushed through the
    /// helper (a container).
    pub async fn run(
        &self,
        op: &OpJournal,
        target: &IssueTarget,
        policy: TokenPolicy,
    ) -> Result<BootstrapIssuerOutcome, StepError> {
        self.run_via(op, target, policy, Delivery::Helper).await
    }

    /// Issues `target`'s token and bootstrap as steps of operation `op`, delivered by
    /// `delivery`.
    pub async fn run_via(
        &self,
        op: &OpJournal,
        target: &IssueTarget,
        policy: TokenPolicy,
        delivery: Delivery<'_>,
    ) -> Result<BootstrapIssuerOutcome, StepError> {
        let guest_id = target.guest_id.to_string();
        let vmid = target.vmid.get();
        let has_token = op
            .local(
                StepName::CheckToken,
                json!({ "guest_id": guest_id, "vmid": vmid }),
                async {
                    self.journal
                        .token_of_guest(guest_id.clone())
                        .await
                        .map(|token| token.is_some())
                        .map_err(|e| format!("reading the guest's token: {e}"))
                },
            )
            .await?;
        // The keys the plan in force trusts for the guest, and whether the bootstrap it holds
        // carries others (decision 0107): then it gets a new one, as on a rotation.
        let keys = self.guest_keys(op, target).await?;
        let access_changed = has_token && self.access_changed(op, target, &keys).await?;
        let issue = !has_token || policy == TokenPolicy::Rotate || access_changed;
        if has_token && issue {
            // Revoked before the push: a crash between the push and storing the new hash
            // then leaves the guest without a token (delivered again by reconcile), never
            // with a file whose token the journal does not know.
            op.local(
                StepName::RevokeToken,
                json!({ "guest_id": guest_id, "vmid": vmid }),
                async {
                    self.journal
                        .revoke_token(guest_id.clone())
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                },
            )
            .await?;
        }
        if issue {
            if access_changed {
                tracing::info!(guest_id = %guest_id, vmid, keys = keys.len(), "the signed plan changed the guest's keys; its bootstrap is issued again");
            }
            self.issue(op, target, keys, delivery).await?;
        } else {
            tracing::info!(guest_id = %guest_id, vmid, "guest already has a local api token; kept");
        }
        Ok(BootstrapIssuerOutcome { issued: issue })
    }

    async fn issue(
        &self,
        op: &OpJournal,
        target: &IssueTarget,
        ssh_authorized_keys: Vec<SshPublicKey>,
        delivery: Delivery<'_>,
    ) -> Result<(), StepError> {
        let vmid = target.vmid.get();
        let keys = ssh_authorized_keys.len();
        let keys_sha256 = bosun_proto::guest_access::keys_sha256(&ssh_authorized_keys);
        let token = mint_token();
        let hash = TokenHash::of(&token);
        let endpoints = self.endpoints();
        let mut text = {
            let document = Bootstrap {
                schema: bootstrap::SCHEMA.to_owned(),
                guest_id: target.guest_id,
                customer: target.customer.clone(),
                hub: endpoints.hub.clone(),
                local_api: BootstrapLocalApi {
                    url: endpoints.local_api_url.clone(),
                    fingerprint: endpoints.local_api_fingerprint.clone(),
                    token: SecretToken::new(token.expose_secret()),
                },
                ssh_authorized_keys,
            };
            drop(token);
            document
                .validate()
                .and_then(|()| {
                    serde_json::to_string_pretty(&document).map_err(|e| {
                        bosun_proto::ValidationError::Invalid {
                            field: "bootstrap".to_owned(),
                            reason: e.to_string(),
                        }
                    })
                })
                .map_err(|e| StepError::Other {
                    op_id: op.op_id(),
                    step: "push_bootstrap".to_owned(),
                    reason: format!("the bootstrap document is invalid: {e}"),
                })?
        };
        if let Delivery::GuestAgent(writer) = delivery {
            let detail = json!({
                "vmid": vmid,
                "destination": bosun_proto::helper::GUEST_BOOTSTRAP_PATH,
                "local_api_fingerprint": endpoints.local_api_fingerprint,
                "ssh_keys": keys,
            });
            let written = op
                .local(
                    StepName::WriteBootstrap,
                    detail,
                    writer.write(
                        target.vmid,
                        bosun_proto::helper::GUEST_BOOTSTRAP_PATH,
                        text.as_bytes(),
                    ),
                )
                .await;
            text.zeroize();
            written?;
            return self.store_token(op, target, hash, keys_sha256).await;
        }
        let document = BootstrapDocument::new(text.clone());
        text.zeroize();
        let document = document.map_err(|e| StepError::Other {
            op_id: op.op_id(),
            step: "push_bootstrap".to_owned(),
            reason: e.to_string(),
        })?;
        let request = Request::PushBootstrap(PushBootstrap {
            vmid: helper_vmid(target.vmid, op, "push_bootstrap")?,
            document,
        });
        let detail = json!({
            "vmid": vmid,
            "destination": bosun_proto::helper::GUEST_BOOTSTRAP_PATH,
            "local_api_fingerprint": endpoints.local_api_fingerprint,
            "ssh_keys": keys,
        });
        op.local(StepName::PushBootstrap, detail, async {
            self.helper
                .call(&request)
                .await
                .map(|_| ())
                .map_err(|e| bosun_errchain::error_chain(&e))
        })
        .await?;
        // The request held the token; it is dropped before the hash is recorded.
        drop(request);
        self.store_token(op, target, hash, keys_sha256).await
    }

    /// `store_token`: the token's hash and the delivered keys' hash journaled, once the
    /// bootstrap carrying them is in the guest.
    async fn store_token(
        &self,
        op: &OpJournal,
        target: &IssueTarget,
        hash: TokenHash,
        keys_sha256: [u8; 32],
    ) -> Result<(), StepError> {
        let guest_id = target.guest_id.to_string();
        let vmid = target.vmid.get();
        op.local(
            StepName::StoreToken,
            json!({ "guest_id": guest_id, "vmid": vmid }),
            async {
                self.journal
                    .store_token_hash(guest_id.clone(), vmid, hash)
                    .await
                    .map_err(|e| e.to_string())?;
                // After the token: a crash between the two leaves no record of these keys,
                // and the next pass delivers them again.
                self.journal
                    .record_guest_access(guest_id.clone(), keys_sha256)
                    .await
                    .map_err(|e| e.to_string())
            },
        )
        .await
    }

    /// The SSH keys the signed data plan in force trusts for `guest_id` (decision 0107): what
    /// the bootstrap hands the guest, and nothing from unsigned desired state. No plan, a
    /// plan signed for another host (a journal carried over from the box this one replaced,
    /// as `PlanKeeper::current` counts it), or none naming the guest: no key. A plan the
    /// journal cannot read fails the step rather than push a bootstrap that would take the
    /// guest's keys away.
    pub(crate) async fn guest_keys(
        &self,
        op: &OpJournal,
        target: &IssueTarget,
    ) -> Result<Vec<SshPublicKey>, StepError> {
        let failed = |reason: String| step_failed(op, reason);
        let Some(stored) = self
            .journal
            .plan()
            .await
            .map_err(|e| failed(format!("reading the data plan for the guest's keys: {e}")))?
        else {
            return Ok(Vec::new());
        };
        let plan: bosun_proto::data_plan::DataPlan = serde_json::from_slice(&stored.document)
            .map_err(|e| failed(format!("the stored data plan does not decode: {e}")))?;
        if plan.host_id != self.host_id {
            tracing::warn!(plan_host_id = %plan.host_id, guest_id = %target.guest_id, "the stored data plan names another host; the bootstrap carries no key from it");
            return Ok(Vec::new());
        }
        Ok(plan
            .guest_keys(target.guest_id, &target.customer.customer_id)
            .to_vec())
    }

    /// Whether the bootstrap `target` holds carries other keys than `keys` (no record: none).
    async fn access_changed(
        &self,
        op: &OpJournal,
        target: &IssueTarget,
        keys: &[SshPublicKey],
    ) -> Result<bool, StepError> {
        let delivered = self
            .journal
            .guest_access()
            .await
            .map_err(|e| step_failed(op, format!("reading the guest's delivered keys: {e}")))?;
        Ok(delivered_differs(
            delivered.get(&target.guest_id.to_string()),
            keys,
        ))
    }

    /// Re-issues `target`'s bootstrap with a fresh token in its own journaled operation.
    pub async fn reissue(&self, target: &IssueTarget) -> Result<(), IssueError> {
        let op = OpJournal::begin(
            &self.journal,
            NewOperation {
                kind: OpKind::ReissueBootstrap,
                guest_id: Some(target.guest_id.to_string()),
                vmid: Some(target.vmid.get()),
                job_id: None,
                request_id: None,
            },
        )
        .await
        .map_err(|source| IssueError::Journal {
            guest_id: target.guest_id,
            source,
        })?;
        let result = self.run(&op, target, TokenPolicy::Rotate).await;
        let (status, error) = match &result {
            Ok(_) => (OpStatus::Done, None),
            Err(e) => (OpStatus::Failed, Some(bosun_errchain::error_chain(e))),
        };
        if let Err(e) = op.finish(status, error).await {
            tracing::error!(guest_id = %target.guest_id, error = %e, "could not journal the end of a bootstrap re-issue");
        }
        result.map(|_| ()).map_err(|source| IssueError::Step {
            guest_id: target.guest_id,
            source,
        })
    }

    /// Rotates the local API's certificate in `dir` and re-issues every guest's bootstrap
    /// with the new fingerprint. The new certificate is returned for the server to load;
    /// guests whose re-issue failed are returned with their errors.
    pub async fn rotate_certificate(
        &self,
        dir: &Path,
        names: &[String],
        guests: &[IssueTarget],
    ) -> Result<(LocalApiCert, Vec<IssueError>), IssueError> {
        let cert = LocalApiCert::rotate(dir, names).map_err(IssueError::Certificate)?;
        self.endpoints.write().local_api_fingerprint = cert.fingerprint().to_owned();
        let mut failures = Vec::new();
        for target in guests {
            if let Err(e) = self.reissue(target).await {
                tracing::error!(guest_id = %target.guest_id, vmid = %target.vmid, error = %bosun_errchain::error_chain(&e), "bootstrap re-issue after certificate rotation failed");
                failures.push(e);
            }
        }
        Ok((cert, failures))
    }
}

/// Whether keys recorded as `delivered` (none: no key) differ from `keys`.
pub fn delivered_differs(delivered: Option<&[u8; 32]>, keys: &[SshPublicKey]) -> bool {
    let none = bosun_proto::guest_access::keys_sha256(&[]);
    *delivered.unwrap_or(&none) != bosun_proto::guest_access::keys_sha256(keys)
}

/// A failure of the push step that is not the helper's.
fn step_failed(op: &OpJournal, reason: String) -> StepError {
    StepError::Other {
        op_id: op.op_id(),
        step: "push_bootstrap".to_owned(),
        reason,
    }
}

#[expect(
    clippy::result_large_err,
    reason = "StepError is the provisioning extension's error type"
)]
fn helper_vmid(
    vmid: Vmid,
    op: &OpJournal,
    step: &str,
) -> Result<bosun_proto::helper::Vmid, StepError> {
    bosun_proto::helper::Vmid::new(u64::from(vmid.get())).map_err(|e| StepError::Other {
        op_id: op.op_id(),
        step: step.to_owned(),
        reason: e.to_string(),
    })
}
