//! The node's hardware and its guests' usage: the disks with their SMART health, wear and
//! attributes (`GET /nodes/{node}/disks/list`, `GET /nodes/{node}/disks/smart`), the LVM thin
//! pools and ZFS pools with their fill (`GET /nodes/{node}/disks/lvmthin`,
//! `GET /nodes/{node}/disks/zfs`), and each container's CPU, memory and root-disk use as
//! `GET /nodes/{node}/lxc` reports it.
//!
//! Tests replace the whole [`Hardware`] (`GET`/`POST /_sim/node/hardware`, or
//! [`SimHandle::set_hardware`](crate::SimHandle::set_hardware)), degrade one disk
//! (`POST /_sim/node/disks/degrade` with a [`DiskDegrade`], or
//! [`SimHandle::degrade_disk`](crate::SimHandle::degrade_disk)) and fix a guest's usage
//! (`POST /_sim/lxc/{vmid}/load` with a [`GuestLoad`]). Privileges as on PVE: `Sys.Audit` on
//! `/` for SMART and the pools, on the node for the disk list.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::server::App;

/// Most disks, pools or guest loads a test may declare.
const MAX_ITEMS: usize = 256;

/// What the node has. A field left out of a posted body is the simulator's own (so `{}`
/// restores the healthy default hardware).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hardware {
    /// Its disks.
    pub disks: Vec<SimDisk>,
    /// Its LVM thin pools.
    pub thin_pools: Vec<SimThinPool>,
    /// Its ZFS pools.
    pub zfs_pools: Vec<SimZfsPool>,
    /// Guests' usage a test fixed, by vmid.
    pub guest_load: BTreeMap<u32, GuestLoad>,
}

/// One disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimDisk {
    /// `/dev/sda`.
    pub devpath: String,
    /// The model.
    #[serde(default)]
    pub model: String,
    /// `hdd`, `ssd`, `nvme`, `usb`.
    #[serde(default)]
    pub kind: String,
    /// `PASSED`, `OK`, `FAILED`, `UNKNOWN`.
    pub health: String,
    /// The life left in percent (`None`: `N/A`).
    #[serde(default)]
    pub wearout: Option<u8>,
    /// Size in bytes.
    #[serde(default)]
    pub size: u64,
    /// The ATA attributes (an NVMe disk answers with text instead when this is empty).
    #[serde(default)]
    pub attributes: Vec<SimAttribute>,
}

/// One ATA SMART attribute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimAttribute {
    /// The id (5, 177, 194, …).
    pub id: u16,
    /// The name.
    pub name: String,
    /// The normalized value.
    pub value: u32,
    /// The threshold.
    pub threshold: u32,
    /// `-`, `FAILING_NOW` or `In_the_past`.
    #[serde(default = "no_failure")]
    pub fail: String,
    /// The raw value.
    #[serde(default)]
    pub raw: String,
}

fn no_failure() -> String {
    "-".to_owned()
}

/// One LVM thin pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimThinPool {
    /// Volume group.
    pub vg: String,
    /// Thin pool.
    pub lv: String,
    /// Size in bytes.
    pub lv_size: u64,
    /// Used bytes.
    pub used: u64,
    /// Metadata size in bytes.
    pub metadata_size: u64,
    /// Used metadata bytes.
    pub metadata_used: u64,
}

/// One ZFS pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimZfsPool {
    /// Name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Allocated bytes.
    pub alloc: u64,
    /// `ONLINE`, `DEGRADED`, …
    #[serde(default = "online")]
    pub health: String,
}

fn online() -> String {
    "ONLINE".to_owned()
}

/// A guest's usage as shares (each `None`: the simulator's own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestLoad {
    /// CPU, a share of its cores.
    #[serde(default)]
    pub cpu: Option<f64>,
    /// Memory, a share of its limit.
    #[serde(default)]
    pub memory: Option<f64>,
    /// Root disk, a share of its size.
    #[serde(default)]
    pub disk: Option<f64>,
}

/// How to degrade one disk; what is left out stays.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskDegrade {
    /// The disk.
    pub devpath: String,
    /// A new health word.
    #[serde(default)]
    pub health: Option<String>,
    /// A new life left in percent.
    #[serde(default)]
    pub wearout: Option<u8>,
    /// An attribute (by name) to mark `FAILING_NOW`, its value dropped to its threshold.
    #[serde(default)]
    pub failing_attribute: Option<String>,
}

const GIB: u64 = 1 << 30;

fn attribute(id: u16, name: &str, value: u32, threshold: u32, raw: &str) -> SimAttribute {
    SimAttribute {
        id,
        name: name.to_owned(),
        value,
        threshold,
        fail: no_failure(),
        raw: raw.to_owned(),
    }
}

