//! Query-focused extraction: one batched LLM call copies the sentences of the retrieved chunks that answer the
//! question, and every copy is verified against its source before it is used.
//!
//! A small model asked to "copy sentences" paraphrases, merges and invents. So each returned sentence is looked up
//! in the document it names (after normalising case, quotes, dashes, whitespace and trailing punctuation); a copy
//! found in another document is attributed to that one, anything else is rejected with a reason. What is kept is
//! the source's own wording, never the model's. When the call fails or too little survives verification, the
//! caller's knowledge refinement ([`Refined`]) is returned instead, marked as a fallback with its reason, so
//! extraction never leaves the generator with less than lexical refinement would have.
//!
//! ```
//! use ragtune_evaluators::refine::decompose;
//! use ragtune_evaluators::text::estimate_tokens;
//!
//! // The fallback's strips come from `decompose`; extraction reports tokens with the same estimate as refinement.
//! assert_eq!(decompose("Scurvy is caused by a lack of vitamin C. Lemons cure it quickly.", 25).len(), 2);
//! assert_eq!(estimate_tokens("Scurvy is caused by a lack of vitamin C."), 12);
//! ```

use std::sync::Arc;

use ragtune_core::prompt::{generate_json, raw_output};
use ragtune_core::{Candidate, Cost, Ctx, Llm, Prompt, Result, TraceEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::refine::Refined;
use crate::text::estimate_tokens;

/// Limits of query-focused extraction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExtractConfig {
    /// Each document is cut to this many characters in the prompt (at a character boundary), so one long chunk
    /// cannot crowd the others out of a small model's context.
    pub max_chars_per_doc: usize,
    /// Fewer verified characters than this count as an empty extraction and fall back.
    pub min_chars: usize,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        Self { max_chars_per_doc: 1500, min_chars: 50 }
    }
}

/// How an [`Extraction`] was produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ExtractionMethod {
    /// The LLM's copies, verified against the sources.
    Llm,
    /// The refined strips the caller passed, because extraction failed or found too little.
    Fallback {
        /// Why extraction was not used.
        reason: String,
    },
}

/// The verified sentences of one chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractedPassage {
    /// The chunk.
    pub chunk_id: String,
    /// Its document.
    pub doc_id: String,
    /// The chunk's title, for citations.
    pub title: Option<String>,
    /// The sentences in the source's wording, in source order, without duplicates.
    pub sentences: Vec<String>,
}

/// A sentence of the LLM's answer that did not pass verification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejected {
    /// The document number the model gave (1-based; 0 when it gave none).
    pub doc: usize,
    /// What the model wrote.
    pub sentence: String,
    /// Why it was rejected (`not found in document 2`, `no document 7`).
    pub reason: String,
}

/// The result of [`Extractor::extract`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extraction {
    /// One passage per chunk with a sentence, in input order.
    pub passages: Vec<ExtractedPassage>,
    /// Whether these are the LLM's verified copies or the fallback.
    pub method: ExtractionMethod,
    /// The model's sentences that failed verification.
    pub rejected: Vec<Rejected>,
    /// How many distinct sentences of the model passed verification (also when the result fell back).
    pub verified: usize,
    /// Estimated tokens of the passages ([`estimate_tokens`]).
    pub tokens_after: usize,
    /// What the LLM call cost, repair included.
    pub cost: Cost,
    /// The prompt used, as `id@version`.
    pub prompt: String,
}

impl Extraction {
    /// Whether there is no sentence at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.passages.iter().all(|p| p.sentences.is_empty())
    }

    /// The number of characters (not bytes) of all sentences.
    #[must_use]
    pub fn text_len(&self) -> usize {
        self.passages.iter().flat_map(|p| &p.sentences).map(|s| s.chars().count()).sum()
    }
}

/// Extracts the sentences that answer a query from retrieved chunks with one LLM call, verified against the
/// sources.
///
/// Cost model: one LLM call over all candidates (two when the answer needs a JSON repair); prompt tokens grow
/// with the candidates, up to `max_chars_per_doc` characters each.
#[derive(Debug)]
pub struct Extractor {
    llm: Arc<dyn Llm>,
    prompt: Prompt,
    repair: Prompt,
    config: ExtractConfig,
}

