//! Query-focused extraction: one batched LLM call picks, by number, the sentences of the retrieved chunks that
//! answer the question, and the context keeps those sentences in the source's own words.
//!
//! Every sentence of every chunk is shown on its own line with a number (`[7] ...`), numbered across all chunks,
//! and the model answers with the numbers (`{"sentences": [7, 9]}`). Asking a small model to copy sentences word
//! for word made it paraphrase, merge and invent, and half of its answers then failed verification; a number is
//! verified by looking it up, costs a few output tokens instead of a sentence, and cannot change the source's
//! wording. Each chosen sentence is kept with `window` neighbours on each side from the same chunk (a sentence
//! often needs the one before it: "He was born in 1809." names nobody), and touching sentences are joined into
//! one span of the source text. When the call fails, no number is valid, or fewer than `min_chars` characters are
//! kept, the chunks' whole text is returned instead, marked as a fallback with its reason, so extraction never
//! leaves the generator with less than plain retrieval would have given it.
//!
//! ```
//! use ragtune_evaluators::extract::ExtractConfig;
//! use ragtune_evaluators::text::sentences;
//!
//! // The numbered units are the shared sentence splitter's.
//! assert_eq!(sentences("Scurvy is caused by a lack of vitamin C. Lemons cure it quickly.").len(), 2);
//! assert_eq!(ExtractConfig::default().window, 1);
//! ```

use std::sync::Arc;

use ragtune_core::prompt::{generate_json, raw_output};
use ragtune_core::{Candidate, Cost, Ctx, Llm, Prompt, Result, TraceEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::text::{estimate_tokens, sentence_spans};

/// Limits of query-focused extraction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExtractConfig {
    /// Each chunk shows the model only its sentences that start within this many characters (at least its first),
    /// so one long chunk cannot crowd the others out of a small model's context.
    pub max_chars_per_doc: usize,
    /// Fewer kept characters than this count as an empty extraction and fall back.
    pub min_chars: usize,
    /// Neighbouring sentences kept on each side of a chosen one, within its chunk (0 keeps only the chosen).
    pub window: usize,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        Self { max_chars_per_doc: 1500, min_chars: 50, window: 1 }
    }
}

/// How an [`Extraction`] was produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ExtractionMethod {
    /// The sentences the LLM chose, with their neighbours.
    Llm,
    /// The chunks' whole text, because extraction failed or found too little.
    Fallback {
        /// Why extraction was not used.
        reason: String,
    },
}

/// The kept text of one chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractedPassage {
    /// The chunk.
    pub chunk_id: String,
    /// Its document.
    pub doc_id: String,
    /// The chunk's title, for citations.
    pub title: Option<String>,
    /// Runs of consecutive kept sentences, each a verbatim span of the chunk, in source order.
    pub sentences: Vec<String>,
}

/// A number in the LLM's answer that names no shown sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejected {
    /// The list item as the model wrote it (JSON).
    pub item: String,
    /// Why it was rejected (`no sentence 57`, `not a sentence number`).
    pub reason: String,
}

/// The result of [`Extractor::extract`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extraction {
    /// One passage per chunk with a kept sentence, in input order.
    pub passages: Vec<ExtractedPassage>,
    /// Whether these are the LLM's choice or the fallback.
    pub method: ExtractionMethod,
    /// The items of the model's answer that named no shown sentence.
    pub rejected: Vec<Rejected>,
    /// How many distinct shown sentences the model chose (also when the result fell back).
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

/// One numbered sentence of the prompt: its chunk, and its index among that chunk's sentences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Numbered {
    chunk: usize,
    /// The sentence's index among its chunk's sentences.
    index: usize,
}

/// Picks the sentences that answer a query from retrieved chunks with one LLM call.
///
/// Cost model: one LLM call over all candidates (two when the answer needs a JSON repair); prompt tokens grow
/// with the candidates, up to `max_chars_per_doc` characters each, and the answer is a short list of numbers.
#[derive(Debug)]
pub struct Extractor {
    llm: Arc<dyn Llm>,
    prompt: Prompt,
    repair: Prompt,
    config: ExtractConfig,
}

