//! `bosunctl explain --host H --order`: the order the host's guests come up and go down in
//! (decision 0099), from the desired state the hub holds for it and the host's last report:
//! each ordered guest's place (Proxmox's `startup` order), what it requires, the guests it
//! waits on with their state now, and the requirements the order refuses with why.

use std::collections::BTreeMap;

use bosun_proto::admin::HostDetail;
use bosun_proto::desired::order::{BootOrder, boot_order};
use bosun_proto::desired::{DesiredState, Power};
use bosun_proto::report::GuestStatus;
use serde_json::json;
use uuid::Uuid;

use crate::client::decode;
use crate::error::CtlError;
use crate::global::GlobalArgs;
use crate::{outln, resolve, table};

/// Runs `explain --host HOST --order`.
pub async fn run(global: &GlobalArgs, host: &str) -> Result<(), CtlError> {
    let client = crate::client::connect(global)?;
    let host_id = resolve::host_id(&client, host).await?;
    let detail: HostDetail = decode(
        "host detail",
        client.get(&format!("/v1/admin/hosts/{host_id}")).await?,
    )?;
    let Some(desired) = &detail.desired else {
        return Err(CtlError::Hub {
            status: 404,
            code: "no_desired_state".to_owned(),
            message: format!("the hub holds no desired state for host {host_id}"),
            request_id: None,
        });
    };
    let status: BTreeMap<Uuid, GuestStatus> = detail
        .last_report
        .iter()
        .flat_map(|r| &r.guests)
        .filter_map(|g| g.guest_id.map(|id| (id, g.status)))
        .collect();
    let order = boot_order(&desired.guests);
    let view = View {
        desired,
        order: &order,
        status: &status,
    };
    if global.json() {
        return table::print_json(&view.json());
    }
    for line in view.lines() {
        outln!("{line}")?;
    }
    Ok(())
}

/// What the command prints, apart from the hub.
pub(crate) struct View<'a> {
    pub desired: &'a DesiredState,
    pub order: &'a BootOrder,
    pub status: &'a BTreeMap<Uuid, GuestStatus>,
}

impl View<'_> {
    fn name(&self, guest: Uuid) -> String {
        self.desired
            .guests
            .iter()
            .find(|g| g.guest_id == guest)
            .map_or_else(|| guest.to_string(), |g| g.hostname.clone())
    }

    fn state(&self, guest: Uuid) -> &'static str {
        self.status
            .get(&guest)
            .map_or("not built", |s| crate::status::status_name(*s))
    }

    fn running(&self, guest: Uuid) -> bool {
        self.status.get(&guest) == Some(&GuestStatus::Running)
    }

    /// The ordered guests, first up first.
    fn ordered(&self) -> Vec<(u32, Uuid)> {
        let mut ordered: Vec<(u32, Uuid)> = self
            .order
            .position
            .iter()
            .map(|(guest, place)| (*place, *guest))
            .collect();
        ordered.sort_by_key(|(place, guest)| (*place, self.name(*guest)));
        ordered
    }

    /// What `guest` is held for now, in words, if anything.
    fn held(&self, guest: Uuid) -> Option<String> {
        let spec = self.desired.guests.iter().find(|g| g.guest_id == guest)?;
        let on: Vec<String> = match spec.power {
            Power::Running if !self.running(guest) => self
                .order
                .waits_on
                .get(&guest)
                .into_iter()
                .flatten()
                .filter(|p| !self.running(**p))
                .map(|p| format!("{} ({})", self.name(*p), self.state(*p)))
                .collect(),
            Power::Stopped if self.running(guest) => self
                .order
                .dependents(guest)
                .filter(|d| self.running(*d))
                .map(|d| format!("{} (running)", self.name(d)))
                .collect(),
            _ => Vec::new(),
        };
        if on.is_empty() {
            return None;
        }
        let verb = if spec.power == Power::Running {
            "starts once these run"
        } else {
            "stops once these are stopped"
        };
        Some(format!("{verb}: {}", on.join(", ")))
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        let ordered = self.ordered();
        if ordered.is_empty() {
            return vec!["no guest of the host provides or requires anything: no order".to_owned()];
        }
        let mut lines = vec![
            "guests come up in this order and go down in its reverse (Proxmox's startup order too):"
                .to_owned(),
        ];
        for (place, guest) in &ordered {
            let spec = self.desired.guests.iter().find(|g| g.guest_id == *guest);
            let list = |names: Option<&Vec<String>>| match names {
                Some(n) if !n.is_empty() => n.join(", "),
                _ => "-".to_owned(),
            };
            lines.push(format!(
                "{place:>3}. {} ({}; desired {}) provides {}; requires {}",
                self.name(*guest),
                self.state(*guest),
                spec.map_or("-", |s| match s.power {
                    Power::Running => "running",
                    Power::Stopped => "stopped",
                }),
                list(spec.map(|s| &s.provides)),
                list(spec.map(|s| &s.requires)),
            ));
            let on: Vec<String> = self
                .order
                .waits_on
                .get(guest)
                .into_iter()
                .flatten()
                .map(|p| self.name(*p))
                .collect();
            if !on.is_empty() {
                lines.push(format!("     waits on {}", on.join(", ")));
            }
            if let Some(held) = self.held(*guest) {
                lines.push(format!("     now held: {held}"));
            }
        }
        for refused in &self.order.refused {
            lines.push(format!(
                "refused: {} requires {}: {}",
                self.name(refused.guest_id),
                refused.requirement,
                refused.reason()
            ));
        }
        lines
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        let guests: Vec<serde_json::Value> = self
            .ordered()
            .into_iter()
            .map(|(place, guest)| {
                json!({
                    "guest_id": guest,
                    "hostname": self.name(guest),
                    "place": place,
                    "status": self.state(guest),
                    "waits_on": self.order.waits_on.get(&guest).into_iter().flatten().map(|p| self.name(*p)).collect::<Vec<_>>(),
                    "held": self.held(guest),
                })
            })
            .collect();
        let refused: Vec<serde_json::Value> = self
            .order
            .refused
            .iter()
            .map(|r| {
                json!({
                    "guest_id": r.guest_id,
                    "hostname": self.name(r.guest_id),
                    "requirement": r.requirement,
                    "refusal": r.refusal.as_str(),
                    "reason": r.reason(),
                })
            })
            .collect();
        json!({ "order": guests, "refused": refused })
    }
}

#[cfg(test)]
#[path = "explain_order_tests.rs"]
mod tests;
