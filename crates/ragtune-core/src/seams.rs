//! The seam traits: every layer of ragtune implements one of these and meets the others only through them.
//!
//! All seams are object-safe, `Send + Sync + Debug`, batch-oriented and take a [`Ctx`].
//! `Arc<T>` and `Box<T>` implement a seam whenever `T` does.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{
    Candidate, Chunk, Complexity, Cost, CostModel, Ctx, EmbeddingSpec, Filter, Query, Record, Result, ScoredHit,
    SpanVector, SparseSpec, SparseVector, TextRole,
};

/// Turns texts into dense vectors of one [`EmbeddingSpec`].
///
/// Implemented by `ragtune-embed` (`FastEmbedder` on ONNX) and by test fakes.
///
/// Invariants: `embed` returns exactly one vector per input, in input order, each of `spec().dim` finite
/// values (L2-normalised when `spec().normalized`); the same text and role give the same vector.
/// Over-long inputs are truncated by the model and reported through the trace, never silently dropped.
///
/// Cost model: one call per batch, `docs` = number of texts, `tokens` = input tokens. CPU-bound; implementations
/// run model work off the async executor.
#[async_trait]
pub trait Embedder: Send + Sync + Debug {
    /// The embedding space this embedder produces.
    fn spec(&self) -> &EmbeddingSpec;
    /// The declared cost of one call.
    fn cost_model(&self) -> CostModel;
    /// Embeds a batch of texts in the given role.
    ///
    /// # Errors
    /// [`Unavailable`](crate::ErrorKind::Unavailable) when the model cannot run; `Cancelled`/`DeadlineExceeded` from `ctx`.
    async fn embed(&self, ctx: &Ctx, texts: &[&str], role: TextRole) -> Result<Vec<Vec<f32>>>;

    /// Whether a text gets the same vector in either [`TextRole`] (a model without query or passage prefixes), so a
    /// passage's vector may stand for the same text asked as a query.
    fn role_independent(&self) -> bool {
        false
    }

    /// Embeds passages as [`embed`](Self::embed) does (`TextRole::Passage`, the same vectors) and, from the same
    /// forward pass, one vector per span of each text (`spans[i]` holds byte ranges of `texts[i]`), pooled over the
    /// span's tokens as the text's vector is pooled over all of them, then L2-normalised. A span is `None` when the
    /// model did not see all of its tokens (it reaches past the truncation) or the embedder cannot pool spans; the
    /// default embeds the texts and pools no span, so callers embed what they need themselves.
    ///
    /// # Errors
    /// As [`embed`](Self::embed); [`InvalidInput`](crate::ErrorKind::InvalidInput) when `spans` and `texts` differ
    /// in length.
    async fn embed_spans(&self, ctx: &Ctx, texts: &[&str], spans: &[Vec<(usize, usize)>]) -> Result<SpanEmbeddings> {
        if spans.len() != texts.len() {
            return Err(crate::Error::invalid_input(format!("{} span lists for {} texts", spans.len(), texts.len())));
        }
        let texts_vectors = self.embed(ctx, texts, TextRole::Passage).await?;
        Ok(SpanEmbeddings { texts: texts_vectors, spans: spans.iter().map(|s| vec![None; s.len()]).collect() })
    }
}

/// What [`Embedder::embed_spans`] returns: each text's vector, and per text one vector (or `None`) per span.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpanEmbeddings {
    /// One vector per text, as `embed` gives them.
    pub texts: Vec<Vec<f32>>,
    /// Per text, one entry per requested span, in order.
    pub spans: Vec<Vec<Option<Vec<f32>>>>,
}

/// Turns texts into sparse vectors of one [`SparseSpec`] (BM25 term weights, SPLADE expansions).
///
/// Implemented by `ragtune-embed` (`Bm25Encoder`).
///
/// Invariants: one vector per input, in order; vectors satisfy [`SparseVector::validate`]; passage and query
/// encodings of the same term use the same index. When `spec().idf` is true the store multiplies by IDF at
/// query time, so encoders never need corpus statistics at query time.
///
/// Cost model: in-process and cheap (microseconds per text); [`CostModel::FREE`] unless it runs a model.
#[async_trait]
pub trait SparseEncoder: Send + Sync + Debug {
    /// The sparse space this encoder produces.
    fn spec(&self) -> &SparseSpec;
    /// Encodes a batch of texts in the given role.
    ///
    /// # Errors
    /// Only when the encoder relies on a model that fails; lexical encoders do not fail.
    async fn encode(&self, ctx: &Ctx, texts: &[&str], role: TextRole) -> Result<Vec<SparseVector>>;
}

