//! `LlmReranker`: pointwise relevance judgements from a language model, behind the core `Reranker` seam.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::prompt::{generate_json, parse_json_text};
use ragtune_core::{Candidate, Cost, CostModel, Ctx, Error, Llm, Prompt, Reranker, Result, TraceEvent};

/// Settings of the [`LlmReranker`].
#[derive(Debug, Clone, Copy)]
pub struct LlmRerankerConfig {
    /// The pointwise relevance prompt; see [`LlmReranker`] for its placeholders and output.
    pub prompt: Prompt,
    /// The prompt that repairs malformed JSON once (placeholders `schema` and `output`; `ragtune_llm` ships
    /// `prompts::REPAIR_JSON`). Used only when `prompt` has a schema; without it a malformed answer fails the
    /// batch at once.
    pub repair: Option<Prompt>,
    /// Passages are cut to this many bytes (at a character boundary) before they are put in the prompt.
    pub max_passage_bytes: usize,
    /// Queries are cut to this many bytes.
    pub max_query_bytes: usize,
    /// Expected wall time per document in milliseconds, declared in the cost model (the controller trims
    /// batches to what fits before the deadline).
    pub ms_per_doc: f64,
}

impl LlmRerankerConfig {
    /// Settings for `prompt`: no repair, passages up to 4000 bytes, queries up to 1000 bytes, two seconds per
    /// document.
    #[must_use]
    pub fn new(prompt: Prompt) -> Self {
        Self { prompt, repair: None, max_passage_bytes: 4000, max_query_bytes: 1000, ms_per_doc: 2000.0 }
    }
}

/// A [`Reranker`] that asks a language model how relevant each passage is to the query, one request per
/// candidate, sequentially.
///
/// **Prompt contract.** The [`Prompt`] is passed in (the prompt texts live in `ragtune_llm::prompts`). Its user
/// message must use both placeholders, `{{query}}` and `{{passage}}` (the candidate's title, header path and
/// text, see [`Chunk::indexable_text`](ragtune_core::Chunk::indexable_text)), and no other. The answer must be a
/// JSON object with either
/// - `"score"`: a number from 0 to 10 (an integer in the intended schema), higher is more relevant; or
/// - `"relevant"`: a boolean, read as 10 (true) or 0 (false).
///
/// A prompt with a JSON schema (for example `{"type": "object", "properties": {"score": {"type": "integer",
/// "minimum": 0, "maximum": 10}}, "required": ["score"]}`) is sent with it, and a malformed answer gets one
/// repair round when [`LlmRerankerConfig::repair`] is set. Scores are on the 0–10 scale.
///
/// **Cost model.** Per document: one call (two with a repair prompt), one document, and a token bound computed
/// from the configuration: the prompt's template, the longest query and passage it sends (at one token per three
/// bytes, a bound for ordinary text) and the answer's `max_tokens`, doubled in kind for the repair round. The
/// actual cost, summed from the LLM's responses, is recorded in one `rerank` trace event per call; a call whose
/// actual tokens would pass the budget in its context (the controller's reservation) stops before the next
/// request and fails the batch.
///
/// **Failures.** Any failed request or unreadable answer fails the whole batch (the controller drops it); the
/// cost spent up to the failure is still reported.
#[derive(Debug, Clone)]
pub struct LlmReranker {
    llm: Arc<dyn Llm>,
    config: LlmRerankerConfig,
    name: String,
    per_doc: Cost,
}

/// Tokens a chat template adds around the messages of one request.
const CHAT_OVERHEAD_TOKENS: u64 = 16;

fn bound_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(3)
}