impl Extractor {
    /// An extractor with the extraction prompt (placeholders `query` and `documents`; answer
    /// `{"extracts": [{"doc": n, "sentence": "..."}]}`, as `ragtune_llm::prompts::EXTRACT`) and the JSON repair
    /// prompt (`ragtune_llm::prompts::REPAIR_JSON`).
    #[must_use]
    pub fn new(llm: Arc<dyn Llm>, prompt: Prompt, repair: Prompt, config: ExtractConfig) -> Self {
        Self { llm, prompt, repair, config }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ExtractConfig {
        &self.config
    }

    /// Extracts the sentences of `candidates` that answer `query`, or returns `fallback`'s kept strips.
    ///
    /// The documents are numbered `[1]..[n]` in the prompt as `[n] (title) text`. Each returned sentence is
    /// verified to occur, at word boundaries, in the document it names after normalising both (lowercase, one
    /// kind of quote and dash, collapsed whitespace, no trailing punctuation); a sentence found in another
    /// document is attributed to that one; anything else is [`Rejected`]. Kept sentences are the matching span of
    /// the source, extended over closing punctuation. The fallback ([`ExtractionMethod::Fallback`]) is returned
    /// when the call fails (a malformed answer after one repair included), nothing is verified, or fewer than
    /// `min_chars` characters are. No candidates give an empty extraction without a call.
    ///
    /// # Errors
    /// Only `Cancelled`/`DeadlineExceeded` from `ctx`; every other failure falls back.
    pub async fn extract(
        &self,
        ctx: &Ctx,
        query: &str,
        candidates: &[Candidate],
        fallback: &Refined,
    ) -> Result<Extraction> {
        ctx.check()?;
        let mut out = Extraction {
            passages: Vec::new(),
            method: ExtractionMethod::Llm,
            rejected: Vec::new(),
            verified: 0,
            tokens_after: 0,
            cost: Cost::ZERO,
            prompt: self.prompt.tag(),
        };
        if candidates.is_empty() {
            trace(ctx, &out);
            return Ok(out);
        }
        match self.call(ctx, query, candidates).await {
            Ok((value, cost)) => {
                out.cost = cost;
                match value.get("extracts").and_then(Value::as_array) {
                    Some(extracts) => self.verify(extracts, candidates, &mut out),
                    None => fall_back(&mut out, fallback, "the LLM's answer has no `extracts` list".to_owned()),
                }
            }
            Err((reason, cost)) => {
                ctx.check()?;
                out.cost = cost;
                fall_back(&mut out, fallback, reason);
            }
        }
        if out.method == ExtractionMethod::Llm {
            let chars = out.text_len();
            if out.verified == 0 {
                fall_back(&mut out, fallback, "no sentence of the LLM's answer was found in the documents".to_owned());
            } else if chars < self.config.min_chars {
                let reason =
                    format!("only {chars} verified characters, fewer than min_chars ({})", self.config.min_chars);
                fall_back(&mut out, fallback, reason);
            }
        }
        out.tokens_after = out.passages.iter().map(|p| estimate_tokens(&p.sentences.join(" "))).sum();
        trace(ctx, &out);
        Ok(out)
    }

    /// Renders the prompt and runs it; on failure, the reason and whatever the failed attempt cost.
    async fn call(
        &self,
        ctx: &Ctx,
        query: &str,
        candidates: &[Candidate],
    ) -> std::result::Result<(Value, Cost), (String, Cost)> {
        let documents = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let text = truncate_chars(&c.chunk.text, self.config.max_chars_per_doc);
                match c.chunk.title.as_deref().filter(|t| !t.trim().is_empty()) {
                    Some(title) => format!("[{}] ({title}) {text}", i + 1),
                    None => format!("[{}] {text}", i + 1),
                }
            })
            .collect::<Vec<_>>()
            .join("\n\n");
        let request = self
            .prompt
            .render(&[("query", query), ("documents", &documents)])
            .map_err(|e| (format!("the extraction prompt could not be rendered: {e}"), Cost::ZERO))?;
        match generate_json(self.llm.as_ref(), ctx, request, &self.repair).await {
            Ok(answer) => Ok((answer.value, answer.cost)),
            Err(e) => {
                let cost = raw_output(&e).map_or(Cost::ZERO, |raw| raw.cost);
                Err((format!("the LLM call failed ({}): {}", e.kind(), e.chain()), cost))
            }
        }
    }

    /// Verifies each extract against the documents and fills `out` with the passages and rejections.
    fn verify(&self, extracts: &[Value], candidates: &[Candidate], out: &mut Extraction) {
        let docs: Vec<Normalized> = candidates.iter().map(|c| Normalized::new(&c.chunk.text)).collect();
        // Byte spans of the source text per document.
        let mut spans: Vec<Vec<(usize, usize)>> = vec![Vec::new(); candidates.len()];
        for item in extracts {
            let doc = doc_number(item.get("doc"));
            let Some(sentence) = item.get("sentence").and_then(Value::as_str) else {
                out.rejected.push(Rejected {
                    doc,
                    sentence: item.to_string(),
                    reason: "malformed extract (needs `doc` and `sentence`)".into(),
                });
                continue;
            };
            let needle = normalize_needle(sentence);
            if !needle.chars().any(char::is_alphanumeric) {
                out.rejected.push(Rejected { doc, sentence: sentence.to_owned(), reason: "empty sentence".into() });
                continue;
            }
            let named = doc.checked_sub(1).filter(|&i| i < docs.len());
            // The named document first, then the others in order.
            let order = named.into_iter().chain((0..docs.len()).filter(|&i| Some(i) != named));
            let found =
                order.into_iter().find_map(|i| docs[i].find(&needle).map(|span| (i, extend(&candidates[i], span))));
            match found {
                Some((i, span)) => spans[i].push(span),
                None => {
                    let reason = match named {
                        Some(_) => format!("not found in document {doc}"),
                        None => format!("no document {doc}"),
                    };
                    out.rejected.push(Rejected { doc, sentence: sentence.to_owned(), reason });
                }
            }
        }
        for (c, mut spans) in candidates.iter().zip(spans) {
            // Source order; a span inside an earlier, longer one adds nothing.
            spans.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            let mut kept: Vec<(usize, usize)> = Vec::new();
            for span in spans {
                if kept.last().is_none_or(|last| span.1 > last.1) {
                    kept.push(span);
                }
            }
            if kept.is_empty() {
                continue;
            }
            let mut sentences: Vec<String> = Vec::with_capacity(kept.len());
            for (s, e) in kept {
                let text = c.chunk.text[s..e].to_owned();
                if !sentences.contains(&text) {
                    sentences.push(text);
                }
            }
            out.verified += sentences.len();
            out.passages.push(ExtractedPassage {
                chunk_id: c.chunk.id.clone(),
                doc_id: c.chunk.doc_id.clone(),
                title: c.chunk.title.clone(),
                sentences,
            });
        }
    }
}

