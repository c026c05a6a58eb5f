#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use std::path::Path;

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn reason(e: AppsError) -> String {
    match e {
        AppsError::Invalid { reason, .. } => reason,
        other => panic!("expected a refused app, got {other}"),
    }
}

#[test]
fn a_missing_customer_file_lists_no_apps_but_a_missing_controller_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("apps.json");
    assert!(load_customer(&missing).unwrap().is_empty());
    assert!(matches!(load(&missing), Err(AppsError::Read { .. })));
}

#[test]
fn apps_files_are_bounded_in_size_count_names_and_commands() {
    let dir = tempfile::tempdir().unwrap();
    let big = write(
        dir.path(),
        "big.json",
        &" ".repeat(usize::try_from(MAX_APPS_FILE).unwrap() + 1),
    );
    assert!(matches!(
        load_customer(&big),
        Err(AppsError::TooLarge { .. })
    ));
    let app = |name: &str| serde_json::json!({"name": name, "stop": ["docker", "stop", name], "start": ["docker", "start", name]});
    let many: Vec<_> = (0..=MAX_APPS).map(|i| app(&format!("a{i}"))).collect();
    let path = write(
        dir.path(),
        "many.json",
        &serde_json::to_string(&many).unwrap(),
    );
    assert!(reason(load_customer(&path).unwrap_err()).contains("at most 32"));
    let twice = write(
        dir.path(),
        "twice.json",
        &serde_json::json!([app("shop"), app("shop")]).to_string(),
    );
    assert!(reason(load_customer(&twice).unwrap_err()).contains("listed twice"));
    let odd = write(
        dir.path(),
        "odd.json",
        &serde_json::json!([app("shop; rm -rf /")]).to_string(),
    );
    assert!(reason(load_customer(&odd).unwrap_err()).contains("is not 1 to 64"));
    let empty = write(
        dir.path(),
        "empty.json",
        r#"[{"name": "shop", "stop": [], "start": ["docker", "start", "shop"]}]"#,
    );
    assert!(reason(load_customer(&empty).unwrap_err()).contains("stop command"));
    let relative = write(
        dir.path(),
        "relative.json",
        r#"[{"name": "shop", "stop": ["x"], "start": ["y"], "data": ["var/lib/shop"]}]"#,
    );
    assert!(reason(load_customer(&relative).unwrap_err()).contains("absolute"));
    let unknown = write(
        dir.path(),
        "unknown.json",
        r#"[{"name": "shop", "stop": ["x"], "start": ["y"], "shell": "sh"}]"#,
    );
    assert!(matches!(
        load_customer(&unknown),
        Err(AppsError::Parse { .. })
    ));
}

#[test]
fn a_customer_app_cannot_take_the_name_of_the_controller_s_own() {
    let own = parse(
        Path::new("own"),
        br#"[{"name": "agent-sidecar", "stop": ["docker", "stop", "s"], "start": ["docker", "start", "s"]}]"#,
    )
    .unwrap();
    let customer = parse(
        Path::new("customer"),
        br#"[{"name": "agent-sidecar", "stop": ["docker", "stop", "x"], "start": ["docker", "start", "x"]}]"#,
    )
    .unwrap();
    let said = reason(merge(&own, customer, Path::new("customer")).unwrap_err());
    assert!(said.contains("already the controller's own"), "{said}");
    let shop = parse(
        Path::new("customer"),
        br#"[{"name": "shop", "stop": ["docker", "stop", "x"], "start": ["docker", "start", "x"]}]"#,
    )
    .unwrap();
    let merged = merge(&own, shop, Path::new("customer")).unwrap();
    let names: Vec<&str> = merged.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        ["agent-sidecar", "shop"],
        "the controller's own first"
    );
}

/// The shipped examples parse as apps files and run only what the controller image holds: it
/// has no shell and no Compose, only `bosun-guest` and the `--with /usr/bin/docker` program
/// the guide builds it with. The app chapter's apps stop and start exactly the containers its
/// Compose file names.
#[test]
fn the_shipped_apps_examples_run_only_docker_and_match_the_compose_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    for file in [
        "helper/debian/examples/apps.json",
        "helper/debian/bosun-guest/apps.json",
        "docs/examples/app/apps.json",
    ] {
        let path = root.join(file);
        let apps = load(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        for app in &apps {
            for argv in [&app.stop, &app.start] {
                assert_eq!(argv[0], "docker", "{file}: {argv:?}");
                assert_ne!(
                    argv.get(1).map(String::as_str),
                    Some("compose"),
                    "{file}: no Compose plugin in the image"
                );
            }
            assert!(
                app.data
                    .iter()
                    .all(|d| d.starts_with("/var/lib/bosun-controller")),
                "{file}: data the controller's container sees"
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "the examples list apps");
    let compose = std::fs::read_to_string(root.join("docs/examples/app/compose.yaml")).unwrap();
    let mut containers: Vec<&str> = compose
        .lines()
        .filter_map(|l| l.trim().strip_prefix("container_name:"))
        .map(str::trim)
        .collect();
    containers.sort_unstable();
    assert_eq!(containers, ["shop-db", "shop-web"]);
    let apps = load(&root.join("docs/examples/app/apps.json")).unwrap();
    for (argv, verb) in [(&apps[0].stop, "stop"), (&apps[0].start, "start")] {
        assert_eq!(argv[1], verb);
        let mut named: Vec<&str> = argv[2..]
            .iter()
            .map(String::as_str)
            .filter(|a| containers.contains(a))
            .collect();
        named.sort_unstable();
        assert_eq!(
            named, containers,
            "{verb} names every container of the Compose file"
        );
    }
    // The guide's own inline apps example too.
    let guide = std::fs::read_to_string(root.join("docs/operator-guide.md")).unwrap();
    let inline = guide
        .split("```json\n")
        .skip(1)
        .filter_map(|block| block.split_once("```").map(|(b, _)| b))
        .filter(|b| b.contains("\"stop\""))
        .collect::<Vec<_>>();
    assert!(!inline.is_empty(), "the guide shows an apps file");
    for block in inline {
        let apps = parse(Path::new("operator-guide.md"), block.as_bytes()).unwrap();
        assert!(
            apps.iter()
                .all(|a| a.stop[0] == "docker" && a.start[0] == "docker")
        );
    }
}
