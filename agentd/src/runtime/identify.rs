//! The second phase: the Proxmox and hub clients, the host's identity at the hub (enrolling
//! on the first start) and the host's keys.

use std::sync::Arc;

use bosun_pve::{Pve, PveClient, PveOps, PveSetupError, client_from_settings};

use super::open::Opened;
use super::{AgentError, local_hostname, notify};
use crate::config::AgentConfig;
use crate::data::backup::{ArchiveProver, ArchiveReader};
use crate::links::helper::HelperClient;
use crate::links::hub::reporter::HostKeys;
use crate::links::hub_client::client::HubClient;
use crate::links::hub_client::identity::HostIdentity;
use crate::links::hub_client::pins::HubPins;
use crate::metrics::PveRequestCounter;
use crate::trust::keys::credentials::CredentialOpener;
use crate::trust::keys::pbs_key::PbsKeySource;
use crate::trust::keys::sealing::StorageIdentity;

/// Who this host is and what it talks through.
pub(super) struct Identified {
    /// Proxmox, its requests counted in the agent's metrics.
    pub pve: Arc<PveClient>,
    /// The hub.
    pub hub: HubClient,
    /// The keys the hub announced last, when pins alone decide whom to trust.
    pub hub_pins: Option<HubPins>,
    /// The host's identity at the hub.
    pub identity: HostIdentity,
    /// Opens what operators seal to this host and sign.
    pub credentials: Arc<CredentialOpener>,
    /// K, the PBS client encryption key.
    pub pbs_key: PbsKeySource,
    /// What the report says of the host's keys.
    pub keys: HostKeys,
    /// What proves each archive when its backup ends, checked before every restore.
    pub prover: ArchiveProver,
}

/// Sets up the clients, reads the host's identity (enrolling when there is none) and loads
/// or makes the host's keys.
pub(super) async fn identify(
    config: &AgentConfig,
    opened: &Opened,
    sd: bool,
) -> Result<Identified, AgentError> {
    let pve = Arc::new(pve_client(config)?);
    let hub = HubClient::with_trust(config.hub.url.clone(), &config.hub.trust)
        .map_err(AgentError::HubClient)?;
    let hub_pins =
        HubPins::for_client(&hub, config, opened.clock.now()).map_err(AgentError::HubPins)?;
    let identity = match HostIdentity::load(&config.state_dir).map_err(AgentError::Identity)? {
        Some(identity) => identity,
        None => {
            notify(sd, &[sd_notify::NotifyState::Status("enrolling")]);
            let identity = enroll(config, &hub, &*pve, opened.clock.now()).await?;
            tracing::warn!(
                host_id = %identity.host_id,
                "the agent enrolled on its own, so no recovery code was made: run \
                 `bosun-agentctl escrow create` with the customer; the hub alerts \
                 escrow_missing once the host backs up to PBS (`bosun-agentctl enroll` \
                 enrolls and makes the escrow in one step)"
            );
            identity
        }
    };
    tracing::info!(host_id = %identity.host_id, "host identity");
    // Made on the first start: what operators seal storage credentials to.
    let storage_identity =
        StorageIdentity::load_or_create(&config.state_dir).map_err(AgentError::Sealing)?;
    // K, the PBS client encryption key: made once, never leaves the box; its fingerprint
    // is reported. A box that took over a lost host waits for K from the escrow instead.
    let pbs_key = PbsKeySource::new(&config.state_dir, identity.replaces.is_none());
    pbs_key.load().map_err(AgentError::PbsKey)?;
    let keys = HostKeys {
        storage_recipient: Some(storage_identity.recipient()),
        pbs_key: pbs_key.clone(),
    };
    let prover = ArchiveProver::new(
        PveOps::shared(Arc::clone(&pve)),
        config
            .helper
            .clone()
            .map(|t| Arc::new(HelperClient::new(t)) as Arc<dyn ArchiveReader>),
        Some(pbs_key.clone()),
        opened.journal.clone(),
    );
    Ok(Identified {
        pve,
        hub,
        hub_pins,
        identity,
        credentials: Arc::new(CredentialOpener::new(
            Arc::new(storage_identity),
            config.allowed_signers.clone(),
            Arc::clone(&opened.clock),
        )),
        pbs_key,
        keys,
        prover,
    })
}

/// The Proxmox client the config describes, its requests counted in the agent's metrics.
fn pve_client(config: &AgentConfig) -> Result<PveClient, AgentError> {
    let client = client_from_settings(&config.pve).map_err(|e| match e {
        PveSetupError::Value { field, reason } => AgentError::Value { field, reason },
        PveSetupError::Client(e) => AgentError::Pve(e),
    })?;
    Ok(client.observed_by(Arc::new(PveRequestCounter)))
}

/// Enrolls with the config's clients (the offline `bosun-agentctl enroll`).
pub(super) async fn enroll_now(config: &AgentConfig) -> Result<HostIdentity, AgentError> {
    let pve = pve_client(config)?;
    let hub = HubClient::with_trust(config.hub.url.clone(), &config.hub.trust)
        .map_err(AgentError::HubClient)?;
    enroll(config, &hub, &pve, jiff::Timestamp::now()).await
}

async fn enroll<P: Pve>(
    config: &AgentConfig,
    hub: &HubClient,
    pve: &P,
    now: jiff::Timestamp,
) -> Result<HostIdentity, AgentError> {
    let token = config
        .hub
        .enrollment_token
        .as_ref()
        .ok_or(AgentError::NotEnrolled)?;
    let hostname = local_hostname(config);
    let pve_version = pve.version().await.ok().map(|v| v.version);
    let response = hub
        .enroll(token, &hostname, pve_version)
        .await
        .map_err(AgentError::Enroll)?;
    let identity = HostIdentity {
        host_id: response.host_id,
        host_key: crate::links::hub_client::identity::HostKey::in_memory(
            secrecy::SecretString::from(response.host_key.expose().to_owned()),
        ),
        replaces: response
            .replaces
            .as_ref()
            .map(|r| r.hostname.chars().take(253).collect()),
        enrolled_at: Some(now),
    };
    identity
        .store(&config.state_dir)
        .map_err(AgentError::Identity)?;
    // Read back, so the key's rotations are kept in the state directory from now on.
    let identity = HostIdentity::load(&config.state_dir)
        .map_err(AgentError::Identity)?
        .unwrap_or(identity);
    tracing::info!(host_id = %identity.host_id, status = ?response.status, "enrolled at the hub; host key stored");
    if let Some(replaced) = &response.replaces {
        tracing::warn!(
            host_id = %identity.host_id,
            replaces = %replaced.hostname,
            "enrolled in restore mode: this box takes over a lost host; its PBS key comes back \
             with `bosun-agentctl escrow recover` and the customer's recovery code"
        );
    }
    Ok(identity)
}
