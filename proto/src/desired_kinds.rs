//! A guest whose `kind` this version does not know (a newer hub's, or a hostile one's
//! `"kind": "bhyve"`): that one guest is refused, every other guest's desired state applies.
//!
//! [`crate::desired::GuestKind`] has no catch-all, so a document naming an unknown kind does
//! not decode as a [`DesiredState`]; the whole generation would be refused and every guest
//! held to the previous one. [`parse`] takes each guest with an unknown kind out of the
//! document before decoding it and names it in a [`Refused`] (`guest <hostname> kind`): the
//! guest is never created, changed or destroyed (a guest left out of desired state is reported
//! `orphaned`, never destroyed), and while the refusal holds the generation is not reported
//! applied (decision 0065).
//!
//! Bounded like every refusal: at most [`MAX_REFUSED`] are named (every unknown guest is taken
//! out all the same), a name is the guest's hostname only when it is a valid one (else its
//! `guest_id`, else its place in the list), and the kind is quoted escaped and cut to
//! [`MAX_KIND_SHOWN`] bytes.

use serde_json::Value;
use uuid::Uuid;

use crate::desired::{DesiredState, GuestKind};
use crate::refused::{MAX_NAME, MAX_REFUSED, Refused, RefusedKind};

/// Most bytes of an unknown kind a refusal quotes.
pub const MAX_KIND_SHOWN: usize = 32;

/// A desired-state document decoded with its unknown-kind guests taken out.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The document, less the refused guests.
    pub state: DesiredState,
    /// One refusal per guest taken out (at most [`MAX_REFUSED`]), in document order.
    pub refused: Vec<Refused>,
}

/// Decodes `document`, refusing each guest whose `kind` is not one this version knows.
/// The rest of the document decodes as it would without them (an error is the document's own).
pub fn parse(mut document: Value) -> Result<Parsed, serde_json::Error> {
    let refused = take_unknown(&mut document);
    let state = serde_json::from_value::<DesiredState>(document)?;
    Ok(Parsed { state, refused })
}

/// Whether `kind` (a guest's `kind` member, absent when `None`) names a kind this version
/// knows: absent (a container), `"lxc"` or `"qemu"`.
fn known(kind: Option<&Value>) -> bool {
    match kind {
        None => true,
        Some(Value::String(k)) => [GuestKind::Lxc, GuestKind::Qemu]
            .iter()
            .any(|known| known.as_str() == k),
        Some(_) => false,
    }
}

/// Takes every guest with an unknown kind out of `document["guests"]`; returns their
/// refusals. A document whose `guests` is not a list is left as it is (decoding refuses it).
fn take_unknown(document: &mut Value) -> Vec<Refused> {
    let Some(guests) = document.get_mut("guests").and_then(Value::as_array_mut) else {
        return Vec::new();
    };
    let mut refused = Vec::new();
    let mut index = 0usize;
    guests.retain(|guest| {
        let at = index;
        index += 1;
        if known(guest.get("kind")) {
            return true;
        }
        if refused.len() < MAX_REFUSED {
            refused.push(refusal(at, guest));
        }
        false
    });
    refused
}

fn refusal(at: usize, guest: &Value) -> Refused {
    let guest_id = guest
        .get("guest_id")
        .and_then(Value::as_str)
        .and_then(|s| Uuid::parse_str(s).ok());
    let hostname = guest
        .get("hostname")
        .and_then(Value::as_str)
        .filter(|h| plain_hostname(h));
    let name = match (hostname, guest_id) {
        (Some(h), _) => h.to_owned(),
        (None, Some(id)) => id.to_string(),
        (None, None) => format!("guests[{at}]"),
    };
    let kind = match guest.get("kind") {
        Some(Value::String(k)) => k.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    Refused {
        kind: RefusedKind::GuestField,
        name,
        guest_id,
        field: Some("kind".to_owned()),
        reason: format!(
            "the kind \"{}\" is not one this host knows ({}, {}): the guest is never created, \
             changed or destroyed",
            crate::inert::escape(cut(&kind, MAX_KIND_SHOWN)),
            GuestKind::Lxc,
            GuestKind::Qemu,
        ),
    }
}

/// Whether `h` is a hostname a refusal may name as it is (the shape `GuestSpec` requires).
fn plain_hostname(h: &str) -> bool {
    (1..=63.min(MAX_NAME)).contains(&h.len())
        && h.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
#[path = "desired_kinds_tests.rs"]
mod tests;
