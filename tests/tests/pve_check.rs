//! `bosunctl pve check` against the simulator, in-process: every check passing with a scratch
//! guest that leaves nothing behind, a token missing a privilege, a storage without `rootdir`,
//! an unsupported version, a wrong fingerprint or secret, a failed or interrupted scratch step
//! (cleaned up all the same), the JSON shape and the exit codes.

use crate::pve_support;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use bosun_pve::{BOSUN_AGENT_PRIVILEGES, ContentType, Pve, RetryPolicy, StorageUpdate};
use bosun_pvesim::{EndpointFault, FaultConfig, PveVersion, SimConfig, SimHandle};
use bosunctl::pve_check::{self, PveCheckArgs, Report, Status};
use clap::Parser as _;
use pve_support::{Rig, bounded, fast_sim, local_lvm, start};
use tempfile::TempDir;

struct Fixture {
    rig: Rig,
    dir: TempDir,
}

async fn fixture(config: SimConfig) -> Fixture {
    Fixture {
        rig: start(config).await,
        dir: tempfile::tempdir().expect("temp dir"),
    }
}

impl Fixture {
    fn sim(&self) -> &SimHandle {
        &self.rig.sim
    }

    /// Writes `content` as a token file.
    fn token_file(&self, content: &str) -> PathBuf {
        let path = self
            .dir
            .path()
            .join(format!("token-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, content).expect("token file written");
        path
    }

    /// Arguments for the agent token, pinned to the simulator's certificate.
    fn args(&self) -> PveCheckArgs {
        let ep = self.sim().endpoint();
        let token = &ep.tokens.agent;
        PveCheckArgs {
            url: ep.url.clone(),
            token_file: self.token_file(&format!("{}={}\n", token.id, token.secret)),
            token_id: None,
            fingerprint: Some(ep.fingerprint.clone()),
            ca_file: None,
            node: None,
            storage: None,
            backup_storage: None,
            golden: None,
            scratch: false,
            json: false,
            // The stand-in: cloudflared is not installable here.
            cloudflared: "/nonexistent/cloudflared".into(),
        }
    }

    fn with_scratch(&self) -> PveCheckArgs {
        PveCheckArgs {
            golden: Some(self.sim().endpoint().golden_volid.clone()),
            scratch: true,
            ..self.args()
        }
    }

    /// The node's guests and every storage's volumes.
    fn inventory(&self) -> (Vec<u32>, Vec<String>, Vec<String>) {
        (
            self.sim().guest_ids(),
            self.sim().storage_volumes("local"),
            self.sim().storage_volumes("local-lvm"),
        )
    }
}

async fn check(args: &PveCheckArgs) -> Report {
    check_until(args, std::future::pending()).await
}

async fn check_until(args: &PveCheckArgs, cancel: impl Future<Output = ()>) -> Report {
    let report = pve_check::check(args, RetryPolicy::fast(), cancel)
        .await
        .expect("usable options");
    // Every report renders, and each failure carries a fix.
    let text = report.render_text();
    for c in &report.checks {
        if c.status == Status::Fail {
            assert!(
                !c.fix.is_empty(),
                "{} failed without a fix:\n{text}",
                c.name
            );
            assert!(text.contains("fix: "), "{text}");
        }
    }
    report
}

fn status_of(report: &Report, name: &str) -> Status {
    report
        .check(name)
        .unwrap_or_else(|| panic!("no check {name}:\n{}", report.render_text()))
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_check_passes_and_the_scratch_guest_leaves_nothing_behind() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let before = f.inventory();
        let report = check(&f.with_scratch()).await;
        let text = report.render_text();
        assert_eq!(report.exit_code, 0, "{text}");
        assert!(report.passed, "{text}");
        for name in [
            "connect",
            "version",
            "node",
            "cluster",
            "least-privilege",
            "privileges",
            "guest-reach",
            "rootdir-storage",
            "backup-storage",
            "golden",
            "scratch-restore",
            "scratch-start",
            "scratch-snapshot",
            "scratch-backup",
            "scratch-cleanup",
        ] {
            assert_eq!(status_of(&report, name), Status::Ok, "{name}:\n{text}");
        }
        assert_eq!(report.node.as_deref(), Some("pve"));
        assert!(
            report
                .check("rootdir-storage")
                .expect("check")
                .detail
                .starts_with("local-lvm "),
            "{text}"
        );
        assert!(
            report
                .check("backup-storage")
                .expect("check")
                .detail
                .starts_with("local "),
            "{text}"
        );
        let cleanup = &report.check("scratch-cleanup").expect("check").detail;
        assert!(
            cleanup.contains("destroyed") && cleanup.contains("deleted"),
            "{text}"
        );
        assert_eq!(
            f.inventory(),
            before,
            "the node holds exactly what it held before"
        );
        // The walk made the calls it reports: a restore, a vzdump, a destroy.
        let log = f.sim().requests();
        for (method, suffix) in [
            ("POST", "/lxc"),
            ("POST", "/vzdump"),
            ("GET", "/access/permissions"),
        ] {
            assert!(
                log.iter()
                    .any(|r| r.method == method && r.path.ends_with(suffix)),
                "{method} …{suffix} was sent"
            );
        }
        assert!(
            log.iter()
                .any(|r| r.method == "DELETE" && r.path.starts_with("/nodes/pve/lxc/"))
        );
        f.rig.sim.clone().shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_trusts_the_node_as_agent_toml_can() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let ca = f.dir.path().join("pve-root-ca.pem");
        std::fs::write(&ca, f.sim().certificate_pem()).expect("written");
        let args = PveCheckArgs {
            fingerprint: None,
            ca_file: Some(ca),
            ..f.args()
        };
        let report = check(&args).await;
        assert_eq!(report.exit_code, 0, "{}", report.render_text());
        // A CA that did not sign the node's certificate: the connection is refused.
        let other = f.dir.path().join("other-ca.pem");
        let stranger = rcgen::generate_simple_self_signed(vec!["elsewhere".to_owned()])
            .expect("a certificate");
        std::fs::write(&other, stranger.cert.pem()).expect("written");
        let args = PveCheckArgs {
            fingerprint: None,
            ca_file: Some(other),
            ..f.args()
        };
        let report = check(&args).await;
        assert_eq!(report.exit_code, 5, "{}", report.render_text());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_holding_more_than_bosun_needs_is_warned_about() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let root = &f.sim().endpoint().tokens.root;
        let args = PveCheckArgs {
            token_file: f.token_file(&format!("{}={}", root.id, root.secret)),
            ..f.args()
        };
        let report = check(&args).await;
        let text = report.render_text();
        let least = report.check("least-privilege").expect("check");
        assert_eq!(least.status, Status::Warn, "{text}");
        assert!(least.detail.contains("root@pam token"), "{text}");
        assert!(least.detail.contains("Sys.Modify"), "{text}");
        // A warning; but a root token also reaches inside every VM (decision 0113), which
        // fails the check.
        let reach = report.check("guest-reach").expect("check");
        assert_eq!(reach.status, Status::Fail, "{text}");
        assert!(reach.detail.contains("on /vms"), "{text}");
        assert_eq!(report.exit_code, 12, "{text}");
        // The agent's own token holds exactly its role.
        let report = check(&f.args()).await;
        let least = report.check("least-privilege").expect("check");
        assert_eq!(least.status, Status::Ok, "{}", report.render_text());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_missing_a_privilege_fails_naming_it_and_the_fix() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let narrow: Vec<&str> = BOSUN_AGENT_PRIVILEGES
            .iter()
            .copied()
            .filter(|p| *p != "VM.Snapshot")
            .collect();
        f.sim().add_role("Narrow", &narrow).expect("role");
        let token = f
            .sim()
            .create_token("bosun@pve", "narrow", true)
            .expect("token");
        f.sim()
            .grant("/", &token.id, "Narrow", true)
            .expect("grant");
        let args = PveCheckArgs {
            token_file: f.token_file(&format!("{}={}", token.id, token.secret)),
            ..f.with_scratch()
        };
        let before = f.inventory();
        let report = check(&args).await;
        let text = report.render_text();
        assert_eq!(report.exit_code, 12, "{text}");
        let privileges = report.check("privileges").expect("check");
        assert_eq!(privileges.status, Status::Fail, "{text}");
        assert!(privileges.detail.contains("VM.Snapshot on /vms"), "{text}");
        assert!(
            !privileges.detail.contains("Rollback"),
            "only the missing one: {text}"
        );
        assert_eq!(
            privileges.fix[0], "pveum role modify BosunAgent --privs \"VM.Snapshot\" --append 1",
            "{text}"
        );
        assert!(
            privileges
                .fix
                .iter()
                .any(|f| f.contains("--tokens 'bosun@pve!narrow' --roles BosunAgent")),
            "{text}"
        );
        assert!(text.contains("fix: pveum role modify BosunAgent"), "{text}");
        // The scratch guest is not attempted with a token that cannot finish it.
        assert_eq!(
            status_of(&report, "scratch-restore"),
            Status::Skip,
            "{text}"
        );
        assert_eq!(f.inventory(), before);

        // A token with no ACL at all: the ACL commands, and every privilege named.
        let bare = f
            .sim()
            .create_token("bosun@pve", "bare", true)
            .expect("token");
        let args = PveCheckArgs {
            token_file: f.token_file(&format!("{}={}", bare.id, bare.secret)),
            ..f.args()
        };
        let report = check(&args).await;
        let privileges = report.check("privileges").expect("check");
        assert_eq!(report.exit_code, 12);
        for p in BOSUN_AGENT_PRIVILEGES {
            assert!(privileges.detail.contains(p), "{p}: {}", privileges.detail);
        }
        assert!(
            privileges
                .fix
                .iter()
                .any(|f| f.starts_with("pveum role add BosunAgent"))
        );
        assert!(
            privileges
                .fix
                .iter()
                .any(|f| f.starts_with("pveum acl modify / --tokens 'bosun@pve!bare'"))
        );
    })
    .await;
}

