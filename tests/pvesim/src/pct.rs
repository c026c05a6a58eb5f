//! Parsing the argument vectors of root's CLI on the node, `pct` and `vzdump`, as their
//! command tables define them (pve-container's `PVE::CLI::pct`, pve-manager's `vzdump`):
//! fixed positional arguments, then `--key value` (or `-key value`) options.

/// One parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// `pct set <vmid> -key value…` → `PUT …/lxc/{vmid}/config`.
    Set { vmid: u32, options: Options },
    /// `pct create <vmid> <ostemplate> …` (and `pct restore <vmid> <archive> …`, the same
    /// with `restore=1`) → `POST …/lxc`.
    Create { vmid: u32, options: Options },
    /// `pct start|stop|shutdown|destroy <vmid> …` → the status routes and `DELETE …/lxc/{vmid}`.
    Power {
        vmid: u32,
        action: Power,
        options: Options,
    },
    /// `pct push <vmid> <file> <destination> [--perms P] [--user U] [--group G]`.
    Push {
        vmid: u32,
        file: String,
        destination: String,
        options: Options,
    },
    /// `pct pull <vmid> <path> <destination> [--perms P] [--user U] [--group G]`: the file's
    /// bytes go back to the stand-in, which writes `<destination>` on the host.
    Pull {
        vmid: u32,
        path: String,
        destination: String,
    },
    /// `pct exec <vmid> [--keep-env B] -- <argv…>`.
    Exec { vmid: u32, argv: Vec<String> },
    /// `pct config <vmid> [--current B]` → `GET …/lxc/{vmid}/config`, printed `key: value`.
    Config { vmid: u32, current: bool },
    /// `vzdump <vmid…> --storage S …` → `POST /nodes/{node}/vzdump`.
    Vzdump { vmids: Vec<u32>, options: Options },
}

/// `pct` commands that map to one task-starting API call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Power {
    Start,
    Stop,
    Shutdown,
    Destroy,
}

impl Power {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Power::Start => "start",
            Power::Stop => "stop",
            Power::Shutdown => "shutdown",
            Power::Destroy => "destroy",
        }
    }
}

/// `(key, value)` options in order.
pub(crate) type Options = Vec<(String, String)>;

fn vmid_arg(word: &str, value: Option<&String>) -> Result<u32, String> {
    value
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|v| (100..=999_999_999).contains(v))
        .ok_or_else(|| format!("{word}: a numeric vmid (100-999999999) must follow `{word}`"))
}

fn positional<'a>(
    word: &str,
    what: &str,
    it: &mut std::slice::Iter<'a, String>,
) -> Result<&'a String, String> {
    it.next()
        .filter(|a| !a.starts_with('-'))
        .ok_or_else(|| format!("{word}: missing argument <{what}>"))
}

