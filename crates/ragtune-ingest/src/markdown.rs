//! Markdown chunking that fits an embedding model's window, counted in the model's own tokens.
//!
//! [`chunk_document`](crate::chunk_document) cuts passages by words, which suits prose; Markdown documentation is
//! half code, tables and paths, at about two tokens per word, so word-sized passages overflow the model and their
//! dense vectors see only their beginning. [`chunk_markdown`] cuts at the document's own structure instead and
//! measures every passage with a [`TokenCounter`].
//!
//! Over 1,000 lines with its unit tests (about 300 lines of them): the code itself is about 820 lines.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag};
use ragtune_core::{Chunk, ChunkKind, Document, Error, Result, TokenCounter};

use crate::ChunkerConfig;
use crate::chunk::{has_words, make_chunk, sections, word_spans};

/// The byte length of the YAML front matter at the start of `text`, 0 when there is none.
///
/// Front matter is a first line `---`, a first non-blank line of the form `key:` (so that a document opening with
/// a thematic break is not taken for it), and a closing line `---` or `...`; the length runs to the end of the
/// closing line, its line break included. A leading byte order mark is skipped.
#[must_use]
pub fn front_matter_len(text: &str) -> usize {
    let bom = if text.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 };
    let mut lines = line_ranges(text, bom..text.len()).into_iter();
    let Some(first) = lines.next() else { return 0 };
    if text[first].trim_end() != "---" {
        return 0;
    }
    let mut seen_key = false;
    for line in lines {
        let content = text[line.clone()].trim_end();
        if content == "---" || content == "..." {
            if !seen_key {
                return 0;
            }
            let end = text[line.end..].strip_prefix("\r\n").or_else(|| text[line.end..].strip_prefix('\n'));
            return end.map_or(text.len(), |rest| text.len() - rest.len());
        }
        if !seen_key && !content.trim().is_empty() {
            if !is_yaml_key_line(content) {
                return 0;
            }
            seen_key = true;
        }
    }
    0
}

/// The `title:` of the front matter at the start of `text`, unquoted, when there is one.
#[must_use]
pub fn front_matter_title(text: &str) -> Option<String> {
    let block = text.get(..front_matter_len(text))?;
    block.lines().find_map(|line| {
        let value = line.strip_prefix("title:")?.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value)
            .trim();
        (!value.is_empty()).then(|| value.to_owned())
    })
}

fn is_yaml_key_line(line: &str) -> bool {
    let Some((key, _)) = line.split_once(':') else { return false };
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A conservative estimate of a BERT-style word-piece tokenizer's count, for when the model's tokenizer is not at
/// hand (no embedding model is loaded).
///
/// Each run of ASCII letters counts one token per three letters (rounded up), each run of digits one per two, and
/// every other non-space character one (punctuation is a token of its own; accented and non-Latin characters are
/// counted alone, which over-counts them); the sum is raised by a ninth (a 10 % margin of the window), and the two
/// special tokens are added.
/// Measured against all-MiniLM-L6-v2's tokenizer on the paragraphs of the project's `docs/` (1,297 of them, 190,000
/// tokens), the raw sum over-counts by 31 % in total and under-counts no paragraph of over 100 tokens by more than
/// 6 % (`BM25` is three tokens, `b ##m ##25`); the margin covers that. Passages cut with it are about a quarter
/// smaller than they need to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EstimatedTokens {
    window: usize,
}

impl EstimatedTokens {
    /// The special tokens every count includes (`[CLS]` and `[SEP]`).
    pub const SPECIAL_TOKENS: usize = 2;

    /// An estimate for a model that sees `window` tokens of a text.
    #[must_use]
    pub fn new(window: usize) -> Self {
        Self { window }
    }

    fn estimate(text: &str) -> usize {
        let (mut raw, mut letters, mut digits) = (0usize, 0usize, 0usize);
        let flush = |raw: &mut usize, letters: &mut usize, digits: &mut usize| {
            *raw += letters.div_ceil(3) + digits.div_ceil(2);
            (*letters, *digits) = (0, 0);
        };
        for c in text.chars() {
            if c.is_ascii_alphabetic() {
                if digits > 0 {
                    flush(&mut raw, &mut letters, &mut digits);
                }
                letters += 1;
            } else if c.is_ascii_digit() {
                if letters > 0 {
                    flush(&mut raw, &mut letters, &mut digits);
                }
                digits += 1;
            } else {
                flush(&mut raw, &mut letters, &mut digits);
                raw += usize::from(!c.is_whitespace());
            }
        }
        flush(&mut raw, &mut letters, &mut digits);
        (raw * 10).div_ceil(9) + Self::SPECIAL_TOKENS
    }
}

impl TokenCounter for EstimatedTokens {
    fn name(&self) -> &str {
        "estimate"
    }

    fn window(&self) -> usize {
        self.window
    }

    fn count(&self, texts: &[&str]) -> Result<Vec<usize>> {
        Ok(texts.iter().map(|t| Self::estimate(t)).collect())
    }
}