impl LlmReranker {
    /// A reranker over `llm` with `config`. Its name is `llm:{model}/{prompt id}@{version}`, so a changed prompt
    /// never shares cached scores with an old one.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when the prompt lacks `{{query}}` or `{{passage}}`
    /// or uses another placeholder.
    pub fn new(llm: Arc<dyn Llm>, config: LlmRerankerConfig) -> Result<Self> {
        for placeholder in ["{{query}}", "{{passage}}"] {
            if !config.prompt.user.contains(placeholder) {
                return Err(Error::invalid_input(format!(
                    "the rerank prompt `{}` must use the placeholder {placeholder}",
                    config.prompt.tag()
                )));
            }
        }
        config.prompt.render(&[("query", "q"), ("passage", "p")])?;
        let prompt = &config.prompt;
        let mut tokens = bound_tokens(prompt.system.len() + prompt.user.len())
            + bound_tokens(config.max_query_bytes)
            + bound_tokens(config.max_passage_bytes)
            + u64::from(prompt.max_tokens)
            + CHAT_OVERHEAD_TOKENS;
        let mut calls = 1;
        if let (Some(repair), Some(schema)) = (&config.repair, prompt.schema) {
            let schema_len = serde_json::to_string(&schema()).map_or(0, |s| s.len());
            // The repair round shows the broken answer (at most `max_tokens` of the model's own tokens) again.
            tokens += bound_tokens(repair.system.len() + repair.user.len() + schema_len)
                + u64::from(prompt.max_tokens)
                + u64::from(repair.max_tokens.max(prompt.max_tokens))
                + CHAT_OVERHEAD_TOKENS;
            calls += 1;
        }
        let name = format!("llm:{}/{}", llm.name(), prompt.tag());
        Ok(Self { llm, config, name, per_doc: Cost::new(tokens, 1, calls) })
    }

