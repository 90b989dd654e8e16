//! The answer pipeline (`Engine::ask`, `Engine::query`): route → retrieve → evaluate → correct → budgeted rerank
//! → refine / extract → assemble under a token budget → generate with citations → judge → smart retry.
//!
//! Every stage that fails or runs out of time degrades: the question still gets the best answer the pipeline has,
//! and [`AskResponse::notes`] plus the trace say what was skipped and why. Only an invalid question is an error.

mod answer;
mod note;
mod run;
mod stages;
mod stream;
mod web;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ragtune_core::{Candidate, Cost, Query, RelevanceJudgement, Result, TraceEvent, Verdict};
use ragtune_evaluators::extract::Extraction;
use ragtune_evaluators::faithfulness::Faithfulness;
use ragtune_evaluators::retry::RetryDecision;
use ragtune_evaluators::text::estimate_tokens;
use serde::{Deserialize, Serialize};

pub use note::{Note, NoteKind};
pub use stream::{AnswerEvent, RestartReason, TokenSink};

use crate::engine::Engine;
use run::Run;

/// One numbered passage of the context the answer was generated from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextPassage {
    /// The citation number (`[n]` in the answer), from 1.
    pub n: usize,
    /// The chunk the text comes from.
    pub chunk_id: String,
    /// Its document.
    pub doc_id: String,
    /// The document's title, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The text given to the generator (whole passage, refinement strips or extracted sentences).
    pub text: String,
    /// A web passage's credibility tier (1 authoritative, 2 secondary, 3 other; `[web.credibility]`); `None`
    /// for corpus passages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u8>,
    /// The page the passage starts on, for passages of paged documents (PDF; the chunk's `page` metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// The page it ends on, when that is a later page (the chunk's `last_page` metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_page: Option<u32>,
}

impl ContextPassage {
    /// The passage's pages as a citation shows them (`p. 3`, `pp. 3–4`); `None` for documents without pages.
    #[must_use]
    pub fn pages(&self) -> Option<String> {
        match (self.page, self.last_page) {
            (Some(first), Some(last)) if last > first => Some(format!("pp. {first}\u{2013}{last}")),
            (Some(first), _) => Some(format!("p. {first}")),
            (None, _) => None,
        }
    }
}

/// A source the answer cites.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Citation {
    /// The number used in the answer.
    pub n: usize,
    /// The cited chunk.
    pub chunk_id: String,
    /// Its document.
    pub doc_id: String,
    /// The document's title, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A cited web page's credibility tier; `None` for corpus passages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u8>,
    /// The cited passage's pages in a paged document (`p. 3`, `pp. 3–4`; PDF); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<String>,
}

/// The Corrective-RAG metadata of an answer (the `crag` fields of docs/pipeline.md, "The result").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CragMetadata {
    /// The evaluator that judged the first retrieval (`heuristic`, `model:…`, or `off`).
    pub evaluator: String,
    /// Its verdict; `None` when evaluation was off, failed or was skipped.
    pub decision: Option<Verdict>,
    /// The verdict in the evaluator's own words (RELEVANT / PARTIAL / IRRELEVANT for the heuristic evaluator,
    /// CORRECT / AMBIGUOUS / INCORRECT for the model-based one, `NONE` without a verdict).
    pub category: CragCategory,
    /// The aggregate score the verdict was read from.
    pub score: f32,
    /// Every criterion and its value.
    pub criteria: BTreeMap<String, f32>,
    /// Why.
    pub reasons: Vec<String>,
    /// Whether a correction ran.
    pub correction_applied: bool,
    /// `none`, `query_expansion`, `query_rewrite`, `web_search` or `query_rewrite+web_search`.
    pub correction_strategy: String,
    /// Whether web results were added.
    pub web_search_used: bool,
    /// The query sent to the web when it is not the question (rewritten for a web search engine by the LLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_query: Option<String>,
    /// The web providers that answered (empty when the web was not searched).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub web_providers: Vec<String>,
    /// The web providers asked that did not answer, each as `provider: reason`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub web_skipped: Vec<String>,
    /// Whether the first retrieval came from the cache.
    pub cache_hit: bool,
    /// Candidates before correction.
    pub original_count: usize,
    /// Candidates after correction (and reranking).
    pub final_count: usize,
}