/// Cuts a Markdown document into sections and passages that fit `tokens`' window, in document order: each section
/// is followed by its passages.
///
/// - YAML front matter ([`front_matter_len`]) is not indexed: no chunk holds it.
/// - Sections start at headings, with header paths, exactly as in [`chunk_document`](crate::chunk_document).
///   Together with the document's title they are each passage's header crumb: a passage's indexed text
///   ([`Chunk::indexable_text`]) is the title, the headings below it and the passage's text, one a line. The crumb
///   takes at most a quarter of the window: longer headings are shortened in the header path to their first words
///   and `…` (the heading's own line in the text stays whole).
/// - Within a section, passages are runs of whole blocks (paragraphs, headings, lists, block quotes, code blocks,
///   tables, HTML), packed in order while the passage's indexed text stays within `tokens.window()` tokens and
///   its text within `cfg.chunk_size` words. A passage never overlaps the one before (`chunk_overlap` is not used):
///   cuts fall between blocks or sentences, so there is no cut-off thought for an overlap to repair.
/// - A block larger than that is cut: a list or block quote into its items and inner blocks, prose at sentence
///   ends, a code block at line breaks with every piece fenced again (the opening fence line, info string included,
///   and the closing fence), a table at row breaks with every piece starting with the table's header and
///   delimiter rows. A sentence or line still too large is cut between words. No cut falls inside a word, so a
///   single word longer than the window (a 300-token URL) is the one passage that may not fit.
/// - A passage that would be left under a quarter full (a heading, a lead-in line such as "Run:") takes the start
///   of the next block, cut as above, rather than stay a bare heading.
/// - Passage texts are the document's text from their first to their last block, except where a code block or
///   table was cut: those pieces are rebuilt as above. Concatenated, the passages hold every word of the document
///   after its front matter, in order, plus the repeated fence and header lines.
/// - Consecutive passages of a heading's section are grouped into sections of at most `cfg.max_section_size` words
///   (at least one passage each); a section's text is the document's text from its first passage's start to its
///   last passage's end. Ids, positions and parents are as in [`chunk_document`](crate::chunk_document):
///   `"{doc_id}#s{n}"` and `"{doc_id}#{n}"`.
///
/// Counting is additive over blocks (a BERT tokenizer never joins tokens across whitespace), and every passage is
/// then counted whole; one that a tokenizer counts higher than its blocks' sum is packed again block by block,
/// counting each step.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when `cfg` is invalid (see
/// [`ChunkerConfig::validate`]), when the window holds no more than the special tokens, or when the tokenizer
/// cannot encode the text; [`ErrorKind::Corrupt`](ragtune_core::ErrorKind::Corrupt) when the counter returns
/// another number of counts than it was given texts.
pub fn chunk_markdown(doc: &Document, cfg: &ChunkerConfig, tokens: &dyn TokenCounter) -> Result<Vec<Chunk>> {
    cfg.validate()?;
    let overhead = tokens.count(&[""])?.first().copied().unwrap_or(0);
    if tokens.window() <= overhead {
        return Err(Error::invalid_input(format!(
            "the token window of {} ({}) holds no more than its {overhead} special tokens",
            tokens.name(),
            tokens.window()
        )));
    }
    let body_start = front_matter_len(&doc.text);
    let body = &doc.text[body_start..];
    let mut chunks = Vec::new();
    let (mut n_sections, mut n_passages) = (0usize, 0usize);
    for section in sections(body, true) {
        let range = section.range.start + body_start..section.range.end + body_start;
        let (header_path, prefix, prefix_tokens) = crumb(doc, &section.header_path, tokens, overhead)?;
        let fit = Fit {
            counter: tokens,
            overhead,
            window: tokens.window(),
            tokens: tokens.window().saturating_sub(overhead + prefix_tokens),
            words: cfg.chunk_size,
            prefix: &prefix,
        };
        let passages = Packer::new(&doc.text, &fit).section(range)?;
        for group in group_sections(&passages, cfg.max_section_size) {
            let span = passages[group.start].span.start..passages[group.end - 1].span.end;
            let section_id = format!("{}#s{n_sections}", doc.id);
            chunks.push(make_chunk(
                doc,
                section_id.clone(),
                ChunkKind::Section,
                None,
                &header_path,
                &doc.text[span],
                n_sections,
            ));
            n_sections += 1;
            for p in &passages[group] {
                chunks.push(make_chunk(
                    doc,
                    format!("{}#{n_passages}", doc.id),
                    ChunkKind::Passage,
                    Some(section_id.clone()),
                    &header_path,
                    &p.text,
                    n_passages,
                ));
                n_passages += 1;
            }
        }
    }
    Ok(chunks)
}

/// The header path a section's chunks carry, their indexed text before their own (title and headings, one a
/// line, as [`Chunk::indexable_text`] writes them) and its tokens.
///
/// The crumb may take at most a quarter of the window: headings that are whole command lines (`## ragtune
/// calibrate --dataset DIR [--split train] …`) would otherwise leave no room for the passage. When it is over, each
/// heading is shortened to its first 16, 8, 4, 2 words, then 1, followed by `…`, until it fits (or is as short as
/// that makes it); the heading's own line stays whole in the text.
fn crumb(
    doc: &Document,
    header_path: &[String],
    tokens: &dyn TokenCounter,
    overhead: usize,
) -> Result<(Vec<String>, String, usize)> {
    let budget = tokens.window().saturating_sub(overhead) / 4;
    let mut best = None;
    for words in [usize::MAX, 16, 8, 4, 2, 1] {
        let path: Vec<String> = header_path.iter().map(|h| shorten(h, words)).collect();
        let prefix = make_chunk(doc, String::new(), ChunkKind::Passage, None, &path, "", 0).indexable_text();
        let n = measure(tokens, overhead, &[prefix.as_str()])?[0];
        let fits = n <= budget;
        best = Some((path, prefix, n));
        if fits {
            break;
        }
    }
    Ok(best.unwrap_or_default())
}

/// `heading`'s first `words` words followed by `…` when it has more.
fn shorten(heading: &str, words: usize) -> String {
    if heading.split_whitespace().nth(words).is_none() {
        return heading.to_owned();
    }
    let mut out = heading.split_whitespace().take(words).collect::<Vec<_>>().join(" ");
    out.push('…');
    out
}

/// The tokens of each text without the special tokens every count includes.
fn measure(tokens: &dyn TokenCounter, overhead: usize, texts: &[&str]) -> Result<Vec<usize>> {
    let counts = tokens.count(texts)?;
    if counts.len() != texts.len() {
        return Err(Error::corrupt(format!(
            "the token counter {} returned {} counts for {} texts",
            tokens.name(),
            counts.len(),
            texts.len()
        )));
    }
    Ok(counts.into_iter().map(|c| c.saturating_sub(overhead)).collect())
}

/// What one passage may hold: `tokens` of its own (the window less the special tokens and the header crumb) and
/// `words`.
struct Fit<'a> {
    counter: &'a dyn TokenCounter,
    overhead: usize,
    window: usize,
    tokens: usize,
    words: usize,
    /// The passage's indexed text before its own (title and headings), which the window holds too.
    prefix: &'a str,
}

impl Fit<'_> {
    fn measure(&self, texts: &[&str]) -> Result<Vec<usize>> {
        measure(self.counter, self.overhead, texts)
    }

    fn fits(&self, tokens: usize, words: usize) -> bool {
        tokens <= self.tokens && words <= self.words
    }
}

/// A passage: its text, and the span of the document it stands for.
struct Passage {
    text: String,
    span: Range<usize>,
}