/// The vector to search with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorQuery {
    /// A dense vector in the store's embedding space.
    Dense(Vec<f32>),
    /// A sparse vector in the store's sparse space.
    Sparse(SparseVector),
}

/// One search against a [`VectorStore`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchRequest {
    /// The query vector.
    pub vector: VectorQuery,
    /// How many hits at most.
    pub top_k: usize,
    /// Only chunks matching this filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Filter>,
}

/// One atomic write: delete whole documents, then upsert records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteBatch {
    /// Documents whose chunks are all removed before the upserts are applied.
    pub delete_docs: Vec<String>,
    /// Records to insert or replace (by chunk id).
    pub upsert: Vec<Record>,
}

/// What a write changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteReport {
    /// Records inserted or replaced.
    pub upserted: u64,
    /// Chunks removed (by document deletion or replacement).
    pub deleted: u64,
}

/// Counts and spaces of a store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoreStats {
    /// Stored chunks (searchable or not).
    pub chunks: u64,
    /// Distinct documents.
    pub documents: u64,
    /// Chunks with a dense vector.
    pub dense_vectors: u64,
    /// Chunks with a sparse vector.
    pub sparse_vectors: u64,
    /// The dense space, once fixed by the first dense write or by `ensure_spaces`.
    pub dense_spec: Option<EmbeddingSpec>,
    /// The sparse space, once fixed.
    pub sparse_spec: Option<SparseSpec>,
    /// Store-specific settings worth showing (backend, index kind, paths).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, serde_json::Value>,
}

/// Persists chunks with their dense and sparse vectors, and searches them.
///
/// Implemented by `ragtune-store` (`EmbeddedStore`, the default; `QdrantStore` behind a feature).
/// Every implementation must pass the contract suite in `ragtune-testkit`.
///
/// Invariants:
/// - a [`WriteBatch`] lands whole or not at all; readers never see half of it;
/// - upsert replaces by chunk id; `delete_docs` removes every chunk of a document;
/// - the dense and sparse spaces are fixed by [`ensure_spaces`](Self::ensure_spaces) and every write and query
///   in another space (other model id or dimension) is a [`Mismatch`](crate::ErrorKind::Mismatch) error;
/// - sparse search scores `sum(idf(t) * q(t) * d(t))` when the sparse space has `idf`, with
///   `idf(t) = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5))` over the chunks that have a sparse vector (Qdrant's formula);
/// - results are sorted by descending score, ties by ascending chunk id; records without the searched vector kind
///   are never returned; filters agree with [`Filter::matches`].
///
/// Cost model: local stores cost nothing in the budget's units; remote stores count one call per request batch.
#[async_trait]
pub trait VectorStore: Send + Sync + Debug {
    /// Fixes the spaces of a new store, or checks that they equal those of an existing one.
    ///
    /// # Errors
    /// [`Mismatch`](crate::ErrorKind::Mismatch) when the store already holds vectors of another space.
    async fn ensure_spaces(&self, ctx: &Ctx, dense: Option<&EmbeddingSpec>, sparse: Option<&SparseSpec>) -> Result<()>;
    /// Applies a batch atomically.
    ///
    /// # Errors
    /// Invalid records, space mismatches, IO failures; on error nothing of the batch is applied.
    async fn write(&self, ctx: &Ctx, batch: WriteBatch) -> Result<WriteReport>;
    /// Fetches chunks by id; `None` for ids that are not stored.
    ///
    /// # Errors
    /// IO failures.
    async fn get(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Option<Chunk>>>;
    /// Runs a batch of searches; one hit list per request, in request order.
    ///
    /// # Errors
    /// Space mismatches, IO failures.
    async fn search(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>>;
    /// Like [`search`](Self::search), but a hit's chunk may come without its text (an empty `text`; fetch it with
    /// [`get`](Self::get)). Ids, scores, order and every other field of the chunks are those of `search`. A store
    /// that can skip reading texts overrides it; the default is `search`.
    ///
    /// # Errors
    /// As [`search`](Self::search).
    async fn search_without_text(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
        self.search(ctx, requests).await
    }
    /// Counts and spaces.
    ///
    /// # Errors
    /// IO failures.
    async fn stats(&self, ctx: &Ctx) -> Result<StoreStats>;

    /// Whether the store can serve reads and take writes now, as cheaply as the backend allows: what a readiness
    /// probe asks many times a minute. The default asks for [`stats`](Self::stats); a store whose counts are
    /// expensive (a remote one), or that knows it cannot write (a full disk), overrides it.
    ///
    /// # Errors
    /// Why the store is not ready.
    async fn ready(&self, ctx: &Ctx) -> Result<()> {
        self.stats(ctx).await.map(drop)
    }

    /// The span vectors stored with these chunks ([`Record::spans`]), one list per id in order: empty for a chunk
    /// without any, an id that is not stored, or a store that keeps none (the default). Callers embed what is
    /// missing themselves.
    ///
    /// # Errors
    /// IO failures.
    async fn span_vectors(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Vec<SpanVector>>> {
        ctx.check()?;
        Ok(vec![Vec::new(); ids.len()])
    }

    /// One page of at most `limit` records (chunks with their vectors and spans), in the store's order, and the
    /// cursor of the next page (`None` after the last): pass `None` first, then each returned cursor. What a
    /// migration, a backup or a re-index reads. The default is for a store that cannot list its records.
    ///
    /// # Errors
    /// [`Unavailable`](crate::ErrorKind::Unavailable) for a store without listing (the default); IO failures.
    async fn scan(&self, ctx: &Ctx, cursor: Option<String>, limit: usize) -> Result<(Vec<Record>, Option<String>)> {
        let _ = (cursor, limit);
        ctx.check()?;
        Err(crate::Error::unavailable("this store cannot list its records"))
    }

    /// Inserts or replaces records by chunk id.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    async fn upsert(&self, ctx: &Ctx, records: Vec<Record>) -> Result<WriteReport> {
        self.write(ctx, WriteBatch { delete_docs: Vec::new(), upsert: records }).await
    }

    /// Removes every chunk of the given documents.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    async fn delete_documents(&self, ctx: &Ctx, doc_ids: &[String]) -> Result<WriteReport> {
        self.write(ctx, WriteBatch { delete_docs: doc_ids.to_vec(), upsert: Vec::new() }).await
    }
}

/// Retrieves candidates for queries: one strategy (BM25, dense), a fusion of several, or a decorator
/// (HyDE, multi-query, rewrite) around another retriever.
///
/// Implemented by `ragtune-retrieve`.
///
/// Invariants: one candidate list per query, in query order; each list is sorted by descending `score` with ties
/// broken by chunk id, holds at most `query.top_k` candidates with distinct chunk ids, and every candidate's
/// `sources` names this retriever's strategy (or the strategies it fused). Empty or over-long queries are an
/// [`InvalidInput`](crate::ErrorKind::InvalidInput) error ([`Query::validate`]).
///
/// Cost model: whatever its components cost (embedding calls, LLM tokens for query transformations), recorded
/// in the trace.
#[async_trait]
pub trait Retriever: Send + Sync + Debug {
    /// The strategy name used in provenance and traces (`bm25`, `dense`, `hybrid`).
    fn name(&self) -> &str;
    /// Retrieves for a batch of queries.
    ///
    /// # Errors
    /// Invalid queries; failures of the store or encoder.
    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>>;

