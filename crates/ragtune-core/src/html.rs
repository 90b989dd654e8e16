//! The main content of an HTML page as Markdown-like text: what the folder loader indexes from an `.html` file and
//! what the web's page fetcher reads from a fetched page (one extractor, so both see a page alike).
//!
//! A small tolerant tokenizer builds an element tree (no HTML5 tree construction: unclosed elements stay open and
//! a stray end tag closes up to its nearest open match), then the tree is rendered without its boilerplate:
//! scripts, styles, navigation, headers and footers outside the main content, asides, forms, and elements whose
//! `class`, `id` or `role` name them as ads, menus, cookie banners, sidebars, comments or share widgets.
//! When the page has a `<main>` (or else `<article>`s), only that is rendered.
//! Headings become `#` lines so the chunker's header paths work, and blocks are separated by blank lines.

/// Elements whose content is never text (`script`, `style` are also read raw by the tokenizer).
const DROPPED: &[&str] = &[
    "script", "style", "noscript", "nav", "footer", "aside", "form", "template", "svg", "iframe", "head", "button",
    "select", "textarea", "dialog", "object", "canvas", "menu",
];

/// Elements that never have content.
const VOID: &[&str] =
    &["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"];

/// Elements inside a line of text: they never separate words.
const INLINE: &[&str] = &[
    "a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "del", "dfn", "em", "font", "i", "ins", "kbd", "mark", "q",
    "s", "samp", "small", "span", "strong", "sub", "sup", "time", "u", "var",
];

/// Elements that start a new block of text.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "ul",
    "ol",
    "li",
    "dl",
    "dt",
    "dd",
    "table",
    "thead",
    "tbody",
    "tr",
    "blockquote",
    "pre",
    "figure",
    "figcaption",
    "br",
    "hr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "address",
    "details",
    "summary",
    "body",
];

/// `class`/`id` words that mark boilerplate.
const MARKERS: &[&str] = &[
    "ad",
    "ads",
    "adv",
    "advert",
    "advertisement",
    "advertising",
    "sponsored",
    "sponsor",
    "promo",
    "banner",
    "cookie",
    "cookies",
    "consent",
    "gdpr",
    "nav",
    "navbar",
    "navigation",
    "menu",
    "sidebar",
    "breadcrumb",
    "breadcrumbs",
    "comment",
    "comments",
    "share",
    "sharing",
    "social",
    "footer",
    "masthead",
    "newsletter",
    "subscribe",
    "popup",
    "modal",
    "related",
    "toolbar",
    "skip",
];

/// Prefixes of `class`/`id` words that mark boilerplate (`cookiebar`, `sidebar-left` is caught by the words).
const MARKER_PREFIXES: &[&str] = &["advert", "cookie", "sidebar", "comment", "share", "social", "navbar", "sponsor"];

/// Deeper elements are flattened into their ancestor, so rendering never recurses without bound.
const MAX_DEPTH: usize = 256;

/// A page's title (`<title>`, else its first `<h1>`) and its main text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtmlText {
    /// `<title>`, else the first `<h1>`.
    pub title: Option<String>,
    /// The main content: blocks separated by blank lines, headings as `#` lines.
    pub text: String,
}

#[derive(Debug)]
enum Node {
    Element { name: String, boilerplate: bool, children: Vec<usize> },
    Text(String),
}

/// Extracts the title and main content of `html`. Never panics, whatever the input.
///
/// ```
/// let page = ragtune_core::html::extract("<title>T</title><nav>Home</nav><main><h1>Bones</h1><p>Soft &amp; weak</p></main>");
/// assert_eq!(page.title.as_deref(), Some("T"));
/// assert_eq!(page.text, "# Bones\n\nSoft & weak");
/// ```
#[must_use]
pub fn extract(html: &str) -> HtmlText {
    let (nodes, title) = parse(html);
    let roots = main_roots(&nodes);
    let mut out = Renderer::default();
    for &root in &roots {
        out.render(&nodes, root, 0, root != 0);
    }
    let text = out.finish();
    let title = title.or_else(|| first_heading(&text)).filter(|t| !t.is_empty());
    HtmlText { title, text }
}