/// Groups consecutive passages into sections of at most `max_words` words (at least one passage each).
fn group_sections(passages: &[Passage], max_words: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut words) = (0, 0);
    for (i, p) in passages.iter().enumerate() {
        let w = p.text.split_whitespace().count();
        if i > start && words + w > max_words {
            out.push(start..i);
            (start, words) = (i, 0);
        }
        words += w;
    }
    if start < passages.len() {
        out.push(start..passages.len());
    }
    out
}

/// The smallest unit a passage is packed from: a slice of the document (a block, a sentence, a line of a cut code
/// block or table, a word), with its counts. A line of a cut code block or table belongs to its block's `frame`,
/// which a passage holding any of its lines repeats around them.
#[derive(Debug, Clone)]
struct Atom {
    range: Range<usize>,
    frame: Option<usize>,
    tokens: usize,
    words: usize,
}

/// What a cut code block or table repeats around its lines in every passage that holds some of them: the opening
/// fence line (info string included) and the closing fence, or the header and delimiter rows; with their counts,
/// the block's span (`outer`) and where its first line starts and its last ends (a passage holding the first
/// stands for the block from its start, one holding the last to its end).
#[derive(Debug)]
struct Frame {
    open: String,
    close: Option<String>,
    tokens: usize,
    words: usize,
    outer: Range<usize>,
    first: usize,
    last: usize,
}

/// Whether two consecutive atoms are one word of the document (a block quote's `>` and the text right after it):
/// no cut may fall between them.
fn glued(before: &Atom, after: &Atom) -> bool {
    before.frame.is_none() && after.frame.is_none() && before.range.end >= after.range.start
}

/// The text of a run of atoms and the span of the document it stands for: unframed atoms as the document has them,
/// each run of a frame's lines inside the frame, joined by the document's own whitespace (a line break where a
/// framed piece meets its neighbour without any).
fn join(text: &str, atoms: &[Atom], frames: &[Frame]) -> (String, Range<usize>) {
    let mut out = String::new();
    let mut span: Option<Range<usize>> = None;
    let mut prev: Option<(usize, bool)> = None;
    let mut i = 0;
    while i < atoms.len() {
        let a = &atoms[i];
        let (piece, range, framed, next) = match a.frame.and_then(|f| frames.get(f)) {
            None => (text[a.range.clone()].to_owned(), a.range.clone(), false, i + 1),
            Some(frame) => {
                let mut j = i + 1;
                while j < atoms.len() && atoms[j].frame == a.frame {
                    j += 1;
                }
                let (first, last) = (a.range.start, atoms[j - 1].range.end);
                let start = if first == frame.first { frame.outer.start } else { first };
                let end = if last == frame.last { frame.outer.end } else { last };
                let mut piece = format!("{}\n{}", frame.open, &text[first..last]);
                if let Some(close) = &frame.close {
                    piece.push('\n');
                    piece.push_str(close);
                }
                (piece, start..end, true, j)
            }
        };
        if let Some((end, was_framed)) = prev {
            let gap = text.get(end..range.start).unwrap_or("");
            if gap.is_empty() && (framed || was_framed) {
                out.push('\n');
            } else {
                out.push_str(gap);
            }
        }
        out.push_str(&piece);
        span = Some(span.map_or(range.clone(), |s| s.start..range.end));
        prev = Some((range.end, framed));
        i = next;
    }
    (out, span.unwrap_or_default())
}

/// What a parsed block is, for cutting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Paragraphs, headings, HTML blocks: cut at sentence ends.
    Prose,
    /// A fenced code block: cut at line breaks, every piece fenced.
    Fenced,
    /// An indented code block: cut at line breaks.
    Indented,
    /// A table: cut at row breaks, every piece with the header and delimiter rows.
    Table,
    /// Lists, items, block quotes, footnotes, definition lists: cut into their inner blocks.
    Container,
}

/// A block of the parse tree and the blocks inside it (containers only).
#[derive(Debug)]
struct Block {
    kind: Kind,
    range: Range<usize>,
    children: Vec<Block>,
}

/// The blocks of `text[range]` as a CommonMark parser (with tables) sees it, outermost first, ranges in `text`.
fn parse_blocks(text: &str, range: Range<usize>) -> Vec<Block> {
    let offset = range.start;
    let mut stack: Vec<Block> = vec![Block { kind: Kind::Container, range: range.clone(), children: Vec::new() }];
    // For every open tag, whether it pushed a block; inside a leaf block (`leaf` open tags deep) nothing is.
    let mut opened: Vec<bool> = Vec::new();
    let mut leaf: Option<usize> = None;
    for (event, r) in Parser::new_ext(&text[range], Options::ENABLE_TABLES).into_offset_iter() {
        let r = r.start + offset..r.end + offset;
        match event {
            Event::Start(tag) => {
                let kind = match tag {
                    _ if leaf.is_some() => None,
                    Tag::Paragraph | Tag::Heading { .. } | Tag::HtmlBlock | Tag::MetadataBlock(_) => Some(Kind::Prose),
                    Tag::CodeBlock(CodeBlockKind::Fenced(_)) => Some(Kind::Fenced),
                    Tag::CodeBlock(CodeBlockKind::Indented) => Some(Kind::Indented),
                    Tag::Table(_) => Some(Kind::Table),
                    Tag::BlockQuote(_)
                    | Tag::List(_)
                    | Tag::Item
                    | Tag::FootnoteDefinition(_)
                    | Tag::DefinitionList
                    | Tag::DefinitionListTitle
                    | Tag::DefinitionListDefinition => Some(Kind::Container),
                    // Inline elements (the text of a tight list item) belong to the text around them.
                    _ => None,
                };
                opened.push(kind.is_some());
                if let Some(kind) = kind {
                    if kind != Kind::Container {
                        leaf = Some(opened.len());
                    }
                    stack.push(Block { kind, range: r, children: Vec::new() });
                }
            }
            Event::End(_) => {
                if leaf == Some(opened.len()) {
                    leaf = None;
                }
                if opened.pop() == Some(true)
                    && stack.len() > 1
                    && let Some(mut block) = stack.pop()
                {
                    block.range.end = trim_end(text, block.range.clone());
                    if let Some(parent) = stack.last_mut() {
                        parent.children.push(block);
                    }
                }
            }
            _ => {}
        }
    }
    // A well-formed event stream closes every block; whatever is still open is kept as it is.
    while stack.len() > 1 {
        if let Some(block) = stack.pop()
            && let Some(parent) = stack.last_mut()
        {
            parent.children.push(block);
        }
    }
    stack.pop().map(|root| root.children).unwrap_or_default()
}

