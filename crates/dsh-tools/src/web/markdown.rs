//! A small, tolerant HTML to Markdown converter for `web_fetch`.
//!
//! It is not an HTML parser: it reads tags and text in one pass, drops what a reader would not
//! see (`script`, `style`, `head` except `title`, `noscript`, `template`, `svg`, comments), and
//! writes headings, paragraphs, lists, links, images, emphasis, inline code, preformatted
//! blocks, quotes, rules and table rows as Markdown. Malformed markup never panics: unknown or
//! unclosed tags are ignored and the text is kept.

use reqwest::Url;

/// Elements whose content is never shown.
const HIDDEN: &[&str] = &[
    "script", "style", "noscript", "template", "svg", "head", "iframe", "object", "canvas",
];
/// Elements that start and end a block (a blank line around them).
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "header",
    "footer",
    "main",
    "nav",
    "aside",
    "form",
    "figure",
    "figcaption",
    "table",
    "ul",
    "ol",
    "dl",
    "address",
    "details",
    "summary",
    "fieldset",
    "body",
    "html",
];

/// Converts `html` to Markdown. Relative link and image targets are resolved against `base`
/// when given.
pub fn html_to_markdown(html: &str, base: Option<&Url>) -> String {
    let mut w = Writer {
        out: String::new(),
        base,
        hidden: Vec::new(),
        pre: 0,
        lists: Vec::new(),
        links: Vec::new(),
        title: None,
        in_title: false,
        quote: 0,
    };
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            w.text(rest);
            break;
        };
        w.text(&rest[..lt]);
        rest = &rest[lt..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let Some(gt) = tag_end(rest) else {
            // A `<` that starts no tag is text.
            w.text("<");
            rest = &rest[1..];
            continue;
        };
        let inside = &rest[1..gt];
        rest = &rest[gt + 1..];
        if inside.starts_with('!') || inside.starts_with('?') {
            continue;
        }
        let tag = Tag::parse(inside);
        if tag.name.is_empty() {
            w.text("<");
            w.text(inside);
            w.text(">");
            continue;
        }
        // Raw text elements: skip to their end tag without reading tags inside.
        if !tag.closing && matches!(tag.name.as_str(), "script" | "style") {
            let close = format!("</{}", tag.name);
            rest = find_ci(rest, &close).map_or("", |at| {
                rest[at..].find('>').map_or("", |gt| &rest[at + gt + 1..])
            });
            continue;
        }
        w.tag(&tag);
    }
    w.finish()
}

/// Index of the `>` closing the tag that starts at `text[0] == '<'`, honouring quoted
/// attribute values; `None` when `<` does not start a tag.
fn tag_end(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let first = *bytes.get(1)?;
    if !(first.is_ascii_alphabetic() || first == b'/' || first == b'!' || first == b'?') {
        return None;
    }
    let mut quote: Option<u8> = None;
    for (i, &b) in bytes.iter().enumerate().skip(1) {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'"' || b == b'\'' => quote = Some(b),
            None if b == b'>' => return Some(i),
            None => {}
        }
    }
    None
}