impl Extractor {
    /// An extractor with the extraction prompt (placeholders `query` and `documents`; answer
    /// `{"sentences": [n, ...]}`, as `ragtune_llm::prompts::EXTRACT`) and the JSON repair prompt
    /// (`ragtune_llm::prompts::REPAIR_JSON`).
    #[must_use]
    pub fn new(llm: Arc<dyn Llm>, prompt: Prompt, repair: Prompt, config: ExtractConfig) -> Self {
        Self { llm, prompt, repair, config }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ExtractConfig {
        &self.config
    }

    /// Picks the sentences of `candidates` that answer `query`, or returns the candidates' whole text.
    ///
    /// The documents are shown as `Document d (title):` followed by their sentences ([`sentence_spans`]), one per
    /// line as `[n] sentence`, numbered from 1 across all documents. Each number the model returns is looked up;
    /// numbers that name no shown sentence are [`Rejected`]. Every chosen sentence is kept with `window`
    /// neighbours on each side within its chunk; consecutive kept sentences form one verbatim span of the chunk.
    /// The fallback ([`ExtractionMethod::Fallback`], every chunk's whole text) is returned when the call fails (a
    /// malformed answer after one repair included), no number is valid, or fewer than `min_chars` characters are
    /// kept. No candidates give an empty extraction without a call.
    ///
    /// # Errors
    /// Only `Cancelled`/`DeadlineExceeded` from `ctx`; every other failure falls back.
    pub async fn extract(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<Extraction> {
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
        let spans: Vec<Vec<(usize, usize)>> = candidates.iter().map(|c| sentence_spans(&c.chunk.text)).collect();
        let (documents, numbered) = self.documents(candidates, &spans);
        match self.call(ctx, query, &documents).await {
            Ok((value, cost)) => {
                out.cost = cost;
                match value.get("sentences").and_then(Value::as_array) {
                    Some(chosen) => self.keep(chosen, &numbered, candidates, &spans, &mut out),
                    None => fall_back(&mut out, candidates, "the LLM's answer has no `sentences` list".to_owned()),
                }
            }
            Err((reason, cost)) => {
                ctx.check()?;
                out.cost = cost;
                fall_back(&mut out, candidates, reason);
            }
        }
        if out.method == ExtractionMethod::Llm {
            let chars = out.text_len();
            if out.verified == 0 {
                fall_back(&mut out, candidates, "the LLM chose no sentence of the documents".to_owned());
            } else if chars < self.config.min_chars {
                let reason = format!("only {chars} characters kept, fewer than min_chars ({})", self.config.min_chars);
                fall_back(&mut out, candidates, reason);
            }
        }
        out.tokens_after =
            out.passages.iter().map(|p| p.sentences.iter().map(|s| estimate_tokens(s)).sum::<usize>()).sum();
        trace(ctx, &out);
        Ok(out)
    }

    /// The prompt's documents block and, for each sentence number (1-based, index + 1), where it sits.
    fn documents(&self, candidates: &[Candidate], spans: &[Vec<(usize, usize)>]) -> (String, Vec<Numbered>) {
        let mut numbered = Vec::new();
        let mut blocks = Vec::with_capacity(candidates.len());
        for (d, (c, spans)) in candidates.iter().zip(spans).enumerate() {
            let mut block = match c.chunk.title.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
                Some(title) => format!("Document {} ({title}):", d + 1),
                None => format!("Document {}:", d + 1),
            };
            // Characters before the current sentence, counted on from the previous one.
            let (mut chars, mut counted) = (0, 0);
            for (index, &(s, e)) in spans.iter().enumerate() {
                chars += c.chunk.text[counted..s].chars().count();
                counted = s;
                if index > 0 && chars >= self.config.max_chars_per_doc {
                    break;
                }
                numbered.push(Numbered { chunk: d, index });
                let shown = truncate_chars(&c.chunk.text[s..e], self.config.max_chars_per_doc);
                // The sentence is untrusted: a `[n]` in it cannot pass for another numbered sentence.
                let shown = ragtune_core::prompt::neutralise(&one_line(shown));
                block.push_str(&format!("\n[{}] {shown}", numbered.len()));
            }
            blocks.push(block);
        }
        (blocks.join("\n\n"), numbered)
    }

    /// Renders the prompt and runs it; on failure, the reason and whatever the failed attempt cost.
    async fn call(
        &self,
        ctx: &Ctx,
        query: &str,
        documents: &str,
    ) -> std::result::Result<(Value, Cost), (String, Cost)> {
        let request = self
            .prompt
            .render(&[("query", query), ("documents", documents)])
            .map_err(|e| (format!("the extraction prompt could not be rendered: {e}"), Cost::ZERO))?;
        match generate_json(self.llm.as_ref(), ctx, request, &self.repair).await {
            Ok(answer) => Ok((answer.value, answer.cost)),
            Err(e) => {
                let cost = raw_output(&e).map_or(Cost::ZERO, |raw| raw.cost);
                Err((format!("the LLM call failed ({}): {}", e.kind(), e.chain()), cost))
            }
        }
    }

    /// Looks up each chosen number and fills `out` with the kept spans and the rejections.
    fn keep(
        &self,
        chosen: &[Value],
        numbered: &[Numbered],
        candidates: &[Candidate],
        spans: &[Vec<(usize, usize)>],
        out: &mut Extraction,
    ) {
        // Per chunk, which of its sentences are kept.
        let mut kept: Vec<Vec<bool>> = spans.iter().map(|s| vec![false; s.len()]).collect();
        let mut seen = vec![false; numbered.len()];
        for item in chosen {
            let Some(n) = number(item) else {
                let reason = "not a sentence number".to_owned();
                out.rejected.push(Rejected { item: item.to_string(), reason });
                continue;
            };
            let Some(&Numbered { chunk, index }) = n.checked_sub(1).and_then(|i| numbered.get(i)) else {
                let reason = format!("no sentence {n} (the documents have {})", numbered.len());
                out.rejected.push(Rejected { item: item.to_string(), reason });
                continue;
            };
            if !std::mem::replace(&mut seen[n - 1], true) {
                out.verified += 1;
            }
            let w = self.config.window;
            let last = spans[chunk].len() - 1;
            kept[chunk][index.saturating_sub(w)..=(index + w).min(last)].fill(true);
        }
        for ((c, spans), kept) in candidates.iter().zip(spans).zip(kept) {
            let mut sentences = Vec::new();
            let mut run: Option<(usize, usize)> = None;
            for (&(s, e), keep) in spans.iter().zip(kept) {
                match (keep, run.as_mut()) {
                    (true, Some(r)) => r.1 = e,
                    (true, None) => run = Some((s, e)),
                    (false, Some(_)) => sentences.extend(run.take().map(|(s, e)| c.chunk.text[s..e].to_owned())),
                    (false, None) => {}
                }
            }
            sentences.extend(run.map(|(s, e)| c.chunk.text[s..e].to_owned()));
            if !sentences.is_empty() {
                out.passages.push(ExtractedPassage {
                    chunk_id: c.chunk.id.clone(),
                    doc_id: c.chunk.doc_id.clone(),
                    title: c.chunk.title.clone(),
                    sentences,
                });
            }
        }
    }
}

/// Replaces `out`'s passages by every candidate's whole text, keeping what the LLM part recorded.
fn fall_back(out: &mut Extraction, candidates: &[Candidate], reason: String) {
    out.passages = candidates
        .iter()
        .filter(|c| !c.chunk.text.trim().is_empty())
        .map(|c| ExtractedPassage {
            chunk_id: c.chunk.id.clone(),
            doc_id: c.chunk.doc_id.clone(),
            title: c.chunk.title.clone(),
            sentences: vec![c.chunk.text.clone()],
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

/// A sentence number: a positive integer, an integral float or a numeric string (`"7"`, `"[7]"`); `None` otherwise.
fn number(value: &Value) -> Option<usize> {
    let n = match value {
        Value::Number(n) => {
            n.as_u64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64))
        }
        Value::String(s) => s.trim().trim_start_matches('[').trim_end_matches(']').trim().parse().ok(),
        _ => None,
    };
    n.and_then(|n| usize::try_from(n).ok())
}

/// The first `max` characters of `text`.
fn truncate_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// `text` with every run of whitespace (line breaks included) as one space, so a sentence is one prompt line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use ragtune_core::{Chunk, ErrorKind, TraceSink};
    use ragtune_testkit::fakes::ScriptedLlm;
    use serde_json::json;

    use super::*;

    const EXTRACT: Prompt = Prompt {
        id: "extract",
        version: 2,
        system: "You pick sentences.",
        user: "Question: {{query}}\n\n{{documents}}\n\nAnswer as {\"sentences\": [<n>]}.",
        schema: Some(|| json!({"type": "object", "required": ["sentences"]})),
        temperature: 0.0,
        max_tokens: 128,
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

    const S1: &str = "Scurvy was common among sailors on long voyages.";
    const S2: &str = "Scurvy is caused by a lack of vitamin C in the diet.";
    const S3: &str = "The ship's cook served salted pork every day.";
    const S4: &str = "Citrus fruits such as lemons are rich in vitamin C.";
    const S5: &str = "In 1747, James Lind showed that lemons “cure” scurvy — a famous trial.";

    fn candidates() -> Vec<Candidate> {
        let chunk = |id: &str, title: &str, text: String| {
            let mut chunk = Chunk::new(id, id.split('#').next().unwrap_or(id), text);
            chunk.title = Some(title.to_owned());
            Candidate { chunk, score: 1.0, sources: Default::default() }
        };
        vec![chunk("med#0", "Scurvy", format!("{S1} {S2}\n{S3}")), chunk("med#1", "Citrus", format!("{S4}  {S5}"))]
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    fn config(window: usize) -> ExtractConfig {
        ExtractConfig { window, ..ExtractConfig::default() }
    }

    /// Runs an extraction with `llm` answering and compares the kept spans (as `chunk: text`), the rejection
    /// reasons, and the method's kind and reason.
    fn check(
        llm: ScriptedLlm,
        config: ExtractConfig,
        expect_kept: &[String],
        expect_rejected: &[&str],
        expect_fallback: Option<&str>,
    ) -> Extraction {
        let extractor = Extractor::new(Arc::new(llm), EXTRACT, REPAIR, config);
        let out = block_on(extractor.extract(&Ctx::new(), "What causes scurvy?", &candidates())).unwrap();
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

    fn reply(numbers: Value) -> ScriptedLlm {
        ScriptedLlm::new(json!({ "sentences": numbers }).to_string())
    }

    fn whole() -> Vec<String> {
        candidates().iter().map(|c| format!("{}: {}", c.chunk.id, c.chunk.text)).collect()
    }

    #[test]
    fn chosen_numbers_keep_the_sources_sentences_with_their_neighbours() {
        // Without a window: exactly the chosen sentences, in source order, duplicates once.
        let out =
            check(reply(json!([5, 2, 2])), config(0), &[format!("med#0: {S2}"), format!("med#1: {S5}")], &[], None);
        assert_eq!(out.verified, 2);
        assert_eq!(out.prompt, "extract@2");
        assert_eq!(out.cost.calls, 1);
        assert_eq!(out.tokens_after, estimate_tokens(S2) + estimate_tokens(S5));
        assert_eq!(out.passages[1].title.as_deref(), Some("Citrus"));
        assert_eq!(out.text_len(), S2.chars().count() + S5.chars().count());
        // A window of one: the neighbours within the chunk, consecutive sentences as one span of the source
        // (its own whitespace kept), never across chunks.
        check(
            reply(json!([2, 4])),
            config(1),
            &[format!("med#0: {S1} {S2}\n{S3}"), format!("med#1: {S4}  {S5}")],
            &[],
            None,
        );
        // Two chosen sentences with a gap between them stay two spans.
        check(reply(json!([1, 3])), config(0), &[format!("med#0: {S1}"), format!("med#0: {S3}")], &[], None);
    }

    #[test]
    fn numbers_in_other_shapes_are_read_and_unknown_ones_rejected() {
        let out = check(
            reply(json!(["2", "[4]", 4.0, 9, 0, "two", {"n": 1}])),
            config(0),
            &[format!("med#0: {S2}"), format!("med#1: {S4}")],
            &[
                "no sentence 9 (the documents have 5)",
                "no sentence 0 (the documents have 5)",
                "not a sentence number",
                "not a sentence number",
            ],
            None,
        );
        assert_eq!(out.verified, 2);
        assert_eq!(out.rejected[0].item, "9");
        assert_eq!(out.rejected[2].item, "\"two\"");
    }

    #[test]
    fn failures_fall_back_to_the_whole_chunks() {
        // The LLM is down: one call, no repair.
        let llm = Arc::new(ScriptedLlm::down());
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, ExtractConfig::default());
        let out = block_on(extractor.extract(&Ctx::new(), "What causes scurvy?", &candidates())).unwrap();
        assert_eq!(llm.calls(), 1);
        let ExtractionMethod::Fallback { reason } = &out.method else { panic!("{:?}", out.method) };
        assert!(reason.contains("transient"), "{reason}");
        assert_eq!(out.tokens_after, candidates().iter().map(|c| estimate_tokens(&c.chunk.text)).sum::<usize>());

        check(ScriptedLlm::down(), config(1), &whole(), &[], Some("the LLM call failed"));
        check(ScriptedLlm::new("not json at all"), config(1), &whole(), &[], Some("malformed_output"));
        check(reply(json!([])), config(1), &whole(), &[], Some("chose no sentence"));
        check(ScriptedLlm::new(r#"{"answer": "scurvy"}"#), config(1), &whole(), &[], Some("no `sentences` list"));
        check(reply(json!([7])), config(1), &whole(), &["no sentence 7 (the documents have 5)"], Some("chose no"));
        let short = ExtractConfig { min_chars: 60, window: 0, ..ExtractConfig::default() };
        check(reply(json!([1])), short, &whole(), &[], Some("only 48 characters kept, fewer than min_chars (60)"));
    }

    #[test]
    fn invalid_json_is_repaired_once_before_falling_back() {
        let llm = Arc::new(ScriptedLlm::new("{\"sentences\": [2").with_reply("Fix this", r#"{"sentences": [2]}"#));
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, ExtractConfig::default());
        let out = block_on(extractor.extract(&Ctx::new(), "What causes scurvy?", &candidates())).unwrap();
        assert_eq!(llm.calls(), 2);
        assert_eq!(out.method, ExtractionMethod::Llm);
        assert_eq!(out.cost.calls, 2);

        let llm = Arc::new(ScriptedLlm::new("{\"sentences\": ["));
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, ExtractConfig::default());
        let out = block_on(extractor.extract(&Ctx::new(), "What causes scurvy?", &candidates())).unwrap();
        assert_eq!(llm.calls(), 2);
        assert!(matches!(out.method, ExtractionMethod::Fallback { .. }));
    }

    #[test]
    fn the_prompt_numbers_sentences_across_documents_and_shows_a_long_chunk_only_in_part() {
        let llm = Arc::new(reply(json!([3])));
        let config = ExtractConfig { max_chars_per_doc: 80, min_chars: 10, window: 0 };
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, config);
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let out = block_on(extractor.extract(&ctx, "What causes scurvy?", &candidates())).unwrap();
        let user = &llm.requests()[0].messages[1].content;
        // Sentences starting past 80 characters are not shown (S3 in the first chunk); numbering runs on.
        let expect = format!("Document 1 (Scurvy):\n[1] {S1}\n[2] {S2}\n\nDocument 2 (Citrus):\n[3] {S4}\n[4] {S5}\n");
        assert!(user.contains(&expect), "{user}");
        assert_eq!(out.method, ExtractionMethod::Llm);
        assert_eq!(out.passages[0].chunk_id, "med#1");
        let events = sink.take();
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].stage.as_str(), events[0].action.as_str()), ("extract", "llm"));
        assert_eq!(events[0].detail["verified"], 1);
        assert_eq!(events[0].cost.calls, 1);
        // A first sentence longer than the limit is shown cut, and still counts as one sentence.
        let config = ExtractConfig { max_chars_per_doc: 10, min_chars: 10, window: 0 };
        let llm = Arc::new(reply(json!([1])));
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, config);
        let out = block_on(extractor.extract(&Ctx::new(), "q", &candidates())).unwrap();
        let user = &llm.requests()[0].messages[1].content;
        assert!(
            user.contains("Document 1 (Scurvy):\n[1] Scurvy was\n\nDocument 2 (Citrus):\n[2] Citrus fru\n"),
            "{user}"
        );
        assert_eq!(out.passages[0].sentences, [S1]);
    }

