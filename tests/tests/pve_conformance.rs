//! Schema conformance: every request the PVE client emits and every route the simulator
//! serves must exist in Proxmox VE's published API schema (9.1 and 8.4), with valid
//! parameters. A mutation test proves the check can fail.

use crate::pve_support;

use std::collections::BTreeSet;

use bosun_pve::{
    BackupMode, CATALOGUE, Compression, ConfigUpdate, ContentFilter, ContentType, CtDisk, DiskSize,
    Ipv4Config, NetConfig, Op, PruneBackups, Pve, RestoreRequest, SizeUnit, SnapName,
    StorageCreate, StorageId, StorageKind, StorageUpdate, VolumeId, VzdumpRequest,
};
use bosun_pvesim::LoggedRequest;
use bosun_tests::pve_schema::{
    ApiSchemas, FORMATS, Formats, SCHEMA_91, Schema, api_dir, template_matches,
};
use pve_support::{bounded, fast_sim, golden, local, local_lvm, start, vmid};

fn load_schemas() -> ApiSchemas {
    match ApiSchemas::load() {
        Ok(s) => s,
        Err(e) => panic!(
            "the PVE API schema files are required: {e} (dir {})",
            api_dir().display()
        ),
    }
}

/// Drives every client operation once against the simulator and returns its request log.
async fn exercise_every_operation() -> Vec<LoggedRequest> {
    let rig = start(fast_sim()).await;
    let c = &rig.client;
    c.version().await.expect("version");
    c.nodes().await.expect("nodes");
    let status = c.node_status().await.expect("node status");
    assert!(status.cpu.is_some() && status.rootfs.and_then(|r| r.total).is_some());
    let disks = c.list_disks().await.expect("disk list");
    assert!(disks.iter().any(|d| d.devpath == "/dev/sda"), "{disks:?}");
    let smart = c.disk_smart("/dev/sda").await.expect("disk smart");
    assert_eq!(smart.health.as_deref(), Some("PASSED"));
    assert!(!c.thin_pools().await.expect("thin pools").is_empty());
    c.zfs_pools().await.expect("zfs pools");
    let network = c.network().await.expect("network");
    assert!(
        network
            .iter()
            .any(|i| i.iface == "vmbr0" && i.kind == "bridge" && i.active),
        "{network:?}"
    );
    assert!(
        status
            .cpuinfo
            .as_ref()
            .is_some_and(|c| c.cpus.is_some() && c.model.is_some())
            && status.pveversion.is_some(),
        "{status:?}"
    );
    let on_root = c.permissions("/").await.expect("permissions");
    assert!(on_root.contains_key("VM.Allocate"), "{on_root:?}");
    c.list_storage().await.expect("storage list");
    c.storage_status(&local()).await.expect("storage status");
    c.list_content(
        &local(),
        ContentFilter {
            content: Some(ContentType::Backup),
            vmid: None,
        },
    )
    .await
    .expect("content list");

    let mut req = RestoreRequest::new(vmid(100), golden(&rig.sim), local_lvm());
    req.options.hostname = Some("web1.example.com".into());
    req.options.cores = Some(2);
    req.options.memory = Some(1024);
    req.options.swap = Some(256);
    req.options.onboot = Some(true);
    req.options.tags = vec!["bosun".into(), "customer-a".into()];
    req.options.description = Some("restored by the conformance test".into());
    let mut net = NetConfig::new("eth0", "vmbr0");
    net.ip = Some(Ipv4Config::Dhcp);
    net.firewall = Some(true);
    req.options.net.insert(0, net);
    let (id, upid) = c
        .restore_ct_next_id(&req)
        .await
        .expect("restore onto next id");
    c.wait_task(Op::RestoreCt, &upid)
        .await
        .expect("restore task");

    let config = c.ct_config(id).await.expect("config");
    // The guest's share (decision 0100): its CPU weight and limit, and a rate on its net0;
    // and its place in the start and stop order (decision 0099).
    let mut rated = NetConfig::parse(&config.get_str("net0").expect("net0")).expect("net0 parses");
    rated.rate = Some(bosun_pve::Thousandths(12_500));
    let mut set = bosun_pve::CtOptions {
        memory: Some(2048),
        cpuunits: Some(250),
        cpulimit: Some(bosun_pve::Thousandths(1_500)),
        startup: Some(bosun_pve::StartupOrder {
            order: 2,
            up: Some(0),
            down: Some(60),
        }),
        ..Default::default()
    };
    set.net.insert(0, rated);
    let update = ConfigUpdate {
        set,
        delete: vec!["description".into()],
        digest: Some(config.digest.clone()),
    };
    c.update_ct_config(id, &update)
        .await
        .expect("config update");
    c.list_cts().await.expect("ct list");
    c.ct_status(id).await.expect("status");
    c.set_ct_firewall(
        id,
        &bosun_pve::FirewallUpdate {
            enable: true,
            ipfilter: true,
        },
    )
    .await
    .expect("firewall options set");
    let firewall = c.ct_firewall(id).await.expect("firewall options");
    assert!(firewall.enable && firewall.ipfilter, "{firewall:?}");
    let datacenter = c.datacenter_firewall().await.expect("datacenter firewall");
    assert!(!datacenter.enable, "off, as in a default install");
    let guests = c.cluster_guests().await.expect("cluster guests");
    assert!(
        guests
            .iter()
            .any(|g| g.vmid == u64::from(id.get()) && g.kind == "lxc"),
        "{guests:?}"
    );
    let members = c.cluster_status().await.expect("cluster status");
    assert!(
        members.iter().any(|m| m.kind == "node" && m.local),
        "{members:?}"
    );

    let up = c.start_ct(id).await.expect("start");
    c.wait_task(Op::StartCt, &up).await.expect("start task");
    let snap = SnapName::new("before-upgrade").expect("valid");
    let up = c
        .create_snapshot(id, &snap, Some("conformance"))
        .await
        .expect("snapshot");
    c.wait_task(Op::CreateSnapshot, &up)
        .await
        .expect("snapshot task");
    c.list_snapshots(id).await.expect("snapshot list");
    let found = c
        .list_tasks(bosun_pve::TaskFilter {
            vmid: id,
            task_type: "vzsnapshot",
            since: 0,
        })
        .await
        .expect("task list");
    assert_eq!(found.len(), 1, "the snapshot's task is listed: {found:?}");
    assert_eq!(found[0].upid, up);
    let up = c
        .resize_disk(id, CtDisk::RootFs, DiskSize::Grow(1, SizeUnit::G))
        .await
        .expect("resize");
    c.wait_task(Op::ResizeDisk, &up).await.expect("resize task");

    let mut dump = VzdumpRequest::new(id, local());
    dump.mode = BackupMode::Snapshot;
    dump.compress = Compression::Zstd;
    dump.notes_template = Some("{{guestname}} {{vmid}}".into());
    dump.prune = Some(PruneBackups {
        keep_last: Some(3),
        ..Default::default()
    });
    let backup = c.backup_ct(&dump).await.expect("backup");
    let volume = VolumeId::new(backup.volid.clone()).expect("volid");
    c.set_volume_notes(&volume, "bosun-guest conformance")
        .await
        .expect("notes set");
    let attributes = c.volume_attributes(&volume).await.expect("attributes");
    assert_eq!(attributes.notes.as_deref(), Some("bosun-guest conformance"));
    let recorded = c.extract_config(&volume).await.expect("extractconfig");
    assert!(recorded.contains("hostname: "), "{recorded}");
    assert!(
        attributes.path.contains("/dump/vzdump-lxc-"),
        "{}",
        attributes.path
    );

    let up = c
        .rollback_snapshot(id, &snap, false)
        .await
        .expect("rollback");
    c.wait_task(Op::RollbackSnapshot, &up)
        .await
        .expect("rollback task");
    let up = c.delete_snapshot(id, &snap).await.expect("snapshot delete");
    c.wait_task(Op::DeleteSnapshot, &up)
        .await
        .expect("snapshot delete task");
    if c.ct_status(id).await.expect("status").status != bosun_pve::GuestStatus::Running {
        let up = c.start_ct(id).await.expect("start after rollback");
        c.wait_task(Op::StartCt, &up).await.expect("start task");
    }
    let up = c.shutdown_ct(id, Some(30), true).await.expect("shutdown");
    c.wait_task(Op::ShutdownCt, &up)
        .await
        .expect("shutdown task");
    let up = c.start_ct(id).await.expect("start again");
    c.wait_task(Op::StartCt, &up).await.expect("start task");
    // A running container's addresses, as the tunnel reads them (decision 0082).
    c.ct_interfaces(id).await.expect("interfaces");
    let up = c.stop_ct(id).await.expect("stop");
    c.wait_task(Op::StopCt, &up).await.expect("stop task");

    let over = RestoreRequest::new(
        id,
        VolumeId::new(backup.volid.clone()).expect("volid"),
        local_lvm(),
    );
    let up = c
        .restore_ct_overwrite(&over)
        .await
        .expect("overwrite restore");
    c.wait_task(Op::RestoreCtOverwrite, &up)
        .await
        .expect("overwrite restore task");

    let up = c.destroy_ct(id, true).await.expect("destroy");
    c.wait_task(Op::DestroyCt, &up).await.expect("destroy task");
    if let Some(up) = c
        .delete_volume(&VolumeId::new(backup.volid).expect("volid"))
        .await
        .expect("volume delete")
    {
        c.wait_task(Op::DeleteVolume, &up)
            .await
            .expect("volume delete task");
    }
    let store = StorageCreate {
        storage: StorageId::new("scratch").expect("valid"),
        kind: StorageKind::Dir {
            path: "/srv/scratch".into(),
            content: vec![ContentType::Backup],
            is_mountpoint: false,
        },
    };
    c.create_storage(&store).await.expect("storage create");
    c.storage_config(&store.storage)
        .await
        .expect("storage config");
    let update = StorageUpdate {
        content: Some(vec![ContentType::Backup]),
        is_mountpoint: Some(false),
        enable: true,
        ..StorageUpdate::default()
    };
    c.update_storage(&store.storage, &update)
        .await
        .expect("storage update");
    let secret = |s: &str| secrecy::SecretString::from(s.to_owned());
    let fingerprint = ["ab"; 32].join(":");
    for (id, kind) in [
        (
            "remote-pbs",
            StorageKind::Pbs {
                server: "pbs.example".into(),
                datastore: "store1".into(),
                username: "backup@pbs".into(),
                password: secret("pw"),
                fingerprint: Some(fingerprint.clone()),
                namespace: Some("host-1".into()),
                port: Some(8008),
                encryption_key: Some(secret(
                    r#"{"kdf":null,"created":"2026-11-01T00:00:00Z","modified":"2026-11-01T00:00:00Z","data":"AAAA","fingerprint":"00"}"#,
                )),
            },
        ),
        (
            "remote-nfs",
            StorageKind::Nfs {
                server: "nas.example".into(),
                export: "/export/backups".into(),
                content: vec![ContentType::Backup],
                options: Some("soft,timeo=30,retrans=2".into()),
            },
        ),
        (
            "remote-cifs",
            StorageKind::Cifs {
                server: "nas.example".into(),
                share: "backups".into(),
                username: "bosun".into(),
                password: secret("pw"),
                content: vec![ContentType::Backup],
                options: Some("soft,echo_interval=5".into()),
            },
        ),
    ] {
        let storage = StorageId::new(id).expect("valid");
        c.create_storage(&StorageCreate { storage, kind })
            .await
            .expect("remote storage create");
    }
    let pbs = StorageId::new("remote-pbs").expect("valid");
    let update = StorageUpdate {
        fingerprint: Some(fingerprint),
        namespace: Some("host-2".into()),
        password: Some(secret("pw2")),
        // A rotated K.
        encryption_key: Some(secret(
            r#"{"kdf":null,"created":"2026-12-01T00:00:00Z","modified":"2026-12-01T00:00:00Z","data":"AAAB","fingerprint":"01"}"#,
        )),
        ..StorageUpdate::default()
    };
    c.update_storage(&pbs, &update)
        .await
        .expect("pbs storage update");
    let nfs = StorageId::new("remote-nfs").expect("valid");
    let update = StorageUpdate {
        options: Some("soft,timeo=50,retrans=3".into()),
        ..StorageUpdate::default()
    };
    c.update_storage(&nfs, &update)
        .await
        .expect("nfs mount options update");
    c.delete_storage(&store.storage)
        .await
        .expect("storage delete");
    let again = c
        .delete_storage(&store.storage)
        .await
        .expect_err("a storage deleted already");
    assert!(
        again.to_string().contains("does not exist"),
        "PVE's words for an unknown storage: {again}"
    );

    pve_support::qemu_exercise::exercise_qemu(&rig).await;
    pve_support::access_exercise::exercise_access(&rig).await;

    let log = rig.sim.requests();
    rig.sim.shutdown().await;
    log
}

