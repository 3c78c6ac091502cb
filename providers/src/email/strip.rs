//! The answer text of a mail: the quoted history and the signature cut off, so that the bot
//! reads what the person wrote this time.
//!
//! | cut at (and everything after) | example |
//! | --- | --- |
//! | an attribution line (possibly wrapped over two lines) | `On Mon, 1 Dec 2026 at 10:00, Ana <ana@example.com> wrote:`; `Am … schrieb …:`, `Le … a écrit :`, `El … escribió:` |
//! | a forwarded or Outlook header | `-----Original Message-----`; `From:` followed by `Sent:` and `To:` or `Subject:` lines |
//! | the signature delimiter (RFC 3676) | a line `-- ` |
//! | a mobile footer | `Sent from my iPhone`, `Get Outlook for iOS` |
//!
//! Lines starting with `>` (quoted, also inline between answers) are removed. The full body
//! stays in the mail (and Mailgun's own `stripped-text` is used when it comes). It does not
//! read HTML (the plain-text part, or the HTML converted to text by `mail-parser`, is given).

/// The person's new text of `body`.
pub(crate) fn answer_text(body: &str) -> String {
    let lines: Vec<&str> = body.lines().collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end_matches('\r');
        let next = lines.get(i + 1).map(|l| l.trim());
        if line == "-- " || line == "--" || is_footer(line) || is_attribution(line, next) {
            break;
        }
        if is_outlook_block(&lines[i..]) {
            break;
        }
        if !line.trim_start().starts_with('>') {
            kept.push(line);
        }
        i += 1;
    }
    let text = kept.join("\n");
    text.trim().to_owned()
}

fn is_footer(line: &str) -> bool {
    let l = line.trim();
    l.starts_with("Sent from my ") || l.starts_with("Get Outlook for ")
}

/// An attribution line: `On … wrote:` (the `wrote:` maybe on the next line) and its
/// translations.
fn is_attribution(line: &str, next: Option<&str>) -> bool {
    let l = line.trim();
    if l.contains("-----Original Message-----") || l.contains("----- Original Message -----") {
        return true;
    }
    // "On … wrote:", "Am … schrieb Ana <a@x>:", "Le … a écrit :", "El … escribió:".
    let ends = |s: &str| {
        let s = s.trim_end();
        s.ends_with(':')
            && ["wrote", "schrieb", "a écrit", "escribió", "escreveu"]
                .iter()
                .any(|verb| s.contains(verb))
    };
    let starts = ["On ", "Am ", "Le ", "El ", "Em "]
        .iter()
        .any(|p| l.starts_with(p));
    starts && (ends(l) || next.is_some_and(|n| ends(n) && !n.starts_with('>')))
}

/// An Outlook reply header: `From:` then, within the next four lines, `Sent:` (or `Date:`)
/// and `To:` or `Subject:`.
fn is_outlook_block(lines: &[&str]) -> bool {
    let first = lines.first().map_or("", |l| l.trim());
    if !first.starts_with("From:") {
        return false;
    }
    let after: Vec<&str> = lines.iter().skip(1).take(4).map(|l| l.trim()).collect();
    let has = |p: &str| after.iter().any(|l| l.starts_with(p));
    (has("Sent:") || has("Date:")) && (has("To:") || has("Subject:"))
}

#[cfg(test)]
mod tests {
    use super::answer_text;

    #[test]
    fn quotes_and_signatures_are_cut() {
        let gmail = "Two please.\r\n\r\nOn Mon, 1 Dec 2026 at 10:00, Shop <bot@shop.example>\r\nwrote:\r\n> How many?\r\n";
        assert_eq!(answer_text(gmail), "Two please.");
        let sig = "Yes\n\n-- \nAna\nCEO\n";
        assert_eq!(answer_text(sig), "Yes");
        let inline = "> How many?\nTwo\n> Colour?\nRed\n";
        assert_eq!(answer_text(inline), "Two\nRed");
        let outlook =
            "ok\n\nFrom: Shop <bot@shop.example>\nSent: Monday\nTo: Ana\nSubject: Re: x\n\nold";
        assert_eq!(answer_text(outlook), "ok");
        let german = "Ja\nAm 01.12.2026 um 10:00 schrieb Shop <bot@shop.example>:\n> Frage";
        assert_eq!(answer_text(german), "Ja");
        assert_eq!(answer_text("hi\n\nSent from my iPhone"), "hi");
        assert_eq!(answer_text("On my way!"), "On my way!");
    }
}