    async fn score_one(&self, ctx: &Ctx, query: &str, candidate: &Candidate) -> Result<(f32, Cost)> {
        // The passage is untrusted text placed in a prompt: nothing in it can pass for the prompt's own markup.
        let passage = ragtune_core::prompt::neutralise(&candidate.chunk.indexable_text());
        let request = self.config.prompt.render(&[
            ("query", clip(query, self.config.max_query_bytes)),
            ("passage", clip(&passage, self.config.max_passage_bytes)),
        ])?;
        let (value, cost) = match (&self.config.repair, request.json_schema.is_some()) {
            (Some(repair), true) => {
                let answer = generate_json(self.llm.as_ref(), ctx, request, repair).await?;
                (answer.value, answer.cost)
            }
            _ => {
                let mut responses = self.llm.generate(ctx, std::slice::from_ref(&request)).await?;
                let response = responses.pop().ok_or_else(|| Error::permanent("the LLM returned no response"))?;
                let value = parse_json_text(&response.text).map_err(|e| {
                    Error::malformed_output(format!(
                        "the relevance answer is not JSON ({e}): {}",
                        clip(&response.text, 200)
                    ))
                })?;
                (value, response.cost)
            }
        };
        let score = read_score(&value).map_err(|e| e.context(format!("judging `{}`", candidate.chunk.id)))?;
        // The LLM counts tokens and calls; the document is this reranker's to count.
        Ok((score, Cost { docs: 1, ..cost }))
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends at a character boundary.
fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Reads `{"score": 0..=10}` or `{"relevant": bool}`.
fn read_score(value: &serde_json::Value) -> Result<f32> {
    if let Some(score) = value.get("score") {
        let Some(s) = score.as_f64() else {
            return Err(Error::malformed_output(format!("`score` is not a number: {score}")));
        };
        if !(0.0..=10.0).contains(&s) {
            return Err(Error::malformed_output(format!("`score` {s} is outside 0..=10")));
        }
        return Ok(s as f32);
    }
    match value.get("relevant").and_then(serde_json::Value::as_bool) {
        Some(true) => Ok(10.0),
        Some(false) => Ok(0.0),
        None => Err(Error::malformed_output(format!(
            "the relevance answer has neither `score` (0..=10) nor `relevant` (bool): {}",
            clip(&value.to_string(), 200)
        ))),
    }
}

#[async_trait]
impl Reranker for LlmReranker {
    fn name(&self) -> &str {
        &self.name
    }

    fn cost_model(&self) -> CostModel {
        CostModel { per_call: Cost::ZERO, per_doc: self.per_doc, ms_per_doc: self.config.ms_per_doc }
    }

    async fn score(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
        let started = Instant::now();
        let mut scores = Vec::with_capacity(candidates.len());
        let mut spent = Cost::ZERO;
        let mut failure = None;
        for candidate in candidates {
            if let Err(e) = ctx.check() {
                failure = Some(e);
                break;
            }
            // Stay within the reservation: the next request may cost up to its declared bound.
            if !ctx.budget.allows(spent, self.per_doc) {
                failure = Some(Error::permanent(format!(
                    "reranker `{}` stopped: the next request could pass the budget reserved for this call",
                    self.name
                )));
                break;
            }
            match self.score_one(ctx, query, candidate).await {
                Ok((score, cost)) => {
                    scores.push(score);
                    spent += cost;
                }
                Err(e) => {
                    // The failed request was (probably) paid for; count its declared bound.
                    spent += self.per_doc;
                    failure = Some(e);
                    break;
                }
            }
        }
        let mut event = TraceEvent::new("rerank", self.name.clone())
            .detail("docs", candidates.len())
            .detail("scored", scores.len())
            .detail("prompt", self.config.prompt.tag())
            .cost(spent)
            .elapsed(started.elapsed());
        if let Some(e) = &failure {
            event = event.detail("error", e.message().to_owned());
        }
        ctx.trace(event);
        match failure {
            Some(e) => Err(e.context(format!("reranker `{}`", self.name))),
            None => Ok(scores),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::{Chunk, ErrorKind, ScoredHit, TraceSink};
    use ragtune_testkit::fakes::ScriptedLlm;
    use serde_json::json;

    const PROMPT: Prompt = Prompt {
        id: "test_rerank",
        version: 1,
        system: "Rate how well the passage answers the query.",
        user: "Query: {{query}}\nPassage: {{passage}}\nAnswer as JSON {\"score\": 0-10}.",
        schema: Some(score_schema),
        temperature: 0.0,
        max_tokens: 16,
    };

    fn score_schema() -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 10}},
            "required": ["score"]
        })
    }

    const REPAIR: Prompt = Prompt {
        id: "test_repair",
        version: 1,
        system: "Fix the JSON.",
        user: "Schema: {{schema}}\nBroken: {{output}}",
        schema: None,
        temperature: 0.0,
        max_tokens: 64,
    };

    fn candidate(id: &str, text: &str) -> Candidate {
        Candidate::from_hit(ScoredHit { chunk: Chunk::new(id, id, text), score: 0.0 }, "bm25", 1)
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().expect("a runtime").block_on(f)
    }

    /// Scores `texts` with a scripted LLM and renders `text -> score` lines or the error.
    fn check(llm: ScriptedLlm, config: LlmRerankerConfig, texts: &[&str], expect: &str) {
        let r = LlmReranker::new(Arc::new(llm), config).unwrap();
        let cands: Vec<Candidate> = texts.iter().enumerate().map(|(i, t)| candidate(&format!("d{i}"), t)).collect();
        let got = match block_on(r.score(&Ctx::new(), "what causes scurvy?", &cands)) {
            Ok(scores) => texts.iter().zip(scores).map(|(t, s)| format!("{t} -> {s}")).collect::<Vec<_>>().join("\n"),
            Err(e) => format!("{}: {}", e.kind(), e.message()),
        };
        assert_eq!(got, expect);
    }

    #[test]
    fn reads_scores_and_booleans() {
        let llm = ScriptedLlm::new(r#"{"score": 0}"#)
            .with_reply("vitamin C", r#"{"score": 9}"#)
            .with_reply("sailors", "Sure: {\"relevant\": true}");
        check(
            llm,
            LlmRerankerConfig::new(PROMPT),
            &["lack of vitamin C", "sailors at sea", "the stock market"],
            "lack of vitamin C -> 9\nsailors at sea -> 10\nthe stock market -> 0",
        );
    }

    #[test]
    fn a_bad_answer_fails_the_batch() {
        check(
            ScriptedLlm::new(r#"{"score": 11}"#),
            LlmRerankerConfig::new(PROMPT),
            &["x"],
            "malformed_output: reranker `llm:scripted-llm/test_rerank@1`: judging `d0`: `score` 11 is outside 0..=10",
        );
        check(
            ScriptedLlm::new("I think it is relevant"),
            LlmRerankerConfig::new(PROMPT),
            &["x"],
            "malformed_output: reranker `llm:scripted-llm/test_rerank@1`: the relevance answer is not JSON (no JSON \
             object or array in the output): I think it is relevant",
        );
        check(
            ScriptedLlm::new(r#"{"score": 5}"#).failing_on("second"),
            LlmRerankerConfig::new(PROMPT),
            &["first", "second"],
            "transient: reranker `llm:scripted-llm/test_rerank@1`: scripted LLM failed call 2 on purpose",
        );
    }

    #[test]
    fn a_malformed_answer_gets_one_repair() {
        let llm = ScriptedLlm::new(r#"{"score": 3}"#).with_reply("Query:", "score is 7");
        let config = LlmRerankerConfig { repair: Some(REPAIR), ..LlmRerankerConfig::new(PROMPT) };
        check(llm, config, &["x"], "x -> 3");
    }

    #[test]
    fn prompts_are_checked() {
        let bad = Prompt { user: "Query: {{query}}", ..PROMPT };
        let err = LlmReranker::new(Arc::new(ScriptedLlm::new("{}")), LlmRerankerConfig::new(bad)).unwrap_err();
        assert!(err.message().contains("{{passage}}"), "{}", err.message());
        let extra = Prompt { user: "{{query}} {{passage}} {{lang}}", ..PROMPT };
        assert!(LlmReranker::new(Arc::new(ScriptedLlm::new("{}")), LlmRerankerConfig::new(extra)).is_err());
    }

    #[test]
    fn reports_its_cost_and_honours_the_reserved_budget() {
        let llm = Arc::new(ScriptedLlm::new(r#"{"score": 4}"#));
        let r = LlmReranker::new(llm.clone(), LlmRerankerConfig::new(PROMPT)).unwrap();
        let per_doc = r.cost_model().per_doc;
        assert_eq!((per_doc.docs, per_doc.calls), (1, 1));
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let cands = [candidate("a", "one two three"), candidate("b", "four five")];
        assert_eq!(block_on(r.score(&ctx, "q", &cands)).unwrap(), vec![4.0, 4.0]);
        let events = sink.take();
        assert_eq!(events.len(), 1);
        let cost = events[0].cost;
        assert_eq!((cost.docs, cost.calls), (2, 2));
        assert!(cost.tokens > 0 && cost.tokens <= 2 * per_doc.tokens, "{cost:?} within {per_doc:?}");
        // A reservation for one document stops before the second request.
        let tight = Ctx::new().with_budget(ragtune_core::Budget::new(per_doc));
        let err = block_on(r.score(&tight, "q", &cands)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Permanent);
        assert_eq!(llm.calls(), 3);
    }

    #[test]
    fn long_passages_are_clipped_at_a_character_boundary() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("héllo", 3), "hé");
        assert_eq!(clip("abc", 10), "abc");
        let llm = Arc::new(ScriptedLlm::new(r#"{"score": 1}"#));
        let config = LlmRerankerConfig { max_passage_bytes: 5, ..LlmRerankerConfig::new(PROMPT) };
        let r = LlmReranker::new(llm.clone(), config).unwrap();
        block_on(r.score(&Ctx::new(), "q", &[candidate("a", "abcdefghij")])).unwrap();
        let sent = &llm.requests()[0].messages[1].content;
        assert!(sent.contains("Passage: abcde\n"), "{sent}");
    }
}