    #[test]
    fn no_candidates_no_call_and_cancellation() {
        let llm = Arc::new(ScriptedLlm::new("{}"));
        let extractor = Extractor::new(llm.clone(), EXTRACT, REPAIR, ExtractConfig::default());
        let out = block_on(extractor.extract(&Ctx::new(), "q", &[])).unwrap();
        assert_eq!(llm.calls(), 0);
        assert_eq!(out.method, ExtractionMethod::Llm);
        assert!(out.is_empty());
        assert_eq!(out.text_len(), 0);

        let ctx = Ctx::new();
        ctx.cancel.cancel();
        let err = block_on(extractor.extract(&ctx, "q", &candidates())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Cancelled);
        assert_eq!(llm.calls(), 0);
    }

    #[test]
    fn serde_shapes() {
        let method = ExtractionMethod::Fallback { reason: "x".into() };
        assert_eq!(serde_json::to_value(&method).unwrap(), json!({"kind": "fallback", "reason": "x"}));
        assert_eq!(serde_json::to_value(ExtractionMethod::Llm).unwrap(), json!({"kind": "llm"}));
        let config: ExtractConfig = serde_json::from_str(r#"{"min_chars": 10}"#).unwrap();
        assert_eq!(config, ExtractConfig { max_chars_per_doc: 1500, min_chars: 10, window: 1 });
        assert!(serde_json::from_str::<ExtractConfig>(r#"{"min_char": 10}"#).is_err());
    }

    #[test]
    fn numbers_and_lines() {
        assert_eq!(number(&json!(3)), Some(3));
        assert_eq!(number(&json!(2.0)), Some(2));
        assert_eq!(number(&json!("[4]")), Some(4));
        assert_eq!(number(&json!(-1)), None);
        assert_eq!(number(&json!(2.5)), None);
        assert_eq!(number(&json!(null)), None);
        assert_eq!(one_line(" a\n b\t\tc "), "a b c");
        assert_eq!(truncate_chars("héllo", 2), "hé");
    }
}
