//! The sheet's layout: what goes where on the one A4 page, top to bottom.

use zeroize::Zeroizing;

use super::pen::{Pen, Style, prose, set_lines};
use super::{SheetContent, WORD_COUNT};

const LEFT: f32 = 40.0;
const TOP: f32 = 30.0;

/// The right margin's edge, in the pen's coordinates.
fn right(pen: &Pen<'_, '_>) -> f32 {
    pen.page_width() - 40.0
}

/// The width between the margins.
fn span(pen: &Pen<'_, '_>) -> f32 {
    right(pen) - LEFT
}

/// Where the footer's rule is; the content must end above it.
pub(super) fn footer_top(pen: &Pen<'_, '_>) -> f32 {
    pen.page_height() - 30.0
}

const BODY: f32 = 7.6;
const LEADING: f32 = 9.3;
const SMALL: f32 = 7.0;
const SMALL_LEADING: f32 = 8.2;
const HEADING: f32 = 9.5;
const LABEL_WIDTH: f32 = 92.0;
/// A line to write on by hand where a field was not given.
const BLANK: &str = "______________________________";

/// The short key ID PBS shows: the fingerprint's first 8 bytes.
fn short_id(fingerprint: &str) -> &str {
    fingerprint.get(..23).unwrap_or(fingerprint)
}

/// The hoster as the sheet's prose names it; the name itself is in the header, under
/// "Who to call" and in the first step.
const HOSTER: &str = "your hosting provider";

/// Draws the page; `content` has been validated. Returns the `y` where the content ends.
pub(super) fn draw(pen: &mut Pen<'_, '_>, content: &SheetContent<'_>) -> f32 {
    let mut y = header(pen, content);
    y = details(pen, content, y);
    if content.rotated && content.older_keys.is_empty() {
        y = boxed_note(
            pen,
            y,
            "This code replaces an earlier recovery code for this host. Use this sheet from now on.",
        );
    }
    y = words(pen, content, y);
    y = explanation(pen, y);
    y = day_of_loss(pen, content, y);
    y = warning(pen, y);
    y = extras(pen, content, y);
    y = handover(pen, y);
    footer(pen, content);
    y
}

fn header(pen: &mut Pen<'_, '_>, content: &SheetContent<'_>) -> f32 {
    let title = "Recovery code";
    pen.text(Style::Bold, 21.0, LEFT, TOP + 18.0, title);
    pen.gray_text(
        Style::Regular,
        BODY,
        LEFT,
        TOP + 31.0,
        60,
        "for the offsite backups of one server. CONFIDENTIAL: keep it offline.",
    );
    pen.gray_text(
        Style::Regular,
        BODY,
        LEFT,
        TOP + 41.0,
        60,
        "The hub keeps only the locked key, never these words.",
    );
    // The hoster's name and contact, right-aligned, in place of any product branding.
    let name = content.operator.unwrap_or("");
    let contact = content.operator_contact.unwrap_or("");
    let right_width = 250.0;
    let name_lines = pen.fonts().wrap(Style::Bold, 11.0, right_width, name);
    let mut line_y = TOP + 8.0;
    for line in name_lines.iter().take(2) {
        let w = pen.fonts().width(Style::Bold, 11.0, line);
        pen.text(Style::Bold, 11.0, right(pen) - w, line_y, line);
        line_y += 13.0;
    }
    for line in pen
        .fonts()
        .wrap(Style::Regular, BODY, right_width, contact)
        .iter()
        .take(2)
    {
        let w = pen.fonts().width(Style::Regular, BODY, line);
        pen.text(Style::Regular, BODY, right(pen) - w, line_y, line);
        line_y += LEADING;
    }
    let bottom = (TOP + 46.0).max(line_y - 6.0);
    pen.rule(LEFT, right(pen), bottom, 2.2, 0);
    bottom + 8.0
}

