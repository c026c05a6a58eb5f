//! What the dashboard's fleet page shows of a host: the state in its row's State column, read
//! from the HTML as a person reads it. The demo narrates it after the operator's triage and
//! from the saved `fleet.html`; the demo's test holds the saved page to that narration.

use uuid::Uuid;

/// The state the fleet page `html` shows for `host_id` (`ok`, `warning`, `critical`, …), or
/// `None` when the page has no row for the host or the row no State cell.
pub fn host_state(html: &str, host_id: Uuid) -> Option<String> {
    let row = &html[html.find(&format!("data-host=\"{host_id}\""))?..];
    let row = &row[..row.find("</tr>").unwrap_or(row.len())];
    let cell = &row[row.find("data-label=\"State\"")?..];
    let cell = &cell[cell.find('>')? + 1..];
    let cell = &cell[..cell.find("</td>").unwrap_or(cell.len())];
    let mut text = String::new();
    let mut in_tag = false;
    for c in cell.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            _ if !in_tag => text.push(c),
            _ => {}
        }
    }
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_is_read_from_the_hosts_own_row() {
        let (one, two) = (Uuid::new_v4(), Uuid::new_v4());
        let page = format!(
            r#"<table><tr data-host="{one}"><td data-label="Host">a</td><td data-label="State"><span class="badge ok">ok</span></td></tr>
<tr data-host="{two}"><td data-label="Host">b</td><td data-label="State"><span class="badge danger">critical</span></td><td data-label="Open alerts">2</td></tr></table>"#
        );
        assert_eq!(host_state(&page, one).as_deref(), Some("ok"));
        assert_eq!(host_state(&page, two).as_deref(), Some("critical"));
        assert_eq!(host_state(&page, Uuid::new_v4()), None);
        let no_cell =
            format!(r#"<tr data-host="{one}"><td>a</td></tr><td data-label="State">x</td>"#);
        assert_eq!(
            host_state(&no_cell, one),
            None,
            "another row's cell is not read"
        );
    }
}