    /// Like [`retrieve`](Self::retrieve), but a candidate's chunk may come without its text (an empty `text`),
    /// to be filled by [`fill_text`](Self::fill_text) for the few that are kept: fusion reads a hundred candidates
    /// per list and keeps ten, and reading a text costs a store read. Ids, scores, ranks and every other field are
    /// those of `retrieve`. The default is `retrieve` (every text present).
    ///
    /// # Errors
    /// As [`retrieve`](Self::retrieve).
    async fn retrieve_without_text(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        self.retrieve(ctx, queries).await
    }

    /// Fills in the text of the candidates in `lists` that this retriever returned from
    /// [`retrieve_without_text`](Self::retrieve_without_text) without it (those with an empty text whose
    /// `sources` name this retriever); a candidate whose chunk was deleted meanwhile is dropped. The default does
    /// nothing, which is right for a retriever whose `retrieve_without_text` keeps the texts.
    ///
    /// # Errors
    /// Failures of the store.
    async fn fill_text(&self, ctx: &Ctx, lists: &mut [Vec<Candidate>]) -> Result<()> {
        let _ = (ctx, lists);
        Ok(())
    }
}

/// Scores query–candidate pairs more precisely (and more expensively) than retrieval did.
///
/// Implemented by `ragtune-embed` (`CrossEncoderReranker`) and `ragtune-rerank` (LLM reranker).
///
/// Invariants: one finite score per candidate, in input order; higher is more relevant; scores of one reranker are
/// comparable across calls for the same query. A failed call fails the whole batch (the controller drops it).
///
/// Cost model: [`cost_model`](Self::cost_model) is what the budgeted controller plans with; cross-encoders cost
/// tens of milliseconds per pair on CPU, LLM rerankers seconds and tokens.
#[async_trait]
pub trait Reranker: Send + Sync + Debug {
    /// The strategy name (`cross-encoder:ms-marco-MiniLM-L-6-v2`, `llm:qwen-0.5b`).
    fn name(&self) -> &str;
    /// The declared price of a call.
    fn cost_model(&self) -> CostModel;
    /// Scores the candidates against the query.
    ///
    /// # Errors
    /// Model or provider failures; the whole batch fails.
    async fn score(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<Vec<f32>>;
}

/// The Corrective-RAG verdict on a retrieval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Retrieval is good enough to answer from (the heuristic evaluator's RELEVANT).
    Correct,
    /// Partly relevant: expand, re-retrieve and merge (PARTIAL).
    Ambiguous,
    /// Not relevant: search elsewhere or rewrite (IRRELEVANT).
    Incorrect,
}

/// A relevance evaluator's judgement with everything that led to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelevanceJudgement {
    /// The verdict.
    pub verdict: Verdict,
    /// The aggregate score the verdict was read from (0..=1).
    pub score: f32,
    /// One score per evaluated candidate, in input order.
    pub per_candidate: Vec<f32>,
    /// Named criteria and their values (keyword overlap, coherence, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub criteria: BTreeMap<String, f32>,
    /// Human-readable reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// What judging cost.
    #[serde(default)]
    pub cost: Cost,
}