/// Replaces `out`'s passages by the fallback's kept strips, keeping what the LLM part recorded.
fn fall_back(out: &mut Extraction, fallback: &Refined, reason: String) {
    out.passages = fallback
        .passages
        .iter()
        .map(|p| {
            let mut sentences: Vec<String> = Vec::new();
            for s in fallback.strips.iter().filter(|s| s.kept && s.chunk_id == p.chunk_id) {
                if !sentences.contains(&s.text) {
                    sentences.push(s.text.clone());
                }
            }
            if sentences.is_empty() && !p.text.is_empty() {
                // A `Refined` built without its strips still has the recomposed text.
                sentences.push(p.text.clone());
            }
            ExtractedPassage {
                chunk_id: p.chunk_id.clone(),
                doc_id: p.doc_id.clone(),
                title: p.title.clone(),
                sentences,
            }
        })
        .collect();
    out.method = ExtractionMethod::Fallback { reason };
}

fn trace(ctx: &Ctx, out: &Extraction) {
    let (action, reason) = match &out.method {
        ExtractionMethod::Llm => ("llm", None),
        ExtractionMethod::Fallback { reason } => ("fallback", Some(reason.clone())),
    };
    let mut event = TraceEvent::new("extract", action)
        .detail("verified", out.verified)
        .detail("rejected", out.rejected.len())
        .detail("passages", out.passages.len())
        .detail("tokens_after", out.tokens_after)
        .detail("prompt", out.prompt.clone())
        .cost(out.cost);
    if let Some(reason) = reason {
        event = event.detail("reason", reason);
    }
    ctx.trace(event);
}

