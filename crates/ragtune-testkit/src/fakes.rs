//! Fakes for unit tests of logic: deterministic, in-process stand-ins for the model-backed seams.
//!
//! None of them models language. They exist so that retrievers, fusion, caches and the rerank controller can be
//! tested without provisioning a model: the same input always gives the same output, and the output is simple
//! enough to reason about by hand (shared words raise similarity, a scripted score is the score you wrote).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use ragtune_core::{
    Candidate, Chunk, Cost, CostModel, Ctx, Distance, Embedder, EmbeddingSpec, Error, Query, Reranker, Result,
    Retriever, ScoredHit, SparseEncoder, SparseSpec, SparseVector, TextRole, sort_ranked,
};

/// The 32-bit FNV-1a hash of `bytes`: stable across platforms, releases and runs.
///
/// ```
/// assert_eq!(ragtune_testkit::fakes::fnv1a(b""), 0x811c_9dc5);
/// assert_eq!(ragtune_testkit::fakes::fnv1a(b"a"), 0xe40c_292c);
/// ```
#[must_use]
pub fn fnv1a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for &b in bytes {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// A fake [`Embedder`] for unit tests: bag-of-words feature hashing into `dim` buckets, L2-normalised.
///
/// Each token lands in bucket `fnv1a(token) % dim` with a sign taken from the hash's top bit, so texts that share
/// words have a higher cosine than texts that do not (up to hash collisions, which a larger `dim` makes rarer).
/// The role is ignored (the space is symmetric). A text without tokens is hashed whole, so every output is a unit
/// vector. The spec is `model_id: "hash-embedder"`, normalised, cosine.
///
/// Not a model: use it to test code around an embedder, never to measure retrieval quality.
#[derive(Debug)]
pub struct HashEmbedder {
    spec: EmbeddingSpec,
    calls: AtomicUsize,
}

impl HashEmbedder {
    /// The model id in this embedder's spec.
    pub const MODEL_ID: &'static str = "hash-embedder";

    /// An embedder of `dim` dimensions.
    ///
    /// # Panics
    /// When `dim` is zero.
    #[must_use]
    pub fn new(dim: usize) -> Self {
        assert!(dim > 0, "HashEmbedder needs a dimension of at least 1");
        Self {
            spec: EmbeddingSpec { model_id: Self::MODEL_ID.into(), dim, normalized: true, distance: Distance::Cosine },
            calls: AtomicUsize::new(0),
        }
    }

    /// The vector of one text, as [`embed`](Embedder::embed) returns it.
    #[must_use]
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let dim = self.spec.dim;
        let mut v = vec![0.0_f32; dim];
        for token in ragtune_core::text::words(text) {
            let h = fnv1a(token.as_bytes());
            v[h as usize % dim] += if h >> 31 == 0 { 1.0 } else { -1.0 };
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm == 0.0 {
            // No tokens, or tokens whose signs cancelled out: fall back to the whole text so the vector stays a
            // unit vector, as the `Embedder` contract requires of a normalised space.
            v.iter_mut().for_each(|x| *x = 0.0);
            v[fnv1a(text.as_bytes()) as usize % dim] = 1.0;
            return v;
        }
        v.iter_mut().for_each(|x| *x /= norm);
        v
    }

    /// How many times [`embed`](Embedder::embed) was called (for tests of caches and batching).
    #[must_use]
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl Embedder for HashEmbedder {
    fn spec(&self) -> &EmbeddingSpec {
        &self.spec
    }

    /// One call per batch and one document per text, like a real embedder; no tokens, since nothing is tokenised
    /// for a model.
    fn cost_model(&self) -> CostModel {
        CostModel { per_call: Cost::new(0, 0, 1), per_doc: Cost::new(0, 1, 0), ms_per_doc: 0.0 }
    }

    async fn embed(&self, ctx: &Ctx, texts: &[&str], _role: TextRole) -> Result<Vec<Vec<f32>>> {
        ctx.check()?;
        self.calls.fetch_add(1, Ordering::Relaxed);
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

/// A fake [`SparseEncoder`] for unit tests: each word (core's [`words`](ragtune_core::text::words)) becomes the
/// term index `fnv1a(word)` with its term frequency as weight.
///
/// The spec is `encoder_id: "hash-sparse"` with `idf: true`, so a store turns these weights into a TF-IDF-like
/// score. The role is ignored. Never fails, as lexical encoders do not.
#[derive(Debug)]
pub struct HashSparseEncoder {
    spec: SparseSpec,
}

impl HashSparseEncoder {
    /// The encoder id in this encoder's spec.
    pub const ENCODER_ID: &'static str = "hash-sparse";

    /// The encoder.
    #[must_use]
    pub fn new() -> Self {
        Self { spec: SparseSpec { encoder_id: Self::ENCODER_ID.into(), idf: true } }
    }

    /// The sparse vector of one text, as [`encode`](SparseEncoder::encode) returns it.
    #[must_use]
    pub fn encode_one(&self, text: &str) -> SparseVector {
        SparseVector::from_pairs(ragtune_core::text::words(text).map(|t| (fnv1a(t.as_bytes()), 1.0)).collect())
    }
}

impl Default for HashSparseEncoder {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl SparseEncoder for HashSparseEncoder {
    fn spec(&self) -> &SparseSpec {
        &self.spec
    }

    async fn encode(&self, _ctx: &Ctx, texts: &[&str], _role: TextRole) -> Result<Vec<SparseVector>> {
        Ok(texts.iter().map(|t| self.encode_one(t)).collect())
    }
}

/// When a [`ScriptedReranker`] fails instead of scoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScriptedFailure {
    /// Every call succeeds.
    #[default]
    Never,
    /// Every call fails.
    Always,
    /// The first `n` calls fail, later calls succeed (for retry and fallback tests).
    FirstCalls(usize),
}

impl ScriptedFailure {
    /// Whether the call numbered `call` (0-based) fails.
    #[must_use]
    pub fn fails(self, call: usize) -> bool {
        match self {
            Self::Never => false,
            Self::Always => true,
            Self::FirstCalls(n) => call < n,
        }
    }
}

/// A fake [`Reranker`] for unit tests: scores each candidate by looking its chunk text up in a script.
///
/// Texts not in the script get the default score (`0.0` unless set). With a [`ScriptedFailure`] it returns a
/// [`Transient`](ragtune_core::ErrorKind::Transient) error for the whole batch instead, as a failing provider
/// would. It counts its calls, failed ones included, so tests can check what a controller spent.
#[derive(Debug)]
pub struct ScriptedReranker {
    name: String,
    scores: HashMap<String, f32>,
    default_score: f32,
    failure: ScriptedFailure,
    cost_model: CostModel,
    calls: AtomicUsize,
}

impl ScriptedReranker {
    /// A reranker named `"scripted"` with an empty script, default score `0.0`, that never fails and declares one
    /// call per batch and one document per candidate.
    #[must_use]
    pub fn new() -> Self {
        Self {
            name: "scripted".into(),
            scores: HashMap::new(),
            default_score: 0.0,
            failure: ScriptedFailure::Never,
            cost_model: CostModel { per_call: Cost::new(0, 0, 1), per_doc: Cost::new(0, 1, 0), ms_per_doc: 0.0 },
            calls: AtomicUsize::new(0),
        }
    }

    /// Sets the name used in provenance and traces.
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Scripts the score of candidates whose chunk text is `text`.
    #[must_use]
    pub fn with_score(mut self, text: impl Into<String>, score: f32) -> Self {
        self.scores.insert(text.into(), score);
        self
    }

    /// Sets the score of texts that are not in the script.
    #[must_use]
    pub fn with_default(mut self, score: f32) -> Self {
        self.default_score = score;
        self
    }

    /// Sets when calls fail.
    #[must_use]
    pub fn failing(mut self, failure: ScriptedFailure) -> Self {
        self.failure = failure;
        self
    }

    /// Sets the declared cost model (what a budgeted controller plans with).
    #[must_use]
    pub fn with_cost_model(mut self, cost_model: CostModel) -> Self {
        self.cost_model = cost_model;
        self
    }

    /// How many times [`score`](Reranker::score) was called, failed calls included.
    #[must_use]
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }
}

impl Default for ScriptedReranker {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Reranker for ScriptedReranker {
    fn name(&self) -> &str {
        &self.name
    }

    fn cost_model(&self) -> CostModel {
        self.cost_model
    }

    async fn score(&self, ctx: &Ctx, _query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
        ctx.check()?;
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        if self.failure.fails(call) {
            return Err(Error::transient(format!(
                "scripted reranker `{}` failed call {} on purpose",
                self.name,
                call + 1
            )));
        }
        Ok(candidates.iter().map(|c| self.scores.get(&c.chunk.text).copied().unwrap_or(self.default_score)).collect())
    }
}

/// A fake [`Retriever`] for unit tests of fusion and decorators: returns a fixed candidate list per query text.
///
/// Lists are kept in the ranking order of ragtune (descending score, ties by ascending chunk id) with distinct
/// chunk ids, as the `Retriever` contract requires; a query's filter and `top_k` are honoured. Unknown query texts
/// get an empty list; invalid queries are an [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) error.
#[derive(Debug, Clone)]
pub struct StaticRetriever {
    name: String,
    lists: HashMap<String, Vec<Candidate>>,
}

impl StaticRetriever {
    /// A retriever with the strategy name `name` and no lists.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), lists: HashMap::new() }
    }

    /// Sets the candidates returned for `query`: sorted into ranking order, keeping the best of repeated ids.
    #[must_use]
    pub fn with_candidates(mut self, query: impl Into<String>, mut candidates: Vec<Candidate>) -> Self {
        sort_ranked(&mut candidates, |c| (c.score, c.chunk.id.as_str()));
        let mut seen = std::collections::HashSet::new();
        candidates.retain(|c| seen.insert(c.chunk.id.clone()));
        self.lists.insert(query.into(), candidates);
        self
    }

    /// Sets the candidates for `query` from `(chunk id, score)` pairs.
    ///
    /// Each chunk gets its id as text and the part of the id before `#` as document id; its `sources` name this
    /// retriever with its score and 1-based rank in the sorted list.
    #[must_use]
    pub fn with_ranking(self, query: impl Into<String>, ranking: &[(&str, f32)]) -> Self {
        let mut hits: Vec<ScoredHit> = ranking
            .iter()
            .map(|&(id, score)| {
                let doc_id = id.split('#').next().unwrap_or(id);
                ScoredHit { chunk: Chunk::new(id, doc_id, id), score }
            })
            .collect();
        sort_ranked(&mut hits, |h| (h.score, h.chunk.id.as_str()));
        let candidates = hits
            .into_iter()
            .enumerate()
            .map(|(i, hit)| Candidate::from_hit(hit, &self.name, u32::try_from(i + 1).unwrap_or(u32::MAX)))
            .collect();
        self.with_candidates(query, candidates)
    }
}

#[async_trait]
impl Retriever for StaticRetriever {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        ctx.check()?;
        queries
            .iter()
            .map(|q| {
                q.validate()?;
                let list = self.lists.get(&q.text).map(Vec::as_slice).unwrap_or_default();
                Ok(list
                    .iter()
                    .filter(|c| q.filter.as_ref().is_none_or(|f| f.matches(&c.chunk)))
                    .take(q.top_k)
                    .cloned()
                    .collect())
            })
            .collect()
    }
}

/// A fake [`Llm`] for unit tests of LLM-driven logic: answers each request with the first scripted reply whose
/// key occurs in the request's last message, else the default reply; or fails as scripted.
///
/// It records every request (so tests can check prompts and call counts) and reports a cost of one call and one
/// token per word of prompt and answer. A reply of `None` for a key makes the call fail with a
/// [`Transient`](ragtune_core::ErrorKind::Transient) error, as a server that times out would.
#[derive(Debug, Default)]
pub struct ScriptedLlm {
    replies: Vec<(String, Option<String>)>,
    default_reply: Option<String>,
    failure: ScriptedFailure,
    requests: std::sync::Mutex<Vec<ragtune_core::LlmRequest>>,
}

impl ScriptedLlm {
    /// An LLM that answers every request with `default_reply`.
    #[must_use]
    pub fn new(default_reply: impl Into<String>) -> Self {
        Self { default_reply: Some(default_reply.into()), ..Self::default() }
    }

    /// An LLM whose every call fails.
    #[must_use]
    pub fn down() -> Self {
        Self { failure: ScriptedFailure::Always, ..Self::default() }
    }

    /// Answers requests whose last message contains `key` with `reply`.
    #[must_use]
    pub fn with_reply(mut self, key: impl Into<String>, reply: impl Into<String>) -> Self {
        self.replies.push((key.into(), Some(reply.into())));
        self
    }

    /// Makes requests whose last message contains `key` fail.
    #[must_use]
    pub fn failing_on(mut self, key: impl Into<String>) -> Self {
        self.replies.push((key.into(), None));
        self
    }

    /// Sets when calls fail regardless of the script.
    #[must_use]
    pub fn failing(mut self, failure: ScriptedFailure) -> Self {
        self.failure = failure;
        self
    }

    /// Every request received so far, failed ones included.
    #[must_use]
    pub fn requests(&self) -> Vec<ragtune_core::LlmRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// How many requests were received.
    #[must_use]
    pub fn calls(&self) -> usize {
        self.requests.lock().map(|r| r.len()).unwrap_or_default()
    }
}

#[async_trait]
impl ragtune_core::Llm for ScriptedLlm {
    fn name(&self) -> &str {
        "scripted-llm"
    }

    async fn generate(
        &self,
        ctx: &Ctx,
        requests: &[ragtune_core::LlmRequest],
    ) -> Result<Vec<ragtune_core::LlmResponse>> {
        ctx.check()?;
        let mut out = Vec::with_capacity(requests.len());
        for request in requests {
            let call = {
                let mut seen = self.requests.lock().map_err(|_| Error::permanent("scripted LLM lock poisoned"))?;
                seen.push(request.clone());
                seen.len() - 1
            };
            let fails = self.failure.fails(call);
            let last = request.messages.last().map(|m| m.content.as_str()).unwrap_or_default();
            let reply = if fails {
                None
            } else {
                self.replies
                    .iter()
                    .find(|(k, _)| last.contains(k.as_str()))
                    .map_or_else(|| self.default_reply.clone(), |(_, r)| r.clone())
            };
            let Some(text) = reply else {
                return Err(Error::transient(format!("scripted LLM failed call {} on purpose", call + 1)));
            };
            let words = |s: &str| s.split_whitespace().count() as u64;
            let prompt: u64 = request.messages.iter().map(|m| words(&m.content)).sum();
            out.push(ragtune_core::LlmResponse {
                cost: Cost::new(prompt + words(&text), 0, 1),
                text,
                finish_reason: "stop".into(),
                model: "scripted-llm".into(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::{ErrorKind, Filter};

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime").block_on(f)
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// Whether `query` is closer (by cosine) to `near` than to `far` under a 64-dimensional embedder.
    fn check_closer(query: &str, near: &str, far: &str, expect: bool) {
        let e = HashEmbedder::new(64);
        let (q, n, f) = (e.embed_one(query), e.embed_one(near), e.embed_one(far));
        assert_eq!(cosine(&q, &n) > cosine(&q, &f), expect, "{query:?} vs {near:?} / {far:?}");
    }

    #[test]
    fn fnv1a_matches_reference_values() {
        assert_eq!(fnv1a(b""), 0x811c_9dc5);
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn shared_words_raise_similarity() {
        check_closer("vitamin c scurvy", "scurvy is caused by lack of vitamin c", "the stock market fell today", true);
        check_closer("rust borrow checker", "the borrow checker in rust", "baking sourdough bread", true);
    }

    #[test]
    fn embedder_is_deterministic_normalized_and_counts_calls() {
        let e = HashEmbedder::new(8);
        let ctx = Ctx::new();
        let out = block_on(e.embed(&ctx, &["Hello, world", "", "hello WORLD"], TextRole::Query)).unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], out[2], "case and punctuation do not change the vector");
        for v in &out {
            assert_eq!(v.len(), 8);
            assert!((cosine(v, v) - 1.0).abs() < 1e-6);
        }
        assert_eq!(e.calls(), 1);
        assert_eq!(e.spec().model_id, "hash-embedder");
    }

    #[test]
    fn embedder_honours_cancellation() {
        let ctx = Ctx::new();
        ctx.cancel.cancel();
        let err = block_on(HashEmbedder::new(4).embed(&ctx, &["x"], TextRole::Passage)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Cancelled);
    }

    #[test]
    fn sparse_encoder_counts_terms() {
        let enc = HashSparseEncoder::new();
        let v = enc.encode_one("The cat, the hat.");
        v.validate().unwrap();
        let the = fnv1a(b"the");
        let at = v.indices.iter().position(|&i| i == the).unwrap();
        assert_eq!(v.values[at], 2.0);
        assert_eq!(v.len(), 3);
        assert!(enc.spec().idf);
        assert_eq!(enc.spec().encoder_id, "hash-sparse");
    }

    fn candidate(text: &str) -> Candidate {
        Candidate::from_hit(ScoredHit { chunk: Chunk::new(text, text, text), score: 0.0 }, "bm25", 1)
    }

    #[test]
    fn scripted_reranker_scores_and_fails_on_script() {
        let r =
            ScriptedReranker::new().with_score("good", 0.9).with_default(-1.0).failing(ScriptedFailure::FirstCalls(1));
        let ctx = Ctx::new();
        let cands = [candidate("good"), candidate("other")];
        let err = block_on(r.score(&ctx, "q", &cands)).unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(block_on(r.score(&ctx, "q", &cands)).unwrap(), vec![0.9, -1.0]);
        assert_eq!(r.calls(), 2);
        let always = ScriptedReranker::new().failing(ScriptedFailure::Always);
        assert_eq!(block_on(always.score(&ctx, "q", &cands)).unwrap_err().kind(), ErrorKind::Transient);
    }

    #[test]
    fn static_retriever_sorts_filters_and_truncates() {
        let r = StaticRetriever::new("bm25").with_ranking("q", &[("b#0", 1.0), ("a#1", 2.0), ("a#0", 1.0)]);
        let ctx = Ctx::new();
        let ids = |lists: Vec<Vec<Candidate>>| -> Vec<Vec<String>> {
            lists.into_iter().map(|l| l.into_iter().map(|c| c.chunk.id).collect()).collect()
        };
        let queries = [
            Query::new("q"),
            Query::new("q").with_top_k(2),
            Query::new("q").with_filter(Filter::eq("doc_id", "a")),
            Query::new("unknown"),
        ];
        let got = ids(block_on(r.retrieve(&ctx, &queries)).unwrap());
        assert_eq!(got, [vec!["a#1", "a#0", "b#0"], vec!["a#1", "a#0"], vec!["a#1", "a#0"], vec![]]);
        let first = block_on(r.retrieve(&ctx, &[Query::new("q")])).unwrap().remove(0).remove(0);
        assert_eq!(first.sources["bm25"].rank, 1);
        assert!(block_on(r.retrieve(&ctx, &[Query::new(" ")])).is_err());
    }

    proptest::proptest! {
        #[test]
        fn every_embedding_is_a_finite_unit_vector(text in ".{0,64}", dim in 1_usize..40) {
            let v = HashEmbedder::new(dim).embed_one(&text);
            proptest::prop_assert_eq!(v.len(), dim);
            proptest::prop_assert!(v.iter().all(|x| x.is_finite()));
            proptest::prop_assert!((cosine(&v, &v) - 1.0).abs() < 1e-5);
        }

        #[test]
        fn every_sparse_vector_is_valid(text in ".{0,64}") {
            proptest::prop_assert!(HashSparseEncoder::new().encode_one(&text).validate().is_ok());
        }
    }
}