/// `range.end` moved back over trailing whitespace (never before `range.start`).
fn trim_end(text: &str, range: Range<usize>) -> usize {
    range.start + text[range.clone()].trim_end().len()
}

/// `range` without leading and trailing whitespace.
fn trim(text: &str, range: Range<usize>) -> Range<usize> {
    let s = &text[range.clone()];
    let start = range.start + (s.len() - s.trim_start().len());
    start..trim_end(text, start..range.end)
}

/// Byte ranges of the lines of `text[range]`, without their line breaks (`\n` or `\r\n`).
fn line_ranges(text: &str, range: Range<usize>) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = range.start;
    for (i, b) in text[range.clone()].bytes().enumerate() {
        if b == b'\n' {
            let end = range.start + i;
            let end = if end > start && text.as_bytes()[end - 1] == b'\r' { end - 1 } else { end };
            out.push(start..end);
            start = range.start + i + 1;
        }
    }
    if start < range.end || out.is_empty() {
        out.push(start..range.end);
    }
    out
}

/// Packs one section into passages: blocks whole while they fit, cut (into items, sentences, lines, words) when
/// they do not.
struct Packer<'a> {
    text: &'a str,
    fit: &'a Fit<'a>,
    atoms: Vec<Atom>,
    frames: Vec<Frame>,
    /// The passages so far, as runs of `atoms`.
    runs: Vec<Range<usize>>,
    /// The open passage: its first atom and its counts (frames included).
    start: usize,
    tokens: usize,
    words: usize,
}

impl<'a> Packer<'a> {
    fn new(text: &'a str, fit: &'a Fit<'a>) -> Self {
        Self { text, fit, atoms: Vec::new(), frames: Vec::new(), runs: Vec::new(), start: 0, tokens: 0, words: 0 }
    }

    /// The passages of the section at `range`.
    fn section(mut self, range: Range<usize>) -> Result<Vec<Passage>> {
        let blocks = parse_blocks(self.text, range.clone());
        self.children(range, &blocks)?;
        if self.start < self.atoms.len() {
            self.runs.push(self.start..self.atoms.len());
        }
        self.finish()
    }

    /// What `atom` adds to the open passage: its counts, and its frame's when the passage does not hold it yet.
    fn cost(&self, atom: &Atom) -> (usize, usize) {
        let open = self.atoms.len() > self.start && self.atoms.last().is_some_and(|l| l.frame == atom.frame);
        match atom.frame.and_then(|f| self.frames.get(f)) {
            Some(frame) if !open => (atom.tokens + frame.tokens, atom.words + frame.words),
            _ => (atom.tokens, atom.words),
        }
    }

    fn has_room(&self, tokens: usize, words: usize) -> bool {
        self.fit.fits(self.tokens + tokens, self.words + words)
    }

    /// Whether the open passage holds something but less than a quarter of what it may (a heading, a lead-in
    /// line): rather than leave it so, the next block is cut to fill it.
    fn thin(&self) -> bool {
        self.atoms.len() > self.start && self.tokens * 4 <= self.fit.tokens
    }

    /// Adds `atom` to the open passage, closing the passage first when the atom does not fit in it.
    fn push(&mut self, atom: Atom) {
        let (mut t, mut w) = self.cost(&atom);
        let cut_ok = self.atoms.last().is_none_or(|l| !glued(l, &atom));
        if self.atoms.len() > self.start && !self.has_room(t, w) && cut_ok {
            self.runs.push(self.start..self.atoms.len());
            (self.start, self.tokens, self.words) = (self.atoms.len(), 0, 0);
            (t, w) = self.cost(&atom);
        }
        self.tokens += t;
        self.words += w;
        self.atoms.push(atom);
    }

    /// The blocks of a container's text, and as prose whatever lies between them (list markers, link reference
    /// definitions, the text of tight list items): each whole when it fits, else cut.
    fn children(&mut self, range: Range<usize>, blocks: &[Block]) -> Result<()> {
        let mut parts: Vec<(Range<usize>, Option<&Block>)> = Vec::new();
        let mut pos = range.start;
        for b in blocks {
            if b.range.start > pos && has_words(&self.text[pos..b.range.start]) {
                parts.push((trim(self.text, pos..b.range.start), None));
            }
            parts.push((b.range.clone(), Some(b)));
            pos = pos.max(b.range.end);
        }
        if range.end > pos && has_words(&self.text[pos..range.end]) {
            parts.push((trim(self.text, pos..range.end), None));
        }
        // Every block is measured whole once; only those that do not fit are cut.
        let texts: Vec<&str> = parts.iter().map(|(r, _)| &self.text[r.clone()]).collect();
        let tokens = self.fit.measure(&texts)?;
        for ((r, block), t) in parts.into_iter().zip(tokens) {
            let words = self.text[r.clone()].split_whitespace().count();
            if words == 0 {
                continue;
            }
            let whole = Atom { range: r.clone(), frame: None, tokens: t, words };
            if self.has_room(t, words) || (self.fit.fits(t, words) && !self.thin()) {
                self.push(whole);
                continue;
            }
            match block {
                Some(b) if b.kind == Kind::Container && !b.children.is_empty() => {
                    self.children(b.range.clone(), &b.children)?;
                }
                Some(b) if b.kind == Kind::Fenced => self.fenced(b.range.clone())?,
                Some(b) if b.kind == Kind::Table => self.table(b.range.clone())?,
                Some(b) if b.kind == Kind::Indented => self.lines(r, None)?,
                _ => self.prose(r)?,
            }
        }
        Ok(())
    }

    /// Prose cut at sentence ends; a sentence too large for a passage of its own is cut between words.
    fn prose(&mut self, range: Range<usize>) -> Result<()> {
        let spans: Vec<Range<usize>> = word_spans(&self.text[range.clone()])
            .into_iter()
            .map(|s| s.start + range.start..s.end + range.start)
            .collect();
        let mut sentences = Vec::new();
        let mut start = 0;
        for (i, w) in spans.iter().enumerate() {
            if ends_sentence(&self.text[w.clone()]) || i + 1 == spans.len() {
                sentences.push(start..i + 1);
                start = i + 1;
            }
        }
        let texts: Vec<&str> =
            sentences.iter().map(|s| &self.text[spans[s.start].start..spans[s.end - 1].end]).collect();
        let tokens = self.fit.measure(&texts)?;
        for (s, t) in sentences.into_iter().zip(tokens) {
            let r = spans[s.start].start..spans[s.end - 1].end;
            if self.fit.fits(t, s.len()) {
                self.push(Atom { range: r, frame: None, tokens: t, words: s.len() });
            } else {
                self.words(&spans[s], None)?;
            }
        }
        Ok(())
    }