/// The document number of an extract: an integer, an integral float or a numeric string; 0 when there is none.
fn doc_number(value: Option<&Value>) -> usize {
    let n = match value {
        Some(Value::Number(n)) => {
            n.as_u64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64))
        }
        Some(Value::String(s)) => s.trim().trim_start_matches('[').trim_end_matches(']').parse().ok(),
        _ => None,
    };
    n.and_then(|n| usize::try_from(n).ok()).unwrap_or(0)
}

/// The first `max` characters of `text`.
fn truncate_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// The normalised form of one character: lowercase, one kind of quote and dash; whitespace is handled by callers.
fn normalize_char(c: char, mut push: impl FnMut(char)) {
    match c {
        '‘' | '’' | '‚' | '‛' | '′' | '`' | '´' => push('\''),
        '“' | '”' | '„' | '‟' | '″' | '«' | '»' => push('"'),
        '‐' | '‑' | '‒' | '–' | '—' | '―' | '−' => push('-'),
        c if c.is_ascii() => push(c.to_ascii_lowercase()),
        c => c.to_lowercase().for_each(push),
    }
}

/// Characters stripped from the end of a model's sentence before matching (and restored from the source).
const TRAILING: &[char] = &['.', ',', ';', ':', '!', '?', '"', '\'', ')', ']', '…'];

/// A model's sentence normalised for matching: lowercase, unified quotes and dashes, collapsed whitespace, no
/// trailing punctuation.
fn normalize_needle(sentence: &str) -> String {
    let mut out = String::with_capacity(sentence.len());
    for c in sentence.trim().chars() {
        if c.is_whitespace() {
            if !out.ends_with(' ') {
                out.push(' ');
            }
        } else {
            normalize_char(c, |n| out.push(n));
        }
    }
    out.trim_end_matches(|c: char| c.is_whitespace() || TRAILING.contains(&c)).trim_start().to_owned()
}

/// A document normalised like [`normalize_needle`], with a map from every normalised byte back to the byte
/// range of the source character it came from.
struct Normalized {
    text: String,
    map: Vec<(usize, usize)>,
}

impl Normalized {
    fn new(source: &str) -> Self {
        let mut text = String::with_capacity(source.len());
        let mut map = Vec::with_capacity(source.len());
        for (i, c) in source.char_indices() {
            let range = (i, i + c.len_utf8());
            if c.is_whitespace() {
                if !text.is_empty() && !text.ends_with(' ') {
                    text.push(' ');
                    map.push(range);
                }
                continue;
            }
            normalize_char(c, |n| {
                text.push(n);
                map.extend(std::iter::repeat_n(range, n.len_utf8()));
            });
        }
        Self { text, map }
    }

    /// The source byte range of the first occurrence of `needle` that starts and ends at word boundaries.
    fn find(&self, needle: &str) -> Option<(usize, usize)> {
        let first_alnum = needle.chars().next().is_some_and(char::is_alphanumeric);
        let last_alnum = needle.chars().next_back().is_some_and(char::is_alphanumeric);
        let mut from = 0;
        while let Some(pos) = self.text.get(from..).and_then(|t| t.find(needle)) {
            let (s, e) = (from + pos, from + pos + needle.len());
            let before_ok = !first_alnum || !self.text[..s].chars().next_back().is_some_and(char::is_alphanumeric);
            let after_ok = !last_alnum || !self.text[e..].chars().next().is_some_and(char::is_alphanumeric);
            if before_ok && after_ok {
                let start = self.map.get(s)?.0;
                let end = self.map.get(e.checked_sub(1)?)?.1;
                return Some((start, end));
            }
            from = s + self.text[s..].chars().next().map_or(1, char::len_utf8);
        }
        None
    }
}