/// `--key value` / `-key value` pairs; a flag followed by another flag (or nothing) is a
/// boolean set to 1, as PVE's CLI reads it.
fn options(word: &str, rest: &[String]) -> Result<Options, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(flag) = rest.get(i) {
        let key = flag
            .strip_prefix("--")
            .or_else(|| flag.strip_prefix('-'))
            .filter(|k| !k.is_empty())
            .ok_or_else(|| format!("{word}: unexpected argument {flag:?}"))?;
        match rest.get(i + 1) {
            Some(value) if !value.starts_with('-') || value.parse::<i64>().is_ok() => {
                out.push((key.to_owned(), value.clone()));
                i += 2;
            }
            _ => {
                out.push((key.to_owned(), "1".to_owned()));
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Parses `pct`'s argument vector.
pub(crate) fn parse_pct(args: &[String]) -> Result<Command, String> {
    let mut it = args.iter();
    let Some(word) = it.next().map(String::as_str) else {
        return Err("pct: no command".to_owned());
    };
    let vmid = vmid_arg(&format!("pct {word}"), it.next());
    let rest = |it: std::slice::Iter<'_, String>| it.cloned().collect::<Vec<_>>();
    match word {
        "set" => {
            let vmid = vmid?;
            let options = options("pct set", &rest(it))?;
            if options.is_empty() {
                return Err("pct set: no option given".to_owned());
            }
            Ok(Command::Set { vmid, options })
        }
        "create" | "restore" => {
            let vmid = vmid?;
            let template = positional(&format!("pct {word}"), "ostemplate", &mut it)?.clone();
            let mut all = vec![("ostemplate".to_owned(), template)];
            if word == "restore" {
                all.push(("restore".to_owned(), "1".to_owned()));
            }
            all.extend(options(&format!("pct {word}"), &rest(it))?);
            Ok(Command::Create { vmid, options: all })
        }
        "start" | "stop" | "shutdown" | "destroy" => {
            let action = match word {
                "start" => Power::Start,
                "stop" => Power::Stop,
                "shutdown" => Power::Shutdown,
                _ => Power::Destroy,
            };
            Ok(Command::Power {
                vmid: vmid?,
                action,
                options: options(&format!("pct {word}"), &rest(it))?,
            })
        }
        "push" => {
            let vmid = vmid?;
            let file = positional("pct push", "file", &mut it)?.clone();
            let destination = positional("pct push", "destination", &mut it)?.clone();
            let options = options("pct push", &rest(it))?;
            if let Some((key, _)) = options
                .iter()
                .find(|(k, _)| !["perms", "user", "group"].contains(&k.as_str()))
            {
                return Err(format!("pct push: unknown option '{key}'"));
            }
            Ok(Command::Push {
                vmid,
                file,
                destination,
                options,
            })
        }
        "pull" => {
            let vmid = vmid?;
            let path = positional("pct pull", "path", &mut it)?.clone();
            let destination = positional("pct pull", "destination", &mut it)?.clone();
            let options = options("pct pull", &rest(it))?;
            if let Some((key, _)) = options
                .iter()
                .find(|(k, _)| !["perms", "user", "group"].contains(&k.as_str()))
            {
                return Err(format!("pct pull: unknown option '{key}'"));
            }
            Ok(Command::Pull {
                vmid,
                path,
                destination,
            })
        }
        "exec" => {
            let vmid = vmid?;
            let all = rest(it);
            let split = all.iter().position(|a| a == "--");
            let (before, argv) = match split {
                Some(i) => (&all[..i], all[i + 1..].to_vec()),
                None => (&all[..0], all.clone()),
            };
            let opts = options("pct exec", before)?;
            if let Some((key, _)) = opts.iter().find(|(k, _)| k != "keep-env") {
                return Err(format!("pct exec: unknown option '{key}'"));
            }
            Ok(Command::Exec { vmid, argv })
        }
        "config" => {
            let vmid = vmid?;
            let mut current = false;
            for (key, value) in options("pct config", &rest(it))? {
                match (key.as_str(), value.as_str()) {
                    ("current", "1" | "0") => current = value == "1",
                    _ => return Err(format!("pct config: unknown option '{key}'")),
                }
            }
            Ok(Command::Config { vmid, current })
        }
        other => Err(format!(
            "pct {other}: not simulated (set, create, restore, start, stop, shutdown, destroy, push, pull, exec, config)"
        )),
    }
}

/// Parses `vzdump`'s argument vector: vmids first, then options.
pub(crate) fn parse_vzdump(args: &[String]) -> Result<Command, String> {
    let first_option = args
        .iter()
        .position(|a| a.starts_with('-'))
        .unwrap_or(args.len());
    let vmids = args[..first_option]
        .iter()
        .map(|v| vmid_arg("vzdump", Some(v)))
        .collect::<Result<Vec<_>, _>>()?;
    let options = options("vzdump", &args[first_option..])?;
    if vmids.is_empty() && !options.iter().any(|(k, _)| k == "all") {
        return Err("vzdump: give the vmids to back up (or --all)".to_owned());
    }
    Ok(Command::Vzdump { vmids, options })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn parses_set_with_single_and_double_dash_options() {
        let set = parse_pct(&args("set 101 -mp0 /a,mp=/b,ro=1 --onboot 1")).expect("valid");
        assert_eq!(
            set,
            Command::Set {
                vmid: 101,
                options: vec![
                    ("mp0".to_owned(), "/a,mp=/b,ro=1".to_owned()),
                    ("onboot".to_owned(), "1".to_owned())
                ]
            }
        );
    }

    #[test]
    fn parses_the_recipes_commands() {
        let create = parse_pct(&args(
            "create 9000 local:vztmpl/d.tar.zst --hostname g --unprivileged 1 --rootfs local-lvm:8",
        ))
        .expect("valid");
        let Command::Create { vmid, options } = create else {
            panic!("{create:?}")
        };
        assert_eq!(vmid, 9000);
        assert_eq!(
            options[0],
            ("ostemplate".into(), "local:vztmpl/d.tar.zst".into())
        );
        assert_eq!(options.len(), 4);
        let push = parse_pct(&args("push 9000 /h/f /etc/f --perms 0600 --user 0")).expect("valid");
        assert!(
            matches!(push, Command::Push { ref destination, ref options, .. }
            if destination == "/etc/f" && options.len() == 2)
        );
        assert_eq!(
            parse_pct(&args("pull 9000 /etc/bosun-bootstrap/guest-stamp /run/f")),
            Ok(Command::Pull {
                vmid: 9000,
                path: "/etc/bosun-bootstrap/guest-stamp".into(),
                destination: "/run/f".into()
            })
        );
        assert!(parse_pct(&args("pull 9000 /etc/x")).is_err());
        assert!(parse_pct(&args("pull 9000 /etc/x /run/f --mode 1")).is_err());
        let exec = parse_pct(&args("exec 9000 -- /usr/bin/rm -f /x")).expect("valid");
        assert_eq!(
            exec,
            Command::Exec {
                vmid: 9000,
                argv: args("/usr/bin/rm -f /x")
            }
        );
        assert_eq!(
            parse_pct(&args("config 9000 --current")),
            Ok(Command::Config {
                vmid: 9000,
                current: true
            })
        );
        assert_eq!(
            parse_pct(&args("config 9000")),
            Ok(Command::Config {
                vmid: 9000,
                current: false
            })
        );
        let destroy = parse_pct(&args("destroy 9000 --purge")).expect("valid");
        assert_eq!(
            destroy,
            Command::Power {
                vmid: 9000,
                action: Power::Destroy,
                options: vec![("purge".into(), "1".into())]
            }
        );
        let dump =
            parse_vzdump(&args("9000 --storage local --mode stop --compress zstd")).expect("valid");
        assert!(
            matches!(dump, Command::Vzdump { ref vmids, ref options } if vmids == &[9000] && options.len() == 3)
        );
    }

    #[test]
    fn refuses_other_commands_and_malformed_arguments() {
        for bad in [
            "list",
            "set",
            "set abc -mp0 x",
            "set 101",
            "set 101 mp0 x",
            "create 9000",
            "push 9000 /a",
            "push 9000 /a /b --mode 1",
            "exec 9000 --bogus 1 -- ls",
            "start 99",
            "config 9000 --snapshot s1",
            "config 9000 --current maybe",
        ] {
            assert!(parse_pct(&args(bad)).is_err(), "{bad:?}");
        }
        assert!(parse_pct(&[]).is_err());
        assert!(parse_vzdump(&args("--storage local")).is_err());
        assert!(parse_vzdump(&args("abc --storage local")).is_err());
    }
}