/// Parses `html` into nodes (node 0 is the document) and the `<title>` text.
fn parse(html: &str) -> (Vec<Node>, Option<String>) {
    let mut nodes = vec![Node::Element { name: "#document".into(), boilerplate: false, children: Vec::new() }];
    let mut stack: Vec<(usize, String)> = vec![(0, "#document".into())];
    let mut title: Option<String> = None;
    let lower = html.to_ascii_lowercase();
    let mut i = 0;
    let push = |nodes: &mut Vec<Node>, parent: usize, node: Node| {
        let id = nodes.len();
        nodes.push(node);
        if let Some(Node::Element { children, .. }) = nodes.get_mut(parent) {
            children.push(id);
        }
        id
    };
    while i < html.len() {
        let rest = &lower[i..];
        if !rest.starts_with('<') {
            let next = rest.find('<').map_or(html.len(), |n| i + n);
            let parent = stack.last().map_or(0, |s| s.0);
            push(&mut nodes, parent, Node::Text(decode_entities(html.get(i..next).unwrap_or_default())));
            i = next;
            continue;
        }
        if rest.starts_with("<!--") {
            i = rest.find("-->").map_or(html.len(), |e| i + e + 3);
            continue;
        }
        if rest.starts_with("<!") || rest.starts_with("<?") {
            i = rest.find('>').map_or(html.len(), |e| i + e + 1);
            continue;
        }
        let closing = rest.starts_with("</");
        let name_start = if closing { 2 } else { 1 };
        let name: String =
            rest[name_start..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == ':').collect();
        if name.is_empty() {
            // A `<` that starts no tag is text.
            let parent = stack.last().map_or(0, |s| s.0);
            push(&mut nodes, parent, Node::Text("<".into()));
            i += 1;
            continue;
        }
        let end = tag_end(&lower, i);
        let tag = &html[i..end];
        i = end;
        if closing {
            if let Some(pos) = stack.iter().rposition(|(_, n)| *n == name)
                && pos > 0
            {
                stack.truncate(pos);
            }
            continue;
        }
        // Raw text: everything up to the matching end tag is one text (kept only for the title).
        if matches!(name.as_str(), "script" | "style" | "title" | "textarea" | "xmp") {
            let close = format!("</{name}");
            let body_end = lower[i..].find(&close).map_or(html.len(), |c| i + c);
            if name == "title" && title.is_none() {
                title = Some(squash(&decode_entities(&html[i..body_end])));
            }
            i = if body_end >= html.len() { html.len() } else { tag_end(&lower, body_end) };
            continue;
        }
        let parent = stack.last().map_or(0, |s| s.0);
        let boilerplate = is_boilerplate(&name, &tag.to_ascii_lowercase());
        let id = push(&mut nodes, parent, Node::Element { name: name.clone(), boilerplate, children: Vec::new() });
        let self_closing = tag.ends_with("/>");
        if !VOID.contains(&name.as_str()) && !self_closing && stack.len() < MAX_DEPTH {
            stack.push((id, name));
        }
    }
    (nodes, title)
}

/// The end of the tag starting at `start` (just past its `>`), skipping `>` inside quoted attribute values.
fn tag_end(lower: &str, start: usize) -> usize {
    let mut quote: Option<u8> = None;
    for (k, b) in lower.bytes().enumerate().skip(start + 1) {
        match (quote, b) {
            (Some(q), _) if b == q => quote = None,
            (Some(_), _) => {}
            (None, b'"' | b'\'') => quote = Some(b),
            (None, b'>') => return k + 1,
            _ => {}
        }
    }
    lower.len()
}

/// Whether an element is boilerplate, from its name and its (lower-cased) start tag.
fn is_boilerplate(name: &str, tag: &str) -> bool {
    if DROPPED.contains(&name) {
        return true;
    }
    let hidden = tag
        .split_ascii_whitespace()
        .any(|t| matches!(t, "hidden" | "hidden>" | "hidden/>") || t.starts_with("hidden="));
    if hidden || tag.contains("aria-hidden=\"true\"") {
        return true;
    }
    if let Some(role) = attribute(tag, "role")
        && matches!(role, "navigation" | "banner" | "contentinfo" | "complementary" | "search" | "dialog" | "menu")
    {
        return true;
    }
    ["class", "id"].iter().filter_map(|a| attribute(tag, a)).any(|value| {
        value.split(|c: char| !c.is_ascii_alphanumeric()).any(|word| {
            MARKERS.contains(&word) || MARKER_PREFIXES.iter().any(|p| word.starts_with(p) && word.len() > p.len())
        })
    })
}

