//! Header-aware parent/child chunking of Markdown and plain text.
//!
//! A document is cut into *sections* at its Markdown headings, and each section into overlapping *passages*.
//! Passages are what gets searched; their parent section is what a "snippet then parent" retriever returns as
//! context.

use std::ops::Range;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use ragtune_core::{Chunk, ChunkKind, Document, Error, Result};

use crate::folder::{FORMAT_PDF, FORMAT_TEXT};
use crate::pdf::PAGE_BREAK;

/// Sizes for [`chunk_document`], in whitespace-separated words.
///
/// Words are a proxy for tokens that needs no tokenizer and gives the same cut on every machine; English prose
/// runs at about 1.3 tokens per word for BERT-style vocabularies, so the default passage of 200 words is about
/// 260 tokens, inside the 512-token window of common embedding and reranking models.
///
/// It is also the `[chunking]` section of the configuration file, as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChunkerConfig {
    /// The most words in one passage.
    pub chunk_size: usize,
    /// How many words each passage repeats from the end of the previous passage of the same section.
    pub chunk_overlap: usize,
    /// The most words in one section; longer sections are cut into consecutive sections.
    pub max_section_size: usize,
}

impl Default for ChunkerConfig {
    fn default() -> Self {
        Self { chunk_size: 200, chunk_overlap: 40, max_section_size: 1000 }
    }
}

impl ChunkerConfig {
    /// Checks that the sizes can produce chunks.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when `chunk_size` or `max_section_size`
    /// is zero, or `chunk_overlap` is not smaller than `chunk_size`.
    pub fn validate(&self) -> Result<()> {
        if self.chunk_size == 0 {
            return Err(Error::invalid_input("chunk_size must be at least 1 word"));
        }
        if self.max_section_size == 0 {
            return Err(Error::invalid_input("max_section_size must be at least 1 word"));
        }
        if self.chunk_overlap >= self.chunk_size {
            return Err(Error::invalid_input(format!(
                "chunk_overlap ({}) must be smaller than chunk_size ({})",
                self.chunk_overlap, self.chunk_size
            )));
        }
        Ok(())
    }
}

/// Cuts a document into sections and passages, in document order: each section is followed by its passages.
///
/// - Sections start at Markdown headings (ATX `#` and Setext `===`/`---`), found with a CommonMark parser so that
///   a `#` line inside a code fence is not a heading. Documents whose metadata has `format` = `"text"` are not
///   searched for headings at all.
/// - A section's `header_path` is the stack of headings enclosing it, outermost first: a `##` after a `#` nests,
///   and a new `#` pops back to the top. Text before the first heading is a section with an empty `header_path`
///   (the document title is in every chunk's `title` already).
/// - A section's text runs from its heading line to the next heading, so sections together hold every word of
///   the document in order. A heading with no text of its own before the next heading is kept with the section
///   that follows it (or, at the end of the document, with the one before), so no passage is a bare heading.
/// - A section over `max_section_size` words is cut into consecutive sections with the same `header_path`.
///   Section ids are `"{doc_id}#s{n}"`, `n` counting sections across the document; `position` is `n`.
/// - Each section is cut into passages of at most `chunk_size` words; each passage after the first of a section
///   starts with the last `chunk_overlap` words of the one before. Instead of cutting exactly at the limit, a cut
///   moves back (by at most a fifth of the size) to the nearest paragraph break, or failing that sentence end.
///   Passage ids are `"{doc_id}#{n}"`, `n` counting passages across the document; `position` is `n`;
///   `parent_id` is the section id.
/// - Chunk texts are slices of the document (from the first to the last word), not re-joined words. Every chunk
///   carries the document's title and a clone of its metadata.
/// - A PDF's chunks (`format` = `"pdf"`) also carry the page they start on (`page`, from 1) and, when they run
///   onto a later page, the page they end on (`last_page`); pages are separated by
///   [`PAGE_BREAK`](crate::PAGE_BREAK) in the text, and a PDF's text is never searched for headings.
///
/// An empty or whitespace-only document gives no chunks.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when `cfg` is invalid (see
/// [`ChunkerConfig::validate`]).
pub fn chunk_document(doc: &Document, cfg: &ChunkerConfig) -> Result<Vec<Chunk>> {
    cfg.validate()?;
    let format = doc.metadata.get("format").and_then(serde_json::Value::as_str);
    // A PDF's text is extracted, not written: a line starting with `#` there is no heading.
    let markdown = format != Some(FORMAT_TEXT) && format != Some(FORMAT_PDF);
    let mut chunks = Vec::new();
    let (mut n_sections, mut n_passages) = (0usize, 0usize);
    for section in sections(&doc.text, markdown) {
        let offset = section.range.start;
        let text = doc.text.get(section.range).unwrap_or_default();
        let spans = word_spans(text);
        for piece in windows(text, &spans, cfg.max_section_size, 0) {
            let piece_spans = spans.get(piece).unwrap_or_default();
            let section_id = format!("{}#s{n_sections}", doc.id);
            let mut chunk = make_chunk(
                doc,
                section_id.clone(),
                ChunkKind::Section,
                None,
                &section.header_path,
                span_text(text, piece_spans),
                n_sections,
            );
            add_pages(doc, &mut chunk, offset, piece_spans);
            chunks.push(chunk);
            n_sections += 1;
            for passage in windows(text, piece_spans, cfg.chunk_size, cfg.chunk_overlap) {
                let passage_spans = piece_spans.get(passage).unwrap_or_default();
                let mut chunk = make_chunk(
                    doc,
                    format!("{}#{n_passages}", doc.id),
                    ChunkKind::Passage,
                    Some(section_id.clone()),
                    &section.header_path,
                    span_text(text, passage_spans),
                    n_passages,
                );
                add_pages(doc, &mut chunk, offset, passage_spans);
                chunks.push(chunk);
                n_passages += 1;
            }
        }
    }
    Ok(chunks)
}