    /// One atom per word, of `frame` when given.
    fn words(&mut self, spans: &[Range<usize>], frame: Option<usize>) -> Result<()> {
        let texts: Vec<&str> = spans.iter().map(|w| &self.text[w.clone()]).collect();
        let tokens = self.fit.measure(&texts)?;
        for (w, t) in spans.iter().zip(tokens) {
            self.push(Atom { range: w.clone(), frame, tokens: t, words: 1 });
        }
        Ok(())
    }

    /// A fenced code block cut at line breaks, every passage's share of it between the block's opening fence line
    /// and its closing fence (the opening fence's characters when the block is not closed).
    fn fenced(&mut self, range: Range<usize>) -> Result<()> {
        let start = line_start(self.text, range.start);
        let lines = line_ranges(self.text, start..range.end);
        let open = self.text[lines[0].clone()].to_owned();
        let marker = fence_marker(&open);
        let (inner, close) = match lines.split_last() {
            Some((last, inner)) if lines.len() > 1 && is_closing_fence(&self.text[last.clone()], &marker) => {
                (inner.get(1..).unwrap_or_default(), self.text[last.clone()].to_owned())
            }
            _ => (lines.get(1..).unwrap_or_default(), format!("{}{marker}", fence_indent(&open))),
        };
        if inner.is_empty() {
            return self.prose(range);
        }
        match self.frame(open, Some(close), start..range.end)? {
            Some(frame) => self.lines(start..range.end, Some((frame, inner))),
            None => self.lines(range, None),
        }
    }

    /// A table cut at row breaks, every passage's share of it after the table's header and delimiter rows.
    fn table(&mut self, range: Range<usize>) -> Result<()> {
        let start = line_start(self.text, range.start);
        let lines = line_ranges(self.text, start..range.end);
        if lines.len() < 3 {
            return self.prose(range);
        }
        let head = format!("{}\n{}", &self.text[lines[0].clone()], &self.text[lines[1].clone()]);
        match self.frame(head, None, start..range.end)? {
            Some(frame) => self.lines(start..range.end, Some((frame, &lines[2..]))),
            None => self.lines(range, None),
        }
    }

    /// The frame of a cut block spanning `outer`, with its counts, when it leaves room for a line in a passage.
    fn frame(&self, open: String, close: Option<String>, outer: Range<usize>) -> Result<Option<Frame>> {
        let whole = format!("{open}\n{}", close.as_deref().unwrap_or(""));
        let tokens = self.fit.measure(&[whole.as_str()])?[0];
        let words = whole.split_whitespace().count();
        let room = tokens < self.fit.tokens && words < self.fit.words;
        Ok(room.then_some(Frame { open, close, tokens, words, outer, first: 0, last: 0 }))
    }

    /// Lines of a block: `framed` lines inside their frame, else every line of `range` (from the start of its
    /// first line) as it is; a line too large for a passage of its own is cut between words.
    fn lines(&mut self, range: Range<usize>, framed: Option<(Frame, &[Range<usize>])>) -> Result<()> {
        let own;
        let (frame, lines) = match framed {
            Some((frame, lines)) => (Some(frame), lines),
            None => {
                own = line_ranges(self.text, line_start(self.text, range.start)..range.end);
                (None, own.as_slice())
            }
        };
        let lines: Vec<Range<usize>> = lines.iter().filter(|l| has_words(&self.text[(*l).clone()])).cloned().collect();
        if lines.is_empty() {
            return Ok(());
        }
        let (frame_tokens, frame_words) = frame.as_ref().map_or((0, 0), |f| (f.tokens, f.words));
        let id = frame.map(|f| {
            self.frames.push(f);
            self.frames.len() - 1
        });
        let first_atom = self.atoms.len();
        let texts: Vec<&str> = lines.iter().map(|l| &self.text[l.clone()]).collect();
        let tokens = self.fit.measure(&texts)?;
        for (l, t) in lines.iter().zip(tokens) {
            let words = self.text[l.clone()].split_whitespace().count();
            if self.fit.fits(frame_tokens + t, frame_words + words) {
                self.push(Atom { range: l.clone(), frame: id, tokens: t, words });
            } else {
                let spans: Vec<Range<usize>> =
                    word_spans(&self.text[l.clone()]).into_iter().map(|s| s.start + l.start..s.end + l.start).collect();
                self.words(&spans, id)?;
            }
        }
        // The frame's first and last atoms (a line, or the first or last word of a line cut into words) stand for
        // the block's start and end.
        if let (Some(f), Some(first), Some(last)) =
            (id.and_then(|f| self.frames.get_mut(f)), self.atoms.get(first_atom), self.atoms.last())
        {
            (f.first, f.last) = (first.range.start, last.range.end);
        }
        Ok(())
    }

    /// The passages' texts, every one counted whole; a passage whose whole count is over the window (a tokenizer
    /// that is not additive over blocks) is packed again, counting each step.
    fn finish(self) -> Result<Vec<Passage>> {
        let joined: Vec<(String, Range<usize>)> =
            self.runs.iter().map(|r| join(self.text, &self.atoms[r.clone()], &self.frames)).collect();
        let whole: Vec<String> = joined.iter().map(|(t, _)| format!("{}{t}", self.fit.prefix)).collect();
        let counts = self.fit.counter.count(&whole.iter().map(String::as_str).collect::<Vec<_>>())?;
        let mut out = Vec::with_capacity(self.runs.len());
        for ((run, (text, span)), count) in self.runs.iter().zip(joined).zip(counts) {
            if count <= self.fit.window || run.len() == 1 {
                out.push(Passage { text, span });
            } else {
                self.pack_counting(run.clone(), &mut out)?;
            }
        }
        Ok(out)
    }