/// Judges whether retrieved candidates can answer a query (Corrective RAG).
///
/// Implemented by `ragtune-evaluators` (heuristic, model-based and learned evaluators).
///
/// Invariants: `per_candidate` has one entry per candidate; the verdict follows from `score` and the evaluator's
/// configured thresholds; no candidates means [`Verdict::Incorrect`].
///
/// Cost model: heuristic evaluators are free; model-based ones cost what their scorer costs.
#[async_trait]
pub trait RelevanceEvaluator: Send + Sync + Debug {
    /// Evaluator name for traces.
    fn name(&self) -> &str;
    /// Judges the candidates for the query.
    ///
    /// # Errors
    /// Scorer failures; callers degrade to the retrieval as it is.
    async fn evaluate(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<RelevanceJudgement>;
}

/// The role of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The user's turn.
    User,
    /// The model's turn.
    Assistant,
}

/// A chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What is said.
    pub content: String,
}

/// A request to a language model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest {
    /// The conversation.
    pub messages: Vec<Message>,
    /// Sampling temperature; `0.0` for deterministic output.
    pub temperature: f32,
    /// The most tokens to generate.
    pub max_tokens: u32,
    /// Sampling seed, where the server supports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// A JSON schema the output must follow; the output is then a JSON document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<serde_json::Value>,
}

/// A language model's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmResponse {
    /// The generated text (a JSON document when a schema was given).
    pub text: String,
    /// Tokens used and calls made.
    pub cost: Cost,
    /// Why generation stopped (`stop`, `length`).
    pub finish_reason: String,
    /// The model that answered.
    pub model: String,
}

/// A language model behind an API (OpenAI-compatible servers, a local llama.cpp server).
///
/// Implemented by `ragtune-llm`.
///
/// Invariants: one response per request, in order; `cost.tokens` counts prompt plus completion tokens as the
/// server reported them; API keys never appear in errors or traces. Transient failures are retried inside the
/// client; what reaches the caller is final.
///
/// Cost model: one call and its tokens per request; seconds of latency on CPU.
#[async_trait]
pub trait Llm: Send + Sync + Debug {
    /// Model name for traces.
    fn name(&self) -> &str;
    /// Runs a batch of requests (sequentially or concurrently, as the implementation allows).
    ///
    /// # Errors
    /// Unreachable server ([`Unavailable`](crate::ErrorKind::Unavailable)), exhausted retries
    /// ([`Transient`](crate::ErrorKind::Transient)), malformed or truncated structured output
    /// ([`MalformedOutput`](crate::ErrorKind::MalformedOutput), whose message holds the start of the raw text).
    async fn generate(&self, ctx: &Ctx, requests: &[LlmRequest]) -> Result<Vec<LlmResponse>>;

