//! The text of a PDF, page by page, with lopdf (ADR 0024).

use std::panic::{AssertUnwindSafe, catch_unwind};

/// The character that separates pages in a PDF document's text (form feed, as `pdftotext` writes it).
///
/// It is whitespace, so it changes no word, and the chunker counts it to give every chunk its page numbers.
pub const PAGE_BREAK: char = '\u{c}';

/// The text of every page of a PDF, joined by [`PAGE_BREAK`], and the number of pages; or why there is none.
pub(crate) fn pdf_text(bytes: &[u8]) -> Result<(String, usize), String> {
    // lopdf has panicked on malformed files (index and arithmetic errors in its parser and content decoder); a
    // broken file must be an issue of its own and never end the load, so the parser runs under catch_unwind. This
    // is the proven-necessary use: the closure owns nothing shared, so no state is left half-updated.
    match catch_unwind(AssertUnwindSafe(|| extract(bytes))) {
        Ok(result) => result,
        Err(_) => Err("not a readable PDF (the parser failed on it)".to_owned()),
    }
}

fn extract(bytes: &[u8]) -> Result<(String, usize), String> {
    // lopdf rebuilds a missing cross-reference table by scanning objects, so a file cut short (a failed download
    // or copy) loads with the pages before the cut; it is reported instead, since what is left is not the
    // document. Writers end every revision with `%%EOF`; some append a few bytes of whitespace or padding after it.
    let tail = &bytes[bytes.len().saturating_sub(1024)..];
    if !tail.windows(5).any(|w| w == b"%%EOF") {
        return Err("truncated PDF (no %%EOF marker at its end)".to_owned());
    }
    let doc = lopdf::Document::load_mem(bytes).map_err(|e| format!("not a readable PDF ({e})"))?;
    if doc.is_encrypted() {
        return Err("encrypted PDF: ragtune reads only unencrypted PDFs".to_owned());
    }
    let pages = doc.get_pages();
    if pages.is_empty() {
        return Err("the PDF has no pages".to_owned());
    }
    let mut texts = Vec::with_capacity(pages.len());
    let mut failed = 0usize;
    for &number in pages.keys() {
        // A page whose text cannot be decoded is left empty rather than losing the document's other pages.
        let text = doc.extract_text(&[number]).unwrap_or_else(|_| {
            failed += 1;
            String::new()
        });
        texts.push(text.replace(PAGE_BREAK, " ").trim().to_owned());
    }
    if texts.iter().all(|t| t.is_empty()) {
        return Err(if failed > 0 {
            format!("no page's text could be read ({failed} of {} failed)", pages.len())
        } else {
            "no text in the PDF (a scan, or a damaged file? ragtune does not recognise text in images)".to_owned()
        });
    }
    let text = texts.join(&format!("\n{PAGE_BREAK}\n"));
    Ok((text, pages.len()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn never_panics_on_any_bytes(body in prop::collection::vec(any::<u8>(), 0..600)) {
            let mut bytes = b"%PDF-1.4\n".to_vec();
            bytes.extend(&body);
            bytes.extend(b"\ntrailer << /Root 1 0 R >>\n%%EOF\n");
            let _ = super::pdf_text(&bytes);
            let _ = super::pdf_text(&body);
        }
    }
}
