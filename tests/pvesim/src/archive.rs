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

/// A VM archive's extension: vzdump writes a VMA stream, compressed as asked.
pub(crate) fn vma_extension(compress: &str) -> &'static str {
    match compress {
        "1" | "lzo" => "vma.lzo",
        "gzip" => "vma.gz",
        "zstd" => "vma.zst",
        _ => "vma",
    }
}

/// The archive's volid, format and the name shown in the log. Dir: node local time; PBS: UTC.
/// If the name is taken (two backups in one second) the time moves on by a second. A VM's
/// (`qemu`) is a `vzdump-qemu-…vma…` file or a PBS `vm/…` snapshot; a container's a
/// `vzdump-lxc-…tar…` file or a `ct/…` snapshot.
pub(crate) fn archive_name(
    st: &NodeState,
    storage: &str,
    compress: &str,
    vmid: u32,
    started: &jiff::Zoned,
    qemu: bool,
) -> Option<(String, String, String)> {
    let (pbs_type, file_type) = if qemu { ("vm", "qemu") } else { ("ct", "lxc") };
    let ext = if qemu {
        vma_extension(compress)
    } else {
        extension(compress)
    };
    let kind = &st.storages.get(storage)?.kind;
    let existing = st.volumes(storage);
    let taken = |volid: &str| existing.iter().any(|v| v.volid == volid);
    let mut when = started.clone();
    // A day of one-second steps is far more than any test makes in one second.
    for _ in 0..86_400 {
        let candidate = match kind {
            StorageKind::Pbs { .. } => {
                let iso = when.timestamp().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
                (
                    format!("{storage}:backup/{pbs_type}/{vmid}/{iso}"),
                    format!("pbs-{pbs_type}"),
                    format!("{pbs_type}/{vmid}/{iso}"),
                )
            }
            StorageKind::Dir { path }
            | StorageKind::Nfs { path, .. }
            | StorageKind::Cifs { path, .. } => {
                let name = format!(
                    "vzdump-{file_type}-{vmid}-{}.{ext}",
                    when.strftime("%Y_%m_%d-%H_%M_%S")
                );
                (
                    format!("{storage}:backup/{name}"),
                    ext.to_owned(),
                    format!("{path}/dump/{name}"),
                )
            }
            StorageKind::LvmThin { .. } => {
                let name = format!(
                    "vzdump-{file_type}-{vmid}-{}.{ext}",
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

/// PVE's backup pruning: for each `keep-*` option in the order last, hourly, daily, weekly,
/// monthly, yearly, keep the newest backup of each of the newest N periods not yet covered by
/// an earlier option. Returns, per input `ctime`, whether that backup is kept.
pub(crate) fn prune_keep(ctimes: &[i64], options: &[(&str, usize)]) -> Vec<bool> {
    const ORDER: &[(&str, &str)] = &[
        ("keep-last", ""),
        ("keep-hourly", "%Y/%m/%d/%H"),
        ("keep-daily", "%Y/%m/%d"),
        ("keep-weekly", "%G/%V"),
        ("keep-monthly", "%Y/%m"),
        ("keep-yearly", "%Y"),
    ];
    let tz = jiff::tz::TimeZone::system();
    let mut order: Vec<usize> = (0..ctimes.len()).collect();
    order.sort_by(|a, b| ctimes[*b].cmp(&ctimes[*a]));
    // None = not decided yet; Some(true) = keep; Some(false) = remove.
    let mut mark: Vec<Option<bool>> = vec![None; ctimes.len()];
    for (option, pattern) in ORDER {
        let Some(count) = options.iter().find(|(k, _)| k == option).map(|(_, n)| *n) else {
            continue;
        };
        if count == 0 {
            continue;
        }
        let period = |i: usize| -> String {
            if pattern.is_empty() {
                return format!("{i}");
            }
            jiff::Timestamp::from_second(ctimes[i])
                .map(|ts| ts.to_zoned(tz.clone()).strftime(pattern).to_string())
                .unwrap_or_default()
        };
        let already: std::collections::BTreeSet<String> = order
            .iter()
            .filter(|i| mark[**i] == Some(true))
            .map(|i| period(*i))
            .collect();
        let mut newly = std::collections::BTreeSet::new();
        for &i in &order {
            let id = period(i);
            if mark[i].is_some() || already.contains(&id) {
                continue;
            }
            if newly.contains(&id) {
                mark[i] = Some(false);
            } else {
                if newly.len() >= count {
                    break;
                }
                newly.insert(id);
                mark[i] = Some(true);
            }
        }
    }
    mark.into_iter().map(|m| m == Some(true)).collect()
}

#[cfg(test)]
mod tests {
    use super::{prune_keep, render_notes};

    const DAY: i64 = 86_400;

    #[test]
    fn keep_last_keeps_the_newest() {
        let ctimes = [100, 300, 200, 400];
        assert_eq!(
            prune_keep(&ctimes, &[("keep-last", 2)]),
            vec![false, true, false, true]
        );
    }

    #[test]
    fn keep_daily_keeps_the_newest_of_each_day_after_keep_last() {
        // Noon on three days (UTC noon stays within the same local day for any zone within +-11h),
        // two backups on the middle day.
        let base = 20_000 * DAY + 12 * 3600;
        let ctimes = [base, base + DAY, base + DAY + 60, base + 2 * DAY];
        // keep-last=1 keeps the newest; keep-daily=2 then keeps the newest of the two older days.
        let kept = prune_keep(&ctimes, &[("keep-last", 1), ("keep-daily", 2)]);
        assert_eq!(kept, vec![true, false, true, true]);
        assert_eq!(
            prune_keep(&ctimes, &[("keep-daily", 1)]),
            vec![false, false, false, true]
        );
    }

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