/// Extends a source span over the closing punctuation right after it (the period the match left out).
fn extend(candidate: &Candidate, (start, end): (usize, usize)) -> (usize, usize) {
    let text = &candidate.chunk.text;
    let mut end = end;
    for c in text[end..].chars().take(3) {
        if matches!(c, '.' | '!' | '?' | '"' | '\'' | ')' | ']' | '”' | '’' | '»' | '…') {
            end += c.len_utf8();
        } else {
            break;
        }
    }
    (start, end)
}

#[cfg(test)]
mod tests {
    use ragtune_core::{Chunk, ErrorKind, TraceSink};
    use ragtune_testkit::fakes::ScriptedLlm;
    use serde_json::json;

    use super::*;
    use crate::refine::{RefineConfig, Refiner};

    const EXTRACT: Prompt = Prompt {
        id: "extract",
        version: 1,
        system: "You copy sentences from documents.",
        user: "Question: {{query}}\n\nDocuments:\n{{documents}}\n\nAnswer as {\"extracts\": [{\"doc\": <n>, \"sentence\": \"...\"}]}.",
        schema: Some(|| json!({"type": "object", "required": ["extracts"]})),
        temperature: 0.0,
        max_tokens: 384,
    };

    const REPAIR: Prompt = Prompt {
        id: "repair_json",
        version: 1,
        system: "You fix JSON.",
        user: "Fix this output.\n\nSchema: {{schema}}\n\nOutput:\n{{output}}",
        schema: None,
        temperature: 0.0,
        max_tokens: 256,
    };

    fn candidates() -> Vec<Candidate> {
        let chunk = |id: &str, title: &str, text: &str| {
            let mut chunk = Chunk::new(id, id.split('#').next().unwrap_or(id), text);
            chunk.title = Some(title.to_owned());
            Candidate { chunk, score: 1.0, sources: Default::default() }
        };
        vec![
            chunk(
                "med#0",
                "Scurvy",
                "Scurvy was common among sailors on long voyages. Scurvy is caused by a lack of vitamin C in the \
                 diet. The ship's cook served salted pork every day.",
            ),
            chunk(
                "med#1",
                "Citrus",
                "Citrus fruits such as lemons are rich in vitamin C. In 1747, James Lind showed that lemons \
                 “cure” scurvy — a famous trial.",
            ),
        ]
    }