impl CragMetadata {
    fn off(reason: &str) -> Self {
        Self {
            evaluator: "off".into(),
            decision: None,
            category: CragCategory::None,
            score: 0.0,
            criteria: BTreeMap::new(),
            reasons: vec![reason.to_owned()],
            correction_applied: false,
            correction_strategy: "none".into(),
            web_search_used: false,
            web_query: None,
            web_providers: Vec::new(),
            web_skipped: Vec::new(),
            cache_hit: false,
            original_count: 0,
            final_count: 0,
        }
    }
}

/// The Corrective-RAG verdict in the evaluator's own words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CragCategory {
    /// The heuristic evaluator's CORRECT band.
    Relevant,
    /// The heuristic evaluator's AMBIGUOUS band.
    Partial,
    /// The heuristic evaluator's INCORRECT band.
    Irrelevant,
    /// The model-based and learned evaluators' verdicts.
    Correct,
    /// See [`Correct`](Self::Correct).
    Ambiguous,
    /// See [`Correct`](Self::Correct).
    Incorrect,
    /// No verdict (evaluation off, failed or skipped).
    None,
}

/// How the context given to the generator was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ContextMethod {
    /// Whole retrieved passages.
    Full,
    /// Knowledge-refinement strips.
    Refine,
    /// Sentences extracted by the LLM and verified against their passages.
    Extract,
    /// Extraction failed or found too little; the whole passages were used.
    ExtractFallback,
    /// The passages' sentences most relevant to the question, under `[pipeline] sentence_context_tokens`.
    Sentences,
    /// Nothing was retrieved.
    None,
}

impl std::fmt::Display for CragCategory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::config::serde_name(self))
    }
}

impl std::fmt::Display for ContextMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::config::serde_name(self))
    }
}

/// How the answer text was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AnswerKind {
    /// Generated by the LLM from the numbered context.
    Llm,
    /// Sentences copied from the context (no LLM configured, or it failed).
    Extractive,
    /// Generated by the LLM without retrieval (the closed-book baseline).
    ClosedBook,
    /// No answer (generation off: `ragtune query`).
    None,
}

/// How the context was reduced before generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextReport {
    /// `full`, `refine`, `extract`, `extract-fallback` (extraction failed and the whole passages were used), or
    /// `none` (nothing was retrieved).
    pub method: ContextMethod,
    /// Estimated tokens of the retrieved passages.
    pub tokens_before: usize,
    /// Estimated tokens of the assembled context.
    pub tokens_after: usize,
    /// Passages dropped or cut to fit the token budget.
    pub cut_for_budget: usize,
}

/// One attempt of the retry loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Attempt {
    /// From 0.
    pub attempt: usize,
    /// The query this attempt searched with (the question, or a rewrite).
    pub query: String,
    /// Candidates asked for.
    pub k: usize,
    /// Candidates retrieved.
    pub retrieved: usize,
    /// The smart-retry policy's decision after this attempt (`None` when retry is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<RetryDecision>,
}

/// Tokens, documents, calls and milliseconds of one stage.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StageCost {
    /// LLM tokens (prompt and completion).
    pub tokens: u64,
    /// Documents scored or read by a model.
    pub docs: u64,
    /// Model or provider calls.
    pub calls: u64,
    /// Wall time in milliseconds.
    pub ms: f64,
}

/// What a question cost, per stage and in total.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PipelineCost {
    /// Per stage (`retrieve`, `evaluate`, `correct`, `rerank`, `refine`, `extract`, `generate`, `judge`), summed
    /// over attempts.
    pub stages: BTreeMap<String, StageCost>,
    /// LLM tokens of the whole question (every LLM call, including query transformations).
    pub tokens: u64,
    /// LLM calls of the whole question.
    pub llm_calls: u64,
    /// Wall time of the whole question in milliseconds.
    pub total_ms: f64,
}

