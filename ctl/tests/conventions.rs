//! `bosunctl`'s command-line conventions, through the real binary against a real hub on
//! loopback: `--output json` on every listing command, hosts by name (unique, ambiguous,
//! unknown), a closed stdout, a missing `--config`, a token file others can read, and the
//! completion scripts and man pages.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common;

use common::hub::{Fixture, start_hub};

impl Fixture {
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("BOSUN_HUB_URL", self.url.clone()),
            ("BOSUN_HUB_FINGERPRINT", self.fingerprint.clone()),
            ("BOSUN_ADMIN_TOKEN", self.admin.clone()),
        ]
    }

    fn command(&self, env: &[(&str, String)], args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_bosunctl"));
        command
            .env_clear()
            .env("HOME", self.dir.path())
            .args(args)
            .kill_on_drop(true);
        for (key, value) in env {
            command.env(key, value);
        }
        command
    }

    async fn run_env(&self, env: &[(&str, String)], args: &[&str]) -> Output {
        tokio::time::timeout(Duration::from_secs(30), self.command(env, args).output())
            .await
            .expect("bosunctl finishes")
            .unwrap()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_are_addressed_by_name_or_id() {
    let hub = start_hub().await;
    let one = hub.enroll_agent("pve-one").await;
    let twin_a = hub.enroll_agent("pve-twin").await;
    let twin_b = hub.enroll_agent("pve-twin").await;

    // A unique name, in any case, and the id, name the same host.
    for host in ["pve-one", "PVE-ONE", &one.to_string()] {
        let out = hub.run(&["hosts", "show", host, "--json"]).await;
        assert_exit(&out, 0);
        let detail: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(detail["host_id"], one.to_string(), "{host}");
    }
    let out = hub.run(&["job", "list", "--host", "pve-one"]).await;
    assert_exit(&out, 0);
    let out = hub
        .run(&["events", "--host", "pve-one", "--output", "json"])
        .await;
    assert_exit(&out, 0);
    let events: Value = serde_json::from_slice(&out.stdout).unwrap();
    let events = events.as_array().unwrap();
    assert!(!events.is_empty());
    assert!(
        events.iter().all(|e| e["host_id"] == one.to_string()),
        "{events:?}"
    );

    // Two hosts share a name: refused, listing both ids.
    let out = hub.run(&["hosts", "show", "pve-twin"]).await;
    assert_exit(&out, 4);
    let err = text(&out.stderr);
    assert!(err.contains("ambiguous"), "{err}");
    assert!(
        err.contains(&twin_a.to_string()) && err.contains(&twin_b.to_string()),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // Its id still works.
    let out = hub.run(&["hosts", "show", &twin_b.to_string()]).await;
    assert_exit(&out, 0);

    // An unknown name says so.
    let out = hub.run(&["hosts", "approve", "pve-nowhere"]).await;
    assert_exit(&out, 8);
    let err = text(&out.stderr);
    assert!(err.contains("no host named \"pve-nowhere\""), "{err}");

    // Offline authoring resolves a name through the hub too.
    let job = hub.dir.path().join("job.json");
    let out = hub
        .run(&[
            "job",
            "new",
            "--kind",
            "agent-update",
            "--host",
            "pve-one",
            "--param",
            "version=0.2.0",
            "-o",
            job.to_str().unwrap(),
        ])
        .await;
    if out.status.success() {
        let doc: Value = serde_json::from_slice(&std::fs::read(&job).unwrap()).unwrap();
        assert_eq!(doc["target"]["host_id"], one.to_string());
    } else {
        // Refused for its parameters, after the name resolved.
        let err = text(&out.stderr);
        assert!(
            !err.contains("no host named") && !err.contains("ambiguous"),
            "{err}"
        );
    }
    let out = hub
        .run(&[
            "job",
            "new",
            "--kind",
            "agent-update",
            "--host",
            "pve-twin",
            "-o",
            job.to_str().unwrap(),
        ])
        .await;
    assert_exit(&out, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listing_command_prints_json_with_output_json() {
    let hub = start_hub().await;
    let host = hub.enroll_agent("pve-json").await;
    let host = host.to_string();
    let listings: [&[&str]; 7] = [
        &["hosts", "list"],
        &["hosts", "show", &host],
        &["job", "list", "--host", &host],
        &["alerts"],
        &["events"],
        &["audit"],
        &["status"],
    ];
    for args in listings {
        // `--output-format json` is pvesh's spelling of the same option.
        for flag in [
            &["--output", "json"][..],
            &["--output-format", "json"][..],
            &["--json"][..],
        ] {
            let mut all = args.to_vec();
            all.extend_from_slice(flag);
            let out = hub.run(&all).await;
            assert_exit(&out, 0);
            let parsed: Result<Value, _> = serde_json::from_slice(&out.stdout);
            assert!(parsed.is_ok(), "{all:?}: {}", text(&out.stdout));
        }
        // Text is the default and is not JSON.
        let out = hub.run(args).await;
        assert_exit(&out, 0);
        assert!(
            serde_json::from_slice::<Value>(&out.stdout).is_err(),
            "{args:?}"
        );
    }
    let out = hub.run(&["hosts", "list", "--output", "yaml"]).await;
    assert_exit(&out, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_is_not_an_error() {
    let hub = start_hub().await;
    // Enough hosts that the table does not fit one write.
    for i in 0..3 {
        hub.enroll_agent(&format!("pve-pipe-{i}")).await;
    }
    let commands: [&[&str]; 4] = [
        &["hosts", "list"],
        &["hosts", "list", "--json"],
        &["events"],
        &["completions", "bash"],
    ];
    for args in commands {
        let mut command = hub.command(&hub.env(), args);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        // The reader goes away before bosunctl writes anything.
        drop(child.stdout.take());
        let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
            .await
            .expect("bosunctl finishes")
            .unwrap();
        assert_exit(&out, 0);
        assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out.stderr));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_and_token_files_are_checked() {
    let hub = start_hub().await;
    let url = ("BOSUN_HUB_URL", hub.url.clone());
    let pin = ("BOSUN_HUB_FINGERPRINT", hub.fingerprint.clone());

    // A --config that does not exist is an error; the default path may be absent.
    let missing = hub.dir.path().join("nowhere.json");
    let mut env = hub.env();
    let out = hub
        .run_env(
            &env,
            &["hosts", "list", "--config", missing.to_str().unwrap()],
        )
        .await;
    assert_exit(&out, 3);
    assert!(
        text(&out.stderr).contains("nowhere.json"),
        "{}",
        text(&out.stderr)
    );
    env.push(("BOSUN_CTL_CONFIG", missing.display().to_string()));
    assert_exit(&hub.run_env(&env, &["hosts", "list"]).await, 3);
    assert_exit(&hub.run(&["hosts", "list"]).await, 0);

    // A token file others can read is refused, naming the fix; 0600 works.
    let token = hub.dir.path().join("admin-token");
    std::fs::write(&token, format!("{}\n", hub.admin)).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let args = [
        "hosts",
        "list",
        "--admin-token-file",
        token.to_str().unwrap(),
    ];
    let out = hub.run_env(&[url.clone(), pin.clone()], &args).await;
    assert_exit(&out, 3);
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("chmod 600 {}", token.display())),
        "{err}"
    );
    assert!(!err.contains(&hub.admin));
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_exit(&hub.run_env(&[url.clone(), pin.clone()], &args).await, 0);

    // So is a config file holding the token.
    let config = hub.dir.path().join("ctl.json");
    let init = hub
        .run(&["hub", "init", "--config", config.to_str().unwrap()])
        .await;
    assert_exit(&init, 0);
    let list = ["hosts", "list", "--config", config.to_str().unwrap()];
    assert_exit(&hub.run_env(&[], &list).await, 0);
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = hub.run_env(&[], &list).await;
    assert_exit(&out, 3);
    assert!(
        text(&out.stderr).contains("chmod 600"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn completions_and_man_pages_are_generated() {
    let dir = tempfile::tempdir().unwrap();
    let bosunctl = env!("CARGO_BIN_EXE_bosunctl");
    for shell in ["bash", "zsh", "fish"] {
        let out = std::process::Command::new(bosunctl)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_exit(&out, 0);
        let script = dir.path().join(format!("bosunctl.{shell}"));
        std::fs::write(&script, &out.stdout).unwrap();
        let check = match shell {
            // Sourced, it registers the completion function for bosunctl.
            "bash" => format!("source {} && complete -p bosunctl", script.display()),
            "zsh" => format!("zsh -n {}", script.display()),
            _ => format!("fish --no-execute {}", script.display()),
        };
        let program = if shell == "bash" { "bash" } else { shell };
        if shell != "bash" && which(program).is_none() {
            eprintln!("{program} is not installed; its script is only generated");
            assert!(text(&out.stdout).contains("hosts"));
            continue;
        }
        let run = std::process::Command::new("bash")
            .args(["--noprofile", "--norc", "-c", &check])
            .output()
            .unwrap();
        assert_exit(&run, 0);
        assert!(run.stderr.is_empty(), "{shell}: {}", text(&run.stderr));
        if shell == "bash" {
            assert!(
                text(&run.stdout).contains("bosunctl"),
                "{}",
                text(&run.stdout)
            );
        }
    }

    let man = dir.path().join("man1");
    let out = std::process::Command::new(bosunctl)
        .args([
            "man",
            "--dir",
            man.to_str().unwrap(),
            "--date",
            "2026-11-23",
        ])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    for page in [
        "bosunctl.1",
        "bosunctl-hosts.1",
        "bosunctl-hosts-list.1",
        "bosunctl-completions.1",
    ] {
        assert!(man.join(page).is_file(), "{page}");
    }
    // Hidden commands get no page.
    assert!(!man.join("bosunctl-man.1").exists());
    let page = man.join("bosunctl.1");
    let roff = std::fs::read_to_string(&page).unwrap();
    assert!(roff.contains(".TH bosunctl 1 2026-11-23"), "{roff}");
    assert!(roff.contains("\\-\\-output"), "{roff}");
    // Rendered as lintian does, without a warning.
    if which("man").is_some() {
        let out = std::process::Command::new("man")
            .env("LC_ALL", "C.UTF-8")
            .env("MANWIDTH", "80")
            .args(["--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z"])
            .arg(&page)
            .output()
            .unwrap();
        assert_exit(&out, 0);
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
        let rendered = std::process::Command::new("man")
            .env("LC_ALL", "C.UTF-8")
            .env("MANPAGER", "cat")
            .args(["-l"])
            .arg(man.join("bosunctl-hosts-show.1"))
            .output()
            .unwrap();
        let rendered = text(&rendered.stdout);
        assert!(rendered.contains("its id or its hostname"), "{rendered}");
    } else {
        eprintln!("man is not installed; the roff was only read");
    }
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| std::path::Path::new(dir).join(program))
        .find(|path| path.is_file())
}