    /// Runs one request and hands the generated text to `on_token` piece by piece as it is generated, then
    /// returns the whole response, as [`generate`](Self::generate) would.
    ///
    /// The pieces concatenate to the generated text: for a request without a JSON schema that is the response's
    /// `text`; with one, the response's `text` is the checked JSON document and the pieces are the raw output it
    /// was read from. `on_token` is called on the task that awaits the call and must not block.
    ///
    /// The default runs [`generate`](Self::generate) and hands over the whole text once (nothing when it is
    /// empty), so every implementation streams, if only in one piece; an implementation over a streaming API
    /// (`ragtune_llm::OpenAiClient`) overrides it. A transient failure is retried only before the first piece,
    /// since pieces already handed over cannot be taken back; after it, a failure is returned with what was lost.
    ///
    /// Cost model: as one request of [`generate`](Self::generate).
    ///
    /// # Errors
    /// As [`generate`](Self::generate), and a stream that breaks or carries a malformed chunk
    /// ([`Transient`](crate::ErrorKind::Transient), [`Permanent`](crate::ErrorKind::Permanent)).
    async fn generate_stream(
        &self,
        ctx: &Ctx,
        request: &LlmRequest,
        on_token: &mut (dyn for<'t> FnMut(&'t str) + Send),
    ) -> Result<LlmResponse> {
        let mut out = self.generate(ctx, std::slice::from_ref(request)).await?;
        let response = out.pop().ok_or_else(|| crate::Error::permanent("the LLM returned no response"))?;
        if !response.text.is_empty() {
            on_token(&response.text);
        }
        Ok(response)
    }
}

/// A web search request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebQuery {
    /// The search text.
    pub text: String,
    /// How many results at most.
    pub max_results: usize,
}

/// One web search result.
///
/// The metadata fields (`domain`, `date`, `tier`) are optional: a provider fills what its API gives, and
/// `ragtune-web`'s multi-provider search fills `domain` and `tier` for every result it returns.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WebResult {
    /// The page address.
    pub url: String,
    /// The page title.
    pub title: String,
    /// The snippet or extracted content.
    pub content: String,
    /// The provider that returned it.
    pub provider: String,
    /// The provider's relevance score, if it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    /// The page's host without a leading `www.`, lower-case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// The publication date as the provider gives it (usually ISO 8601), if it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    /// The source's credibility tier: 1 (authoritative), 2 (secondary) or 3 (independent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u8>,
}

/// A web search provider (Tavily, Exa, SearXNG, arXiv...), usually wrapped in rate limiting and a circuit breaker.
///
/// Implemented by `ragtune-web`.
///
/// Invariants: at most `max_results` results per query, in the provider's order; a provider that is down returns
/// [`Unavailable`](crate::ErrorKind::Unavailable) quickly rather than hanging past the context's deadline.
///
/// Cost model: one call per query; providers with per-request pricing declare it here.
#[async_trait]
pub trait WebSearch: Send + Sync + Debug {
    /// Provider name.
    fn name(&self) -> &str;
    /// The declared price of a call.
    fn cost_model(&self) -> CostModel;
    /// Searches the web for a batch of queries; one result list per query.
    ///
    /// # Errors
    /// Provider failures, rate limits ([`Transient`](crate::ErrorKind::Transient)).
    async fn search(&self, ctx: &Ctx, queries: &[WebQuery]) -> Result<Vec<Vec<WebResult>>>;

    /// Searches for one question on the route of its complexity and reports who answered and who was skipped.
    ///
    /// A provider's failure is reported in [`WebOutcome::skipped`], not returned: the outcome then has no results.
    /// The default is for a single provider, which has one route: it answers every complexity with
    /// [`search`](Self::search) and reports itself as answered or skipped; a multi-provider search
    /// (`ragtune_web::MultiSearch`) asks the providers of the route and asks none on a route without any.
    ///
    /// # Errors
    /// Only when the search cannot run at all: [`Cancelled`](crate::ErrorKind::Cancelled) or
    /// [`DeadlineExceeded`](crate::ErrorKind::DeadlineExceeded) from the context.
    async fn search_routed(&self, ctx: &Ctx, query: &WebQuery, route: Complexity) -> Result<WebOutcome> {
        let _ = route;
        ctx.check()?;
        Ok(match self.search(ctx, std::slice::from_ref(query)).await {
            Ok(mut lists) => {
                let mut results = lists.pop().unwrap_or_default();
                results.truncate(query.max_results);
                WebOutcome { results, answered: vec![self.name().to_owned()], skipped: Vec::new() }
            }
            Err(e) => {
                ctx.check()?;
                WebOutcome {
                    results: Vec::new(),
                    answered: Vec::new(),
                    skipped: vec![Skipped::from_error(self.name(), &e)],
                }
            }
        })
    }
}