impl PipelineCost {
    fn add(&mut self, stage: &str, cost: Cost, elapsed: Duration) {
        let s = self.stages.entry(stage.to_owned()).or_default();
        s.tokens += cost.tokens;
        s.docs += cost.docs;
        s.calls += cost.calls;
        s.ms += elapsed.as_secs_f64() * 1e3;
    }
}

/// The answer to one question, with everything that led to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AskResponse {
    /// The question as asked.
    pub question: String,
    /// The answer with `[n]` citations; `None` for `ragtune query`.
    pub answer: Option<String>,
    /// How the answer was produced.
    pub answer_kind: AnswerKind,
    /// The sources the answer cites, in citation order.
    pub citations: Vec<Citation>,
    /// The numbered context the answer was generated from.
    pub context: Vec<ContextPassage>,
    /// Corrective-RAG metadata of the first retrieval.
    pub crag: CragMetadata,
    /// The faithfulness verdict of the final answer (`None` when judging was off or skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faithfulness: Option<Faithfulness>,
    /// When web passages are in the context: each of the answer's claims (the judge's statements, else its
    /// sentences) checked against independent sources (registered domains; the corpus is one source), with the
    /// VERIFIED / LIKELY / UNVERIFIED status, coverage and tier-1 ratio (`ragtune_web::triangulation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triangulation: Option<ragtune_web::triangulation::Triangulation>,
    /// How the context was reduced.
    pub context_report: ContextReport,
    /// Every attempt of the retry loop.
    pub attempts: Vec<Attempt>,
    /// What was skipped, degraded or fell back, and why (each note serialises to its sentence).
    pub notes: Vec<Note>,
    /// What the question cost.
    pub cost: PipelineCost,
    /// Time to first token: milliseconds from the question's arrival to the first piece of the LLM's answer sent
    /// to the caller's token sink; `None` when the answer was not streamed (no sink, or no LLM answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Milliseconds the LLM spent generating answers (every attempt's call, streamed or not); `None` when the LLM
    /// generated none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_ms: Option<f64>,
    /// Every recorded step.
    pub trace: Vec<TraceEvent>,
}

/// The result of one attempt.
struct AttemptResult {
    retrieved: usize,
    crag: CragMetadata,
    context: Vec<ContextPassage>,
    report: ContextReport,
    extraction: Option<Extraction>,
    answer: Option<String>,
    answer_kind: AnswerKind,
    faithfulness: Option<Faithfulness>,
}

impl AttemptResult {
    /// Nothing retrieved, nothing answered; the CRAG metadata says why evaluation is off.
    fn empty(why: &str) -> Self {
        Self {
            retrieved: 0,
            crag: CragMetadata::off(why),
            context: Vec::new(),
            report: ContextReport { method: ContextMethod::None, tokens_before: 0, tokens_after: 0, cut_for_budget: 0 },
            extraction: None,
            answer: None,
            answer_kind: AnswerKind::None,
            faithfulness: None,
        }
    }
}

/// Caches of the answer pipeline: bounded, with a time to live, keyed by the normalised query, a fingerprint of the
/// configuration and the store's write generation ([`crate::stores::OpenStore::generation`]), so that no answer
/// computed before a write (a deleted or replaced document) is served after it.
#[derive(Debug, Clone)]
pub(crate) struct PipelineCaches {
    pub(crate) retrieval: moka::sync::Cache<String, Arc<Vec<Candidate>>>,
    pub(crate) evaluation: moka::sync::Cache<String, Arc<RelevanceJudgement>>,
    pub(crate) fingerprint: u64,
}