fn catalogue_entry(req: &LoggedRequest) -> Option<&'static bosun_pve::Endpoint> {
    CATALOGUE
        .iter()
        .find(|e| e.method.as_str() == req.method && template_matches(e.path, &req.path))
}

fn violations_of(schema: &Schema, log: &[LoggedRequest]) -> Vec<String> {
    log.iter()
        .flat_map(|r| schema.validate_request(&r.method, &r.path, &r.params))
        .map(|v| v.to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_request_conforms_to_both_schemas() {
    let schemas = load_schemas();
    let log = bounded(exercise_every_operation()).await;
    assert!(!log.is_empty(), "the simulator logged no request");
    let refused: Vec<String> = log
        .iter()
        .filter(|r| r.status == 400 || r.status == 501)
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect();
    assert!(
        refused.is_empty(),
        "the simulator refused client requests: {refused:?}"
    );

    let mut violations = Vec::new();
    for schema in schemas.each() {
        violations.extend(violations_of(schema, &log));
    }
    assert!(
        violations.is_empty(),
        "requests outside the schema:\n{}",
        violations.join("\n")
    );

    let mut hit = BTreeSet::new();
    for r in &log {
        let entry = catalogue_entry(r).unwrap_or_else(|| {
            panic!(
                "request {} {} is not in the client's catalogue",
                r.method, r.path
            )
        });
        hit.insert((entry.method.as_str(), entry.path));
    }
    let missed: Vec<String> = CATALOGUE
        .iter()
        .filter(|e| !hit.contains(&(e.method.as_str(), e.path)))
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert!(
        missed.is_empty(),
        "catalogue entries never exercised: {missed:?}"
    );
}

#[test]
fn every_catalogue_entry_exists_in_both_schemas() {
    let schemas = load_schemas();
    for schema in schemas.each() {
        for e in CATALOGUE {
            assert!(
                schema.has_endpoint(e.method.as_str(), e.path),
                "PVE {}: {} {} is not in the schema",
                schema.label(),
                e.method,
                e.path
            );
        }
    }
}

#[test]
fn every_simulator_route_exists_in_both_schemas() {
    let schemas = load_schemas();
    let routes = bosun_pvesim::routes();
    assert!(!routes.is_empty(), "the simulator serves no route");
    let mut violations = Vec::new();
    for schema in schemas.each() {
        for r in routes {
            violations.extend(
                schema
                    .check_route(r.method, r.path, &r.param_names())
                    .into_iter()
                    .map(|v| v.to_string()),
            );
        }
    }
    assert!(
        violations.is_empty(),
        "simulator routes outside the schema:\n{}",
        violations.join("\n")
    );
}

/// Writes a copy of the 9.1 schema with `edit` applied and loads it.
fn mutated_schema(dir: &std::path::Path, edit: impl FnOnce(&mut serde_json::Value)) -> Schema {
    let src = api_dir();
    let text = std::fs::read(src.join(SCHEMA_91)).expect("schema readable");
    let mut tree: serde_json::Value = serde_json::from_slice(&text).expect("schema parses");
    edit(&mut tree);
    let path = dir.join("mutated-schema.json");
    std::fs::write(&path, serde_json::to_vec(&tree).expect("serialises"))
        .expect("temp copy written");
    Schema::load("9.1-mutated", &path, &src.join(FORMATS)).expect("mutated schema loads")
}

fn find_node<'a>(tree: &'a mut serde_json::Value, path: &str) -> &'a mut serde_json::Value {
    fn walk<'a>(
        nodes: &'a mut [serde_json::Value],
        path: &str,
    ) -> Option<&'a mut serde_json::Value> {
        for n in nodes {
            if n.get("path").and_then(|p| p.as_str()) == Some(path) {
                return Some(n);
            }
            if let Some(children) = n.get_mut("children").and_then(|c| c.as_array_mut())
                && let Some(found) = walk(children, path)
            {
                return Some(found);
            }
        }
        None
    }
    let roots = tree.as_array_mut().expect("top level array");
    walk(roots, path).unwrap_or_else(|| panic!("{path} is in the schema"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_an_endpoint_or_parameter_from_the_schema_fails_the_check() {
    let schemas = load_schemas();
    let log = bounded(exercise_every_operation()).await;
    assert!(
        violations_of(&schemas.v91, &log).is_empty(),
        "baseline must conform"
    );
    let dir = tempfile::tempdir().expect("temp dir");

    let no_snapshot_post = mutated_schema(dir.path(), |tree| {
        let node = find_node(tree, "/nodes/{node}/lxc/{vmid}/snapshot");
        node["info"].as_object_mut().expect("info").remove("POST");
    });
    let v = violations_of(&no_snapshot_post, &log);
    assert!(
        v.iter()
            .any(|m| m.contains("POST") && m.contains("/snapshot")),
        "removing POST snapshot must be caught; got {v:?}"
    );

    let no_notes_template = mutated_schema(dir.path(), |tree| {
        let node = find_node(tree, "/nodes/{node}/vzdump");
        node["info"]["POST"]["parameters"]["properties"]
            .as_object_mut()
            .expect("properties")
            .remove("notes-template");
    });
    let v = violations_of(&no_notes_template, &log);
    assert!(
        v.iter()
            .any(|m| m.contains("`notes-template`") && m.contains("not defined")),
        "removing vzdump's notes-template must be caught; got {v:?}"
    );

    let narrower_enum = mutated_schema(dir.path(), |tree| {
        let node = find_node(tree, "/nodes/{node}/vzdump");
        node["info"]["POST"]["parameters"]["properties"]["compress"]["enum"] =
            serde_json::json!(["0", "gzip"]);
    });
    let v = violations_of(&narrower_enum, &log);
    assert!(
        v.iter().any(|m| m.contains("`compress`")),
        "a narrowed enum must be caught; got {v:?}"
    );
}

#[test]
fn a_missing_schema_file_is_an_error_not_a_skip() {
    let dir = tempfile::tempdir().expect("temp dir");
    let err = ApiSchemas::load_from(dir.path()).expect_err("an empty dir has no schema");
    assert!(
        err.to_string().contains("pve-api"),
        "error names the file: {err}"
    );
    let err = Formats::load(&dir.path().join(FORMATS)).expect_err("no formats file");
    assert!(
        err.to_string().contains(FORMATS),
        "error names the file: {err}"
    );
}

/// One request: method, path below `/api2/json`, parameters.
type Call = (&'static str, String, Vec<(&'static str, &'static str)>);

/// Calls the simulator's read-and-annotate endpoints (which the client does not use yet) the
/// way a real client would; every request must be answered and lie within both schemas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulators_inspection_endpoints_take_valid_requests() {
    let schemas = load_schemas();
    let rig = bounded(start(fast_sim())).await;
    let c = &rig.client;
    let upid = c
        .restore_ct(&RestoreRequest::new(
            vmid(100),
            golden(&rig.sim),
            local_lvm(),
        ))
        .await
        .expect("restore");
    c.wait_task(Op::RestoreCt, &upid).await.expect("restored");
    let snap = SnapName::new("inspect").expect("valid");
    let upid = c
        .create_snapshot(vmid(100), &snap, None)
        .await
        .expect("snapshot");
    c.wait_task(Op::CreateSnapshot, &upid)
        .await
        .expect("snapshot done");
    let archive = rig.sim.endpoint().golden_volid.clone();

    let ep = rig.sim.endpoint().clone();
    let cert = reqwest::Certificate::from_pem(rig.sim.certificate_pem().as_bytes()).expect("pem");
    let http = reqwest::Client::builder()
        .tls_certs_only([cert])
        .build()
        .expect("client");
    let auth = ep.tokens.agent.header_value();
    let calls: Vec<Call> = vec![
        ("GET", "/nodes/pve/status".into(), vec![]),
        ("GET", "/nodes/pve/lxc/100/pending".into(), vec![]),
        ("GET", "/nodes/pve/lxc/100/snapshot/inspect".into(), vec![]),
        (
            "GET",
            "/nodes/pve/lxc/100/snapshot/inspect/config".into(),
            vec![],
        ),
        (
            "PUT",
            "/nodes/pve/lxc/100/snapshot/inspect/config".into(),
            vec![("description", "checked")],
        ),
        (
            "GET",
            format!("/nodes/pve/storage/local/content/{archive}"),
            vec![],
        ),
        (
            "PUT",
            format!("/nodes/pve/storage/local/content/{archive}"),
            vec![("notes", "golden"), ("protected", "1")],
        ),
    ];
    rig.sim.clear_requests();
    for (method, path, params) in &calls {
        let url = format!("{}{path}", ep.url);
        let req = match *method {
            "GET" => http.get(url).query(params),
            _ => http.put(url).form(params),
        };
        let resp = req
            .header("Authorization", &auth)
            .send()
            .await
            .expect("answered");
        assert_eq!(resp.status().as_u16(), 200, "{method} {path}");
    }
    let log = rig.sim.requests();
    assert_eq!(log.len(), calls.len());
    let mut violations = Vec::new();
    for schema in schemas.each() {
        violations.extend(violations_of(schema, &log));
    }
    assert!(
        violations.is_empty(),
        "requests outside the schema:\n{}",
        violations.join("\n")
    );
    rig.sim.shutdown().await;
}
