//! The sheet as HTML: one self-contained A4 page with its print CSS, every piece of
//! content escaped.

use std::fmt::Write as _;

use super::SheetContent;

/// Appends `text` to `out` with `&`, `<`, `>`, `"` and `'` escaped.
fn push_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

const STYLE: &str = r#"
@page { size: A4; margin: 12mm 15mm 11mm 15mm; }
* { box-sizing: border-box; }
html, body { margin: 0; padding: 0; }
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, Helvetica, sans-serif;
  font-size: 8.6pt; line-height: 1.32; color: #111; padding-bottom: 14pt;
  -webkit-print-color-adjust: exact; print-color-adjust: exact; }
.mono { font-family: "DejaVu Sans Mono", "Liberation Mono", "Courier New", monospace; }
header { display: flex; justify-content: space-between; align-items: flex-end; gap: 12pt;
  border-bottom: 2.5pt solid #111; padding-bottom: 4pt; margin-bottom: 6pt; }
h1 { font-size: 21pt; line-height: 1.1; margin: 0; }
header .tag { font-size: 8pt; color: #333; text-align: right; }
header .tag b { letter-spacing: 1pt; }
h2 { font-size: 10pt; margin: 0 0 2pt 0; }
p { margin: 0 0 2.5pt 0; }
p:last-child { margin-bottom: 0; }
table.meta { border-collapse: collapse; width: 100%; margin-bottom: 6pt; }
table.meta th { text-align: left; font-weight: normal; color: #555; width: 27mm;
  padding: 1pt 6pt 1pt 0; vertical-align: top; }
table.meta td { padding: 1pt 0; overflow-wrap: anywhere; vertical-align: top; }
table.meta td.host { font-weight: bold; font-size: 10pt; line-height: 1.2; }
table.meta .note { color: #555; font-size: 7.5pt; }
table.meta .older { font-size: 7pt; line-height: 1.2; }
.notice { border: 1.2pt solid #111; background: #e8e8e8; padding: 3pt 7pt;
  margin-bottom: 6pt; font-weight: bold; }
.code { border: 1.5pt solid #111; border-radius: 4pt; padding: 5pt 8pt; margin-bottom: 6pt; }
.words { display: grid; grid-template-columns: repeat(3, 1fr); gap: 4pt 7pt;
  margin: 3pt 0 4pt 0; padding: 0; list-style: none; }
.words li { display: flex; align-items: baseline; margin: 0; border: 0.8pt solid #888;
  border-radius: 3pt; padding: 2.5pt 6pt; }
.words .n { width: 16pt; text-align: right; margin-right: 8pt; color: #555; font-size: 9.5pt; }
.words .w { font-size: 20pt; line-height: 1.15; font-weight: bold; letter-spacing: 0.4pt; }
.code .hint { color: #444; font-size: 7.5pt; }
.cols { display: flex; gap: 12pt; margin-bottom: 6pt; }
.cols section { flex: 1 1 0; }
ul { margin: 0; padding-left: 11pt; }
li { margin-bottom: 1pt; }
.warning { border-left: 4pt solid #111; background: #eee; padding: 4pt 8pt;
  margin-bottom: 6pt; }
.extras { display: flex; gap: 7pt; align-items: stretch; margin-bottom: 6pt; }
.extra { border: 0.8pt dashed #444; padding: 4pt 7pt; flex: 1 1 0; min-width: 0; }
.extra.blob { flex: 0 0 102mm; }
.extra.blob:only-child { flex: 1 1 0; }
.extra.danger { border: 2pt solid #111; }
.extra h2 .opt { font-weight: normal; color: #555; font-size: 8pt; }
.extra .caveat { font-weight: bold; }
pre.block { font-size: 7pt; line-height: 1.18; margin: 3pt 0 0 0;
  white-space: pre-wrap; overflow-wrap: anywhere; word-break: break-all; }
footer { position: fixed; left: 0; right: 0; bottom: 0; border-top: 0.8pt solid #888;
  padding-top: 2pt; color: #555; font-size: 7pt; line-height: 1.2;
  display: flex; justify-content: space-between; gap: 12pt; }
"#;

/// The short key ID PBS shows: the fingerprint's first 8 bytes.
fn short_id(fingerprint: &str) -> &str {
    fingerprint.get(..23).unwrap_or(fingerprint)
}

/// Writes the page into `out`; `content` has been validated.
pub(super) fn write_page(out: &mut String, content: &SheetContent<'_>) {
    let date = content.created_at.strftime("%Y-%m-%d");
    let fingerprint = content.key_fingerprint;

    out.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" \
         content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <title>Bosun recovery code</title>\n<style>",
    );
    out.push_str(STYLE);
    out.push_str(
        "</style>\n</head>\n<body>\n\
         <header><h1>Bosun recovery code</h1>\
         <div class=\"tag\"><b>CONFIDENTIAL</b><br>Keep offline. Bosun keeps no copy.</div>\
         </header>\n",
    );

    out.push_str("<table class=\"meta\">\n<tr><th>Host</th><td class=\"host\">");
    push_escaped(out, content.hostname);
    let _ = write!(
        out,
        "</td></tr>\n<tr><th>Host ID</th><td class=\"mono\">{}</td></tr>\n\
         <tr><th>Created</th><td>{date} (UTC)</td></tr>\n",
        content.host_id
    );
    // Two lines of 16 bytes; the first keeps its trailing ':' so the halves join back
    // into the fingerprint when whitespace is removed.
    let _ = writeln!(
        out,
        "<tr><th>Key fingerprint</th><td><span class=\"mono\">{}<br>{}</span><br>\
         <span class=\"note\">{}. It is not secret.</span></td></tr>",
        &fingerprint[..48],
        &fingerprint[48..],
        if content.older_keys.is_empty() {
            "Identifies the backup key this code unlocks"
        } else {
            "Identifies the key of the backups made from the date above on"
        }
    );
    // After a rotation the older keys' row says what the notice would, in less room: the
    // page holds the extras below only if the top stays as short as before.
    if let Some(newest) = content.older_keys.first() {
        out.push_str("<tr><th>Older keys, retired on</th><td><span class=\"mono older\">");
        for (index, key) in content.older_keys.iter().enumerate() {
            if index > 0 {
                out.push_str(", ");
            }
            let _ = write!(
                out,
                "{}&nbsp;({})",
                short_id(&key.fingerprint),
                key.retired_at.strftime("%Y-%m-%d")
            );
        }
        let _ = writeln!(
            out,
            "</span><br><span class=\"note\"><b>This code replaces an earlier recovery code \
             for this host: use this sheet from now on.</b> It also unlocks these keys, each \
             used before its date. The earlier code still unlocks only the keys up to {} \
             (backups made before {}), never the key above.</span></td></tr>",
            short_id(&newest.fingerprint),
            newest.retired_at.strftime("%Y-%m-%d")
        );
    }
    out.push_str("</table>\n");

    if content.rotated && content.older_keys.is_empty() {
        out.push_str(
            "<div class=\"notice\">This code replaces an earlier recovery code for this \
             host. Use this sheet from now on.</div>\n",
        );
    }

    out.push_str(
        "<section class=\"code\"><h2>Your 12 recovery words, in this order</h2>\n\
         <ol class=\"words mono\">\n",
    );
    for (index, word) in content.words.iter().enumerate() {
        let _ = write!(
            out,
            "<li><span class=\"n\">{}</span><span class=\"w\">",
            index + 1
        );
        push_escaped(out, word);
        out.push_str("</span></li>\n");
    }
    out.push_str(
        "</ol>\n<p class=\"hint\">The words are from the standard BIP39 English list; the \
         first four letters of a word are enough to tell it from every other word.</p>\n\
         </section>\n",
    );

    out.push_str(
        "<div class=\"cols\">\n<section><h2>What this code is for</h2>\n\
         <p>The offsite (PBS) backups of this host are encrypted with a key that stays on \
         the host. Bosun keeps a copy of that key, locked with this code. If the host is \
         lost, this code unlocks that copy on a replacement host, and with it the offsite \
         backups.</p>\n\
         <p>Bosun and your operator never store this code: this sheet is the only record \
         of it.</p>\n</section>\n\
         <section><h2>What to do with it</h2>\n<ul>\n\
         <li>Store it offline, on paper: never in e-mail, chat, cloud storage or a \
         photo.</li>\n\
         <li>Make two copies and keep them in different places, for example in a safe at \
         the office and in a safe elsewhere.</li>\n\
         <li>Never type the words into anything but the Bosun recovery prompt on the \
         host.</li>\n\
         </ul>\n</section>\n</div>\n",
    );

    out.push_str(
        "<div class=\"warning\">\n\
         <p><b>If both this code and the host are lost, the offsite backups can be read by \
         nobody: not your operator, not Bosun.</b> There is no reset and no back door.</p>\n\
         <p>Making a new code (rotating it) also makes a new key for later backups. It does \
         not re-encrypt existing backups: an old sheet with the old locked copy still unlocks \
         those. Keep old sheets as safe as this one, or destroy them.</p>\n</div>\n",
    );

    if content.wrapped_blob.is_some() || content.paper_key.is_some() {
        out.push_str("<div class=\"extras\">\n");
    }
    if let Some(blob) = content.wrapped_blob {
        out.push_str(
            "<section class=\"extra blob\"><h2>Locked key <span class=\"opt\">(optional \
             extra)</span></h2>\n\
             <p>The backup key locked with the 12 words: the copy Bosun keeps. \
             <span class=\"caveat\">With this block the code works even if the hub is \
             gone; it is useless without the 12 words.</span></p>\n\
             <pre class=\"block mono\">",
        );
        push_escaped(out, blob.trim_end());
        out.push_str("</pre>\n</section>\n");
    }
    if let Some(key) = content.paper_key {
        out.push_str(
            "<section class=\"extra danger\"><h2>Paper key <span class=\"opt\">(optional \
             extra)</span></h2>\n\
             <p class=\"caveat\">This is the key itself: anyone holding this paper can read \
             every backup",
        );
        // After a rotation it is the current key only: older backups need the words.
        if !content.older_keys.is_empty() {
            out.push_str(" made with it");
        }
        out.push_str(
            ", with no code needed, and it cannot be revoked. Keep it in a safe.</p>\n\
             <pre class=\"block mono\">",
        );
        push_escaped(out, key.trim_end());
        out.push_str("</pre>\n</section>\n");
    }
    if content.wrapped_blob.is_some() || content.paper_key.is_some() {
        out.push_str("</div>\n");
    }

    let _ = write!(
        out,
        "<footer><span>Bosun recovery code for host {}, created {date}.</span>\
         <span>Page 1 of 1</span></footer>\n</body>\n</html>\n",
        content.host_id
    );
}