impl Default for Hardware {
    /// A SATA SSD and an NVMe disk, both healthy; the `pve/data` thin pool a quarter full.
    fn default() -> Self {
        Self {
            disks: vec![
                SimDisk {
                    devpath: "/dev/sda".into(),
                    model: "Samsung SSD 870 EVO 1TB".into(),
                    kind: "ssd".into(),
                    health: "PASSED".into(),
                    wearout: Some(97),
                    size: 1_000_204_886_016,
                    attributes: vec![
                        attribute(5, "Reallocated_Sector_Ct", 100, 10, "0"),
                        attribute(177, "Wear_Leveling_Count", 97, 0, "31"),
                        attribute(194, "Temperature_Celsius", 66, 0, "34"),
                    ],
                },
                SimDisk {
                    devpath: "/dev/nvme0n1".into(),
                    model: "Samsung SSD 980 PRO 1TB".into(),
                    kind: "nvme".into(),
                    health: "PASSED".into(),
                    wearout: Some(99),
                    size: 1_000_204_886_016,
                    attributes: Vec::new(),
                },
            ],
            thin_pools: vec![SimThinPool {
                vg: "pve".into(),
                lv: "data".into(),
                lv_size: 800 * GIB,
                used: 200 * GIB,
                metadata_size: 8 * GIB,
                metadata_used: GIB / 2,
            }],
            zfs_pools: Vec::new(),
            guest_load: BTreeMap::new(),
        }
    }
}

impl Hardware {
    /// Checks what a test declared.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.disks.len() > MAX_ITEMS
            || self.thin_pools.len() + self.zfs_pools.len() > MAX_ITEMS
            || self.guest_load.len() > MAX_ITEMS
        {
            return Err(format!("at most {MAX_ITEMS} disks, pools and guest loads"));
        }
        for d in &self.disks {
            if !d.devpath.starts_with("/dev/") {
                return Err(format!("devpath {:?} is not under /dev/", d.devpath));
            }
            if d.wearout.is_some_and(|w| w > 100) {
                return Err(format!("wearout of {} is above 100", d.devpath));
            }
        }
        for p in &self.thin_pools {
            if p.used > p.lv_size || p.metadata_used > p.metadata_size {
                return Err(format!(
                    "thin pool {}/{} holds more than its size",
                    p.vg, p.lv
                ));
            }
        }
        for p in &self.zfs_pools {
            if p.alloc > p.size {
                return Err(format!("zfs pool {} holds more than its size", p.name));
            }
        }
        self.guest_load.values().try_for_each(GuestLoad::check)
    }

    /// Applies `degrade` to its disk.
    pub(crate) fn degrade(&mut self, degrade: &DiskDegrade) -> Result<(), String> {
        let disk = self
            .disks
            .iter_mut()
            .find(|d| d.devpath == degrade.devpath)
            .ok_or_else(|| format!("no disk {}", degrade.devpath))?;
        if let Some(health) = &degrade.health {
            disk.health.clone_from(health);
        }
        if let Some(wearout) = degrade.wearout {
            if wearout > 100 {
                return Err("wearout is at most 100".into());
            }
            disk.wearout = Some(wearout);
        }
        if let Some(name) = &degrade.failing_attribute {
            let a = disk
                .attributes
                .iter_mut()
                .find(|a| &a.name == name)
                .ok_or_else(|| format!("disk {} has no attribute {name}", degrade.devpath))?;
            a.fail = "FAILING_NOW".into();
            a.value = a.threshold;
        }
        Ok(())
    }
}

impl GuestLoad {
    fn check(&self) -> Result<(), String> {
        for v in [self.cpu, self.memory, self.disk].into_iter().flatten() {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{v} is not a share between 0 and 1"));
            }
        }
        Ok(())
    }
}

/// `GET /nodes/{node}/disks/list`.
pub(crate) fn list(ctx: &Ctx) -> HandlerResult {
    let skip_smart = ctx.flag("skipsmart");
    let hw = ctx.shared.hardware.lock();
    let items: Vec<Value> = hw
        .disks
        .iter()
        .map(|d| {
            let mut v = json!({
                "devpath": d.devpath,
                "model": d.model,
                "type": d.kind,
                "size": d.size,
                "gpt": 1,
                "mounted": 0,
                "osdid": -1,
                "used": "LVM",
                "serial": format!("SIM{:08X}", d.size % 0xFFFF_FFFF),
                "wearout": d.wearout.map_or_else(|| json!("N/A"), |w| json!(w)),
            });
            if !skip_smart {
                v["health"] = json!(d.health);
            }
            v
        })
        .collect();
    data(Value::Array(items))
}

