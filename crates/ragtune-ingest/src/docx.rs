//! The text of a Word document (`.docx`): paragraphs of `word/document.xml`, headings as `#` lines.
//!
//! A DOCX is a ZIP archive of XML parts; `zip` and `quick-xml` were already in the workspace (ragtune-provision
//! reads wheels, ragtune-web reads arXiv's feed), so reading one adds no crate (ADR 0024).

use std::io::{Cursor, Read};

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

/// The most bytes `word/document.xml` may inflate to: a ZIP bomb is an issue, not an exhausted machine.
const MAX_XML_BYTES: u64 = 256 * 1024 * 1024;

/// The title (the first paragraph styled `Title`, else none) and the text of a DOCX; or why there is none.
pub(crate) fn docx_text(bytes: &[u8]) -> Result<(Option<String>, String), String> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| format!("not a readable DOCX ({e})"))?;
    let mut xml = String::new();
    {
        let part = archive.by_name("word/document.xml").map_err(|_| "not a DOCX (no word/document.xml)".to_owned())?;
        part.take(MAX_XML_BYTES + 1)
            .read_to_string(&mut xml)
            .map_err(|e| format!("not a readable DOCX (word/document.xml: {e})"))?;
    }
    if u64::try_from(xml.len()).unwrap_or(u64::MAX) > MAX_XML_BYTES {
        return Err(format!("skipped: word/document.xml inflates past {} MiB", MAX_XML_BYTES >> 20));
    }
    let (title, text) = paragraphs(&xml)?;
    if text.trim().is_empty() {
        return Err("the DOCX holds no text".to_owned());
    }
    Ok((title, text))
}

/// Paragraphs (`w:p`) of a document part, blank-line separated; headings (`HeadingN`, `Title` styles) as `#` lines.
fn paragraphs(xml: &str) -> Result<(Option<String>, String), String> {
    let mut reader = Reader::from_str(xml);
    let mut blocks: Vec<String> = Vec::new();
    let (mut title, mut current, mut level, mut in_text) = (None, String::new(), None::<usize>, false);
    loop {
        let event = reader.read_event().map_err(|e| format!("not a readable DOCX (word/document.xml: {e})"))?;
        match event {
            Event::Start(e) | Event::Empty(e) => match e.local_name().as_ref() {
                "p" => {
                    current.clear();
                    level = None;
                }
                "pStyle" => {
                    let style = value(&e).unwrap_or_default().to_ascii_lowercase();
                    level = match style.strip_prefix("heading").map(str::parse::<usize>) {
                        Some(Ok(n)) => Some(n.clamp(1, 6)),
                        _ if style == "title" => Some(1),
                        _ => level,
                    };
                    if style == "title" {
                        title = Some(String::new());
                    }
                }
                "t" => in_text = true,
                "tab" | "br" | "cr" => current.push(' '),
                _ => {}
            },
            Event::Text(t) if in_text => current.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if in_text => {
                let resolved = match r.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    _ => quick_xml::escape::resolve_predefined_entity(&r.xml10_content()).unwrap_or("").to_owned(),
                };
                current.push_str(&resolved);
            }
            Event::End(e) => match e.local_name().as_ref() {
                "t" => in_text = false,
                "p" => {
                    let text = current.split_whitespace().collect::<Vec<_>>().join(" ");
                    current.clear();
                    if text.is_empty() {
                        continue;
                    }
                    if title.as_deref() == Some("") {
                        title = Some(text.clone());
                    }
                    blocks.push(match level.take() {
                        Some(n) => format!("{} {text}", "#".repeat(n)),
                        // A paragraph starting with `#` would read as a heading.
                        None if text.starts_with('#') => format!("\\{text}"),
                        None => text,
                    });
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    Ok((title, blocks.join("\n\n")))
}

/// The `w:val` attribute of an element.
fn value(e: &BytesStart<'_>) -> Option<String> {
    e.attributes().flatten().find(|a| a.key.local_name().as_ref() == "val").map(|a| a.value.into_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn headings_paragraphs_and_entities() {
        let xml = r#"<w:document xmlns:w="x"><w:body>
            <w:p><w:pPr><w:pStyle w:val="Title"/></w:pPr><w:r><w:t>The Report</w:t></w:r></w:p>
            <w:p><w:pPr><w:pStyle w:val="Heading2"/></w:pPr><w:r><w:t>Scope</w:t></w:r></w:p>
            <w:p><w:r><w:t xml:space="preserve">Fish &amp; </w:t></w:r><w:r><w:t>chips</w:t><w:tab/><w:t>#1</w:t></w:r></w:p>
            <w:p><w:r><w:t>#tag</w:t></w:r></w:p><w:p/>
            </w:body></w:document>"#;
        let (title, text) = super::paragraphs(xml).unwrap();
        assert_eq!(title.as_deref(), Some("The Report"));
        assert_eq!(text, "# The Report\n\n## Scope\n\nFish & chips #1\n\n\\#tag");
    }

    #[test]
    fn broken_archives_are_errors() {
        assert!(super::docx_text(b"PK\x03\x04 not a zip").unwrap_err().starts_with("not a readable DOCX"));
        assert!(super::paragraphs("<w:p><w:t>unclosed</w:x>").is_err());
    }
}
