//! The provisioning back half (DESIGN §8): after the front half has restored and sized a
//! guest, give its controller what it needs to reach the agent and the hub.
//!
//! ```text
//!  has_token? ──yes (and not asked to rotate)──────────────────────────────┐
//!      │ no                                                                 ▼
//!  mint token ─► prepare_config_mount (helper, root) ─► store SHA-256 ─► attach_bind_mount
//!  (256 bits,    <guests root>/<vmid>/bootstrap,        (journal;          (helper: pct set
//!   in memory)    bootstrap.json 0600, owned by the      token.minted       -mpN …,ro=1)
//!                 guest's mapped root)                   audited)
//! ```
//!
//! - The plaintext token exists only between minting and the helper's write; the journal
//!   keeps its hash, and the hash is stored only **after** the file is written, so "the
//!   journal knows a token" always means "the guest's bootstrap carries it". A crash between
//!   the two leaves no hash, and the next pass mints and writes again.
//! - A re-run keeps an existing guest's token ([`TokenPolicy::KeepExisting`]); only an
//!   explicit [`TokenPolicy::Rotate`] (certificate rotation, a suspected leak) replaces it.
//! - Each piece is a journaled step of the provisioning operation ([`OpJournal::local`]).
//! - Certificate rotation ([`BackHalf::rotate_certificate`]) re-issues every bootstrap with
//!   the new fingerprint and fresh tokens.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use bosun_proto::bootstrap::{self, Bootstrap, LocalApi as BootstrapLocalApi, PinnedEndpoint};
use bosun_proto::desired::CustomerIdentity;
use bosun_proto::helper::{
    AttachBindMount, BindSource, BootstrapDocument, GuestPath, MappedId, MountIndex,
    PrepareConfigMount, Request,
};
use bosun_proto::secret::SecretToken;
use futures::future::BoxFuture;
use parking_lot::RwLock;
use secrecy::ExposeSecret;
use serde_json::json;
use uuid::Uuid;
use zeroize::Zeroize;

use crate::helper_client::{HelperClient, HelperClientError};
use crate::journal::{JournalError, JournalHandle, NewOperation, OpStatus, TokenHash};
use crate::localapi::{CertError, LocalApiCert, mint_token};
use crate::pve::{Pve, Vmid};
use crate::reconcile::provision::{ExtensionFuture, ProvisionContext, ProvisionExtension};
use crate::reconcile::steps::{OpJournal, StepError};

/// The host uid/gid an unprivileged container's root maps to on a default PVE install.
pub const UNPRIVILEGED_ROOT_ID: u64 = 100_000;
/// Where the bootstrap appears inside the guest.
pub const DEFAULT_GUEST_PATH: &str = "/etc/bosun";
/// The mount point index used for the bootstrap (`mp9`), clear of the usual data mounts.
pub const DEFAULT_MOUNT_INDEX: u64 = 9;

/// The helper verbs the back half needs, as a seam so tests can run a helper that is not
/// root. [`HelperClient`] is the production implementation.
pub trait ConfigMountHelper: Send + Sync + fmt::Debug {
    /// Sends one request to the helper.
    fn call<'a>(
        &'a self,
        request: &'a Request,
    ) -> BoxFuture<'a, Result<bosun_proto::helper::Output, HelperClientError>>;
}

impl ConfigMountHelper for HelperClient {
    fn call<'a>(
        &'a self,
        request: &'a Request,
    ) -> BoxFuture<'a, Result<bosun_proto::helper::Output, HelperClientError>> {
        Box::pin(HelperClient::call(self, request))
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

/// How the bootstrap is laid out.
#[derive(Debug, Clone)]
pub struct BackHalfConfig {
    /// The container root's host uid.
    pub root_uid: MappedId,
    /// The container root's host gid.
    pub root_gid: MappedId,
    /// `mpN` used for the config mount.
    pub mount_index: MountIndex,
    /// The path inside the guest.
    pub guest_path: GuestPath,
}

impl BackHalfConfig {
    /// Unprivileged containers (root = 100000:100000), `mp9` at `/etc/bosun`.
    pub fn unprivileged() -> Result<Self, bosun_proto::helper::InvalidArgument> {
        Ok(Self {
            root_uid: MappedId::new(UNPRIVILEGED_ROOT_ID)?,
            root_gid: MappedId::new(UNPRIVILEGED_ROOT_ID)?,
            mount_index: MountIndex::new(DEFAULT_MOUNT_INDEX)?,
            guest_path: GuestPath::new(DEFAULT_GUEST_PATH)?,
        })
    }
}

/// What one back-half run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackHalfOutcome {
    /// A token was minted and the bootstrap (re)written.
    pub issued: bool,
    /// The config mount was attached.
    pub attached: bool,
}

/// The back half. Cheap to clone.
#[derive(Debug, Clone)]
pub struct BackHalf {
    helper: Arc<dyn ConfigMountHelper>,
    journal: JournalHandle,
    endpoints: Arc<RwLock<BootstrapEndpoints>>,
    config: BackHalfConfig,
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

impl BackHalf {
    /// A back half writing through `helper`.
    pub fn new(
        helper: Arc<dyn ConfigMountHelper>,
        journal: JournalHandle,
        endpoints: BootstrapEndpoints,
        config: BackHalfConfig,
    ) -> Self {
        Self {
            helper,
            journal,
            endpoints: Arc::new(RwLock::new(endpoints)),
            config,
        }
    }

    /// The endpoints bootstraps currently carry.
    pub fn endpoints(&self) -> BootstrapEndpoints {
        self.endpoints.read().clone()
    }

