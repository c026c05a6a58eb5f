//! What the operator dashboard ([`crate::ui`]) reads beyond the admin API's lists: whether the
//! dead-man's switch suspects the hub's own connectivity, the alerts still open (storage,
//! backup, restore-test and escrow watches, and overdue hosts), and the newest alerts of one
//! host.

use bosun_proto::admin::Alert;
use uuid::Uuid;

/// Most alerts one [`DashboardQuery`] may ask for.
pub const MAX_ALERTS: u32 = 1_000;

/// What to read for a dashboard page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DashboardQuery {
    /// Only this host's open and recent alerts; `None`: every host's, and hub-wide alerts.
    pub host_id: Option<Uuid>,
    /// At most this many recent alerts (capped at [`MAX_ALERTS`]).
    pub alert_limit: u32,
    /// Now, Unix ms: which silences are in force.
    pub now_ms: i64,
}

/// One alert that is still open: the admin API's wire type (`GET /v1/admin/alerts/open`).
pub use bosun_proto::admin::OpenAlert;

/// The dashboard's extra reads, taken in one transaction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DashboardFacts {
    /// Most hosts went silent at once and the hub suspects its own connectivity (the
    /// `hub_connectivity_suspected` alert is open).
    pub hub_silence_suspected: bool,
    /// Open alerts, oldest first.
    pub open_alerts: Vec<OpenAlert>,
    /// The newest alerts (of the host, when the query names one), newest last.
    pub recent_alerts: Vec<Alert>,
    /// The hub's key rotation while a key is staged or retiring, with how many live hosts
    /// hold each key (read only then: counting holders reads every host row).
    pub key_rotation: Option<super::hub_keys::KeyRotation>,
}