/// A web search provider that was asked and did not answer, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The provider's name.
    pub provider: String,
    /// The error kind (`unavailable` for an open circuit, `transient`, `malformed_output`, ...).
    pub kind: String,
    /// The error message.
    pub reason: String,
}

impl Skipped {
    /// The provider `provider` skipped for `error`.
    #[must_use]
    pub fn from_error(provider: &str, error: &crate::Error) -> Self {
        Self {
            provider: provider.to_owned(),
            kind: error.kind().as_str().to_owned(),
            reason: error.message().to_owned(),
        }
    }
}

/// What a routed web search ([`WebSearch::search_routed`]) found, and who answered.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WebOutcome {
    /// The results, best first.
    pub results: Vec<WebResult>,
    /// The providers that answered, in route order.
    pub answered: Vec<String>,
    /// The providers that failed or were refused (an open circuit breaker), in route order.
    pub skipped: Vec<Skipped>,
}

// Blanket implementations so that `Arc<dyn Seam>`, `Box<dyn Seam>` and `Arc<Concrete>` can be passed wherever
// a seam is expected.
macro_rules! forward_pointer {
    ($($ptr:ident),*) => {$(
        #[async_trait]
        impl<T: Embedder + ?Sized> Embedder for $ptr<T> {
            fn spec(&self) -> &EmbeddingSpec { (**self).spec() }
            fn cost_model(&self) -> CostModel { (**self).cost_model() }
            async fn embed(&self, ctx: &Ctx, texts: &[&str], role: TextRole) -> Result<Vec<Vec<f32>>> {
                (**self).embed(ctx, texts, role).await
            }
            fn role_independent(&self) -> bool { (**self).role_independent() }
            async fn embed_spans(&self, ctx: &Ctx, texts: &[&str], spans: &[Vec<(usize, usize)>]) -> Result<SpanEmbeddings> {
                (**self).embed_spans(ctx, texts, spans).await
            }
        }

        #[async_trait]
        impl<T: SparseEncoder + ?Sized> SparseEncoder for $ptr<T> {
            fn spec(&self) -> &SparseSpec { (**self).spec() }
            async fn encode(&self, ctx: &Ctx, texts: &[&str], role: TextRole) -> Result<Vec<SparseVector>> {
                (**self).encode(ctx, texts, role).await
            }
        }

        #[async_trait]
        impl<T: VectorStore + ?Sized> VectorStore for $ptr<T> {
            async fn ensure_spaces(&self, ctx: &Ctx, dense: Option<&EmbeddingSpec>, sparse: Option<&SparseSpec>) -> Result<()> {
                (**self).ensure_spaces(ctx, dense, sparse).await
            }
            async fn write(&self, ctx: &Ctx, batch: WriteBatch) -> Result<WriteReport> { (**self).write(ctx, batch).await }
            async fn get(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Option<Chunk>>> { (**self).get(ctx, ids).await }
            async fn search(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
                (**self).search(ctx, requests).await
            }
            async fn stats(&self, ctx: &Ctx) -> Result<StoreStats> { (**self).stats(ctx).await }
            async fn ready(&self, ctx: &Ctx) -> Result<()> { (**self).ready(ctx).await }
            // The provided methods are forwarded too: an implementation that overrides them (a store with a
            // cheaper delete, say) keeps its override once it is shared behind a pointer.
            async fn upsert(&self, ctx: &Ctx, records: Vec<Record>) -> Result<WriteReport> {
                (**self).upsert(ctx, records).await
            }
            async fn delete_documents(&self, ctx: &Ctx, doc_ids: &[String]) -> Result<WriteReport> {
                (**self).delete_documents(ctx, doc_ids).await
            }
            async fn span_vectors(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Vec<SpanVector>>> {
                (**self).span_vectors(ctx, ids).await
            }
            async fn scan(&self, ctx: &Ctx, cursor: Option<String>, limit: usize) -> Result<(Vec<Record>, Option<String>)> {
                (**self).scan(ctx, cursor, limit).await
            }
            async fn search_without_text(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
                (**self).search_without_text(ctx, requests).await
            }
        }

        #[async_trait]
        impl<T: Retriever + ?Sized> Retriever for $ptr<T> {
            fn name(&self) -> &str { (**self).name() }
            async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
                (**self).retrieve(ctx, queries).await
            }
            async fn retrieve_without_text(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
                (**self).retrieve_without_text(ctx, queries).await
            }
            async fn fill_text(&self, ctx: &Ctx, lists: &mut [Vec<Candidate>]) -> Result<()> {
                (**self).fill_text(ctx, lists).await
            }
        }

        #[async_trait]
        impl<T: Reranker + ?Sized> Reranker for $ptr<T> {
            fn name(&self) -> &str { (**self).name() }
            fn cost_model(&self) -> CostModel { (**self).cost_model() }
            async fn score(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
                (**self).score(ctx, query, candidates).await
            }
        }

        #[async_trait]
        impl<T: RelevanceEvaluator + ?Sized> RelevanceEvaluator for $ptr<T> {
            fn name(&self) -> &str { (**self).name() }
            async fn evaluate(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<RelevanceJudgement> {
                (**self).evaluate(ctx, query, candidates).await
            }
        }

        #[async_trait]
        impl<T: Llm + ?Sized> Llm for $ptr<T> {
            fn name(&self) -> &str { (**self).name() }
            async fn generate(&self, ctx: &Ctx, requests: &[LlmRequest]) -> Result<Vec<LlmResponse>> {
                (**self).generate(ctx, requests).await
            }
            async fn generate_stream(
                &self,
                ctx: &Ctx,
                request: &LlmRequest,
                on_token: &mut (dyn for<'t> FnMut(&'t str) + Send),
            ) -> Result<LlmResponse> {
                (**self).generate_stream(ctx, request, on_token).await
            }
        }

        #[async_trait]
        impl<T: WebSearch + ?Sized> WebSearch for $ptr<T> {
            fn name(&self) -> &str { (**self).name() }
            fn cost_model(&self) -> CostModel { (**self).cost_model() }
            async fn search(&self, ctx: &Ctx, queries: &[WebQuery]) -> Result<Vec<Vec<WebResult>>> {
                (**self).search(ctx, queries).await
            }
            async fn search_routed(&self, ctx: &Ctx, query: &WebQuery, route: Complexity) -> Result<WebOutcome> {
                (**self).search_routed(ctx, query, route).await
            }
        }
    )*};
}

forward_pointer!(Arc, Box);

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + ?Sized>() {}

    #[test]
    fn web_results_without_metadata_still_parse_and_metadata_is_omitted_when_absent() {
        let old = r#"{"url":"https://a.org","title":"A","content":"c","provider":"p"}"#;
        let r: WebResult = serde_json::from_str(old).unwrap();
        assert_eq!((r.domain.as_deref(), r.date.as_deref(), r.tier), (None, None, None));
        assert_eq!(serde_json::to_string(&r).unwrap(), old);
        let tiered = WebResult { domain: Some("a.org".into()), tier: Some(1), ..r };
        assert_eq!(
            serde_json::to_string(&tiered).unwrap(),
            r#"{"url":"https://a.org","title":"A","content":"c","provider":"p","domain":"a.org","tier":1}"#
        );
    }

    #[test]
    fn every_seam_is_object_safe_send_and_sync() {
        assert_send_sync::<Arc<dyn Embedder>>();
        assert_send_sync::<Arc<dyn SparseEncoder>>();
        assert_send_sync::<Arc<dyn VectorStore>>();
        assert_send_sync::<Arc<dyn Retriever>>();
        assert_send_sync::<Arc<dyn Reranker>>();
        assert_send_sync::<Arc<dyn RelevanceEvaluator>>();
        assert_send_sync::<Arc<dyn Llm>>();
        assert_send_sync::<Arc<dyn WebSearch>>();
        // A pointer to a seam is itself a seam, so decorators can wrap shared components.
        fn is_retriever<R: Retriever>() {}
        is_retriever::<Arc<dyn Retriever>>();
        is_retriever::<Box<dyn Retriever>>();
        fn is_store<S: VectorStore>() {}
        is_store::<Arc<dyn VectorStore>>();
    }

    /// A store that overrides the provided methods and counts how often each path is taken.
    #[derive(Debug, Default)]
    struct Overriding {
        writes: std::sync::atomic::AtomicUsize,
        upserts: std::sync::atomic::AtomicUsize,
        deletes: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl VectorStore for Overriding {
        async fn ensure_spaces(&self, _: &Ctx, _: Option<&EmbeddingSpec>, _: Option<&SparseSpec>) -> Result<()> {
            Ok(())
        }
        async fn write(&self, _: &Ctx, _: WriteBatch) -> Result<WriteReport> {
            self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(WriteReport::default())
        }
        async fn get(&self, _: &Ctx, ids: &[String]) -> Result<Vec<Option<Chunk>>> {
            Ok(vec![None; ids.len()])
        }
        async fn search(&self, _: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
            Ok(vec![Vec::new(); requests.len()])
        }
        async fn stats(&self, _: &Ctx) -> Result<StoreStats> {
            Ok(StoreStats::default())
        }
        async fn upsert(&self, _: &Ctx, _: Vec<Record>) -> Result<WriteReport> {
            self.upserts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(WriteReport::default())
        }
        async fn delete_documents(&self, _: &Ctx, _: &[String]) -> Result<WriteReport> {
            self.deletes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(WriteReport::default())
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn pointers_forward_every_method_including_overridden_provided_ones() {
        use std::sync::atomic::Ordering::SeqCst;
        let inner = Arc::new(Overriding::default());
        let ctx = Ctx::new();
        let shared: Arc<dyn VectorStore> = inner.clone();
        shared.upsert(&ctx, Vec::new()).await.unwrap();
        shared.delete_documents(&ctx, &["d".to_owned()]).await.unwrap();
        let boxed: Box<dyn VectorStore> = Box::new(shared.clone());
        boxed.upsert(&ctx, Vec::new()).await.unwrap();
        boxed.delete_documents(&ctx, &["d".to_owned()]).await.unwrap();
        assert_eq!(
            (inner.upserts.load(SeqCst), inner.deletes.load(SeqCst), inner.writes.load(SeqCst)),
            (2, 2, 0),
            "the overrides ran behind Arc and Box, and the default bodies (which call write) did not"
        );
    }

    /// An LLM that answers every request with a fixed text; it streams in words only when `words` is set.
    #[derive(Debug)]
    struct Fixed {
        text: &'static str,
        words: bool,
    }

    #[async_trait]
    impl Llm for Fixed {
        fn name(&self) -> &str {
            "fixed"
        }

        async fn generate(&self, _: &Ctx, requests: &[LlmRequest]) -> Result<Vec<LlmResponse>> {
            let response = LlmResponse {
                text: self.text.to_owned(),
                cost: Cost::new(7, 0, 1),
                finish_reason: "stop".into(),
                model: "fixed".into(),
            };
            Ok(vec![response; requests.len()])
        }

        async fn generate_stream(
            &self,
            ctx: &Ctx,
            request: &LlmRequest,
            on_token: &mut (dyn for<'t> FnMut(&'t str) + Send),
        ) -> Result<LlmResponse> {
            if !self.words {
                return self.generate(ctx, std::slice::from_ref(request)).await.map(|mut r| r.remove(0));
            }
            for piece in self.text.split_inclusive(' ') {
                on_token(piece);
            }
            Ok(self.generate(ctx, std::slice::from_ref(request)).await?.remove(0))
        }
    }

    /// A seam that does not override `generate_stream`: the default.
    #[derive(Debug)]
    struct Plain(&'static str);

    #[async_trait]
    impl Llm for Plain {
        fn name(&self) -> &str {
            "plain"
        }

        async fn generate(&self, ctx: &Ctx, requests: &[LlmRequest]) -> Result<Vec<LlmResponse>> {
            Fixed { text: self.0, words: false }.generate(ctx, requests).await
        }
    }

    fn pieces(llm: &dyn Llm) -> (Vec<String>, LlmResponse) {
        let request = LlmRequest {
            messages: vec![Message { role: Role::User, content: "q".into() }],
            temperature: 0.0,
            max_tokens: 8,
            seed: None,
            stop: Vec::new(),
            json_schema: None,
        };
        let mut seen = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let response = rt
            .block_on(llm.generate_stream(&Ctx::new(), &request, &mut |piece: &str| seen.push(piece.to_owned())))
            .unwrap();
        (seen, response)
    }

    #[test]
    fn the_default_stream_hands_over_the_whole_text_once_and_pointers_forward_an_override() {
        let (seen, response) = pieces(&Plain("Scurvy is caused by a lack of vitamin C."));
        assert_eq!(seen, ["Scurvy is caused by a lack of vitamin C."]);
        assert_eq!(
            (response.text.as_str(), response.cost),
            ("Scurvy is caused by a lack of vitamin C.", Cost::new(7, 0, 1))
        );
        let (seen, response) = pieces(&Plain(""));
        assert!(seen.is_empty() && response.text.is_empty(), "an empty answer hands over nothing: {seen:?}");
        // Behind Arc and Box the implementation's own stream runs, not the default.
        let shared: Arc<dyn Llm> = Arc::new(Fixed { text: "a b c", words: true });
        assert_eq!(pieces(&shared).0, ["a ", "b ", "c"]);
        let boxed: Box<dyn Llm> = Box::new(shared);
        let (seen, response) = pieces(&boxed);
        assert_eq!((seen.concat(), response.text), ("a b c".to_owned(), "a b c".to_owned()));
    }
}