/// The whole document as one passage, for corpora of short documents (BEIR): `doc_id` is the document id, no
/// parent, no header path, title and metadata from the document, position 0.
///
/// The chunk id is the document id when it holds no `#`, and the document id followed by `#` when it does
/// (`a#0` → `a#0#`).
/// Chunk ids share one namespace in a store, and [`chunk_document`] names chunks `{doc_id}#{n}` and
/// `{doc_id}#s{n}`: a document `a#0` kept whole under its own id would overwrite the first passage of a document
/// `a` (JSONL and BEIR ids may hold `#`).
/// An id ending in `#` is never a chunker id, and appending it only to ids that hold `#` keeps whole-document ids
/// distinct from each other; ids without `#` (BEIR SciFact's numbers, file paths) keep the chunk ids existing
/// stores and evaluation runs already have.
/// Refusing `#` in document ids would refuse real corpora, and escaping it in every chunker id would rename the
/// chunks of every document that holds one; evaluations map chunks to documents by `doc_id`, never by parsing ids.
#[must_use]
pub fn whole_document_chunk(doc: &Document) -> Chunk {
    let id = if doc.id.contains('#') { format!("{}#", doc.id) } else { doc.id.clone() };
    let mut chunk = make_chunk(doc, id, ChunkKind::Passage, None, &[], &doc.text, 0);
    add_pages(doc, &mut chunk, 0, &word_spans(&doc.text));
    chunk
}

/// For a PDF document, records in `chunk`'s metadata the page its first word is on (`page`, from 1) and, when it
/// ends on another page, the page of its last word (`last_page`); `spans` are the chunk's words, as byte ranges
/// `offset` bytes into the document's text. Pages are counted by the [`PAGE_BREAK`]s before each word.
fn add_pages(doc: &Document, chunk: &mut Chunk, offset: usize, spans: &[Range<usize>]) {
    if doc.metadata.get("format").and_then(serde_json::Value::as_str) != Some(FORMAT_PDF) {
        return;
    }
    let (Some(first), Some(last)) = (spans.first(), spans.last()) else { return };
    let page_at = |pos: usize| {
        let before = doc.text.get(..offset + pos).unwrap_or_default();
        before.matches(PAGE_BREAK).count() + 1
    };
    let (page, last_page) = (page_at(first.start), page_at(last.start));
    chunk.metadata.insert("page".to_owned(), page.into());
    if last_page != page {
        chunk.metadata.insert("last_page".to_owned(), last_page.into());
    }
}