/// A label and its value (wrapped); returns the `y` below it.
fn row(pen: &mut Pen<'_, '_>, y: f32, label: &str, style: Style, size: f32, value: &str) -> f32 {
    pen.gray_text(Style::Regular, BODY, LEFT, y + LEADING - 2.0, 80, label);
    let leading = size * 1.27;
    let end = pen.paragraph(
        style,
        size,
        if size < BODY {
            leading
        } else {
            leading.max(LEADING)
        },
        LEFT + LABEL_WIDTH,
        y,
        span(pen) - LABEL_WIDTH,
        value,
    );
    end + 1.5
}

fn details(pen: &mut Pen<'_, '_>, content: &SheetContent<'_>, y: f32) -> f32 {
    let mut y = y;
    y = row(
        pen,
        y,
        "Customer",
        Style::Bold,
        8.5,
        content.customer.unwrap_or(BLANK),
    );
    y = row(pen, y, "Server (host)", Style::Bold, 8.5, content.hostname);
    y = row(
        pen,
        y,
        "Host ID",
        Style::Mono,
        BODY,
        &content.host_id.to_string(),
    );
    let who = match (content.operator, content.operator_contact) {
        (Some(name), Some(contact)) => format!("{name}, {contact}"),
        (Some(name), None) => format!("{name}, {BLANK}"),
        (None, Some(contact)) => format!("{BLANK}, {contact}"),
        (None, None) => format!("{BLANK} phone / e-mail: {BLANK}"),
    };
    y = row(pen, y, "Who to call", Style::Regular, BODY, &who);
    y = row(
        pen,
        y,
        "Created",
        Style::Regular,
        BODY,
        &content.created_at.strftime("%Y-%m-%d (UTC)").to_string(),
    );
    let fingerprint = content.key_fingerprint;
    let note = if content.older_keys.is_empty() {
        "Identifies the backup key this code unlocks. It is not secret."
    } else {
        "Identifies the key of the backups made from the date above on. It is not secret."
    };
    y = row(pen, y, "Key fingerprint", Style::Mono, SMALL, fingerprint);
    y = pen.paragraph(
        Style::Regular,
        SMALL,
        SMALL_LEADING,
        LEFT + LABEL_WIDTH,
        y - 1.5,
        span(pen) - LABEL_WIDTH,
        note,
    ) + 1.5;
    if let Some(newest) = content.older_keys.first() {
        let list = content
            .older_keys
            .iter()
            .map(|key| {
                format!(
                    "{} ({})",
                    short_id(&key.fingerprint),
                    key.retired_at.strftime("%Y-%m-%d")
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        y = row(pen, y, "Older keys, retired", Style::Mono, 6.0, &list);
        y = pen.paragraph(
            Style::Bold,
            SMALL,
            SMALL_LEADING,
            LEFT + LABEL_WIDTH,
            y - 1.5,
            span(pen) - LABEL_WIDTH,
            &format!(
                "This code replaces an earlier recovery code for this host: use this sheet from \
                 now on. It also unlocks these keys, each used before its date. The earlier code \
                 still unlocks only the keys up to {} (backups made before {}), never the key \
                 above.",
                short_id(&newest.fingerprint),
                newest.retired_at.strftime("%Y-%m-%d")
            ),
        ) + 1.5;
    }
    y + 4.0
}

fn boxed_note(pen: &mut Pen<'_, '_>, y: f32, text: &str) -> f32 {
    let lines = pen
        .fonts()
        .wrap(Style::Bold, BODY, span(pen) - 14.0, text)
        .len();
    #[allow(clippy::cast_precision_loss)]
    let height = lines as f32 * LEADING + 6.0;
    pen.rect(LEFT, y, span(pen), height, 1.0, Some(232));
    pen.paragraph(
        Style::Bold,
        BODY,
        LEADING,
        LEFT + 7.0,
        y + 3.0,
        span(pen) - 14.0,
        text,
    );
    y + height + 4.0
}

fn words(pen: &mut Pen<'_, '_>, content: &SheetContent<'_>, y: f32) -> f32 {
    const ROWS: usize = WORD_COUNT / 3;
    const CELL_HEIGHT: f32 = 20.0;
    const GAP: f32 = 5.0;
    let inner = LEFT + 8.0;
    let inner_width = span(pen) - 16.0;
    const NOTE: &str = "The words are from the standard BIP39 English list; the first four \
                        letters of a word are enough to tell it from every other word.";
    let note = pen.fonts().wrap(Style::Regular, SMALL, inner_width, NOTE);
    #[allow(clippy::cast_precision_loss)]
    let note_height = note.len().saturating_sub(1) as f32 * SMALL_LEADING;
    #[allow(clippy::cast_precision_loss)]
    let height = 20.0 + ROWS as f32 * (CELL_HEIGHT + GAP) + 14.0 + note_height;
    pen.rect(LEFT, y, span(pen), height, 1.4, None);
    pen.text(
        Style::Bold,
        HEADING,
        inner,
        y + 14.0,
        "The 12 recovery words, in this order",
    );
    let cell_width = (inner_width - 2.0 * GAP) / 3.0;
    // As large as the widest word lets every word fit its cell, at most 15 points.
    let widest = content
        .words
        .iter()
        .map(|word| pen.fonts().width(Style::Bold, 1.0, word))
        .fold(0.0_f32, f32::max);
    let word_size = if widest > 0.0 {
        15.0_f32.min((cell_width - 36.0) / widest)
    } else {
        15.0
    };
    for (index, word) in content.words.iter().enumerate() {
        // Down the columns: 1–4, 5–8, 9–12, as they are read out.
        let column = index / ROWS;
        let row = index % ROWS;
        #[allow(clippy::cast_precision_loss)]
        let x = inner + column as f32 * (cell_width + GAP);
        #[allow(clippy::cast_precision_loss)]
        let top = y + 20.0 + row as f32 * (CELL_HEIGHT + GAP);
        pen.rect(x, top, cell_width, CELL_HEIGHT, 0.6, None);
        let number = Zeroizing::new(format!("{}", index + 1));
        let number_width = pen.fonts().width(Style::Regular, 9.0, &number);
        pen.gray_text(
            Style::Regular,
            9.0,
            x + 22.0 - number_width,
            top + 14.0,
            90,
            &number,
        );
        pen.text(
            Style::Bold,
            word_size,
            x + 30.0,
            top + (CELL_HEIGHT + word_size * 0.7) / 2.0,
            word,
        );
    }
    let mut baseline = y + height - 5.0 - note_height;
    for line in note {
        pen.gray_text(Style::Regular, SMALL, inner, baseline, 60, line);
        baseline += SMALL_LEADING;
    }
    y + height + 5.0
}

/// A titled section in one column; returns the `y` below it.
fn section(pen: &mut Pen<'_, '_>, x: f32, y: f32, width: f32, title: &str, text: &str) -> f32 {
    pen.text(Style::Bold, HEADING, x, y + HEADING, title);
    prose(
        pen,
        (Style::Regular, BODY),
        LEADING,
        x,
        y + HEADING + 2.0,
        width,
        text,
    )
}

fn explanation(pen: &mut Pen<'_, '_>, y: f32) -> f32 {
    let operator = HOSTER;
    let half = (span(pen) - 14.0) / 2.0;
    let left = section(
        pen,
        LEFT,
        y,
        half,
        "What this code is for",
        &format!(
            "The offsite backups of this server are encrypted with a key that stays on the \
             server. The Bosun hub {operator} runs keeps a copy of that key, locked with these \
             words; it never holds the words. If the server is lost, the words unlock that copy \
             on a replacement server, and with it the offsite backups. This sheet is the only \
             record of the words: neither the hub nor {operator} stores them."
        ),
    );
    let right = section(
        pen,
        LEFT + half + 14.0,
        y,
        half,
        "Keeping it safe",
        "\u{2022} Store it offline, on paper: never in e-mail, chat, cloud storage or a photo.\n\
         \u{2022} Keep two copies in different places, for example a safe at the office and a \
         safe elsewhere, and note the places in the handover box below.\n\
         \u{2022} Type the words into nothing but the recovery prompt on the replacement server.",
    );
    left.max(right) + 4.0
}

fn day_of_loss(pen: &mut Pen<'_, '_>, content: &SheetContent<'_>, y: f32) -> f32 {
    let call = match content.operator {
        Some(operator) => format!("Call {operator} (see \u{201c}Who to call\u{201d} above)"),
        None => format!("Call {HOSTER} (see \u{201c}Who to call\u{201d} above)"),
    };
    let steps = format!(
        "1. {call} and say that this server is lost. Fetch one copy of this sheet; do not \
         send the words by e-mail, chat or phone.\n\
         2. Your hosting provider sets up a replacement server and connects it to the hub in \
         place of this one.\n\
         3. At the replacement server, run this command and type the 12 words when asked (the \
         screen does not show them):\n\
         $ bosun-agentctl escrow recover\n\
         Check that the key fingerprint it prints matches the one above.\n\
         4. The server then restores its containers from the newest offsite backups by itself. \
         Once it runs, make a new code there:\n\
         $ bosun-agentctl escrow rotate\n\
         Hand over the new sheet, and keep this one as safe as before: it still unlocks the \
         older backups."
    );
    let end = section(
        pen,
        LEFT,
        y,
        span(pen),
        "On the day the server is lost",
        &steps,
    );
    end + 4.0
}

fn warning(pen: &mut Pen<'_, '_>, y: f32) -> f32 {
    let operator = HOSTER;
    let first = format!(
        "If both this code and the server are lost, the offsite backups can be read by nobody: \
         not {operator}, not the hub. There is no reset and no back door."
    );
    let second = "Making a new code (rotating it) also makes a new key for later backups. It \
                  does not re-encrypt existing backups: an old sheet still unlocks those. Keep \
                  old sheets as safe as this one, or destroy them.";
    let width = span(pen) - 16.0;
    let fonts = pen.fonts();
    #[allow(clippy::cast_precision_loss)]
    let height = (fonts.wrap(Style::Bold, BODY, width, &first).len()
        + fonts.wrap(Style::Regular, BODY, width, second).len()) as f32
        * LEADING
        + 8.0;
    pen.rect(LEFT, y, span(pen), height, 0.0, Some(236));
    pen.rect(LEFT, y, 3.5, height, 0.0, Some(0));
    let mid = pen.paragraph(
        Style::Bold,
        BODY,
        LEADING,
        LEFT + 10.0,
        y + 4.0,
        width,
        &first,
    );
    pen.paragraph(
        Style::Regular,
        BODY,
        LEADING,
        LEFT + 10.0,
        mid,
        width,
        second,
    );
    y + height + 4.0
}

fn extras(pen: &mut Pen<'_, '_>, content: &SheetContent<'_>, y: f32) -> f32 {
    let both = content.wrapped_blob.is_some() && content.paper_key.is_some();
    // Side by side, the blob takes the wider share (300 of 515 points at scale 1).
    let blob_width = if both { span(pen) * 0.58 } else { span(pen) };
    let mut bottom = y;
    if let Some(blob) = content.wrapped_blob {
        bottom = bottom.max(extra(
            pen,
            LEFT,
            y,
            blob_width,
            "Locked key (optional extra)",
            "The backup key locked with the 12 words: the copy the hub keeps. With this block \
             the code works even if the hub is gone; it is useless without the 12 words. Type \
             it into a file and run:\n\
             $ bosun-agentctl escrow recover --blob FILE",
            blob.trim_end(),
            5.9,
            false,
        ));
    }
    if let Some(key) = content.paper_key {
        let (x, width) = if both {
            (LEFT + blob_width + 8.0, span(pen) - blob_width - 8.0)
        } else {
            (LEFT, span(pen))
        };
        let scope = if content.older_keys.is_empty() {
            "every backup"
        } else {
            "every backup made with it"
        };
        bottom = bottom.max(extra(
            pen,
            x,
            y,
            width,
            "Paper key (optional extra)",
            &format!(
                "This is the key itself: anyone holding this paper can read {scope}, with no \
                 code needed, and it cannot be revoked. Keep it in a safe. To use it, run this \
                 and type the 14 groups (a typo is caught by its checksum):\n\
                 $ bosun-agentctl escrow recover --paper-key"
            ),
            key,
            10.0,
            true,
        ));
    }
    if bottom > y { bottom + 4.0 } else { y }
}

/// One dashed-frame extra: a title, a caveat and a block of monospaced text.
#[allow(clippy::too_many_arguments)]
fn extra(
    pen: &mut Pen<'_, '_>,
    x: f32,
    y: f32,
    width: f32,
    title: &str,
    caveat: &str,
    block: &str,
    block_size: f32,
    danger: bool,
) -> f32 {
    let inner = width - 12.0;
    let fonts = pen.fonts();
    let caveat_lines = set_lines(fonts, (Style::Bold, SMALL), inner, caveat).len();
    let block_leading = block_size * 1.1;
    let block_lines = fonts.wrap(Style::Mono, block_size, inner, block).len();
    #[allow(clippy::cast_precision_loss)]
    let height =
        15.0 + caveat_lines as f32 * SMALL_LEADING + 3.0 + block_lines as f32 * block_leading + 5.0;
    pen.rect(x, y, width, height, if danger { 1.8 } else { 0.6 }, None);
    pen.text(Style::Bold, HEADING, x + 6.0, y + 12.0, title);
    let after = prose(
        pen,
        (Style::Bold, SMALL),
        SMALL_LEADING,
        x + 6.0,
        y + 14.0,
        inner,
        caveat,
    );
    pen.paragraph(
        Style::Mono,
        block_size,
        block_leading,
        x + 6.0,
        after + 3.0,
        inner,
        block,
    );
    y + height
}

fn handover(pen: &mut Pen<'_, '_>, y: f32) -> f32 {
    let height = 52.0;
    pen.rect(LEFT, y, span(pen), height, 1.0, None);
    pen.text(
        Style::Bold,
        HEADING,
        LEFT + 8.0,
        y + 13.0,
        "Handover (filled in by hand)",
    );
    let half = (span(pen) - 30.0) / 2.0;
    let second = right(pen) - 8.0 - half;
    let mut line_y = y + 26.0;
    for (x, label) in [
        (LEFT + 8.0, "Copy 1 is kept at:"),
        (second, "Copy 2 is kept at:"),
    ] {
        pen.text(Style::Regular, BODY, x, line_y, label);
        let w = pen.fonts().width(Style::Regular, BODY, label);
        pen.rule(x + w + 4.0, x + half, line_y + 1.5, 0.5, 100);
    }
    line_y += 14.0;
    let label = "Handed over on (date):";
    pen.text(Style::Regular, BODY, LEFT + 8.0, line_y, label);
    let w = pen.fonts().width(Style::Regular, BODY, label);
    pen.rule(
        LEFT + 8.0 + w + 4.0,
        LEFT + 8.0 + half,
        line_y + 1.5,
        0.5,
        100,
    );
    pen.rule(second, right(pen) - 8.0, line_y + 1.5, 0.5, 100);
    pen.gray_text(
        Style::Regular,
        SMALL,
        second,
        line_y + 9.0,
        60,
        "Signatures: the hosting provider's and the customer's",
    );
    y + height
}

fn footer(pen: &mut Pen<'_, '_>, content: &SheetContent<'_>) {
    let footer_top = footer_top(pen);
    pen.rule(LEFT, right(pen), footer_top, 0.6, 140);
    let by = content
        .operator
        .map(|name| format!(" Made by {name}."))
        .unwrap_or_default();
    let text = format!(
        "Recovery code for server {} ({}), created {}.{by}",
        content.hostname,
        content.host_id,
        content.created_at.strftime("%Y-%m-%d")
    );
    let line = pen
        .fonts()
        .wrap(Style::Regular, SMALL, span(pen) - 60.0, &text)
        .first()
        .map(|l| (*l).to_owned())
        .unwrap_or_default();
    pen.gray_text(Style::Regular, SMALL, LEFT, footer_top + 10.0, 80, &line);
    let page = "Page 1 of 1";
    let w = pen.fonts().width(Style::Regular, SMALL, page);
    pen.gray_text(
        Style::Regular,
        SMALL,
        right(pen) - w,
        footer_top + 10.0,
        80,
        page,
    );
}