    /// Packs the atoms of `run` one at a time, counting each candidate passage whole.
    fn pack_counting(&self, run: Range<usize>, out: &mut Vec<Passage>) -> Result<()> {
        let passage = |r: Range<usize>| {
            let (text, span) = join(self.text, &self.atoms[r], &self.frames);
            Passage { text, span }
        };
        let mut start = run.start;
        for i in run.start + 1..run.end {
            let (candidate, _) = join(self.text, &self.atoms[start..=i], &self.frames);
            let words = candidate.split_whitespace().count();
            let whole = format!("{}{candidate}", self.fit.prefix);
            let count = self.fit.counter.count(&[whole.as_str()])?.first().copied().unwrap_or(0);
            if (count > self.fit.window || words > self.fit.words) && !glued(&self.atoms[i - 1], &self.atoms[i]) {
                out.push(passage(start..i));
                start = i;
            }
        }
        out.push(passage(start..run.end));
        Ok(())
    }
}

/// The start of the line holding `pos`, when everything before `pos` on that line is indentation or block-quote
/// markers (so that a piece rebuilt from whole lines keeps them); else `pos`.
fn line_start(text: &str, pos: usize) -> usize {
    let start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    if text[start..pos].chars().all(|c| c == ' ' || c == '\t' || c == '>') { start } else { pos }
}

/// The fence characters that open a fenced code block on `line` (three or more backticks or tildes).
fn fence_marker(line: &str) -> String {
    let body = line.trim_start_matches([' ', '\t', '>']);
    let c = body.chars().next().unwrap_or('`');
    let c = if c == '~' { '~' } else { '`' };
    let n = body.chars().take_while(|&x| x == c).count().max(3);
    std::iter::repeat_n(c, n).collect()
}

/// The indentation and block-quote markers before a fence line's fence.
fn fence_indent(line: &str) -> &str {
    let body = line.trim_start_matches([' ', '\t', '>']);
    &line[..line.len() - body.len()]
}

/// Whether `line` closes a code block opened by `marker`: at least as many of its characters and nothing else.
fn is_closing_fence(line: &str, marker: &str) -> bool {
    let body = line.trim_start_matches([' ', '\t', '>']).trim_end();
    let c = marker.chars().next().unwrap_or('`');
    !body.is_empty() && body.chars().all(|x| x == c) && body.len() >= marker.len()
}