pub(crate) fn make_chunk(
    doc: &Document,
    id: String,
    kind: ChunkKind,
    parent_id: Option<String>,
    header_path: &[String],
    text: &str,
    position: usize,
) -> Chunk {
    Chunk {
        id,
        doc_id: doc.id.clone(),
        parent_id,
        kind,
        header_path: header_path.to_vec(),
        title: doc.title.clone(),
        source: doc.source.clone(),
        text: text.to_owned(),
        position: u32::try_from(position).unwrap_or(u32::MAX),
        metadata: doc.metadata.clone(),
    }
}

/// A Markdown heading: where it is in the source, its level (1–6) and its text with whitespace collapsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Heading {
    pub(crate) range: Range<usize>,
    pub(crate) level: usize,
    pub(crate) text: String,
}

/// Every non-empty heading of `text`, in order, as a CommonMark parser sees them.
pub(crate) fn markdown_headings(text: &str) -> Vec<Heading> {
    let mut out = Vec::new();
    let mut current: Option<Heading> = None;
    for (event, range) in Parser::new_ext(text, Options::empty()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                current = Some(Heading { range, level: level as usize, text: String::new() });
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(mut h) = current.take() {
                    h.text = h.text.split_whitespace().collect::<Vec<_>>().join(" ");
                    if !h.text.is_empty() {
                        out.push(h);
                    }
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = current.as_mut() {
                    h.text.push_str(&t);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(h) = current.as_mut() {
                    h.text.push(' ');
                }
            }
            _ => {}
        }
    }
    out
}

/// A byte range of the document and the headings above it.
#[derive(Debug)]
pub(crate) struct Section {
    pub(crate) range: Range<usize>,
    pub(crate) header_path: Vec<String>,
}

/// Cuts `text` at its headings into sections that hold words, in order.
pub(crate) fn sections(text: &str, markdown: bool) -> Vec<Section> {
    struct Raw {
        range: Range<usize>,
        header_path: Vec<String>,
        heading_only: bool,
    }
    let headings = if markdown { markdown_headings(text) } else { Vec::new() };
    // A heading may start inside a run of non-space characters (`>#` in a block quote); cutting there would split
    // a word in two, so each cut moves back to the start of its word. Cuts stay in order.
    let mut starts: Vec<usize> = Vec::with_capacity(headings.len());
    for h in &headings {
        let start = word_start(text, h.range.start).max(starts.last().copied().unwrap_or(0));
        starts.push(start);
    }

    let mut raws = vec![Raw {
        range: 0..starts.first().copied().unwrap_or(text.len()),
        header_path: Vec::new(),
        heading_only: false,
    }];
    let mut stack: Vec<(usize, &str)> = Vec::new();
    for (i, (h, &start)) in headings.iter().zip(&starts).enumerate() {
        while stack.last().is_some_and(|&(level, _)| level >= h.level) {
            stack.pop();
        }
        stack.push((h.level, &h.text));
        let end = starts.get(i + 1).copied().unwrap_or(text.len());
        let body_start = h.range.end.clamp(start, end);
        let heading_only = text.get(body_start..end).is_some_and(|body| !has_words(body));
        let header_path = stack.iter().map(|&(_, t)| t.to_owned()).collect();
        raws.push(Raw { range: start..end, header_path, heading_only });
    }
    raws.retain(|r| text.get(r.range.clone()).is_some_and(has_words));

    let mut out: Vec<Section> = Vec::new();
    let mut pending_start: Option<usize> = None;
    let last = raws.len().saturating_sub(1);
    for (i, raw) in raws.into_iter().enumerate() {
        if raw.heading_only && i < last {
            pending_start.get_or_insert(raw.range.start);
            continue;
        }
        if raw.heading_only
            && pending_start.is_none()
            && let Some(prev) = out.last_mut()
        {
            prev.range.end = raw.range.end;
            continue;
        }
        let start = pending_start.take().unwrap_or(raw.range.start);
        out.push(Section { range: start..raw.range.end, header_path: raw.header_path });
    }
    out
}

/// Moves `pos` back to a character boundary and then to the start of the word it is in.
fn word_start(text: &str, pos: usize) -> usize {
    let mut pos = pos.min(text.len());
    while !text.is_char_boundary(pos) {
        pos -= 1;
    }
    while let Some(c) = text.get(..pos).and_then(|before| before.chars().next_back()) {
        if c.is_whitespace() {
            break;
        }
        pos -= c.len_utf8();
    }
    pos
}

pub(crate) fn has_words(s: &str) -> bool {
    s.chars().any(|c| !c.is_whitespace())
}

