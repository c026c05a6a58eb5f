//! `bosunctl completions SHELL`, with host names for bash.
//!
//! The scripts are clap's, generated from the command line itself, so subcommands, options
//! and closed value lists (`job new --kind`) complete in every shell. Host names are the hub's
//! and change: for bash the script gains a wrapper that, where a command takes a host (an
//! option or argument named `HOST`), asks `bosunctl complete-hosts` for them. That hidden
//! command reads the hub's host list with the operator's saved connection, gives up after
//! [`HOST_LIST_TIMEOUT`], and prints nothing on any failure, so a Tab never hangs or prints an
//! error into the command line.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use bosun_clidoc::Shell;
use bosun_proto::admin::HostSummary;

use crate::error::CtlError;
use crate::global::GlobalArgs;

/// The value name every host option and argument carries ([`crate::resolve::HostArg`]).
pub const HOST_VALUE: &str = "HOST";

/// How long `complete-hosts` waits for the hub.
pub const HOST_LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// Writes the completion script of `cmd` for `shell` to `out`.
pub fn write(cmd: clap::Command, shell: Shell, out: &mut dyn Write) -> Result<(), CtlError> {
    let mut script = bosun_clidoc::completions(cmd.clone(), shell);
    if shell == Shell::Bash {
        script.extend_from_slice(bash_hosts(&cmd).as_bytes());
    }
    out.write_all(&script)
        .and_then(|()| out.flush())
        .map_err(|source| CtlError::Docs(bosun_clidoc::ClidocError::Completions { shell, source }))
}

/// Where a host is taken: the long options named [`HOST_VALUE`] (without `--`), and the
/// subcommand paths (`hosts show`) whose first argument is one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HostPlaces {
    /// `host`, `restore-host`, …
    pub options: BTreeSet<String>,
    /// `hosts show`, `hosts revoke`, …
    pub paths: BTreeSet<String>,
}

/// The places of `cmd` (and its subcommands) that take a host.
pub fn host_places(cmd: &clap::Command) -> HostPlaces {
    let mut places = HostPlaces::default();
    walk(cmd, &mut Vec::new(), &mut places);
    places
}

fn walk(cmd: &clap::Command, path: &mut Vec<String>, places: &mut HostPlaces) {
    let takes_host = |arg: &clap::Arg| {
        arg.get_value_names()
            .is_some_and(|names| names.iter().any(|n| n.as_str() == HOST_VALUE))
    };
    for arg in cmd.get_opts().filter(|a| !a.is_hide_set() && takes_host(a)) {
        if let Some(long) = arg.get_long() {
            places.options.insert(long.to_owned());
        }
    }
    if !path.is_empty() && cmd.get_positionals().next().is_some_and(takes_host) {
        places.paths.insert(path.join(" "));
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        path.push(sub.get_name().to_owned());
        walk(sub, path, places);
        path.pop();
    }
}

/// The bash wrapper: host names after a host option or as a host argument, clap's function
/// (`_NAME`) for everything else. Only word characters, `-` and spaces reach the script, so a
/// name from the command line cannot break out of its quoting.
fn bash_hosts(cmd: &clap::Command) -> String {
    let name = cmd.get_name();
    let safe = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == ' ')
    };
    let places = host_places(cmd);
    let options: Vec<String> = places
        .options
        .iter()
        .filter(|o| safe(o))
        .map(|o| format!("--{o}"))
        .collect();
    let paths: Vec<String> = places
        .paths
        .iter()
        .filter(|p| safe(p))
        .map(|p| format!("\"{p}\""))
        .collect();
    let function = format!("_{}", name.replace('-', "__"));
    let options = if options.is_empty() {
        "--no-host-option".to_owned()
    } else {
        options.join("|")
    };
    let paths = if paths.is_empty() {
        "\"\"".to_owned()
    } else {
        paths.join("|")
    };
    format!(
        r#"
# Host names from the hub where a command takes a host (`{name} complete-hosts`).
_{name}_hosts() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    case "$prev" in
        {options})
            COMPREPLY=($(compgen -W "$({name} complete-hosts 2>/dev/null)" -- "$cur"))
            return 0
            ;;
    esac
    local words=() i
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ ${{COMP_WORDS[i]}} == -* ]] || words+=("${{COMP_WORDS[i]}}")
    done
    case "${{words[*]}}" in
        {paths})
            if [[ $cur != -* ]]; then
                COMPREPLY=($(compgen -W "$({name} complete-hosts 2>/dev/null)" -- "$cur"))
                return 0
            fi
            ;;
    esac
    {function} "$@"
}}
complete -F _{name}_hosts -o nosort -o bashdefault -o default {name}
"#
    )
}

/// `bosunctl complete-hosts`: the hub's host names, one a line, sorted; nothing on failure.
pub async fn print_hosts(global: &GlobalArgs) -> Result<(), CtlError> {
    let Ok(client) = crate::client::connect(global) else {
        return Ok(());
    };
    let listed = tokio::time::timeout(HOST_LIST_TIMEOUT, client.get("/v1/admin/hosts")).await;
    let Ok(Ok(value)) = listed else {
        return Ok(());
    };
    let Ok(hosts) = serde_json::from_value::<Vec<HostSummary>>(value) else {
        return Ok(());
    };
    let names: BTreeSet<&str> = hosts
        .iter()
        .map(|h| h.hostname.as_str())
        .filter(|n| is_plain_hostname(n))
        .collect();
    for name in names {
        crate::outln!("{name}")?;
    }
    Ok(())
}

/// Whether `name` is made of hostname characters only. Bash's `compgen -W` expands the words
/// it is given (`$(…)`, backquotes, `$VAR`), so a name from the hub with anything else in it
/// (a compromised hub's `$(rm -rf ~)`) is never offered.
fn is_plain_hostname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hostname_characters_reach_the_completion() {
        for good in ["pve-01", "edge_07", "node.example.net"] {
            assert!(is_plain_hostname(good), "{good}");
        }
        for bad in ["$(touch x)", "`id`", "a;b", "$HOME", "a b", "", "ü"] {
            assert!(!is_plain_hostname(bad), "{bad}");
        }
    }

    #[test]
    fn the_host_options_and_arguments_are_found_on_the_command_line() {
        let places = host_places(&crate::cli::Cli::command_line());
        assert!(places.options.contains("host"), "{places:?}");
        for path in [
            "hosts show",
            "hosts approve",
            "hosts revoke",
            "hosts remove",
        ] {
            assert!(places.paths.contains(path), "{path}: {places:?}");
        }
        assert!(!places.paths.contains("hosts list"), "{places:?}");
    }

    #[test]
    fn the_bash_script_asks_for_hosts_and_falls_back_to_clap() {
        let mut script = Vec::new();
        write(crate::cli::Cli::command_line(), Shell::Bash, &mut script).unwrap();
        let script = String::from_utf8(script).unwrap();
        assert!(script.contains("_bosunctl() {"), "clap's function is kept");
        assert!(script.contains("bosunctl complete-hosts"), "{script}");
        assert!(script.contains("\"hosts show\""), "{script}");
        assert!(script.contains("complete -F _bosunctl_hosts"), "{script}");
        let mut zsh = Vec::new();
        write(crate::cli::Cli::command_line(), Shell::Zsh, &mut zsh).unwrap();
        assert!(!String::from_utf8(zsh).unwrap().contains("_bosunctl_hosts"));
    }
}