/// Whether a word ends a sentence: it ends with `.`, `!` or `?`, before any closing quotes, brackets or emphasis.
fn ends_sentence(word: &str) -> bool {
    let word = word.trim_end_matches(['"', '\'', ')', ']', '\u{201d}', '\u{2019}', '*', '_', '`']);
    word.ends_with(['.', '!', '?'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One token per whitespace-separated word and per punctuation character, plus two special tokens: close
    /// enough to a word-piece tokenizer for the tests, and exactly additive.
    #[derive(Debug)]
    struct Words(usize);

    impl TokenCounter for Words {
        fn name(&self) -> &str {
            "words"
        }
        fn window(&self) -> usize {
            self.0
        }
        fn count(&self, texts: &[&str]) -> Result<Vec<usize>> {
            Ok(texts.iter().map(|t| Self::tokens(t) + 2).collect())
        }
    }

    impl Words {
        fn tokens(t: &str) -> usize {
            t.split(|c: char| c.is_whitespace() || c.is_ascii_punctuation()).filter(|w| !w.is_empty()).count()
                + t.chars().filter(char::is_ascii_punctuation).count()
        }
    }

    fn cfg(chunk_size: usize, max_section_size: usize) -> ChunkerConfig {
        ChunkerConfig { chunk_size, chunk_overlap: 0, max_section_size }
    }

    /// Chunks `text` (Markdown, id `d`, title `T`) and renders one line per chunk: `s0 [A > B] "text"` for
    /// sections and `  0 "text"` for their passages.
    fn check(text: &str, window: usize, cfg: ChunkerConfig, expect: &str) {
        let mut doc = Document::new("d", text);
        doc.title = Some("T".into());
        let chunks = chunk_markdown(&doc, &cfg, &Words(window)).unwrap();
        assert_eq!(crate::chunk::tests::render(&chunks), expect);
    }

    #[test]
    fn front_matter_is_not_indexed_and_gives_a_title() {
        let text = "---\ntitle: \"Install guide\"\ntags: [a, b]\n---\n\nBody text.\n";
        assert_eq!(front_matter_len(text), "---\ntitle: \"Install guide\"\ntags: [a, b]\n---\n".len());
        assert_eq!(front_matter_title(text).as_deref(), Some("Install guide"));
        check(text, 64, ChunkerConfig::default(), "s0 [] \"Body text.\"\n  0 \"Body text.\"\n");
        // `...` closes too; CRLF line ends; a byte order mark before it.
        assert_eq!(front_matter_len("\u{feff}---\r\na: 1\r\n...\r\nx"), "\u{feff}---\r\na: 1\r\n...\r\n".len());
        // Only front matter: nothing to index.
        check("---\nkey: value\n---\n", 64, ChunkerConfig::default(), "");
    }

    #[test]
    fn thematic_breaks_and_unclosed_blocks_are_not_front_matter() {
        for text in ["---\n\nSome text\n\n---\n", "---\nkey: value\nno end", "text\n---\nkey: v\n---\n", "--- \n---\n"]
        {
            assert_eq!(front_matter_len(text), 0, "{text:?}");
            assert_eq!(front_matter_title(text), None);
        }
        check(
            "---\n\nAfter a rule.\n",
            64,
            ChunkerConfig::default(),
            "s0 [] \"---\\n\\nAfter a rule.\"\n  0 \"---\\n\\nAfter a rule.\"\n",
        );
    }

    #[test]
    fn passages_carry_the_header_crumb_and_count_it() {
        let mut doc = Document::new("d", "# Guide\nIntro.\n## Install\nRun make.\n");
        doc.title = Some("Guide".into());
        let chunks = chunk_markdown(&doc, &ChunkerConfig::default(), &Words(64)).unwrap();
        let passages: Vec<&Chunk> = chunks.iter().filter(|c| c.kind == ChunkKind::Passage).collect();
        let crumbs: Vec<String> = passages.iter().map(|p| p.header_path.join(" > ")).collect();
        assert_eq!(crumbs, ["Guide", "Guide > Install"]);
        assert_eq!(passages[1].indexable_text(), "Guide\nInstall\n## Install\nRun make.");
        // The crumb takes room in the window: `Guide Install` (2) + `## Install Run make.` (6) + 2 special = 10.
        let tight = chunk_markdown(&doc, &ChunkerConfig::default(), &Words(9)).unwrap();
        let texts: Vec<&str> = tight.iter().filter(|c| c.kind == ChunkKind::Passage).map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["# Guide\nIntro.", "## Install", "Run make."]);
    }

    #[test]
    fn blocks_pack_up_to_the_window_and_long_paragraphs_cut_at_sentences() {
        // Window 12: 9 tokens of text per passage (2 special tokens, 1 for the title `T`); a word and a
        // punctuation character are a token each.
        check(
            "One two. Three four.\n\nFive six.\n\nSeven eight nine ten eleven. Twelve thirteen fourteen. Fifteen.\n",
            12,
            ChunkerConfig::default(),
            "s0 [] \"One two. Three four.\\n\\nFive six.\\n\\nSeven eight nine ten eleven. Twelve thirteen fourteen. Fifteen.\"\n\
             \x20 0 \"One two. Three four.\\n\\nFive six.\"\n\
             \x20 1 \"Seven eight nine ten eleven.\"\n\
             \x20 2 \"Twelve thirteen fourteen. Fifteen.\"\n",
        );
        // Words as the limit, and a sentence too long for it cut between words.
        check(
            "a b c d e f g h.",
            1000,
            cfg(3, 1000),
            "s0 [] \"a b c d e f g h.\"\n  0 \"a b c\"\n  1 \"d e f\"\n  2 \"g h.\"\n",
        );
    }

    #[test]
    fn code_blocks_are_cut_at_lines_and_fenced_again() {
        // Window 14: 11 tokens of text; the fence lines take 7 (`sh` and six backticks), a line 2. The lead-in
        // `Run:` (2) would leave its passage under a quarter full, so the block is cut to join it.
        check(
            "Run:\n\n```sh\none two\nthree four\nfive six\n```\n",
            14,
            ChunkerConfig::default(),
            "s0 [] \"Run:\\n\\n```sh\\none two\\nthree four\\nfive six\\n```\"\n\
             \x20 0 \"Run:\\n\\n```sh\\none two\\n```\"\n\
             \x20 1 \"```sh\\nthree four\\nfive six\\n```\"\n",
        );
    }

    #[test]
    fn a_code_line_too_long_for_a_passage_is_cut_between_words_inside_the_fences() {
        // Window 14: 11 tokens; the fences take 6, so a piece holds 5 words of the 8-word first line (3 beside the
        // lead-in `Intro.`, which is too thin a passage alone).
        check(
            "Intro.\n\n```\n  a b c d e f g h\ni j\n```",
            14,
            ChunkerConfig::default(),
            "s0 [] \"Intro.\\n\\n```\\n  a b c d e f g h\\ni j\\n```\"\n\
             \x20 0 \"Intro.\\n\\n```\\na b c\\n```\"\n\
             \x20 1 \"```\\nd e f g h\\n```\"\n\
             \x20 2 \"```\\ni j\\n```\"\n",
        );
    }

    #[test]
    fn tables_are_cut_at_rows_and_keep_their_header() {
        check(
            "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n| 5 | 6 |\n",
            30,
            ChunkerConfig::default(),
            "s0 [] \"| a | b |\\n|---|---|\\n| 1 | 2 |\\n| 3 | 4 |\\n| 5 | 6 |\"\n\
             \x20 0 \"| a | b |\\n|---|---|\\n| 1 | 2 |\\n| 3 | 4 |\"\n\
             \x20 1 \"| a | b |\\n|---|---|\\n| 5 | 6 |\"\n",
        );
    }

    #[test]
    fn lists_are_cut_into_items() {
        check(
            "- alpha beta gamma.\n- delta epsilon.\n- zeta eta theta.\n",
            12,
            ChunkerConfig::default(),
            "s0 [] \"- alpha beta gamma.\\n- delta epsilon.\\n- zeta eta theta.\"\n\
             \x20 0 \"- alpha beta gamma.\\n- delta epsilon.\"\n\
             \x20 1 \"- zeta eta theta.\"\n",
        );
    }

    #[test]
    fn sections_group_passages_up_to_their_word_limit() {
        check(
            "# H\nw1 w2.\n\nw3 w4.\n\nw5 w6.\n",
            1000,
            cfg(3, 4),
            "s0 [H] \"# H\\nw1 w2.\"\n  0 \"# H\"\n  1 \"w1 w2.\"\n\
             s1 [H] \"w3 w4.\\n\\nw5 w6.\"\n  2 \"w3 w4.\"\n  3 \"w5 w6.\"\n",
        );
    }

    #[test]
    fn headings_too_long_for_a_quarter_of_the_window_are_shortened_in_the_crumb() {
        // Window 40: the crumb may take (40 - 2) / 4 = 9 tokens; `T` is one, each heading word one (`g…` too), so
        // the 11 words are cut to 8.
        let heading = "## run a b c d e f g h i j";
        let mut doc = Document::new("d", format!("{heading}\n\nBody text."));
        doc.title = Some("T".into());
        let chunks = chunk_markdown(&doc, &ChunkerConfig::default(), &Words(40)).unwrap();
        assert!(chunks.iter().all(|c| c.header_path == ["run a b c d e f g…"]), "{chunks:#?}");
        assert!(chunks[1].text.starts_with(heading), "the heading line stays whole: {:?}", chunks[1].text);
        assert_eq!(shorten("a b c", 3), "a b c");
        assert_eq!(shorten("a b c", 2), "a b…");
    }

    #[test]
    fn a_block_quote_marker_and_the_word_after_it_are_never_cut_apart() {
        // `>` is the quote's and `{…}` its paragraph's, but without a space they are one word of the text; the
        // word is longer than the window, so the passage is over it rather than cut inside the word.
        let word = format!("{{{}}}", "x!".repeat(40));
        let doc = Document::new("d", format!(">{word}"));
        let chunks = chunk_markdown(&doc, &ChunkerConfig::default(), &EstimatedTokens::new(64)).unwrap();
        let texts: Vec<&str> =
            chunks.iter().filter(|c| c.kind == ChunkKind::Passage).map(|c| c.text.as_str()).collect();
        assert_eq!(texts, [format!(">{word}")]);
    }

    #[test]
    fn a_window_of_special_tokens_only_is_refused() {
        let e = chunk_markdown(&Document::new("d", "x"), &ChunkerConfig::default(), &Words(2)).unwrap_err();
        assert_eq!(e.kind(), ragtune_core::ErrorKind::InvalidInput);
    }

    #[test]
    fn the_estimate_counts_runs_and_punctuation_with_its_margin() {
        let e = EstimatedTokens::new(256);
        // `embedding`: 3; `BM25`: 1 + 1; `,`: 1; `a`: 1 → 7, raised by a ninth → 8, plus 2.
        assert_eq!(e.count(&["embedding BM25, a", ""]).unwrap(), [10, 2]);
        assert_eq!((e.name(), e.window()), ("estimate", 256));
    }

    // Generated Markdown: headings, prose paragraphs, lists, fenced code and tables, with words of 1–12 letters.

    fn word() -> impl Strategy<Value = String> {
        "[a-z]{1,12}[.,]?".prop_map(String::from)
    }

    fn sentence() -> impl Strategy<Value = String> {
        prop::collection::vec(word(), 1..30).prop_map(|w| format!("{}.", w.join(" ")))
    }

    fn block() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::collection::vec(sentence(), 1..8).prop_map(|s| s.join(" ")),
            (1usize..4, "[a-z]{1,8}( [a-z]{1,8}){0,3}").prop_map(|(l, t)| format!("{} {t}", "#".repeat(l))),
            prop::collection::vec(sentence(), 1..6).prop_map(|s| s.iter().map(|s| format!("- {s}\n")).collect()),
            (prop::collection::vec("[a-z(){};=]{1,10}( [a-z(){};=]{1,10}){0,8}", 1..40), "(rust|sh|)")
                .prop_map(|(lines, info)| format!("```{info}\n{}\n```", lines.join("\n"))),
            // A list item holding a code block, and a block quote.
            (sentence(), prop::collection::vec("[a-z(){};=]{1,10}( [a-z]{1,10}){0,8}", 1..30))
                .prop_map(|(s, lines)| format!("1. {s}\n\n   ```sh\n   {}\n   ```", lines.join("\n   "))),
            prop::collection::vec(sentence(), 1..12).prop_map(|s| format!("> {}", s.join("\n> "))),
            (1usize..4, prop::collection::vec(prop::collection::vec("[a-z0-9]{1,8}", 3), 1..30)).prop_map(
                |(_, rows)| {
                    let mut t = String::from("| k | v | w |\n|---|---|---|\n");
                    for r in rows {
                        t.push_str(&format!("| {} | {} | {} |\n", r[0], r[1], r[2]));
                    }
                    t
                }
            ),
        ]
    }

    fn markdown() -> impl Strategy<Value = String> {
        (prop::bool::ANY, prop::collection::vec(block(), 0..12)).prop_map(|(fm, blocks)| {
            let front = if fm { "---\ntitle: Generated\nlayout: page\n---\n" } else { "" };
            format!("{front}{}", blocks.join("\n\n"))
        })
    }

    /// Whether `needle` appears in `hay` in order (not necessarily contiguously).
    fn is_subsequence(needle: &[&str], hay: &[&str]) -> bool {
        let mut it = hay.iter();
        needle.iter().all(|w| it.any(|h| h == w))
    }

    proptest! {
        #[test]
        fn every_passage_fits_keeps_words_whole_and_loses_none(
            text in markdown(),
            window in 64usize..300,
            chunk_size in 16usize..200,
        ) {
            let counter = Words(window);
            let cfg = ChunkerConfig { chunk_size, chunk_overlap: 0, max_section_size: 300 };
            let mut doc = Document::new("d", text.as_str());
            doc.title = Some("Generated".into());
            let chunks = chunk_markdown(&doc, &cfg, &counter).unwrap();
            let passages: Vec<&Chunk> = chunks.iter().filter(|c| c.kind == ChunkKind::Passage).collect();
            let body = &text[front_matter_len(&text)..];
            let body_words: Vec<&str> = body.split_whitespace().collect();
            // Every passage fits the window with its crumb, and the word limit.
            for p in &passages {
                let n = counter.count(&[&p.indexable_text()]).unwrap()[0];
                prop_assert!(n <= window, "{n} tokens > {window}: {:?}", p.indexable_text());
                prop_assert!(p.text.split_whitespace().count() <= chunk_size, "{:?}", p.text);
                // No word is cut: every word of a passage is a word of the document (or a fence line's).
                for w in p.text.split_whitespace() {
                    prop_assert!(body_words.contains(&w) || w.starts_with("```"), "cut word {w:?} in {:?}", p.text);
                }
                // Code stays fenced: an even number of fence lines in every passage.
                let fences = p.text.lines().filter(|l| l.trim_start().starts_with("```")).count();
                prop_assert!(fences % 2 == 0, "unbalanced fences in {:?}", p.text);
                // A table piece keeps its header row before its delimiter row.
                for (i, l) in p.text.lines().enumerate() {
                    if l.starts_with("| ") && !l.starts_with("| k |") {
                        let before: Vec<&str> = p.text.lines().take(i).collect();
                        prop_assert!(before.contains(&"| k | v | w |") && before.contains(&"|---|---|---|"), "row without header in {:?}", p.text);
                    }
                }
            }
            // Concatenated, the passages hold every word of the body in order; front matter is in none.
            let all: Vec<&str> = passages.iter().flat_map(|p| p.text.split_whitespace()).collect();
            prop_assert!(is_subsequence(&body_words, &all), "words lost");
            prop_assert!(!all.contains(&"layout:"));
            // Sections hold every word of the body exactly, in order, and every passage has its section.
            let section_words: Vec<&str> = chunks.iter().filter(|c| c.kind == ChunkKind::Section).flat_map(|c| c.text.split_whitespace()).collect();
            prop_assert_eq!(section_words, body_words);
            for p in &passages {
                let parent = p.parent_id.as_deref().unwrap_or_default();
                prop_assert!(chunks.iter().any(|c| c.kind == ChunkKind::Section && c.id == parent));
            }
        }

        #[test]
        fn the_estimate_is_conservative_on_generated_markdown_and_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let text = String::from_utf8_lossy(&bytes);
            let chunks = chunk_markdown(&Document::new("d", text.as_ref()), &ChunkerConfig::default(), &EstimatedTokens::new(64)).unwrap();
            let words: Vec<&str> = chunks.iter().filter(|c| c.kind == ChunkKind::Passage).flat_map(|c| c.text.split_whitespace()).collect();
            let body = &text[front_matter_len(&text)..];
            prop_assert!(is_subsequence(&body.split_whitespace().collect::<Vec<_>>(), &words));
        }
    }
}