/// The network guard needs `VM.Config.Network` (and `VM.Audit`) on `/vms`: a role without it
/// fails `guest-firewall` with the fix. With the privileges, the check warns while the
/// datacenter firewall is off (nothing is filtered) and passes once it is on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_firewall_needs_its_privilege_and_the_datacenter_switch() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let narrow: Vec<&str> = BOSUN_AGENT_PRIVILEGES
            .iter()
            .copied()
            .filter(|p| *p != "VM.Config.Network")
            .collect();
        f.sim().add_role("NoNetwork", &narrow).expect("role");
        let token = f
            .sim()
            .create_token("bosun@pve", "nonet", true)
            .expect("token");
        f.sim()
            .grant("/", &token.id, "NoNetwork", true)
            .expect("grant");
        let args = PveCheckArgs {
            token_file: f.token_file(&format!("{}={}", token.id, token.secret)),
            ..f.args()
        };
        let report = check(&args).await;
        let text = report.render_text();
        assert_eq!(report.exit_code, 12, "{text}");
        let firewall = report.check("guest-firewall").expect("check");
        assert_eq!(firewall.status, Status::Fail, "{text}");
        assert!(
            firewall.detail.contains("VM.Config.Network on /vms"),
            "{text}"
        );
        assert!(!firewall.detail.contains("VM.Audit"), "{text}");
        assert_eq!(
            firewall.fix,
            vec!["pveum role modify BosunAgent --privs \"VM.Config.Network\" --append 1"],
            "{text}"
        );
        assert!(
            report
                .check("privileges")
                .expect("check")
                .detail
                .contains("VM.Config.Network on /vms"),
            "{text}"
        );

        // The agent's own token: allowed, but the datacenter switch is off by default.
        let report = check(&f.args()).await;
        let text = report.render_text();
        assert_eq!(report.exit_code, 0, "a warning does not fail: {text}");
        let firewall = report.check("guest-firewall").expect("check");
        assert_eq!(firewall.status, Status::Warn, "{text}");
        assert!(
            firewall.detail.contains("datacenter firewall is off"),
            "{text}"
        );
        assert!(
            firewall
                .fix
                .iter()
                .any(|f| f.contains("pvesh set /cluster/firewall/options --enable 1")),
            "{text}"
        );
        f.sim().set_datacenter_firewall(true);
        let report = check(&f.args()).await;
        assert_eq!(
            status_of(&report, "guest-firewall"),
            Status::Ok,
            "{}",
            report.render_text()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_without_rootdir_fails_naming_it() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let args = PveCheckArgs {
            storage: Some("local".into()),
            ..f.args()
        };
        let report = check(&args).await;
        let text = report.render_text();
        assert_eq!(report.exit_code, 12, "{text}");
        let rootdir = report.check("rootdir-storage").expect("check");
        assert_eq!(rootdir.status, Status::Fail, "{text}");
        assert!(
            rootdir
                .detail
                .contains("storage local has no rootdir content"),
            "{text}"
        );
        assert_eq!(
            rootdir.fix,
            vec!["pvesm set local --content backup,iso,vztmpl,rootdir".to_owned()],
            "{text}"
        );
        assert_eq!(status_of(&report, "backup-storage"), Status::Ok, "{text}");

        // No storage at all allows rootdir: the check says so and names one to change.
        let update = StorageUpdate {
            content: Some(vec![ContentType::Images]),
            ..StorageUpdate::default()
        };
        f.rig
            .client
            .update_storage(&local_lvm(), &update)
            .await
            .expect("content narrowed");
        let report = check(&f.args()).await;
        let rootdir = report.check("rootdir-storage").expect("check");
        assert_eq!(report.exit_code, 12);
        assert_eq!(rootdir.status, Status::Fail);
        assert!(
            rootdir
                .detail
                .contains("no enabled, active storage allows rootdir"),
            "{}",
            rootdir.detail
        );
        assert!(
            rootdir.detail.contains("local-lvm (lvmthin: images)"),
            "{}",
            rootdir.detail
        );
        assert_eq!(
            rootdir.fix,
            vec!["pvesm set local-lvm --content images,rootdir".to_owned()]
        );

        // A storage that does not exist.
        let args = PveCheckArgs {
            backup_storage: Some("usb-1".into()),
            ..f.args()
        };
        let report = check(&args).await;
        let backup = report.check("backup-storage").expect("check");
        assert_eq!(backup.status, Status::Fail);
        assert!(
            backup.detail.contains("storage usb-1 is not on this node"),
            "{}",
            backup.detail
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_version_fails_with_what_is_supported() {
    bounded(async {
        let f = fixture(SimConfig {
            pve_version: PveVersion::V8_2,
            ..fast_sim()
        })
        .await;
        let report = check(&f.args()).await;
        let version = report.check("version").expect("check");
        assert_eq!(report.exit_code, 12);
        assert_eq!(version.status, Status::Fail);
        assert!(
            version.detail.contains("8.2.7") && version.detail.contains("8.4 and 9.x"),
            "{}",
            version.detail
        );

        let f = fixture(SimConfig {
            pve_version: PveVersion::V8_4,
            ..fast_sim()
        })
        .await;
        let report = check(&f.args()).await;
        assert_eq!(
            status_of(&report, "version"),
            Status::Ok,
            "{}",
            report.render_text()
        );
        assert_eq!(report.exit_code, 0, "{}", report.render_text());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_fingerprint_or_secret_is_exit_2() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let args = PveCheckArgs {
            fingerprint: Some(["AB"; 32].join(":")),
            ca_file: None,
            ..f.args()
        };
        let report = check(&args).await;
        let text = report.render_text();
        assert_eq!(report.exit_code, 5, "{text}");
        assert!(!report.passed);
        assert_eq!(report.checks.len(), 1, "nothing after connect: {text}");
        assert_eq!(status_of(&report, "connect"), Status::Fail);
        assert!(text.contains("pvenode cert info"), "{text}");
        assert!(text.contains("could not reach or authenticate"), "{text}");

        let token = &f.sim().endpoint().tokens.agent;
        let args = PveCheckArgs {
            token_file: f.token_file(&format!("{}=not-the-secret", token.id)),
            ..f.args()
        };
        let report = check(&args).await;
        assert_eq!(report.exit_code, 5, "{}", report.render_text());
        assert!(
            report
                .check("connect")
                .expect("check")
                .detail
                .contains("401")
        );

        // The secret alone, with the id from --token-id (the agent's own secret file).
        let args = PveCheckArgs {
            token_file: f.token_file(&format!("{}\n", token.secret)),
            token_id: Some(token.id.clone()),
            ..f.args()
        };
        assert_eq!(check(&args).await.exit_code, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_scratch_step_is_cleaned_up() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        f.sim().set_faults(FaultConfig {
            endpoints: vec![EndpointFault {
                method: Some("POST".into()),
                path: "/nodes/{node}/lxc/{vmid}/snapshot".into(),
                error_rate: 1.0,
                error_message: "snapshot feature is not available".into(),
                ..EndpointFault::default()
            }],
            ..FaultConfig::default()
        });
        let before = f.inventory();
        let report = check(&f.with_scratch()).await;
        let text = report.render_text();
        assert_eq!(report.exit_code, 12, "{text}");
        assert_eq!(status_of(&report, "scratch-start"), Status::Ok, "{text}");
        let snapshot = report.check("scratch-snapshot").expect("check");
        assert_eq!(snapshot.status, Status::Fail, "{text}");
        assert!(
            snapshot
                .detail
                .contains("snapshot feature is not available"),
            "{text}"
        );
        assert!(report.check("scratch-backup").is_none(), "{text}");
        assert_eq!(status_of(&report, "scratch-cleanup"), Status::Ok, "{text}");
        assert_eq!(f.inventory(), before, "{text}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_scratch_guest_is_cleaned_up() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let before = f.inventory();
        let sim = f.sim().clone();
        let known: BTreeSet<u32> = before.0.iter().copied().collect();
        // "Ctrl-C" as soon as the scratch guest runs.
        let cancel = async move {
            loop {
                let running = sim
                    .guest_ids()
                    .into_iter()
                    .any(|id| !known.contains(&id) && sim.guest_running(id) == Some(true));
                if running {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        let report = check_until(&f.with_scratch(), cancel).await;
        let text = report.render_text();
        assert_eq!(report.exit_code, 12, "{text}");
        assert!(
            report
                .checks
                .iter()
                .any(|c| c.status == Status::Fail && c.detail.contains("interrupted")),
            "{text}"
        );
        assert_eq!(status_of(&report, "scratch-cleanup"), Status::Ok, "{text}");
        assert_eq!(f.inventory(), before, "{text}");
    })
    .await;
}

/// The node's cluster membership: standalone, then one node of a three-node cluster (the
/// simulator joined to it), read from `GET /cluster/status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_membership_is_reported() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let report = check(&f.args()).await;
        let cluster = report.check("cluster").expect("a cluster check");
        assert_eq!(cluster.status, Status::Ok, "{}", report.render_text());
        assert!(cluster.detail.starts_with("standalone node"), "{cluster:?}");

        f.sim().join_cluster("lab", &["pve2", "pve3"]);
        let report = check(&f.args()).await;
        let cluster = report.check("cluster").expect("a cluster check");
        assert_eq!(cluster.status, Status::Ok, "{}", report.render_text());
        assert!(
            cluster
                .detail
                .starts_with("node of cluster lab (3 nodes, 3 online, quorate)")
                && cluster.detail.contains("`migrated`"),
            "{cluster:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_report_has_the_documented_shape() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let args = PveCheckArgs {
            storage: Some("local".into()),
            golden: Some(f.sim().endpoint().golden_volid.clone()),
            ..f.args()
        };
        let report = check(&args).await;
        let text = serde_json::to_string(&report).expect("serialises");
        let json: serde_json::Value = serde_json::from_str(&text).expect("parses");
        assert_eq!(json["format"], 2);
        assert_eq!(json["passed"], false);
        assert_eq!(json["exit_code"], 12);
        assert_eq!(json["node"], "pve");
        assert_eq!(json["token_id"], "bosun@pve!agent");
        assert!(json["url"].as_str().expect("url").ends_with("/api2/json"));
        let checks = json["checks"].as_array().expect("checks");
        let names: Vec<&str> = checks
            .iter()
            .map(|c| c["name"].as_str().expect("name"))
            .collect();
        assert_eq!(
            names,
            [
                "connect",
                "version",
                "node",
                "cluster",
                "least-privilege",
                "privileges",
                "guest-reach",
                "guest-firewall",
                "rootdir-storage",
                "backup-storage",
                "tunnel",
                "golden"
            ]
        );
        for c in checks {
            let keys: BTreeSet<&str> = c
                .as_object()
                .expect("object")
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, BTreeSet::from(["name", "status", "detail", "fix"]));
            assert!(
                ["ok", "warn", "fail", "skip"].contains(&c["status"].as_str().expect("status"))
            );
            assert!(c["detail"].is_string());
            assert!(
                c["fix"]
                    .as_array()
                    .expect("fix")
                    .iter()
                    .all(serde_json::Value::is_string)
            );
        }
        let rootdir = checks
            .iter()
            .find(|c| c["name"] == "rootdir-storage")
            .expect("rootdir");
        assert_eq!(rootdir["status"], "fail");
        assert_eq!(
            rootdir["fix"][0],
            "pvesm set local --content backup,iso,vztmpl,rootdir"
        );
    })
    .await;
}

#[test]
fn usage_errors_are_refused_and_the_options_parse() {
    let bad = ["bosunctl", "pve", "check", "--url", "https://pve:8006"];
    assert!(bosunctl::cli::Cli::try_parse_from(bad).is_err());
    let scratch_without_golden = [
        "bosunctl",
        "pve",
        "check",
        "--url",
        "https://pve:8006",
        "--token-file",
        "/t",
        "--fingerprint",
        "AB",
        "--scratch",
    ];
    assert!(bosunctl::cli::Cli::try_parse_from(scratch_without_golden).is_err());

    // --fingerprint and --json are the node's here, not the hub's global ones.
    let cli = bosunctl::cli::Cli::try_parse_from([
        "bosunctl",
        "pve",
        "check",
        "--url",
        "https://pve:8006",
        "--token-file",
        "/t",
        "--fingerprint",
        "AB:CD",
        "--json",
        "--golden",
        "local:backup/x.tar.zst",
        "--scratch",
    ])
    .expect("parses");
    let bosunctl::cli::Command::Pve(bosunctl::pve_check::PveCommand::Check(args)) = cli.command
    else {
        panic!("pve check parsed as {:?}", cli.command);
    };
    assert_eq!(args.fingerprint.as_deref(), Some("AB:CD"));
    assert!(args.scratch && args.json);
    let err = bosunctl::error::CtlError::PveCheck {
        exit: bosunctl::pve_check::exit::FAILED,
        summary: "a check failed".into(),
    };
    assert_eq!(err.exit_code(), 12);
}

#[tokio::test]
async fn an_unusable_token_file_is_an_input_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let args = |token_file: PathBuf| PveCheckArgs {
        url: "https://127.0.0.1:1".into(),
        token_file,
        token_id: None,
        fingerprint: Some(["AB"; 32].join(":")),
        ca_file: None,
        node: None,
        storage: None,
        backup_storage: None,
        golden: None,
        scratch: false,
        json: false,
        cloudflared: "/nonexistent/cloudflared".into(),
    };
    let missing = dir.path().join("missing");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").expect("written");
    for path in [missing, empty] {
        let err = pve_check::check(&args(path), RetryPolicy::fast(), std::future::pending())
            .await
            .expect_err("unusable");
        let err = bosunctl::error::CtlError::from(err);
        assert_eq!(err.exit_code(), 4, "{err}");
    }
    let mut plain = args(dir.path().join("missing"));
    plain.url = "http://pve:8006".into();
    assert!(
        pve_check::check(&plain, RetryPolicy::fast(), std::future::pending())
            .await
            .is_err()
    );
}

/// A token `bosun@pve!<name>` with the agent's roles, as the doc writes them, and
/// `BosunGuest` also granted on `path` (to the token and its user).
fn token_with_guest_reach_on(f: &Fixture, name: &str, path: &str) -> PveCheckArgs {
    let token = f
        .sim()
        .create_token("bosun@pve", name, true)
        .expect("token");
    f.sim()
        .grant("/", &token.id, "BosunAgent", true)
        .expect("grant");
    f.sim()
        .grant("/pool/bosun", &token.id, "BosunGuest", true)
        .expect("grant");
    if !path.is_empty() {
        for subject in ["bosun@pve", token.id.as_str()] {
            f.sim()
                .grant(path, subject, "BosunGuest", true)
                .expect("grant");
        }
    }
    PveCheckArgs {
        token_file: f.token_file(&format!("{}={}", token.id, token.secret)),
        ..f.args()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_agent_reach_outside_bosuns_pool_fails_naming_the_path() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        // As the doc sets it up: on the pool only, and pool members are fine.
        let vm = f.sim().add_vm_golden();
        let root = &f.sim().endpoint().tokens.root;
        let root_client = pve_support::client_for(f.sim(), root, RetryPolicy::fast());
        let mut req = bosun_pve::VmRestoreRequest::new(
            pve_support::vmid(400),
            bosun_pve::VolumeId::new(vm).expect("volid"),
            local_lvm(),
        );
        req.pool = Some(bosun_pve::PoolId::new("bosun").expect("pool"));
        let up = bosun_pve::PveQemu::restore_vm(&root_client, &req)
            .await
            .expect("restore");
        root_client
            .wait_task(bosun_pve::Op::RestoreVm, &up)
            .await
            .expect("restored");
        let report = check(&f.args()).await;
        let text = report.render_text();
        assert_eq!(status_of(&report, "guest-reach"), Status::Ok, "{text}");
        assert!(
            report
                .check("guest-reach")
                .expect("check")
                .detail
                .contains("1 member VMs"),
            "{text}"
        );

        for (name, path) in [
            ("wide-vms", "/vms"),
            ("wide-root", "/"),
            ("one-vm", "/vms/777"),
        ] {
            let report = check(&token_with_guest_reach_on(&f, name, path)).await;
            let text = report.render_text();
            let reach = report.check("guest-reach").expect("check");
            assert_eq!(reach.status, Status::Fail, "{path}:\n{text}");
            assert!(
                reach.detail.contains(&format!("on {path}")),
                "{path}: the failing path is named:\n{text}"
            );
            assert!(
                reach.detail.contains("VM.GuestAgent.Unrestricted"),
                "{text}"
            );
            assert_eq!(report.exit_code, 12, "{text}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_the_pool_grant_fails_with_the_commands_that_write_it() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        let token = f
            .sim()
            .create_token("bosun@pve", "no-pool", true)
            .expect("token");
        f.sim()
            .grant("/", &token.id, "BosunAgent", true)
            .expect("grant");
        let args = PveCheckArgs {
            token_file: f.token_file(&format!("{}={}", token.id, token.secret)),
            ..f.args()
        };
        let report = check(&args).await;
        let text = report.render_text();
        let reach = report.check("guest-reach").expect("check");
        assert_eq!(reach.status, Status::Fail, "{text}");
        assert!(reach.detail.contains("on /pool/bosun"), "{text}");
        for fix in [
            "pveum pool add bosun",
            "pveum role add BosunGuest --privs \"VM.Config.Cloudinit,VM.Config.HWType,VM.GuestAgent.Audit,VM.GuestAgent.FileWrite,VM.GuestAgent.Unrestricted\"",
            "pveum acl modify /pool/bosun --tokens 'bosun@pve!no-pool' --roles BosunGuest --propagate 1",
        ] {
            assert!(
                reach.fix.iter().any(|l| l.starts_with(fix)),
                "{fix}:\n{text}"
            );
        }
        // Container checks are untouched by it.
        assert_eq!(status_of(&report, "privileges"), Status::Ok, "{text}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_could_add_any_vm_to_bosuns_pool_fails() {
    bounded(async {
        let f = fixture(fast_sim()).await;
        // As the doc sets it up, plus Pool.Allocate on the pool: with BosunAgent's VM.Allocate
        // on `/`, Proxmox would let the token put any VM in the pool (decision 0122).
        let args = token_with_guest_reach_on(&f, "pool-joiner", "");
        f.sim()
            .add_role("BosunPoolJoin", &["Pool.Allocate"])
            .expect("role");
        for subject in ["bosun@pve", "bosun@pve!pool-joiner"] {
            f.sim()
                .grant("/pool/bosun", subject, "BosunPoolJoin", true)
                .expect("grant");
        }
        let report = check(&args).await;
        let text = report.render_text();
        let reach = report.check("guest-reach").expect("check");
        assert_eq!(reach.status, Status::Fail, "{text}");
        assert!(reach.detail.contains("Pool.Allocate"), "{text}");
        assert!(
            reach.fix.iter().any(|l| l.contains("pveum pool modify")),
            "{text}"
        );
        assert_eq!(report.exit_code, 12, "{text}");
    })
    .await;
}
