//! Table tests of the checker against the real schema files: each known-bad request must be
//! refused with the right parameter named, and each good one accepted.

use std::sync::LazyLock;

use super::*;

static SCHEMAS: LazyLock<ApiSchemas> = LazyLock::new(|| match ApiSchemas::load() {
    Ok(s) => s,
    Err(e) => panic!("the PVE API schema files are required: {e}"),
});

/// Request parameters as the simulator logs them.
type Params = Vec<(String, String)>;

fn p(pairs: &[(&str, &str)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

const GOLDEN: &str = "local:backup/vzdump-lxc-9000-2026_01_01-00_00_00.tar.zst";

#[test]
fn good_requests_pass_both_schemas() {
    let content_path = format!("/nodes/pve/storage/local/content/{GOLDEN}");
    let cases: Vec<(&str, &str, Params)> = vec![
        ("GET", "/version", p(&[])),
        ("GET", "/cluster/nextid", p(&[])),
        (
            "POST",
            "/nodes/pve/lxc",
            p(&[
                ("vmid", "101"),
                ("ostemplate", GOLDEN),
                ("restore", "1"),
                ("storage", "local-lvm"),
                ("unique", "1"),
                ("unprivileged", "1"),
                ("hostname", "web1.example.com"),
                (
                    "net0",
                    "name=eth0,bridge=vmbr0,ip=dhcp,firewall=1,tag=10,trunks=10;20",
                ),
                (
                    "net31",
                    "name=eth9,bridge=vmbr1,ip=10.0.0.5/24,gw=10.0.0.1,hwaddr=BC:24:11:00:00:01",
                ),
                ("rootfs", "local-lvm:8"),
                ("mp255", "local-lvm:4,mp=/srv"),
                ("tags", "a;b"),
                ("features", "nesting=1,keyctl=yes"),
            ]),
        ),
        (
            "PUT",
            "/nodes/pve/lxc/101/config",
            p(&[
                ("startup", "order=2,up=0,down=60"),
                ("delete", "net1,description"),
                ("digest", "0123abcd"),
                ("cores", "4"),
            ]),
        ),
        (
            "POST",
            "/nodes/pve/vzdump",
            p(&[
                ("vmid", "100,101"),
                ("storage", "local"),
                ("mode", "stop"),
                ("compress", "zstd"),
                ("notes-template", "{{guestname}}"),
                ("prune-backups", "keep-last=3,keep-daily=7"),
            ]),
        ),
        (
            "PUT",
            "/nodes/pve/lxc/100/resize",
            p(&[("disk", "mp3"), ("size", "+2G")]),
        ),
        ("GET", &content_path, p(&[])),
        (
            "DELETE",
            "/nodes/pve/storage/local/content/local%3Abackup%2Fa.tar",
            p(&[]),
        ),
        (
            "GET",
            "/nodes/pve/tasks/UPID:pve:0000ABCD:00012345:6650F1A2:vzdump:100:bosun@pve!agent:/log",
            p(&[("start", "0"), ("limit", "50")]),
        ),
        (
            "POST",
            "/storage",
            p(&[
                ("storage", "pbs1"),
                ("type", "pbs"),
                ("server", "10.0.0.2"),
                ("datastore", "ds"),
                ("username", "u@pbs"),
                ("password", "x"),
                ("content", "backup"),
                ("fingerprint", &("AB:".repeat(31) + "CD")),
            ]),
        ),
    ];
    for (m, path, params) in cases {
        let v = SCHEMAS.validate_request(m, path, &params);
        assert!(
            v.is_empty(),
            "{m} {path} must pass: {:#?}",
            v.iter().map(ToString::to_string).collect::<Vec<_>>()
        );
    }
}

#[test]
fn bad_requests_name_the_offending_parameter() {
    let restore = |extra: &[(&str, &str)]| {
        let mut v = p(&[("vmid", "101"), ("ostemplate", GOLDEN), ("restore", "1")]);
        v.extend(p(extra));
        v
    };
    let cases: Vec<(&str, &str, Params, &str, &str)> = vec![
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("bogus", "1")]),
            "bogus",
            "not defined",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("startup", "order=1,sideways=2")]),
            "startup",
            "unable to parse startup options",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("start", "true")]),
            "start",
            "type check ('boolean')",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("cores", "0")]),
            "cores",
            "minimum",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("cores", "two")]),
            "cores",
            "type check ('integer')",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("net32", "name=eth0,bridge=vmbr0")]),
            "net32",
            "not defined",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("net01", "name=eth0,bridge=vmbr0")]),
            "net01",
            "not defined",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("mp256", "local-lvm:4,mp=/srv")]),
            "mp256",
            "not defined",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("net0", "name=eth0,bridge=vmbr0,speed=10")]),
            "net0",
            "invalid key",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("net0", "name=eth0,name=eth1,bridge=vmbr0")]),
            "net0",
            "duplicate key",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("net0", "bridge=vmbr0")]),
            "net0",
            "required key name",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("net0", "name=eth0,bridge=vmbr0,trunks=10,20")]),
            "net0",
            "without key",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("mp0", "local-lvm:4,mp=/srv/../etc")]),
            "mp0",
            "illegal character",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("net0", "name=eth0,bridge=vmbr0,ip=10.0.0.5")]),
            "net0",
            "IPv4",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("hostname", "web_1")]),
            "hostname",
            "DNS name",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            restore(&[("storage", "9local")]),
            "storage",
            "illegal characters",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            p(&[("vmid", "101"), ("ostemplate", GOLDEN), ("unique", "1")]),
            "unique",
            "required by 'unique'",
        ),
        (
            "POST",
            "/nodes/pve/lxc",
            p(&[("ostemplate", GOLDEN)]),
            "vmid",
            "not optional",
        ),
        (
            "POST",
            "/nodes/pve/lxc/99/snapshot",
            p(&[("snapname", "a1")]),
            "vmid",
            "valid VM ID",
        ),
        (
            "POST",
            "/nodes/pve/lxc/100/snapshot",
            p(&[]),
            "snapname",
            "not optional",
        ),
        (
            "POST",
            "/nodes/pve/lxc/100/snapshot",
            p(&[("snapname", "1abc")]),
            "snapname",
            "configuration ID",
        ),
        (
            "PUT",
            "/nodes/pve/lxc/100/config",
            p(&[("digest", &"a".repeat(41))]),
            "digest",
            "40 characters long",
        ),
        (
            "PUT",
            "/nodes/pve/lxc/100/config",
            p(&[("vmid", "101"), ("cores", "1")]),
            "vmid",
            "duplicate parameter",
        ),
        (
            "PUT",
            "/nodes/pve/lxc/100/resize",
            p(&[("disk", "mp256"), ("size", "1G")]),
            "disk",
            "enumeration",
        ),
        (
            "PUT",
            "/nodes/pve/lxc/100/resize",
            p(&[("disk", "rootfs"), ("size", "2GB")]),
            "size",
            "regex",
        ),
        (
            "POST",
            "/nodes/pve/vzdump",
            p(&[("vmid", "100,abc")]),
            "vmid",
            "valid VM ID",
        ),
        (
            "POST",
            "/nodes/pve/vzdump",
            p(&[("vmid", "100"), ("mode", "fast")]),
            "mode",
            "enumeration",
        ),
        (
            "POST",
            "/nodes/pve/vzdump",
            p(&[("vmid", "100"), ("prune-backups", "keep-last=-1")]),
            "prune-backups",
            "minimum",
        ),
        (
            "GET",
            "/nodes/pve/storage/local/content",
            p(&[("content", "movies")]),
            "content",
            "content type",
        ),
    ];
    for (m, path, params, param, needle) in cases {
        for schema in SCHEMAS.each() {
            let v = schema.validate_request(m, path, &params);
            assert!(
                v.iter()
                    .any(|x| x.param.as_deref() == Some(param) && x.message.contains(needle)),
                "PVE {}: {m} {path} {params:?} must be refused on `{param}` with {needle:?}; got {:#?}",
                schema.label(),
                v.iter().map(ToString::to_string).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn unknown_paths_and_methods_are_refused() {
    for (m, path) in [
        ("GET", "/nodes/pve/foo"),
        ("PATCH", "/version"),
        ("POST", "/version"),
        ("GET", "/nodes/pve/lxc/100/config/extra"),
    ] {
        let v = SCHEMAS.validate_request(m, path, &[]);
        assert_eq!(v.len(), 2, "{m} {path} refused by both schemas: {v:?}");
    }
}

#[test]
fn paths_match_their_templates() {
    let s = &SCHEMAS.v91;
    let m = s
        .match_path("/nodes/pve/lxc/100/snapshot/snap1/rollback")
        .unwrap();
    assert_eq!(
        m.template,
        "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback"
    );
    assert_eq!(m.path_params["snapname"], "snap1");
    let m = s
        .match_path(&format!("/nodes/pve/storage/local/content/{GOLDEN}"))
        .unwrap();
    assert_eq!(
        m.template,
        "/nodes/{node}/storage/{storage}/content/{volume}"
    );
    assert_eq!(m.path_params["volume"], GOLDEN);
    assert!(template_matches("/nodes/{node}/lxc", "/nodes/pve/lxc"));
    assert!(!template_matches("/nodes/{node}/lxc", "/nodes/pve/lxc/100"));
    assert!(!template_matches("/nodes/{node}", "/nodes/pve/foo"));
}

#[test]
fn routes_are_checked_by_name() {
    let s = &SCHEMAS.v84;
    assert!(
        s.check_route(
            "POST",
            "/nodes/{node}/lxc",
            &["vmid", "net[n]", "net7", "ostemplate"]
        )
        .is_empty()
    );
    let v = s.check_route("POST", "/nodes/{node}/lxc", &["vmid", "no-such"]);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].param.as_deref(), Some("no-such"));
    assert_eq!(
        s.check_route("POST", "/nodes/{node}/teleport", &[]).len(),
        1
    );
}

#[test]
fn perl_patterns_are_rewritten_and_anchored() {
    let re = value::perl_pattern(r"(?^:\d+(?:;\d+)*)").unwrap();
    assert!(re.is_match("10;20"));
    assert!(!re.is_match("x10;20"), "anchored at the start");
    assert!(!re.is_match("10;20x"), "anchored at the end");
    let re = value::perl_pattern(r"(?^i:[a-z]+)").unwrap();
    assert!(re.is_match("ABC"));
}