impl PipelineCaches {
    pub(crate) fn new(config: &crate::Config) -> Option<Self> {
        let c = config.cache;
        if !c.enabled {
            return None;
        }
        let ttl = Duration::from_secs(c.ttl_secs.max(1));
        let fingerprint = xxhash_rust::xxh3::xxh3_64(serde_json::to_string(config).unwrap_or_default().as_bytes());
        Some(Self {
            retrieval: moka::sync::Cache::builder().max_capacity(c.capacity).time_to_live(ttl).build(),
            evaluation: moka::sync::Cache::builder().max_capacity(c.capacity).time_to_live(ttl).build(),
            fingerprint,
        })
    }
}

/// Lowercased, whitespace-collapsed: the cache key's view of a query.
pub(crate) fn normalize_query(q: &str) -> String {
    q.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>().join(" ")
}

/// Runs the pipeline for `question` (`Engine::ask`, `ask_streaming` and `query`): the answer when `generate`.
pub(crate) async fn run_pipeline(
    engine: &Engine,
    question: &str,
    generate: bool,
    sink: Option<TokenSink>,
) -> Result<AskResponse> {
    let query = Query::new(question.trim());
    query.validate()?;
    let run = Run::new(engine, query.text, sink);
    Ok(if engine.config().pipeline.retrieve { run.answer(generate).await } else { run.closed_book(generate).await })
}

/// What the extractive answer says when nothing was retrieved.
pub const NO_DOCUMENTS: &str = "No documents were retrieved for this question.";

/// What the extractive answer says when no sentence of the context shares a word with the question (an honest
/// "not in the documents", which smart retry accepts).
pub const NO_INFO: &str = "The documents don't contain this information.";

/// Fuses the original candidates with a correction's by reciprocal rank fusion (k = 60, equal weights), so that
/// documents both retrievals found rise and new ones join; at most `limit` results, ties broken by chunk id. This
/// is the retrieval layer's RRF ([`ragtune_retrieve::rrf_fuse`]): a chunk listed twice in one list counts once.
#[must_use]
pub fn fuse_lists(original: &[Candidate], extra: &[Candidate], limit: usize) -> Vec<Candidate> {
    ragtune_retrieve::rrf_fuse(&[(1.0, original.to_vec()), (1.0, extra.to_vec())], CORRECTION_RRF_K, limit)
}

/// The RRF constant of correction fusion (the usual 60 of Cormack et al.).
const CORRECTION_RRF_K: f32 = 60.0;

/// Numbers the passages in order and cuts them to `budget` estimated tokens: whole passages while they fit, the
/// first that does not fit cut at a word boundary when at least a quarter of it fits, the rest dropped. Returns
/// the context and how many passages were cut or dropped.
fn assemble(passages: Vec<ContextPassage>, budget: usize) -> (Vec<ContextPassage>, usize) {
    let mut out = Vec::new();
    let mut used = 0usize;
    let mut cut = 0usize;
    let mut seen = BTreeSet::new();
    for mut p in passages {
        if p.text.trim().is_empty() || !seen.insert(p.chunk_id.clone()) {
            continue;
        }
        let tokens = estimate_tokens(&p.text);
        if used + tokens <= budget {
            used += tokens;
        } else {
            cut += 1;
            let room = budget.saturating_sub(used);
            if room * 4 < tokens || room < 16 {
                continue;
            }
            let words: Vec<&str> = p.text.split_whitespace().collect();
            let keep = (room * 3 / 4).min(words.len());
            p.text = words[..keep].join(" ");
            used += estimate_tokens(&p.text);
        }
        p.n = out.len() + 1;
        out.push(p);
    }
    (out, cut)
}

