//! Caches in front of an [`Embedder`]: [`QueryCache`] keeps query vectors across questions (bounded, least recently
//! used first out); [`RequestVectors`] keeps every vector one question meets, seeded with the strip vectors the
//! store keeps, so that nothing is embedded twice while it is answered.
//!
//! ```
//! use std::sync::Arc;
//!
//! use ragtune_core::Embedder;
//! use ragtune_embed::{QueryCache, RequestVectors};
//!
//! fn caches(model: Arc<dyn Embedder>) -> (Arc<dyn Embedder>, RequestVectors) {
//!     // Across questions: a query asked again is not embedded again.
//!     let across: Arc<dyn Embedder> = Arc::new(QueryCache::new(model, 10_000));
//!     // Within one question: the strips, statements and passages it embeds, each once.
//!     let within = RequestVectors::new(across.clone());
//!     (across, within)
//! }
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use ragtune_core::{Candidate, Ctx, Embedder, Error, Result, SpanEmbeddings, SpanVector, TextRole, TraceEvent};

/// Query embeddings cached by text (bounded; the least recently used go first): a query embedded again — by the
/// hybrid retriever and the judge, or for a repeated question — costs no inference. Passages go straight through.
#[derive(Debug)]
pub struct QueryCache {
    inner: Arc<dyn Embedder>,
    cache: moka::sync::Cache<String, Arc<Vec<f32>>>,
}

impl QueryCache {
    /// `inner` with a cache of at most `capacity` query vectors.
    #[must_use]
    pub fn new(inner: Arc<dyn Embedder>, capacity: u64) -> Self {
        Self { inner, cache: moka::sync::Cache::new(capacity) }
    }
}

#[async_trait]
impl Embedder for QueryCache {
    fn spec(&self) -> &ragtune_core::EmbeddingSpec {
        self.inner.spec()
    }

    fn cost_model(&self) -> ragtune_core::CostModel {
        self.inner.cost_model()
    }

    async fn embed(&self, ctx: &Ctx, texts: &[&str], role: TextRole) -> Result<Vec<Vec<f32>>> {
        if role != TextRole::Query {
            return self.inner.embed(ctx, texts, role).await;
        }
        let lookup = |t: &str| self.cache.get(t);
        let keep = |t: &str, v: &Arc<Vec<f32>>| self.cache.insert(t.to_owned(), v.clone());
        embed_through(ctx, self.inner.as_ref(), texts, role, "query_cache_hit", lookup, keep).await
    }

    fn role_independent(&self) -> bool {
        self.inner.role_independent()
    }

    async fn embed_spans(&self, ctx: &Ctx, texts: &[&str], spans: &[Vec<(usize, usize)>]) -> Result<SpanEmbeddings> {
        self.inner.embed_spans(ctx, texts, spans).await
    }
}