/// Case-insensitive ASCII search.
fn find_ci(haystack: &str, needle: &str) -> Option<usize> {
    let h = haystack.as_bytes();
    let n = needle.as_bytes();
    if n.is_empty() || h.len() < n.len() {
        return None;
    }
    (0..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

struct Tag {
    name: String,
    closing: bool,
    attrs: Vec<(String, String)>,
}

impl Tag {
    fn parse(inside: &str) -> Tag {
        let (closing, body) = match inside.strip_prefix('/') {
            Some(b) => (true, b),
            None => (false, inside),
        };
        let body = body.trim_end_matches('/');
        let name_end = body
            .find(|c: char| c.is_whitespace() || c == '/')
            .unwrap_or(body.len());
        let name = body[..name_end].to_ascii_lowercase();
        let valid = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        let mut attrs = Vec::new();
        let mut rest = &body[name_end..];
        while let Some(start) = rest.find(|c: char| !c.is_whitespace() && c != '/') {
            rest = &rest[start..];
            let key_end = rest
                .find(|c: char| c.is_whitespace() || c == '=')
                .unwrap_or(rest.len());
            let key = rest[..key_end].to_ascii_lowercase();
            rest = rest[key_end..].trim_start();
            let mut value = String::new();
            if let Some(after) = rest.strip_prefix('=') {
                let after = after.trim_start();
                let (v, remaining) = match after.chars().next() {
                    Some(q @ ('"' | '\'')) => {
                        let inner = &after[1..];
                        match inner.find(q) {
                            Some(end) => (&inner[..end], &inner[end + 1..]),
                            None => (inner, ""),
                        }
                    }
                    _ => {
                        let end = after.find(char::is_whitespace).unwrap_or(after.len());
                        (&after[..end], &after[end..])
                    }
                };
                value = decode_entities(v);
                rest = remaining;
            }
            if key.is_empty() {
                break;
            }
            attrs.push((key, value));
        }
        Tag {
            name: if valid { name } else { String::new() },
            closing,
            attrs,
        }
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Writer<'a> {
    out: String,
    base: Option<&'a Url>,
    /// Open hidden elements.
    hidden: Vec<String>,
    pre: usize,
    /// Open lists: `Some(n)` for an ordered list at item n, `None` for bullets.
    lists: Vec<Option<u32>>,
    /// Targets of open links.
    links: Vec<Option<String>>,
    title: Option<String>,
    in_title: bool,
    quote: usize,
}

impl Writer<'_> {
    fn text(&mut self, raw: &str) {
        if raw.is_empty() {
            return;
        }
        if self.in_title {
            self.title
                .get_or_insert_with(String::new)
                .push_str(&decode_entities(raw));
            return;
        }
        if !self.hidden.is_empty() {
            return;
        }
        let text = decode_entities(raw);
        if self.pre > 0 {
            self.out.push_str(&text);
            return;
        }
        let mut pending_space = text.starts_with(char::is_whitespace);
        for word in text.split_whitespace() {
            if pending_space && !self.at_line_start() && !self.out.ends_with(' ') {
                self.out.push(' ');
            }
            self.out.push_str(word);
            pending_space = true;
        }
        if text.ends_with(char::is_whitespace) && !text.trim().is_empty() && !self.at_line_start() {
            self.out.push(' ');
        }
    }

    fn at_line_start(&self) -> bool {
        self.out.is_empty() || self.out.ends_with('\n') || self.out.ends_with("> ")
    }

    fn newline(&mut self) {
        trim_trailing_spaces(&mut self.out);
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
        if self.quote > 0 {
            self.out.push_str(&"> ".repeat(self.quote));
        }
    }

    fn blank_line(&mut self) {
        trim_trailing_spaces(&mut self.out);
        if self.out.is_empty() {
            return;
        }
        while !self.out.ends_with("\n\n") {
            self.out.push('\n');
        }
        if self.quote > 0 {
            self.out.push_str(&"> ".repeat(self.quote));
        }
    }

    fn link_target(&self, raw: &str) -> Option<String> {
        let raw = raw.trim();
        if raw.is_empty()
            || raw.starts_with('#')
            || raw.to_ascii_lowercase().starts_with("javascript:")
        {
            return None;
        }
        match self.base.and_then(|b| b.join(raw).ok()) {
            Some(url) => Some(url.to_string()),
            None => Some(raw.to_string()),
        }
    }

    fn tag(&mut self, tag: &Tag) {
        let name = tag.name.as_str();
        if HIDDEN.contains(&name) {
            if tag.closing {
                if let Some(pos) = self.hidden.iter().rposition(|h| h == name) {
                    self.hidden.truncate(pos);
                }
            } else {
                self.hidden.push(name.to_string());
            }
            return;
        }
        if name == "title" {
            self.in_title = !tag.closing;
            return;
        }
        if !self.hidden.is_empty() {
            return;
        }
        match (name, tag.closing) {
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", false) => {
                self.blank_line();
                let level = name[1..].parse::<usize>().unwrap_or(1);
                self.out.push_str(&"#".repeat(level));
                self.out.push(' ');
            }
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", true) => self.blank_line(),
            ("br", _) => self.newline(),
            ("hr", _) => {
                self.blank_line();
                self.out.push_str("---");
                self.blank_line();
            }
            ("pre", false) => {
                self.blank_line();
                self.out.push_str("```\n");
                self.pre += 1;
            }
            ("pre", true) if self.pre > 0 => self.close_pre(),
            ("code" | "kbd" | "samp" | "tt", _) if self.pre == 0 => self.out.push('`'),
            ("strong" | "b", _) => self.out.push_str("**"),
            ("em" | "i", _) => self.out.push('*'),
            ("blockquote", false) => {
                self.quote += 1;
                self.blank_line();
            }
            ("blockquote", true) => {
                self.quote = self.quote.saturating_sub(1);
                self.blank_line();
            }
            ("ul", false) => {
                self.lists.push(None);
                self.newline();
            }
            ("ol", false) => {
                self.lists.push(Some(0));
                self.newline();
            }
            ("ul" | "ol", true) => {
                self.lists.pop();
                if self.lists.is_empty() {
                    self.blank_line();
                } else {
                    self.newline();
                }
            }
            ("li", false) => self.list_item(),
            ("dt" | "dd" | "tr", false) => self.newline(),
            ("td" | "th", false) if !self.at_line_start() => self.out.push_str(" | "),
            ("a", false) => {
                let target = tag.attr("href").and_then(|h| self.link_target(h));
                if target.is_some() {
                    self.out.push('[');
                }
                self.links.push(target);
            }
            ("a", true) => {
                if let Some(Some(target)) = self.links.pop() {
                    trim_trailing_spaces(&mut self.out);
                    self.out.push_str(&format!("]({target})"));
                }
            }
            ("img", false) => {
                let alt = tag.attr("alt").unwrap_or("").trim().to_string();
                if let Some(src) = tag.attr("src").and_then(|s| self.link_target(s)) {
                    if !alt.is_empty() {
                        self.out.push_str(&format!("![{alt}]({src})"));
                    }
                }
            }
            (other, _) if BLOCKS.contains(&other) => self.blank_line(),
            _ => {}
        }
    }

    /// Ends a code block opened by `<pre>`.
    fn close_pre(&mut self) {
        self.pre -= 1;
        if !self.out.ends_with('\n') {
            self.out.push('\n');
        }
        self.out.push_str("```");
        self.blank_line();
    }

    /// Starts a list item: indented by list depth, numbered in an `<ol>`, else `- `.
    fn list_item(&mut self) {
        self.newline();
        let depth = self.lists.len().saturating_sub(1);
        self.out.push_str(&"  ".repeat(depth));
        match self.lists.last_mut() {
            Some(Some(n)) => {
                *n += 1;
                let n = *n;
                self.out.push_str(&format!("{n}. "));
            }
            _ => self.out.push_str("- "),
        }
    }

    fn finish(self) -> String {
        let mut lines: Vec<&str> = Vec::new();
        let mut blank = 0;
        for line in self.out.lines() {
            let line = line.trim_end();
            if line.is_empty() || line.chars().all(|c| c == '>' || c == ' ') {
                blank += 1;
                if blank > 1 || lines.is_empty() {
                    continue;
                }
                lines.push("");
            } else {
                blank = 0;
                lines.push(line);
            }
        }
        let body = lines.join("\n").trim().to_string();
        match self
            .title
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
        {
            Some(title) if !title.is_empty() && !body.contains(&title) => {
                format!("# {title}\n\n{body}")
            }
            _ => body,
        }
    }
}

fn trim_trailing_spaces(out: &mut String) {
    while out.ends_with(' ') && !out.ends_with("> ") {
        out.pop();
    }
}

/// Decodes character references: numeric ones and the common named ones. Unknown names are
/// kept as written.
pub fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let end = rest
            .char_indices()
            .take(12)
            .find(|(_, c)| *c == ';')
            .map(|(i, _)| i);
        let decoded = end.and_then(|end| entity(&rest[1..end]).map(|c| (c, end)));
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn entity(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(code).filter(|c| *c != '\0');
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "mdash" => '—',
        "ndash" => '–',
        "hellip" => '…',
        "copy" => '©',
        "reg" => '®',
        "trade" => '™',
        "lsquo" => '‘',
        "rsquo" => '’',
        "ldquo" => '“',
        "rdquo" => '”',
        "laquo" => '«',
        "raquo" => '»',
        "middot" => '·',
        "bull" => '•',
        "times" => '×',
        "deg" => '°',
        "euro" => '€',
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_common_structure() {
        let html = r#"<!doctype html><html><head><title>T  page</title><style>p{}</style>
            <script>if (a < b) { document.write("<p>x</p>") }</script></head>
            <body><h1>Main &amp; more</h1><p>Hello <b>bold</b> and <a href="/x?a=1&amp;b=2">a link</a>.</p>
            <ul><li>one</li><li>two<ol><li>inner</li></ol></li></ul>
            <pre><code>let x = 1;
  indented</code></pre><!-- hidden --><p>A&nbsp;B &#x41; &#66;</p>
            <img src="i.png" alt="pic"><blockquote>quoted</blockquote><hr><table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table></body></html>"#;
        let base = Url::parse("https://example.com/dir/page").unwrap();
        let md = html_to_markdown(html, Some(&base));
        assert!(md.starts_with("# T page\n\n# Main & more"), "{md}");
        assert!(
            md.contains("Hello **bold** and [a link](https://example.com/x?a=1&b=2)."),
            "{md}"
        );
        assert!(md.contains("- one\n- two\n  1. inner"), "{md}");
        assert!(md.contains("```\nlet x = 1;\n  indented\n```"), "{md}");
        assert!(md.contains("A B A B"), "{md}");
        assert!(md.contains("![pic](https://example.com/dir/i.png)"), "{md}");
        assert!(md.contains("> quoted"), "{md}");
        assert!(md.contains("---"), "{md}");
        assert!(md.contains("a | b\n1 | 2"), "{md}");
        assert!(!md.contains("document.write"), "{md}");
        assert!(!md.contains("hidden"), "{md}");
    }

    #[test]
    fn malformed_markup_does_not_panic() {
        for html in [
            "<",
            "<<<>>>",
            "<a href=\"x",
            "<p>a < b</p>",
            "&#xFFFFFFFF;",
            "&#0;",
            "<script>",
            "</ul></ol></li>",
            "<h7>x</h7>",
            "<a href='é'>é</a>",
            "&",
            "&;",
            "<!--",
            "<é>",
        ] {
            let _ = html_to_markdown(html, None);
        }
        assert_eq!(html_to_markdown("<p>a < b</p>", None), "a < b");
    }
}