    /// Runs the back half for `target` as steps of operation `op`.
    pub async fn run(
        &self,
        op: &OpJournal,
        target: &IssueTarget,
        policy: TokenPolicy,
        attach: bool,
    ) -> Result<BackHalfOutcome, StepError> {
        let guest_id = target.guest_id.to_string();
        let vmid = target.vmid.get();
        let has_token = op
            .local(
                "check_token",
                json!({ "guest_id": guest_id, "vmid": vmid }),
                async {
                    guest_has_token(&self.journal, &guest_id)
                        .await
                        .map_err(|e| format!("reading the audit log: {e}"))
                },
            )
            .await?;
        let issue = !has_token || policy == TokenPolicy::Rotate;
        if issue {
            self.issue(op, target).await?;
        } else {
            tracing::info!(guest_id = %guest_id, vmid, "guest already has a local api token; kept");
        }
        if attach {
            self.attach(op, target).await?;
        }
        Ok(BackHalfOutcome {
            issued: issue,
            attached: attach,
        })
    }

    async fn issue(&self, op: &OpJournal, target: &IssueTarget) -> Result<(), StepError> {
        let guest_id = target.guest_id.to_string();
        let vmid = target.vmid.get();
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
                    step: "write_bootstrap".to_owned(),
                    reason: format!("the bootstrap document is invalid: {e}"),
                })?
        };
        let document = BootstrapDocument::new(text.clone());
        text.zeroize();
        let document = document.map_err(|e| StepError::Other {
            op_id: op.op_id(),
            step: "write_bootstrap".to_owned(),
            reason: e.to_string(),
        })?;
        let request = Request::PrepareConfigMount(PrepareConfigMount {
            vmid: helper_vmid(target.vmid, op, "write_bootstrap")?,
            root_uid: self.config.root_uid,
            root_gid: self.config.root_gid,
            bootstrap: document,
        });
        let detail = json!({
            "vmid": vmid,
            "root_uid": self.config.root_uid.get(),
            "root_gid": self.config.root_gid.get(),
            "local_api_fingerprint": endpoints.local_api_fingerprint,
        });
        op.local("write_bootstrap", detail, async {
            self.helper
                .call(&request)
                .await
                .map(|_| ())
                .map_err(|e| crate::localapi::error_chain(&e))
        })
        .await?;
        // The request held the token; it is dropped before the hash is recorded.
        drop(request);
        op.local(
            "store_token",
            json!({ "guest_id": guest_id, "vmid": vmid }),
            async {
                self.journal
                    .store_token_hash(guest_id.clone(), vmid, hash)
                    .await
                    .map_err(|e| e.to_string())
            },
        )
        .await
    }

    async fn attach(&self, op: &OpJournal, target: &IssueTarget) -> Result<(), StepError> {
        let request = Request::AttachBindMount(AttachBindMount {
            vmid: helper_vmid(target.vmid, op, "attach_config_mount")?,
            index: self.config.mount_index,
            source: BindSource::Bootstrap,
            guest_path: self.config.guest_path.clone(),
            read_only: true,
        });
        let detail = json!({
            "vmid": target.vmid.get(),
            "mp": format!("mp{}", self.config.mount_index.get()),
            "guest_path": self.config.guest_path.as_str(),
        });
        op.local("attach_config_mount", detail, async {
            self.helper
                .call(&request)
                .await
                .map(|_| ())
                .map_err(|e| crate::localapi::error_chain(&e))
        })
        .await
    }

    /// Re-issues `target`'s bootstrap with a fresh token in its own journaled operation.
    pub async fn reissue(&self, target: &IssueTarget) -> Result<(), IssueError> {
        let op = OpJournal::begin(
            &self.journal,
            NewOperation {
                kind: "reissue_bootstrap".to_owned(),
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
        let result = self.run(&op, target, TokenPolicy::Rotate, false).await;
        let (status, error) = match &result {
            Ok(_) => (OpStatus::Done, None),
            Err(e) => (OpStatus::Failed, Some(crate::localapi::error_chain(e))),
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
                tracing::error!(guest_id = %target.guest_id, vmid = %target.vmid, error = %crate::localapi::error_chain(&e), "bootstrap re-issue after certificate rotation failed");
                failures.push(e);
            }
        }
        Ok((cert, failures))
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

/// Whether the journal holds a token for `guest_id`, from its audit log (`token.minted` /
/// `token.revoked`, written in the same transaction as the token table).
pub async fn guest_has_token(
    journal: &JournalHandle,
    guest_id: &str,
) -> Result<bool, JournalError> {
    const PAGE: u32 = 1000;
    let mut after = 0u64;
    let mut has = false;
    loop {
        let page = journal.audit_since(after, PAGE).await?;
        let Some(last) = page.last() else {
            return Ok(has);
        };
        after = last.seq;
        for entry in &page {
            if entry.event.guest_id.as_deref() != Some(guest_id) {
                continue;
            }
            match entry.event.event.as_str() {
                "token.minted" => has = true,
                "token.revoked" => has = false,
                _ => {}
            }
        }
        if page.len() < PAGE as usize {
            return Ok(has);
        }
    }
}

impl<P: Pve> ProvisionExtension<P> for BackHalf {
    fn name(&self) -> &'static str {
        "back_half"
    }

    fn run<'a>(&'a self, cx: &'a ProvisionContext<'a, P>) -> ExtensionFuture<'a> {
        Box::pin(async move {
            let target = IssueTarget {
                guest_id: cx.spec.guest_id,
                vmid: cx.vmid,
                customer: cx.spec.customer.clone(),
            };
            BackHalf::run(self, cx.op, &target, TokenPolicy::KeepExisting, true)
                .await
                .map(|_| ())
        })
    }
}