/// Byte ranges of the whitespace-separated words of `s` (the same words as `str::split_whitespace`).
pub(crate) fn word_spans(s: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        if c.is_whitespace() {
            if let Some(st) = start.take() {
                spans.push(st..i);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(st) = start {
        spans.push(st..s.len());
    }
    spans
}

/// The slice of `text` from the first to the last of `spans`.
fn span_text<'a>(text: &'a str, spans: &[Range<usize>]) -> &'a str {
    match (spans.first(), spans.last()) {
        (Some(first), Some(last)) => text.get(first.start..last.end).unwrap_or_default(),
        _ => "",
    }
}

/// Cuts word indices `0..spans.len()` into windows of at most `size` words, each after the first starting
/// `overlap` words before the end of the previous one. Needs `overlap < size`; every window is non-empty.
fn windows(text: &str, spans: &[Range<usize>], size: usize, overlap: usize) -> Vec<Range<usize>> {
    let n = spans.len();
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let mut end = start.saturating_add(size).min(n);
        if end < n {
            // Never cut so early that the next window would not move forward.
            let earliest = (start + overlap + 1).max(end - size / 5);
            end = preferred_end(text, spans, earliest, end);
        }
        out.push(start..end);
        if end >= n {
            break;
        }
        start = end - overlap;
    }
    out
}

/// The best cut in `earliest..=latest` (a cut `j` ends a window after word `j - 1`): the latest paragraph break,
/// else the latest sentence end, else `latest`. Needs `1 <= earliest` and `latest < spans.len()`.
fn preferred_end(text: &str, spans: &[Range<usize>], earliest: usize, latest: usize) -> usize {
    let mut best = (0u8, latest);
    for j in (earliest..=latest).rev() {
        let score = boundary_score(text, spans, j);
        if score > best.0 {
            best = (score, j);
        }
    }
    best.1
}