fn render_context(context: &[ContextPassage]) -> String {
    // Document and web text is untrusted: each passage goes in a delimited block it cannot close or forge
    // (`ragtune_llm::prompts::render_sources`), and the answer prompts say the blocks are data, not instructions.
    let sources: Vec<ragtune_llm::prompts::Source<'_>> = context
        .iter()
        .map(|p| ragtune_llm::prompts::Source {
            n: p.n,
            title: p.title.as_deref().filter(|t| !t.is_empty()),
            text: &p.text,
        })
        .collect();
    ragtune_llm::prompts::render_sources(&sources)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context passage of `text` with chunk and document `id` (the answer module's tests use it too).
    pub(super) fn passage(n: usize, id: &str, text: &str) -> ContextPassage {
        ContextPassage {
            n,
            chunk_id: id.into(),
            doc_id: id.into(),
            title: None,
            text: text.into(),
            tier: None,
            page: None,
            last_page: None,
        }
    }

    #[test]
    fn pages_of_paged_passages() {
        let mut p = passage(1, "report.pdf#2", "x");
        assert_eq!(p.pages(), None);
        p.page = Some(3);
        assert_eq!(p.pages().as_deref(), Some("p. 3"));
        p.last_page = Some(4);
        assert_eq!(p.pages().as_deref(), Some("pp. 3\u{2013}4"));
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!((json["page"].as_u64(), json["last_page"].as_u64()), (Some(3), Some(4)));
        assert!(serde_json::to_value(passage(1, "a", "x")).unwrap().get("page").is_none(), "absent when unpaged");
    }

    #[test]
    fn context_methods_and_crag_categories_keep_their_json_spelling() {
        let json = |v: serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        for (m, name) in [
            (ContextMethod::Full, "full"),
            (ContextMethod::Refine, "refine"),
            (ContextMethod::Extract, "extract"),
            (ContextMethod::ExtractFallback, "extract-fallback"),
            (ContextMethod::None, "none"),
        ] {
            assert_eq!((json(serde_json::to_value(m).unwrap()), m.to_string()), (name.to_owned(), name.to_owned()));
        }
        for (c, name) in
            [(CragCategory::Relevant, "RELEVANT"), (CragCategory::Incorrect, "INCORRECT"), (CragCategory::None, "NONE")]
        {
            assert_eq!((json(serde_json::to_value(c).unwrap()), c.to_string()), (name.to_owned(), name.to_owned()));
        }
    }

    #[test]
    fn assembly_numbers_passages_and_cuts_to_the_budget() {
        let long = "word ".repeat(300);
        let input =
            vec![passage(0, "a", "short one"), passage(0, "a", "dup"), passage(0, "b", &long), passage(0, "c", "x y")];
        // Less than a quarter of the long passage fits: it is dropped and the next one still gets in.
        let (out, cut) = assemble(input.clone(), 50);
        assert_eq!(out.iter().map(|p| (p.n, p.chunk_id.as_str())).collect::<Vec<_>>(), [(1, "a"), (2, "c")]);
        assert_eq!(cut, 1);
        // More than a quarter fits: it is cut at a word boundary and fills the budget.
        let (out, cut) = assemble(input, 120);
        assert_eq!(out.iter().map(|p| (p.n, p.chunk_id.as_str())).collect::<Vec<_>>(), [(1, "a"), (2, "b")]);
        assert_eq!(cut, 2);
        assert!(out.iter().map(|p| estimate_tokens(&p.text)).sum::<usize>() <= 120);
        let (out, cut) = assemble(vec![passage(0, "b", &long)], 200);
        assert_eq!(cut, 1);
        assert!(estimate_tokens(&out[0].text) <= 200, "{}", estimate_tokens(&out[0].text));
    }

    #[test]
    fn fusion_raises_documents_both_lists_found_and_keeps_the_limit() {
        let c = |id: &str| {
            Candidate::from_hit(
                ragtune_core::ScoredHit { chunk: ragtune_core::Chunk::new(id, id, id), score: 1.0 },
                "x",
                1,
            )
        };
        let base = fuse_lists(&[c("a"), c("b")], &[c("b"), c("c"), c("d")], 3);
        assert_eq!(base.iter().map(|c| c.chunk.id.as_str()).collect::<Vec<_>>(), ["b", "a", "c"]);
        let same = fuse_lists(&[c("a"), c("b")], &[c("a"), c("b")], 10);
        assert_eq!(same.iter().map(|c| c.chunk.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }
}