/// The value of attribute `name` in a lower-cased start tag.
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(at) = tag[from..].find(name).map(|p| p + from) {
        from = at + name.len();
        let before_ok = tag[..at].ends_with(|c: char| c.is_ascii_whitespace());
        let after = tag[from..].trim_start();
        if !before_ok || !after.starts_with('=') {
            continue;
        }
        let value = after[1..].trim_start();
        return Some(match value.chars().next() {
            Some(q @ ('"' | '\'')) => value[1..].split(q).next().unwrap_or_default(),
            _ => value.split(|c: char| c.is_ascii_whitespace() || c == '>').next().unwrap_or_default(),
        });
    }
    None
}

/// The elements to render: the first `<main>`, else every outermost `<article>`, else the whole document.
fn main_roots(nodes: &[Node]) -> Vec<usize> {
    for wanted in ["main", "article"] {
        let mut found = Vec::new();
        collect(nodes, 0, wanted, &mut found);
        if !found.is_empty() {
            if wanted == "main" {
                found.truncate(1);
            }
            return found;
        }
    }
    vec![0]
}

/// The outermost non-boilerplate elements named `wanted` below `at`, in document order (iteratively).
fn collect(nodes: &[Node], at: usize, wanted: &str, found: &mut Vec<usize>) {
    let mut todo = vec![at];
    while let Some(n) = todo.pop() {
        let Some(Node::Element { name, boilerplate, children }) = nodes.get(n) else { continue };
        if *boilerplate {
            continue;
        }
        if name == wanted && n != at {
            found.push(n);
            continue;
        }
        todo.extend(children.iter().rev());
    }
}

#[derive(Debug, Default)]
struct Renderer {
    blocks: Vec<String>,
    current: String,
}

impl Renderer {
    /// Renders node `at`; `keep_header`: whether `header` elements are content (inside a chosen main element,
    /// where they hold the article's title) rather than the page's header.
    fn render(&mut self, nodes: &[Node], at: usize, depth: usize, keep_header: bool) {
        match nodes.get(at) {
            Some(Node::Text(t)) => self.current.push_str(t),
            Some(Node::Element { name, boilerplate, children }) => {
                if *boilerplate || (name == "header" && !keep_header) || depth > MAX_DEPTH {
                    return;
                }
                let level = heading_level(name);
                let block = BLOCKS.contains(&name.as_str()) || level.is_some();
                if block {
                    self.flush();
                }
                for &c in children {
                    self.render(nodes, c, depth + 1, keep_header);
                }
                if let Some(level) = level {
                    let text = squash(&self.current);
                    self.current.clear();
                    if !text.is_empty() {
                        self.blocks.push(format!("{} {text}", "#".repeat(level)));
                    }
                } else if block {
                    self.flush();
                } else if !INLINE.contains(&name.as_str()) {
                    // Table cells, list markers and unknown elements separate words; inline markup does not.
                    self.current.push(' ');
                }
            }
            None => {}
        }
    }

    fn flush(&mut self) {
        let text = squash(&self.current);
        self.current.clear();
        if !text.is_empty() {
            // A paragraph starting with `#` would read as a heading.
            let text = if text.starts_with('#') { format!("\\{text}") } else { text };
            self.blocks.push(text);
        }
    }

    fn finish(mut self) -> String {
        self.flush();
        self.blocks.join("\n\n")
    }
}

fn heading_level(name: &str) -> Option<usize> {
    match name.as_bytes() {
        [b'h', d @ b'1'..=b'6'] => Some(usize::from(d - b'0')),
        _ => None,
    }
}

fn first_heading(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix("# ")).map(str::to_owned)
}

fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` with its character references (`&#233;`, `&#xE9;`) and the common named ones (`&amp;`, `&nbsp;`, `&mdash;`,
/// …) decoded; anything else (an unknown name, a bare `&`, an invalid code point) is kept as it is.
#[must_use]
pub fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        // Entity names are ASCII: look for the `;` among the next bytes, never slicing inside a character.
        let Some(semi) = rest.bytes().take(12).position(|b| b == b';') else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let name = &rest[1..semi];
        let decoded = match name {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "nbsp" => Some(' '),
            "mdash" => Some('\u{2014}'),
            "ndash" => Some('\u{2013}'),
            "hellip" => Some('\u{2026}'),
            "copy" => Some('\u{a9}'),
            _ => name
                .strip_prefix("#x")
                .or_else(|| name.strip_prefix("#X"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| name.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `decode_entities(input)` is `expect`.
    fn decoded(input: &str, expect: &str) {
        assert_eq!(decode_entities(input), expect, "{input:?}");
    }

    #[test]
    fn references_are_decoded_and_anything_else_is_kept() {
        decoded(
            "bones&nbsp;in adults &amp; more&#x2014;see &#8220;rickets&#8221;",
            "bones in adults & more—see \u{201c}rickets\u{201d}",
        );
        decoded("End &unknown; &amp", "End &unknown; &amp");
        decoded("&#39;quoted&apos; &mdash; &hellip;", "'quoted' \u{2014} \u{2026}");
    }

    #[test]
    fn an_ampersand_before_multi_byte_text_is_kept_as_it_is() {
        decoded("a &é b", "a &é b");
        decoded("&€", "&€");
        decoded("x &", "x &");
        decoded("&", "&");
        decoded("&#x1F600;", "\u{1F600}");
        decoded("&#128512; &amp;", "\u{1F600} &");
        // The entity name window (12 bytes) ends inside a multi-byte character.
        decoded("&€€€€", "&€€€€");
        decoded("&aaaaaaaaaaé;", "&aaaaaaaaaaé;");
        decoded("Caf&eacute; &€ &#xD800; &#x110000; &#; &;", "Caf&eacute; &€ &#xD800; &#x110000; &#; &;");
    }

    #[test]
    fn an_unclosed_script_hides_the_rest_and_plain_text_stays() {
        check("plain", None, "plain");
        check("<p>unclosed <script>forever", None, "unclosed");
    }

    fn check(html: &str, expect_title: Option<&str>, expect: &str) {
        let got = extract(html);
        assert_eq!(got.title.as_deref(), expect_title);
        assert_eq!(got.text, expect);
    }

    #[test]
    fn main_content_with_headings() {
        check(
            "<!doctype html><html><head><title>My &amp; Page</title><style>p{}</style></head><body>\
             <header><a href=/>Home</a></header><nav><ul><li>Menu</li></ul></nav>\
             <main><article><header><h1>Big   title</h1></header><p>First <b>para</b>.</p>\
             <div class=\"ad-slot\">Buy now</div><h2>Sub</h2><p>Second<br>line</p>\
             <script>var x = '<p>no</p>';</script></article></main>\
             <footer>Copyright</footer></body></html>",
            Some("My & Page"),
            "# Big title\n\nFirst para.\n\n## Sub\n\nSecond\n\nline",
        );
    }

    #[test]
    fn without_main_the_body_minus_boilerplate() {
        check(
            "<body><header>Site</header><div id=cookie-banner>We use cookies</div>\
             <div class='content'><h1>T</h1><p>#hashtag text</p></div>\
             <div class=\"share-buttons\">Tweet</div><aside>Side</aside><div role=navigation>Nav</div></body>",
            Some("T"),
            "# T\n\n\\#hashtag text",
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_any_text(html in "(<[/!a-z]{0,8}( [a-z]{1,5}=['\"a-z ]{0,6})?/?>|&[#a-z0-9]{0,6};?|[a-zé <>\n]{0,5})*") {
            let _ = extract(&html);
        }
    }

    #[test]
    fn never_panics_on_odd_input() {
        for s in ["<", "<<>>", "</x>", "<p", "<a href='>", "&#xffffffff;", "<script>", "é<é>", "<!--", "&;"] {
            let _ = extract(s);
        }
        let deep = "<div>".repeat(100_000) + "deep";
        assert_eq!(extract(&deep).text, "deep");
    }
}