/// 2 when a blank line separates words `j - 1` and `j`, 1 when word `j - 1` ends a sentence, else 0.
fn boundary_score(text: &str, spans: &[Range<usize>], j: usize) -> u8 {
    let (Some(before), Some(after)) = (spans.get(j.wrapping_sub(1)), spans.get(j)) else { return 0 };
    let gap = text.get(before.end..after.start).unwrap_or_default();
    if gap.matches('\n').count() >= 2 {
        return 2;
    }
    let word = text.get(before.clone()).unwrap_or_default();
    let word = word.trim_end_matches(['"', '\'', ')', ']', '\u{201d}', '\u{2019}', '*', '_']);
    u8::from(word.ends_with(['.', '!', '?']))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg(chunk_size: usize, chunk_overlap: usize, max_section_size: usize) -> ChunkerConfig {
        ChunkerConfig { chunk_size, chunk_overlap, max_section_size }
    }

    /// Chunks `text` (Markdown, id `d`) and renders one line per chunk:
    /// `s0 [A > B] "text"` for sections and `  0 "text"` for their passages.
    fn check(text: &str, cfg: ChunkerConfig, expect: &str) {
        let chunks = chunk_document(&Document::new("d", text), &cfg).unwrap();
        assert_eq!(render(&chunks), expect);
    }

    /// One line per chunk of document `d`: `s0 [A > B] "text"` for sections, `  0 "text"` for their passages (the
    /// Markdown chunker's tests read chunks the same way).
    pub(crate) fn render(chunks: &[Chunk]) -> String {
        let mut got = String::new();
        for c in chunks {
            let short = c.id.strip_prefix("d#").unwrap();
            match c.kind {
                ChunkKind::Section => {
                    got.push_str(&format!("{short} [{}] {:?}\n", c.header_path.join(" > "), c.text));
                }
                ChunkKind::Passage => got.push_str(&format!("  {short} {:?}\n", c.text)),
            }
        }
        got
    }

    #[test]
    fn nested_headers_give_header_paths() {
        check(
            "intro text\n# Guide\nabout\n## Install\nsteps\n### Linux\napt\n## Use\nrun it\n# Other\nend\n",
            ChunkerConfig::default(),
            "s0 [] \"intro text\"\n  0 \"intro text\"\n\
             s1 [Guide] \"# Guide\\nabout\"\n  1 \"# Guide\\nabout\"\n\
             s2 [Guide > Install] \"## Install\\nsteps\"\n  2 \"## Install\\nsteps\"\n\
             s3 [Guide > Install > Linux] \"### Linux\\napt\"\n  3 \"### Linux\\napt\"\n\
             s4 [Guide > Use] \"## Use\\nrun it\"\n  4 \"## Use\\nrun it\"\n\
             s5 [Other] \"# Other\\nend\"\n  5 \"# Other\\nend\"\n",
        );
    }

    #[test]
    fn setext_headings_and_skipped_levels() {
        check(
            "Title\n=====\n\nbody\n\n### Deep\nx\n\nSub\n---\ny",
            ChunkerConfig::default(),
            "s0 [Title] \"Title\\n=====\\n\\nbody\"\n  0 \"Title\\n=====\\n\\nbody\"\n\
             s1 [Title > Deep] \"### Deep\\nx\"\n  1 \"### Deep\\nx\"\n\
             s2 [Title > Sub] \"Sub\\n---\\ny\"\n  2 \"Sub\\n---\\ny\"\n",
        );
    }

    #[test]
    fn hash_in_code_fence_is_not_a_heading() {
        check(
            "# Script\n```sh\n# install deps\nmake\n```\n    # indented code\nafter",
            ChunkerConfig::default(),
            "s0 [Script] \"# Script\\n```sh\\n# install deps\\nmake\\n```\\n    # indented code\\nafter\"\n\
             \x20 0 \"# Script\\n```sh\\n# install deps\\nmake\\n```\\n    # indented code\\nafter\"\n",
        );
    }

    #[test]
    fn heading_without_body_stays_with_the_next_section() {
        check(
            "# Guide\n\n## Install\nsteps\n## Empty\n",
            ChunkerConfig::default(),
            "s0 [Guide > Install] \"# Guide\\n\\n## Install\\nsteps\\n## Empty\"\n\
             \x20 0 \"# Guide\\n\\n## Install\\nsteps\\n## Empty\"\n",
        );
        check(
            "# Only a title",
            ChunkerConfig::default(),
            "s0 [Only a title] \"# Only a title\"\n  0 \"# Only a title\"\n",
        );
    }

    #[test]
    fn overlap_repeats_words() {
        check(
            "a b c d e f g h i j",
            cfg(4, 2, 100),
            "s0 [] \"a b c d e f g h i j\"\n  0 \"a b c d\"\n  1 \"c d e f\"\n  2 \"e f g h\"\n  3 \"g h i j\"\n",
        );
        check("a b c d e", cfg(3, 0, 100), "s0 [] \"a b c d e\"\n  0 \"a b c\"\n  1 \"d e\"\n");
    }

    #[test]
    fn cuts_prefer_paragraphs_then_sentences() {
        // Size 10 looks back up to 2 words for a better cut.
        check(
            "w1 w2 w3 w4 w5 w6 w7 w8.\n\nw9 w10 w11 w12",
            cfg(10, 0, 100),
            "s0 [] \"w1 w2 w3 w4 w5 w6 w7 w8.\\n\\nw9 w10 w11 w12\"\n  0 \"w1 w2 w3 w4 w5 w6 w7 w8.\"\n  1 \"w9 w10 w11 w12\"\n",
        );
        check(
            "w1 w2 w3 w4 w5 w6 w7 w8 w9. w10 w11 w12",
            cfg(10, 1, 100),
            "s0 [] \"w1 w2 w3 w4 w5 w6 w7 w8 w9. w10 w11 w12\"\n  0 \"w1 w2 w3 w4 w5 w6 w7 w8 w9.\"\n  1 \"w9. w10 w11 w12\"\n",
        );
        // Too far back (3 words for size 10): cut at the limit.
        check(
            "w1 w2 w3 w4 w5 w6 w7. w8 w9 w10 w11 w12",
            cfg(10, 0, 100),
            "s0 [] \"w1 w2 w3 w4 w5 w6 w7. w8 w9 w10 w11 w12\"\n  0 \"w1 w2 w3 w4 w5 w6 w7. w8 w9 w10\"\n  1 \"w11 w12\"\n",
        );
    }

    #[test]
    fn long_sections_are_split() {
        // Heading markers are words too: `# H one` is three words.
        check(
            "# H\none two three four five six",
            cfg(2, 1, 3),
            "s0 [H] \"# H\\none\"\n  0 \"# H\"\n  1 \"H\\none\"\n\
             s1 [H] \"two three four\"\n  2 \"two three\"\n  3 \"three four\"\n\
             s2 [H] \"five six\"\n  4 \"five six\"\n",
        );
    }

    #[test]
    fn plain_text_has_no_headings_and_empty_docs_no_chunks() {
        let mut doc = Document::new("t", "# not a heading\nbody");
        doc.metadata.insert("format".into(), FORMAT_TEXT.into());
        let chunks = chunk_document(&doc, &ChunkerConfig::default()).unwrap();
        assert_eq!(chunks.len(), 2);
        assert!(chunks.iter().all(|c| c.header_path.is_empty()));
        check("", ChunkerConfig::default(), "");
        check(" \n\t\r\n ", ChunkerConfig::default(), "");
    }

    #[test]
    fn chunks_carry_title_metadata_and_positions() {
        let mut doc = Document::new("doc", "# A\nx\n# B\ny");
        doc.title = Some("T".into());
        doc.metadata.insert("lang".into(), "en".into());
        let chunks = chunk_document(&doc, &ChunkerConfig::default()).unwrap();
        let rendered: Vec<String> = chunks
            .iter()
            .map(|c| format!("{} {:?} parent={:?} pos={}", c.id, c.kind, c.parent_id, c.position))
            .collect();
        assert_eq!(
            rendered,
            [
                "doc#s0 Section parent=None pos=0",
                "doc#0 Passage parent=Some(\"doc#s0\") pos=0",
                "doc#s1 Section parent=None pos=1",
                "doc#1 Passage parent=Some(\"doc#s1\") pos=1",
            ]
        );
        assert!(
            chunks.iter().all(|c| c.title.as_deref() == Some("T") && c.metadata == doc.metadata && c.doc_id == "doc")
        );
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let doc = Document::new("d", "text");
        for bad in [cfg(0, 0, 10), cfg(10, 10, 10), cfg(10, 2, 0)] {
            let e = chunk_document(&doc, &bad).unwrap_err();
            assert_eq!(e.kind(), ragtune_core::ErrorKind::InvalidInput, "{bad:?}");
        }
        ChunkerConfig::default().validate().unwrap();
    }

    #[test]
    fn whole_document_is_one_passage() {
        let mut doc = Document::new("4983", "Some abstract.");
        doc.title = Some("A title".into());
        let c = whole_document_chunk(&doc);
        assert_eq!((c.id.as_str(), c.doc_id.as_str(), c.kind, c.parent_id), ("4983", "4983", ChunkKind::Passage, None));
        assert_eq!((c.title.as_deref(), c.text.as_str()), (Some("A title"), "Some abstract."));
    }

    #[test]
    fn whole_document_ids_never_collide_with_chunk_ids() {
        // `a` is chunked (passages `a#0`, `a#1`, ...); `a#0` and `a#s1` are documents indexed whole beside it.
        let chunked: Vec<String> = chunk_document(&Document::new("a", "w1 w2 w3 w4 w5"), &cfg(2, 0, 3))
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert!(chunked.iter().any(|id| id == "a#0") && chunked.iter().any(|id| id == "a#s1"), "{chunked:?}");
        let whole = |id: &str| {
            let c = whole_document_chunk(&Document::new(id, "x"));
            assert_eq!(c.doc_id, id, "the document id is kept as it is");
            c.id
        };
        for id in ["a#0", "a#s1", "a#", "a#0#"] {
            assert!(!chunked.contains(&whole(id)), "{id} -> {}", whole(id));
        }
        assert_eq!(whole("a#0"), "a#0#");
        // Ids without `#` (BEIR's numeric ids, file paths) keep their whole-document chunk id.
        assert_eq!(whole("4983"), "4983");
        assert_eq!(whole("guide/notes.txt"), "guide/notes.txt");
    }

    #[test]
    fn headings_inside_containers_do_not_split_words() {
        // `>#` is a block quote holding a heading; the cut moves back to the start of the word `>#`.
        let chunks = chunk_document(&Document::new("d", "a\n># b\nc"), &ChunkerConfig::default()).unwrap();
        let words: Vec<&str> =
            chunks.iter().filter(|c| c.kind == ChunkKind::Section).flat_map(|c| c.text.split_whitespace()).collect();
        assert_eq!(words, ["a", ">#", "b", "c"]);
    }

    /// Checks every invariant of [`chunk_document`] on `text`.
    fn check_invariants(text: &str, cfg: &ChunkerConfig) -> std::result::Result<(), TestCaseError> {
        let doc = Document::new("d", text);
        let chunks = chunk_document(&doc, cfg).unwrap();
        let mut ids = std::collections::BTreeSet::new();
        for c in &chunks {
            prop_assert!(ids.insert(c.id.clone()), "duplicate id {}", c.id);
        }
        let sections: Vec<&Chunk> = chunks.iter().filter(|c| c.kind == ChunkKind::Section).collect();
        // Sections hold every word of the document, in order, and none is over the limit.
        let section_words: Vec<&str> = sections.iter().flat_map(|s| s.text.split_whitespace()).collect();
        prop_assert_eq!(section_words, text.split_whitespace().collect::<Vec<_>>());
        for s in &sections {
            let n = s.text.split_whitespace().count();
            prop_assert!(n >= 1 && n <= cfg.max_section_size);
            // A section's passages, without their overlap, hold exactly its words.
            let passages: Vec<&Chunk> =
                chunks.iter().filter(|c| c.parent_id.as_deref() == Some(s.id.as_str())).collect();
            prop_assert!(!passages.is_empty());
            let mut words: Vec<&str> = Vec::new();
            for (k, p) in passages.iter().enumerate() {
                prop_assert_eq!(&p.header_path, &s.header_path);
                let pw: Vec<&str> = p.text.split_whitespace().collect();
                prop_assert!(!pw.is_empty() && pw.len() <= cfg.chunk_size);
                let skip = if k == 0 { 0 } else { cfg.chunk_overlap };
                prop_assert!(pw.len() > skip);
                if k > 0 {
                    prop_assert_eq!(&pw[..skip], &words[words.len() - skip..]);
                }
                words.extend(&pw[skip..]);
            }
            prop_assert_eq!(words, s.text.split_whitespace().collect::<Vec<_>>());
        }
        // Every passage has a parent in the output.
        for c in chunks.iter().filter(|c| c.kind == ChunkKind::Passage) {
            let parent = c.parent_id.as_deref().unwrap_or("<none>");
            prop_assert!(sections.iter().any(|s| s.id == parent), "{} has no parent {}", c.id, parent);
        }
        Ok(())
    }

    fn any_cfg() -> impl Strategy<Value = ChunkerConfig> {
        (1usize..12, 0usize..12, 1usize..30)
            .prop_map(|(size, overlap, max_section)| cfg(size, overlap % size, max_section))
    }

    proptest! {
        #[test]
        fn invariants_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400), cfg in any_cfg()) {
            check_invariants(&String::from_utf8_lossy(&bytes), &cfg)?;
        }

        #[test]
        fn invariants_on_markdown_like_text(text in "([#`~=>*. \t\n-]|\r\n|[a-c]{1,3}|\u{a0}|é){0,120}", cfg in any_cfg()) {
            check_invariants(&text, &cfg)?;
        }

        #[test]
        fn whole_document_ids_are_distinct_from_each_other_and_from_chunk_ids(
            ids in prop::collection::btree_set("[a#s0-9]{1,5}", 1..12),
        ) {
            let mut seen = std::collections::BTreeMap::new();
            for id in &ids {
                let whole = whole_document_chunk(&Document::new(id.as_str(), "x")).id;
                if let Some(other) = seen.insert(whole.clone(), id.clone()) {
                    prop_assert!(false, "{id} and {other} both give {whole}");
                }
            }
            // Every chunk id of every document cut by the chunker (ids end in `#<n>` or `#s<n>`).
            for id in &ids {
                let doc = Document::new(id.as_str(), "w1 w2 w3 w4 w5 w6 w7");
                for c in chunk_document(&doc, &cfg(2, 0, 3)).unwrap() {
                    prop_assert!(!seen.contains_key(&c.id), "chunk {} of {id} is the whole chunk of {}", c.id, seen[&c.id]);
                }
            }
        }

        #[test]
        fn headings_never_panic(text in "(#{1,7} ?[a-z]{0,3}\n|```\n|[a-z ]{0,5}\n|===\n|---\n|> )*") {
            let _ = markdown_headings(&text);
            check_invariants(&text, &ChunkerConfig::default())?;
        }
    }
}