    /// The refinement the extractor falls back to: what `Refiner` keeps for the scurvy question.
    fn refined() -> Refined {
        // A strict refinement, so the fallback's content is small and exact.
        let strict =
            RefineConfig { threshold: 0.25, relative_threshold: 0.5, top_n: Some(8), ..RefineConfig::default() };
        let refiner = Refiner::new(strict).unwrap();
        block_on(refiner.refine(&Ctx::new(), "What causes scurvy?", &candidates())).unwrap()
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    /// Runs an extraction with `llm` answering and compares the kept sentences (as `chunk: sentence`), the
    /// rejection reasons, and the method's kind and reason.
    fn check(
        llm: ScriptedLlm,
        expect_kept: &[&str],
        expect_rejected: &[&str],
        expect_fallback: Option<&str>,
    ) -> Extraction {
        let extractor = Extractor::new(Arc::new(llm), EXTRACT, REPAIR, ExtractConfig::default());
        let out = block_on(extractor.extract(&Ctx::new(), "What causes scurvy?", &candidates(), &refined())).unwrap();
        let kept: Vec<String> =
            out.passages.iter().flat_map(|p| p.sentences.iter().map(move |s| format!("{}: {s}", p.chunk_id))).collect();
        assert_eq!(kept, expect_kept);
        let rejected: Vec<&str> = out.rejected.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(rejected, expect_rejected);
        match (&out.method, expect_fallback) {
            (ExtractionMethod::Llm, None) => {}
            (ExtractionMethod::Fallback { reason }, Some(expect)) => {
                assert!(reason.contains(expect), "reason {reason:?} lacks {expect:?}");
            }
            (method, expect) => panic!("method {method:?}, expected fallback {expect:?}"),
        }
        out
    }

    fn reply(extracts: &[(usize, &str)]) -> String {
        let items: Vec<Value> = extracts.iter().map(|(d, s)| json!({"doc": d, "sentence": s})).collect();
        json!({ "extracts": items }).to_string()
    }

    const FALLBACK: &[&str] = &[
        "med#0: Scurvy was common among sailors on long voyages.",
        "med#0: Scurvy is caused by a lack of vitamin C in the diet.",
    ];

    #[test]
    fn verified_copies_pass_in_the_sources_wording() {
        let llm = ScriptedLlm::new(reply(&[
            (2, "In 1747, James Lind showed that lemons \"cure\" scurvy - a famous trial"),
            (1, "scurvy is caused by a  lack of vitamin C in the diet"),
            (1, "Scurvy is caused by a lack of vitamin C in the diet."),
        ]));
        let out = check(
            llm,
            &[
                "med#0: Scurvy is caused by a lack of vitamin C in the diet.",
                "med#1: In 1747, James Lind showed that lemons “cure” scurvy — a famous trial.",
            ],
            &[],
            None,
        );
        assert_eq!(out.verified, 2);
        assert_eq!(out.prompt, "extract@1");
        assert_eq!(out.cost.calls, 1);
        assert_eq!(
            out.tokens_after,
            estimate_tokens(&out.passages[0].sentences[0]) + estimate_tokens(&out.passages[1].sentences[0])
        );
        assert_eq!(out.passages[1].title.as_deref(), Some("Citrus"));
        assert_eq!(out.text_len(), out.passages.iter().map(|p| p.sentences[0].chars().count()).sum::<usize>());
        assert!(out.text_len() > 100);
        assert!(!out.is_empty());
    }

    #[test]
    fn paraphrases_and_unknown_documents_are_rejected() {
        let llm = ScriptedLlm::new(reply(&[
            (1, "Scurvy is caused by a lack of vitamin C in the diet."),
            (1, "Scurvy results from too little vitamin C."),
            (7, "Sailors ate lemons."),
            (1, "caus"),
            (2, "..."),
        ]));
        let out = check(
            llm,
            &["med#0: Scurvy is caused by a lack of vitamin C in the diet."],
            &["not found in document 1", "no document 7", "not found in document 1", "empty sentence"],
            None,
        );
        assert_eq!(out.rejected[1].doc, 7);
        assert_eq!(out.rejected[1].sentence, "Sailors ate lemons.");
    }

    #[test]
    fn sentences_of_another_document_are_reattributed() {
        let llm = ScriptedLlm::new(reply(&[
            (2, "Scurvy is caused by a lack of vitamin C in the diet."),
            (9, "Citrus fruits such as lemons are rich in vitamin C."),
        ]));
        check(
            llm,
            &[
                "med#0: Scurvy is caused by a lack of vitamin C in the diet.",
                "med#1: Citrus fruits such as lemons are rich in vitamin C.",
            ],
            &[],
            None,
        );
    }

    #[test]
    fn failures_fall_back_to_the_refined_strips() {
        // The LLM is down: one call, no repair.
        let llm = Arc::new(ScriptedLlm::down());
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, ExtractConfig::default());
        let out = block_on(extractor.extract(&Ctx::new(), "What causes scurvy?", &candidates(), &refined())).unwrap();
        assert_eq!(llm.calls(), 1);
        let ExtractionMethod::Fallback { reason } = &out.method else { panic!("{:?}", out.method) };
        assert!(reason.contains("transient"), "{reason}");
        assert_eq!(out.passages.iter().map(|p| p.sentences.len()).sum::<usize>(), 2);

        check(ScriptedLlm::down(), FALLBACK, &[], Some("the LLM call failed"));
        check(ScriptedLlm::new("not json at all"), FALLBACK, &[], Some("malformed_output"));
        check(ScriptedLlm::new(r#"{"extracts": []}"#), FALLBACK, &[], Some("no sentence"));
        check(ScriptedLlm::new(r#"{"answer": "scurvy"}"#), FALLBACK, &[], Some("no `extracts` list"));
        check(
            ScriptedLlm::new(reply(&[(1, "Scurvy is caused by")])),
            FALLBACK,
            &[],
            Some("only 19 verified characters, fewer than min_chars (50)"),
        );
        check(
            ScriptedLlm::new(reply(&[(1, "Lemons cure everything.")])),
            FALLBACK,
            &["not found in document 1"],
            Some("no sentence"),
        );
    }

    #[test]
    fn invalid_json_is_repaired_once_before_falling_back() {
        let llm = Arc::new(
            ScriptedLlm::new("{\"extracts\": [")
                .with_reply("Fix this", reply(&[(1, "Scurvy is caused by a lack of vitamin C in the diet.")])),
        );
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, ExtractConfig::default());
        let out = block_on(extractor.extract(&Ctx::new(), "What causes scurvy?", &candidates(), &refined())).unwrap();
        assert_eq!(llm.calls(), 2);
        assert_eq!(out.method, ExtractionMethod::Llm);
        assert_eq!(out.cost.calls, 2);

        let llm = Arc::new(ScriptedLlm::new("{\"extracts\": ["));
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, ExtractConfig::default());
        let out = block_on(extractor.extract(&Ctx::new(), "What causes scurvy?", &candidates(), &refined())).unwrap();
        assert_eq!(llm.calls(), 2);
        assert!(matches!(out.method, ExtractionMethod::Fallback { .. }));
    }

    #[test]
    fn prompt_numbers_and_truncates_documents() {
        let llm = Arc::new(ScriptedLlm::new(reply(&[(1, "Scurvy is caused by a lack of vitamin C in the diet.")])));
        let config = ExtractConfig { max_chars_per_doc: 20, min_chars: 10 };
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, config);
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let out = block_on(extractor.extract(&ctx, "What causes scurvy?", &candidates(), &refined())).unwrap();
        // Verification uses the whole chunk, even though the prompt showed only its start.
        assert_eq!(out.method, ExtractionMethod::Llm);
        let user = &llm.requests()[0].messages[1].content;
        assert!(user.contains("[1] (Scurvy) Scurvy was common am\n\n[2] (Citrus) Citrus fruits such a\n"), "{user}");
        let events = sink.take();
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].stage.as_str(), events[0].action.as_str()), ("extract", "llm"));
        assert_eq!(events[0].detail["verified"], 1);
        assert_eq!(events[0].cost.calls, 1);
    }

    #[test]
    fn no_candidates_no_call_and_cancellation() {
        let llm = Arc::new(ScriptedLlm::new("{}"));
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, ExtractConfig::default());
        let out = block_on(extractor.extract(&Ctx::new(), "q", &[], &refined())).unwrap();
        assert_eq!(llm.calls(), 0);
        assert_eq!(out.method, ExtractionMethod::Llm);
        assert!(out.is_empty());
        assert_eq!(out.text_len(), 0);

        let ctx = Ctx::new();
        ctx.cancel.cancel();
        let err = block_on(extractor.extract(&ctx, "q", &candidates(), &refined())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Cancelled);
        assert_eq!(llm.calls(), 0);
    }

    #[test]
    fn serde_shapes() {
        let method = ExtractionMethod::Fallback { reason: "x".into() };
        assert_eq!(serde_json::to_value(&method).unwrap(), json!({"kind": "fallback", "reason": "x"}));
        assert_eq!(serde_json::to_value(ExtractionMethod::Llm).unwrap(), json!({"kind": "llm"}));
        let config: ExtractConfig = serde_json::from_str(r#"{"min_chars": 10}"#).unwrap();
        assert_eq!(config, ExtractConfig { max_chars_per_doc: 1500, min_chars: 10 });
        assert!(serde_json::from_str::<ExtractConfig>(r#"{"min_char": 10}"#).is_err());
    }

    #[test]
    fn doc_numbers_and_normalisation() {
        assert_eq!(doc_number(Some(&json!(3))), 3);
        assert_eq!(doc_number(Some(&json!(2.0))), 2);
        assert_eq!(doc_number(Some(&json!("[4]"))), 4);
        assert_eq!(doc_number(Some(&json!(-1))), 0);
        assert_eq!(doc_number(None), 0);
        assert_eq!(normalize_needle("  “Hello”  —  World!! "), "\"hello\" - world");
        let doc = Normalized::new("Ünïcode  TEXT, here.");
        assert_eq!(doc.find("ünïcode text"), Some((0, 15)));
        assert_eq!(doc.find("text, here"), Some((11, 21)));
        assert_eq!(doc.find("ext"), None);
        assert_eq!(truncate_chars("héllo", 2), "hé");
    }
}
