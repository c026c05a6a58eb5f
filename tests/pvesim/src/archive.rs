//! Backup archive naming (as vzdump names them), vzdump's size display and notes templates.

use crate::state::{NodeState, StorageKind};

/// Expands `{{cluster}}`, `{{guestname}}`, `{{node}}`, `{{vmid}}`, `\n` and `\\`.
pub(crate) fn render_notes(
    template: &str,
    guestname: &str,
    node: &str,
    vmid: u32,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("\\\\") {
            out.push('\\');
            rest = r;
        } else if let Some(r) = rest.strip_prefix("\\n") {
            out.push('\n');
            rest = r;
        } else if let Some(r) = rest.strip_prefix("{{") {
            let end = r
                .find("}}")
                .ok_or_else(|| format!("found unknown: '{{{{{r}'"))?;
            let var = &r[..end];
            match var {
                "cluster" => out.push_str(node),
                "guestname" => out.push_str(guestname),
                "node" => out.push_str(node),
                "vmid" => out.push_str(&vmid.to_string()),
                other => return Err(format!("found unknown: '{{{{{other}}}}}'")),
            }
            rest = &r[end + 2..];
        } else if rest.starts_with('\\') {
            let bad: String = rest.chars().take(2).collect();
            return Err(format!("found unknown: '{bad}'"));
        } else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    Ok(out)
}

/// vzdump's size display: whole KB/MB, GB/TB with two decimals.
pub(crate) fn format_size(bytes: u64) -> String {
    let kb = bytes as f64 / 1024.0;
    if kb < 1024.0 {
        return format!("{}KB", kb.floor());
    }
    let mb = kb / 1024.0;
    if mb < 1024.0 {
        return format!("{}MB", mb.floor());
    }
    let gb = mb / 1024.0;
    if gb < 1024.0 {
        return format!("{gb:.2}GB");
    }
    format!("{:.2}TB", gb / 1024.0)
}

pub(crate) fn extension(compress: &str) -> &'static str {
    match compress {
        "1" | "lzo" => "tar.lzo",
        "gzip" => "tar.gz",
        "zstd" => "tar.zst",
        _ => "tar",
    }
}

/// The archive's volid, format and the name shown in the log. Dir: node local time; PBS: UTC.
/// If the name is taken (two backups in one second) the time moves on by a second.
pub(crate) fn archive_name(
    st: &NodeState,
    storage: &str,
    compress: &str,
    vmid: u32,
    started: &jiff::Zoned,
) -> Option<(String, String, String)> {
    let kind = &st.storages.get(storage)?.kind;
    let taken = |volid: &str| {
        st.storages
            .get(storage)
            .is_some_and(|s| s.volumes.iter().any(|v| v.volid == volid))
    };
    let mut when = started.clone();
    // A day of one-second steps is far more than any test makes in one second.
    for _ in 0..86_400 {
        let candidate = match kind {
            StorageKind::Pbs { .. } => {
                let iso = when.timestamp().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
                (
                    format!("{storage}:backup/ct/{vmid}/{iso}"),
                    "pbs-ct".to_owned(),
                    format!("ct/{vmid}/{iso}"),
                )
            }
            StorageKind::Dir { path } => {
                let ext = extension(compress);
                let name = format!(
                    "vzdump-lxc-{vmid}-{}.{ext}",
                    when.strftime("%Y_%m_%d-%H_%M_%S")
                );
                (
                    format!("{storage}:backup/{name}"),
                    ext.to_owned(),
                    format!("{path}/dump/{name}"),
                )
            }
            StorageKind::LvmThin { .. } => {
                let ext = extension(compress);
                let name = format!(
                    "vzdump-lxc-{vmid}-{}.{ext}",
                    when.strftime("%Y_%m_%d-%H_%M_%S")
                );
                (format!("{storage}:backup/{name}"), ext.to_owned(), name)
            }
        };
        if !taken(&candidate.0) {
            return Some(candidate);
        }
        when = when.checked_add(jiff::Span::new().seconds(1)).ok()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::render_notes;

    #[test]
    fn notes_template_expands_variables_and_escapes() {
        let out = render_notes(
            "{{guestname}} on {{node}}\\n#{{vmid}}\\\\",
            "web",
            "pve",
            101,
        )
        .expect("valid template");
        assert_eq!(out, "web on pve\n#101\\");
    }

    #[test]
    fn notes_template_rejects_unknown_variables_and_escapes() {
        assert!(render_notes("{{bogus}}", "x", "pve", 100).is_err());
        assert!(render_notes("a\\tb", "x", "pve", 100).is_err());
    }
}
