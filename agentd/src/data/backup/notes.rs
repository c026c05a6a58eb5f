//! What every backup's notes say: the guest it is of, and once the backup is proven, the
//! binding that ties a PBS archive to this host's key ([`super::proof`]). A box that took
//! over a lost host finds the lost guests' backups by them (`crate::data::recovery::host_loss`).

use uuid::Uuid;

/// What a backup's notes start with; the guest id follows.
pub const NOTES_PREFIX: &str = "bosun-guest ";

/// The notes every backup of `guest_id` carries (vzdump's `notes-template`; no template
/// variables, so vzdump writes it as is).
pub fn backup_notes(guest_id: &str) -> String {
    format!("{NOTES_PREFIX}{guest_id}")
}

/// The guest a backup's notes name, if they are Bosun's (the first line:
/// `bosun-guest <guest id>`, then the binding once the backup is proven).
pub fn guest_of_notes(notes: &str) -> Option<Uuid> {
    let rest = notes.lines().next()?.trim().strip_prefix(NOTES_PREFIX)?;
    Uuid::parse_str(rest.split_whitespace().next()?).ok()
}

/// The guest and the binding a proven backup's notes carry
/// (`bosun-guest <guest id> <binding>`; see [`super::proof`]).
pub fn binding_of_notes(notes: &str) -> Option<(Uuid, String)> {
    let rest = notes.lines().next()?.trim().strip_prefix(NOTES_PREFIX)?;
    let mut words = rest.split_whitespace();
    let guest = Uuid::parse_str(words.next()?).ok()?;
    let binding = words.next()?;
    let hex = binding.len() == 64 && binding.bytes().all(|c| c.is_ascii_hexdigit());
    (hex && words.next().is_none()).then(|| (guest, binding.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_name_the_guest_and_nothing_else_counts() {
        let id = Uuid::new_v4();
        let notes = backup_notes(&id.to_string());
        assert_eq!(guest_of_notes(&notes), Some(id));
        assert_eq!(guest_of_notes(&format!("{notes}\nmore lines")), Some(id));
        let binding = "ab".repeat(32);
        let bound = format!("{notes} {binding}");
        assert_eq!(guest_of_notes(&bound), Some(id));
        assert_eq!(binding_of_notes(&bound), Some((id, binding)));
        assert_eq!(binding_of_notes(&notes), None);
        assert_eq!(binding_of_notes(&format!("{notes} xyz")), None);
        assert_eq!(binding_of_notes(&format!("{bound} extra")), None);
        assert_eq!(guest_of_notes("bosun-guest not-a-uuid"), None);
        assert_eq!(guest_of_notes(&id.to_string()), None);
        assert_eq!(guest_of_notes(""), None);
    }
}