/// Embeds `texts` through a cache: the vectors `lookup` knows are not embedded again (one `hit` trace event counts
/// them), the rest are embedded in one call and handed to `keep`. The one cache path of [`QueryCache`] and
/// [`RequestVectors`].
async fn embed_through(
    ctx: &Ctx,
    inner: &dyn Embedder,
    texts: &[&str],
    role: TextRole,
    hit: &str,
    lookup: impl Fn(&str) -> Option<Arc<Vec<f32>>>,
    keep: impl Fn(&str, &Arc<Vec<f32>>),
) -> Result<Vec<Vec<f32>>> {
    // A cancelled request gets no vector, not even a cached one (the `Embedder` contract).
    ctx.check()?;
    let mut out: Vec<Option<Vec<f32>>> = texts.iter().map(|t| lookup(t).map(|v| v.as_ref().clone())).collect();
    let missing: Vec<usize> = (0..texts.len()).filter(|&i| out[i].is_none()).collect();
    let hits = texts.len() - missing.len();
    if hits > 0 {
        ctx.trace(TraceEvent::new("embed", hit).detail("texts", hits));
    }
    if !missing.is_empty() {
        let batch: Vec<&str> = missing.iter().map(|&i| texts[i]).collect();
        let vectors = inner.embed(ctx, &batch, role).await?;
        if vectors.len() != batch.len() {
            return Err(Error::corrupt(format!(
                "the embedder returned {} vectors for {} texts",
                vectors.len(),
                batch.len()
            )));
        }
        for (&i, v) in missing.iter().zip(vectors) {
            keep(texts[i], &Arc::new(v.clone()));
            out[i] = Some(v);
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// The vectors a [`RequestVectors`] knows, by role (`None` when the embedder is role-independent) and text.
type Seen = std::collections::HashMap<(Option<TextRole>, String), Arc<Vec<f32>>>;

/// The vectors one question has met, so that nothing is embedded twice while it is answered: seeded with the
/// strip vectors the store keeps for its candidates ([`seed`](Self::seed)), and filled with every text embedded
/// through it (refinement's strips, the judge's statements and passages).
///
/// A text's vector is shared between roles when the embedder says it is role-independent (a strip embedded as a
/// passage is the same vector as that sentence judged as a statement). A seeded strip vector was pooled from its
/// passage's forward pass at indexing time (`Embedder::embed_spans`), so it may differ slightly from the vector of
/// the strip embedded alone: the strip as the model read it in its passage.
#[derive(Debug)]
pub struct RequestVectors {
    inner: Arc<dyn Embedder>,
    seen: std::sync::Mutex<Seen>,
}

impl RequestVectors {
    /// An empty memory in front of `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn Embedder>) -> Self {
        Self { inner, seen: std::sync::Mutex::default() }
    }

    fn key(&self, role: TextRole, text: &str) -> (Option<TextRole>, String) {
        (if self.inner.role_independent() { None } else { Some(role) }, text.to_owned())
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Remembers the stored span vectors of `candidates` (`spans[i]` for `candidates[i]`) as passage vectors of the
    /// spans' texts, and each candidate's whole text as the mean of its spans ([`seed_mean`](Self::seed_mean)) when
    /// they cover at least four fifths of it, so a judge reading whole passages embeds none of them; a span that
    /// does not fit its chunk's text, or a text seen already, is left alone. Returns how many strip vectors were
    /// added.
    pub fn seed(&self, candidates: &[Candidate], spans: &[Vec<SpanVector>]) -> usize {
        let dim = self.inner.spec().dim;
        let mut added = 0;
        for (c, spans) in candidates.iter().zip(spans) {
            let mut parts = Vec::with_capacity(spans.len());
            let mut seen = self.seen();
            for s in spans.iter().filter(|s| s.vector.len() == dim) {
                let Some(text) = s.text_in(&c.chunk.text) else { continue };
                parts.push(text);
                let key = self.key(TextRole::Passage, text);
                if let std::collections::hash_map::Entry::Vacant(slot) = seen.entry(key) {
                    slot.insert(Arc::new(s.vector.clone()));
                    added += 1;
                }
            }
            drop(seen);
            // The mean stands for the passage only when the strips cover most of it.
            let covered: usize = parts.iter().map(|p| p.len()).sum();
            if covered * 5 >= c.chunk.text.trim().len() * 4 {
                self.seed_mean(&c.chunk.text, &parts);
            }
        }
        added
    }
}

impl RequestVectors {
    /// Remembers, as the passage vector of `text`, the normalised mean of the known passage vectors of `parts` (the
    /// strips a refined passage was joined from), so a judge comparing statements with that passage needs no
    /// inference. Returns `false`, remembering nothing, when a part is unknown or the mean is zero.
    ///
    /// The mean of the strips' vectors stands for the vector of their joined text: both average the same tokens
    /// (the strips' vectors are themselves token means of one forward pass), up to the strips' lengths and the
    /// context each was read in, which is close enough for the judge's similarity and costs nothing.
    pub fn seed_mean(&self, text: &str, parts: &[&str]) -> bool {
        let mut seen = self.seen();
        let key = self.key(TextRole::Passage, text);
        if parts.is_empty() || seen.contains_key(&key) {
            return false;
        }
        let mut sum = vec![0.0f32; self.inner.spec().dim];
        for p in parts {
            let Some(v) = seen.get(&self.key(TextRole::Passage, p)) else { return false };
            if v.len() != sum.len() {
                return false;
            }
            sum.iter_mut().zip(v.iter()).for_each(|(a, x)| *a += x);
        }
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            return false;
        }
        sum.iter_mut().for_each(|x| *x /= norm);
        seen.insert(key, Arc::new(sum));
        true
    }
}

#[async_trait]
impl Embedder for RequestVectors {
    fn spec(&self) -> &ragtune_core::EmbeddingSpec {
        self.inner.spec()
    }

    fn cost_model(&self) -> ragtune_core::CostModel {
        self.inner.cost_model()
    }

    async fn embed(&self, ctx: &Ctx, texts: &[&str], role: TextRole) -> Result<Vec<Vec<f32>>> {
        let lookup = |t: &str| self.seen().get(&self.key(role, t)).cloned();
        let keep = |t: &str, v: &Arc<Vec<f32>>| {
            self.seen().insert(self.key(role, t), v.clone());
        };
        embed_through(ctx, self.inner.as_ref(), texts, role, "request_hit", lookup, keep).await
    }

    fn role_independent(&self) -> bool {
        self.inner.role_independent()
    }

    async fn embed_spans(&self, ctx: &Ctx, texts: &[&str], spans: &[Vec<(usize, usize)>]) -> Result<SpanEmbeddings> {
        self.inner.embed_spans(ctx, texts, spans).await
    }
}