/// `GET /nodes/{node}/disks/smart?disk=…`.
pub(crate) fn smart(ctx: &Ctx) -> HandlerResult {
    let device = ctx.required("disk")?;
    let hw = ctx.shared.hardware.lock();
    let disk = hw
        .disks
        .iter()
        .find(|d| d.devpath == device)
        .ok_or_else(|| ApiError::internal(&format!("{device}: no such disk\n")))?;
    if ctx.flag("healthonly") {
        return data(json!({ "health": disk.health }));
    }
    if disk.attributes.is_empty() {
        return data(json!({
            "health": disk.health,
            "type": "text",
            "text": format!("SMART overall-health self-assessment test result: {}\n", disk.health),
        }));
    }
    let attributes: Vec<Value> = disk
        .attributes
        .iter()
        .map(|a| {
            json!({
                "id": format!("{:>3}", a.id),
                "name": a.name,
                "value": a.value,
                "worst": a.value,
                "threshold": a.threshold,
                "fail": a.fail,
                "raw": a.raw,
                "flags": "PO--CK",
                "normalized": a.value,
            })
        })
        .collect();
    data(json!({ "health": disk.health, "type": "ata", "attributes": attributes }))
}

/// `GET /nodes/{node}/disks/lvmthin`.
pub(crate) fn lvmthin(ctx: &Ctx) -> HandlerResult {
    let hw = ctx.shared.hardware.lock();
    data(json!(hw.thin_pools))
}

/// `GET /nodes/{node}/disks/zfs`.
pub(crate) fn zfs(ctx: &Ctx) -> HandlerResult {
    let hw = ctx.shared.hardware.lock();
    let items: Vec<Value> = hw
        .zfs_pools
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "size": p.size,
                "alloc": p.alloc,
                "free": p.size - p.alloc,
                "frag": 3,
                "dedup": 1.0,
                "health": p.health,
            })
        })
        .collect();
    data(Value::Array(items))
}

/// The usage a test fixed for `vmid`.
pub(crate) fn guest_load(shared: &crate::state::Shared, vmid: u32) -> GuestLoad {
    shared
        .hardware
        .lock()
        .guest_load
        .get(&vmid)
        .copied()
        .unwrap_or_default()
}

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/_sim/node/hardware", get(get_hardware).post(set_hardware))
        .route("/_sim/node/disks/degrade", post(degrade_disk))
        .route("/_sim/lxc/{vmid}/load", post(set_guest_load))
}

type AdminResult<T> = Result<Json<T>, (StatusCode, String)>;

fn bad(what: &str) -> impl Fn(String) -> (StatusCode, String) + '_ {
    move |e| (StatusCode::BAD_REQUEST, format!("invalid {what}: {e}\n"))
}

async fn get_hardware(State(app): State<App>, headers: HeaderMap) -> AdminResult<Hardware> {
    crate::admin::authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    Ok(Json(app.shared.hardware.lock().clone()))
}

/// Replaces the whole hardware; 400 and no change for a body that does not parse or check.
async fn set_hardware(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> AdminResult<Hardware> {
    crate::admin::authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let hw: Hardware = serde_json::from_slice(&body).map_err(|e| bad("hardware")(e.to_string()))?;
    hw.check().map_err(bad("hardware"))?;
    *app.shared.hardware.lock() = hw.clone();
    Ok(Json(hw))
}

async fn degrade_disk(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> AdminResult<SimDisk> {
    crate::admin::authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let degrade: DiskDegrade =
        serde_json::from_slice(&body).map_err(|e| bad("degrade")(e.to_string()))?;
    let mut hw = app.shared.hardware.lock();
    let mut next = hw.clone();
    next.degrade(&degrade).map_err(bad("degrade"))?;
    *hw = next;
    tracing::info!(devpath = %degrade.devpath, "disk degraded over the admin endpoint");
    let disk = hw
        .disks
        .iter()
        .find(|d| d.devpath == degrade.devpath)
        .cloned();
    disk.map(Json)
        .ok_or_else(|| (StatusCode::NOT_FOUND, "no such disk\n".into()))
}

async fn set_guest_load(
    State(app): State<App>,
    headers: HeaderMap,
    Path(vmid): Path<u32>,
    body: Bytes,
) -> AdminResult<GuestLoad> {
    crate::admin::authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let load: GuestLoad =
        serde_json::from_slice(&body).map_err(|e| bad("guest load")(e.to_string()))?;
    load.check().map_err(bad("guest load"))?;
    app.shared.hardware.lock().guest_load.insert(vmid, load);
    Ok(Json(load))
}
