//! Hybrid retrieval: any number of retrievers fused by one of the methods of [`crate::fusion`].

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::{Candidate, Ctx, Error, Query, Result, Retriever, SparseEncoder, TextRole, TraceEvent, TraceSink};

use crate::fusion::{FusionConfig, fuse_weighted, fusion_weights};
use crate::validate_all;

/// Hybrid retrieval settings: how lists are fused and how deep each is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HybridConfig {
    /// The fusion method, the RRF constant and the strength of the query-time weights.
    pub fusion: FusionConfig,
    /// How many candidates each fused retriever contributes (at least the query's `top_k` are always fetched).
    pub depth: usize,
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self { fusion: FusionConfig::default(), depth: 100 }
    }
}

/// One input of a fusion: a retriever, its weight, and optionally how sure its list is for each query.
#[derive(Debug, Clone)]
pub struct Fused {
    /// The retriever.
    pub retriever: Arc<dyn Retriever>,
    /// Its weight; 0 removes it (it is not even called).
    pub weight: f32,
    /// Scales the weight per query by how high the list's best score is ([`ListLevel`]); `None` leaves it.
    pub level: Option<FusedLevel>,
}

impl Fused {
    /// An input of weight `weight` whose weight does not depend on the query's scores.
    #[must_use]
    pub fn new(retriever: Arc<dyn Retriever>, weight: f32) -> Self {
        Self { retriever, weight, level: None }
    }
}

/// A list's confidence from the level of its best score: `sigmoid(slope × (level − center) / center)`, where the
/// level is the best score, divided by the number of the query's terms when `per_term` (a BM25 score grows with
/// the terms that match). A list whose best score is far below what a match usually scores is guessing.
///
/// ```
/// use ragtune_retrieve::ListLevel;
/// let dense = ListLevel { center: 0.5, slope: 5.0, per_term: false };
/// assert_eq!(dense.confidence(Some(0.5), 1), 0.5);
/// assert!(dense.confidence(Some(0.8), 1) > 0.9 && dense.confidence(Some(0.2), 1) < 0.1);
/// // Per query term: the same best score counts for less when the query has more terms.
/// let bm25 = ListLevel { center: 1.5, slope: 5.0, per_term: true };
/// assert!(bm25.confidence(Some(12.0), 4) > bm25.confidence(Some(12.0), 12));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ListLevel {
    /// The level at which the confidence is one half; above 0.
    pub center: f32,
    /// How steeply the confidence rises around `center`; above 0.
    pub slope: f32,
    /// Whether the level is the best score per query term.
    pub per_term: bool,
}

impl ListLevel {
    /// The confidence of a list whose best score is `top` (`None`: an empty list, confidence 1, which changes
    /// nothing since it contributes nothing), for a query of `terms` terms (at least 1 is counted).
    #[must_use]
    pub fn confidence(&self, top: Option<f32>, terms: usize) -> f32 {
        let Some(top) = top.filter(|t| t.is_finite()) else { return 1.0 };
        let level = if self.per_term { f64::from(top) / terms.max(1) as f64 } else { f64::from(top) };
        let center = f64::from(self.center);
        (1.0 / (1.0 + (-f64::from(self.slope) * (level - center) / center).exp())) as f32
    }

    /// Checks that `center` and `slope` are finite and above 0.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming the setting.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [("center", self.center), ("slope", self.slope)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::invalid_input(format!(
                    "a list level's {name} must be a finite number > 0, got {v}"
                )));
            }
        }
        Ok(())
    }
}

/// Scales each list's weight in `weights` by its level's confidence: `levels[k]` is list `k`'s level and the query's
/// term count, `None` leaving its weight as it is. What [`HybridRetriever`] does per query, for callers that fuse lists
/// themselves (the fusion fit of `ragtune calibrate --fusion`).
pub fn scale_by_levels<L: AsRef<[Candidate]>>(
    weights: &mut [f32],
    lists: &[(f32, L)],
    levels: &[Option<(ListLevel, usize)>],
) {
    for ((w, (_, list)), level) in weights.iter_mut().zip(lists).zip(levels) {
        if let Some((level, terms)) = level {
            *w *= level.confidence(list.as_ref().first().map(|c| c.score), *terms);
        }
    }
}

/// A [`ListLevel`] for one fused input, with the encoder that counts a query's terms when it is per term (the BM25
/// encoder: the number of distinct terms of its query vector).
#[derive(Debug, Clone)]
pub struct FusedLevel {
    /// The level's settings.
    pub level: ListLevel,
    /// Counts the query's terms when `level.per_term`; without one a query counts as one term.
    pub terms: Option<Arc<dyn SparseEncoder>>,
}

/// Fuses several retrievers: weighted RRF by default, or a normalised-score method, with fixed or query-time
/// weights ([`FusionConfig`]).
///
/// Every retriever is asked for `depth` candidates; the lists are fused by [`fuse`]: candidates are deduplicated by
/// chunk id, keep the provenance of every list they came from (`sources`: strategy → score and rank), and are
/// ordered by fused score, ties by chunk id. The result does not depend on the order of the inputs.
///
/// The fused retrievers run at once, each asked for its candidates without their texts
/// ([`Retriever::retrieve_without_text`]); only the fused top k are completed ([`Retriever::fill_text`]), so a
/// store reads ten texts rather than a hundred per list.
#[derive(Debug, Clone)]
pub struct HybridRetriever {
    name: String,
    inputs: Vec<Fused>,
    config: HybridConfig,
}

impl HybridRetriever {
    /// A hybrid retriever over `inputs`.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for no inputs, two inputs with the same name, a
    /// negative or non-finite weight, an invalid fusion setting ([`FusionConfig::validate`]), or a depth of 0.
    pub fn new(name: impl Into<String>, inputs: Vec<Fused>, config: HybridConfig) -> Result<Self> {
        if inputs.is_empty() {
            return Err(Error::invalid_input("a hybrid retriever needs at least one retriever to fuse"));
        }
        let mut names: Vec<&str> = inputs.iter().map(|f| f.retriever.name()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::invalid_input(format!("two fused retrievers are both named `{}`", w[0])));
        }
        if let Some(f) = inputs.iter().find(|f| !(f.weight.is_finite() && f.weight >= 0.0)) {
            return Err(Error::invalid_input(format!(
                "the weight of `{}` must be a finite number >= 0, got {}",
                f.retriever.name(),
                f.weight
            )));
        }
        for f in &inputs {
            if let Some(l) = &f.level {
                l.level.validate().map_err(|e| e.context(format!("the level of `{}`", f.retriever.name())))?;
            }
        }
        config.fusion.validate()?;
        if config.depth == 0 {
            return Err(Error::invalid_input("hybrid retrieval needs depth >= 1, got 0"));
        }
        Ok(Self { name: name.into(), inputs, config })
    }

    /// The fusion settings.
    #[must_use]
    pub fn config(&self) -> HybridConfig {
        self.config
    }
}

#[async_trait]
impl Retriever for HybridRetriever {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        let started = Instant::now();
        validate_all(queries)?;
        let deep: Vec<Query> =
            queries.iter().map(|q| Query { top_k: q.top_k.max(self.config.depth), ..q.clone() }).collect();
        let active: Vec<&Fused> = self.inputs.iter().filter(|f| f.weight > 0.0).collect();
        // Every list is retrieved at once (the keyword search runs while the query is embedded), each into a trace
        // of its own that is replayed in input order, so the trace does not depend on which list finished first.
        let runs = active.iter().map(|input| {
            let sink = TraceSink::new();
            let child = ctx.clone().with_trace(sink.clone());
            let deep = &deep;
            async move { (input.retriever.retrieve_without_text(&child, deep).await, sink) }
        });
        let mut per_input: Vec<(f32, Vec<Vec<Candidate>>)> = Vec::new();
        for (input, (lists, sink)) in active.iter().zip(futures_util::future::join_all(runs).await) {
            for event in sink.take() {
                ctx.trace(event);
            }
            per_input.push((input.weight, lists?));
        }
        // Each query's term count for the inputs whose level is per term (one encoding of the batch per encoder).
        let mut terms: Vec<Option<Vec<usize>>> = Vec::with_capacity(active.len());
        for input in &active {
            terms.push(match &input.level {
                Some(FusedLevel { level: ListLevel { per_term: true, .. }, terms: Some(encoder) }) => {
                    let texts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
                    let encoded = encoder.encode(ctx, &texts, TextRole::Query).await?;
                    Some(encoded.iter().map(|v| v.indices.len()).collect())
                }
                _ => None,
            });
        }
        let levelled = active.iter().any(|f| f.level.is_some());
        // The query-time weights of each query, by retriever name, for the trace (adaptive or level weights only).
        let mut adaptive: Vec<serde_json::Value> = Vec::new();
        let mut out: Vec<Vec<Candidate>> = queries
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let lists: Vec<(f32, &[Candidate])> =
                    per_input.iter().map(|(w, lists)| (*w, lists.get(i).map_or(&[][..], Vec::as_slice))).collect();
                let mut w = fusion_weights(&lists, &self.config.fusion);
                let levels: Vec<Option<(ListLevel, usize)>> = active
                    .iter()
                    .zip(&terms)
                    .map(|(f, t)| {
                        f.level.as_ref().map(|l| (l.level, t.as_ref().and_then(|t| t.get(i).copied()).unwrap_or(1)))
                    })
                    .collect();
                scale_by_levels(&mut w, &lists, &levels);
                if self.config.fusion.adaptive > 0.0 || levelled {
                    let named: serde_json::Map<String, serde_json::Value> = active
                        .iter()
                        .zip(&w)
                        .map(|(f, w)| (f.retriever.name().to_owned(), f64::from(*w).into()))
                        .collect();
                    adaptive.push(named.into());
                }
                fuse_weighted(&lists, &w, &self.config.fusion, q.top_k)
            })
            .collect();
        // Texts only for what is kept: each candidate's from the first list that has it.
        for input in &active {
            input.retriever.fill_text(ctx, &mut out).await?;
        }
        let weights: serde_json::Map<String, serde_json::Value> =
            self.inputs.iter().map(|f| (f.retriever.name().to_owned(), f64::from(f.weight).into())).collect();
        let fusion = self.config.fusion;
        let mut event = TraceEvent::new("retrieve", self.name.clone())
            .detail("fusion", fusion.method.name())
            .detail("k", f64::from(fusion.k))
            .detail("depth", self.config.depth)
            .detail("weights", serde_json::Value::Object(weights));
        if fusion.adaptive > 0.0 {
            event = event.detail("adaptive", f64::from(fusion.adaptive));
        }
        if fusion.adaptive > 0.0 || levelled {
            event = event.detail("query_weights", adaptive);
        }
        ctx.trace(event.elapsed(started.elapsed()));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FusionMethod, fuse};
    use ragtune_core::TraceSink;
    use ragtune_testkit::fakes::StaticRetriever;

    fn ids(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.chunk.id.as_str()).collect()
    }

    #[tokio::test]
    async fn hybrid_retriever_fuses_and_skips_zero_weights() {
        let bm25 = StaticRetriever::new("bm25").with_ranking("q", &[("a", 9.0), ("b", 8.0)]);
        let dense = StaticRetriever::new("dense").with_ranking("q", &[("c", 0.9), ("b", 0.8)]);
        let inputs = vec![Fused::new(Arc::new(bm25), 1.0), Fused::new(Arc::new(dense), 0.0)];
        let h = HybridRetriever::new("hybrid", inputs, HybridConfig::default()).unwrap();
        let out = h.retrieve(&Ctx::new(), &[Query::new("q")]).await.unwrap();
        assert_eq!(ids(&out[0]), vec!["a", "b"]);
        assert!(out[0].iter().all(|c| !c.sources.contains_key("dense")));
    }

    #[tokio::test]
    async fn list_levels_scale_each_query_weight_by_how_high_its_best_score_is() {
        // BM25's best score is low for this query (it is guessing), dense's best cosine is high: with levels the
        // dense favourite wins; without, equal weights tie the two favourites and the chunk id decides.
        let bm25 = StaticRetriever::new("bm25").with_ranking("q", &[("a", 3.0), ("b", 1.0)]);
        let dense = StaticRetriever::new("dense").with_ranking("q", &[("c", 0.8), ("d", 0.1)]);
        let config = HybridConfig {
            fusion: FusionConfig { method: FusionMethod::Convex, ..FusionConfig::default() },
            ..HybridConfig::default()
        };
        let level = |center, per_term| FusedLevel {
            level: ListLevel { center, slope: 5.0, per_term },
            terms: Some(Arc::new(ragtune_testkit::fakes::HashSparseEncoder::default()) as Arc<dyn SparseEncoder>),
        };
        let run = |levels: bool| {
            let (bm25, dense) = (bm25.clone(), dense.clone());
            async move {
                let mut inputs = vec![Fused::new(Arc::new(bm25), 1.0), Fused::new(Arc::new(dense), 1.0)];
                if levels {
                    inputs[0].level = Some(level(2.0, true));
                    inputs[1].level = Some(level(0.5, false));
                }
                let sink = TraceSink::new();
                let ctx = Ctx::new().with_trace(sink.clone());
                let out = HybridRetriever::new("hybrid", inputs, config)
                    .unwrap()
                    .retrieve(&ctx, &[Query::new("q")])
                    .await
                    .unwrap();
                (out, sink.take())
            }
        };
        let (plain, _) = run(false).await;
        assert_eq!(ids(&plain[0])[..2], ["a", "c"]);
        let (levelled, trace) = run(true).await;
        assert_eq!(ids(&levelled[0])[..2], ["c", "a"]);
        // The weights used are in the trace: BM25's 3.0 on a one-term query is above its centre 2.0, but dense's
        // 0.8 is further above 0.5.
        let event = trace.iter().find(|e| e.stage == "retrieve" && e.action == "hybrid").unwrap();
        let w = &event.detail["query_weights"][0];
        let (b, d) = (w["bm25"].as_f64().unwrap(), w["dense"].as_f64().unwrap());
        assert!(d > b && b > 0.5, "{w}");
        // Bad levels are refused when the retriever is built.
        let mut inputs = vec![Fused::new(Arc::new(bm25.clone()), 1.0)];
        inputs[0].level = Some(level(0.0, true));
        let err = HybridRetriever::new("hybrid", inputs, config).unwrap_err();
        assert!(err.to_string().contains("center must be a finite number > 0"), "{err}");
    }

    #[test]
    fn a_list_level_confidence_is_a_logistic_curve_of_its_best_score() {
        let l = ListLevel { center: 2.0, slope: 5.0, per_term: true };
        assert_eq!(l.confidence(None, 3), 1.0);
        assert_eq!(l.confidence(Some(f32::NAN), 3), 1.0);
        assert!((l.confidence(Some(6.0), 3) - 0.5).abs() < 1e-6);
        assert!(l.confidence(Some(6.0), 0) > 0.99, "no terms counts as one");
        let mut last = 0.0;
        for top in [0.0, 1.0, 2.0, 4.0, 8.0] {
            let c = l.confidence(Some(top), 1);
            assert!(c > last && (0.0..=1.0).contains(&c));
            last = c;
        }
        assert!(ListLevel { slope: f32::INFINITY, ..l }.validate().is_err());
        assert!(l.validate().is_ok());
    }

    /// A retriever that gives the executor back `yields` times before answering, and traces its answer.
    #[derive(Debug)]
    struct Slow {
        inner: StaticRetriever,
        yields: usize,
    }

    #[async_trait]
    impl Retriever for Slow {
        fn name(&self) -> &str {
            self.inner.name()
        }

        async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
            for _ in 0..self.yields {
                tokio::task::yield_now().await;
            }
            ctx.trace(TraceEvent::new("retrieve", self.inner.name().to_owned()));
            self.inner.retrieve(ctx, queries).await
        }
    }

    #[tokio::test]
    async fn the_lists_are_retrieved_together_and_traced_in_input_order() {
        let bm25 = StaticRetriever::new("bm25").with_ranking("q", &[("a", 9.0), ("b", 8.0)]);
        let dense = StaticRetriever::new("dense").with_ranking("q", &[("c", 0.9), ("b", 0.8)]);
        // The first list takes longer: the second finishes first.
        let inputs = vec![
            Fused::new(Arc::new(Slow { inner: bm25, yields: 5 }), 1.0),
            Fused::new(Arc::new(Slow { inner: dense, yields: 0 }), 1.0),
        ];
        let h = HybridRetriever::new("hybrid", inputs, HybridConfig::default()).unwrap();
        let sink = TraceSink::new();
        let out = h.retrieve(&Ctx::new().with_trace(sink.clone()), &[Query::new("q")]).await.unwrap();
        assert_eq!(ids(&out[0])[0], "b", "the document both lists have comes first");
        let order: Vec<String> = sink.take().into_iter().map(|e| e.action).collect();
        assert_eq!(order, ["bm25", "dense", "hybrid"], "input order, whichever list finished first");
    }

    #[tokio::test]
    async fn the_configured_method_fuses_and_is_traced() {
        let bm25 = StaticRetriever::new("bm25").with_ranking("q", &[("a", 9.0), ("b", 8.9), ("c", 1.0)]);
        let dense = StaticRetriever::new("dense").with_ranking("q", &[("c", 0.9), ("b", 0.5)]);
        let inputs = vec![Fused::new(Arc::new(bm25), 1.0), Fused::new(Arc::new(dense), 1.0)];
        let fusion = FusionConfig { method: FusionMethod::Convex, adaptive: 1.0, ..FusionConfig::default() };
        let h = HybridRetriever::new("hybrid", inputs, HybridConfig { fusion, depth: 10 }).unwrap();
        let sink = TraceSink::new();
        let out = h.retrieve(&Ctx::new().with_trace(sink.clone()), &[Query::new("q")]).await.unwrap();
        assert_eq!(out[0], fuse(&[(1.0, bm25_list(&h).await), (1.0, dense_list(&h).await)], &fusion, 10));
        let events = sink.take();
        let e = events.iter().find(|e| e.stage == "retrieve" && e.action == "hybrid").unwrap();
        assert_eq!(e.detail["fusion"], "convex");
        let w = &e.detail["query_weights"][0];
        assert!(w["bm25"].as_f64().unwrap() > 0.0 && w["dense"].as_f64().unwrap() > 0.0, "{w}");
    }

    async fn bm25_list(h: &HybridRetriever) -> Vec<Candidate> {
        let q = Query::new("q").with_top_k(h.config().depth);
        h.inputs[0].retriever.retrieve(&Ctx::new(), &[q]).await.unwrap().remove(0)
    }

    async fn dense_list(h: &HybridRetriever) -> Vec<Candidate> {
        let q = Query::new("q").with_top_k(h.config().depth);
        h.inputs[1].retriever.retrieve(&Ctx::new(), &[q]).await.unwrap().remove(0)
    }

    /// A store that leaves the texts out of `search_without_text` and counts the chunks `get` reads.
    #[derive(Debug, Default)]
    struct Lean {
        inner: ragtune_testkit::MemoryStore,
        read: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl ragtune_core::VectorStore for Lean {
        async fn ensure_spaces(
            &self,
            ctx: &Ctx,
            dense: Option<&ragtune_core::EmbeddingSpec>,
            sparse: Option<&ragtune_core::SparseSpec>,
        ) -> Result<()> {
            self.inner.ensure_spaces(ctx, dense, sparse).await
        }
        async fn write(&self, ctx: &Ctx, batch: ragtune_core::WriteBatch) -> Result<ragtune_core::WriteReport> {
            self.inner.write(ctx, batch).await
        }
        async fn get(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Option<ragtune_core::Chunk>>> {
            self.read.fetch_add(ids.len(), std::sync::atomic::Ordering::SeqCst);
            self.inner.get(ctx, ids).await
        }
        async fn search(
            &self,
            ctx: &Ctx,
            requests: &[ragtune_core::SearchRequest],
        ) -> Result<Vec<Vec<ragtune_core::ScoredHit>>> {
            self.inner.search(ctx, requests).await
        }
        async fn search_without_text(
            &self,
            ctx: &Ctx,
            requests: &[ragtune_core::SearchRequest],
        ) -> Result<Vec<Vec<ragtune_core::ScoredHit>>> {
            let mut lists = self.inner.search(ctx, requests).await?;
            lists.iter_mut().flatten().for_each(|h| h.chunk.text.clear());
            Ok(lists)
        }
        async fn stats(&self, ctx: &Ctx) -> Result<ragtune_core::StoreStats> {
            self.inner.stats(ctx).await
        }
    }

    #[tokio::test]
    async fn only_the_kept_candidates_have_their_texts_read() {
        use ragtune_core::{Chunk, Embedder, Record, SparseEncoder, TextRole, VectorStore};
        use ragtune_testkit::fakes::{HashEmbedder, HashSparseEncoder};
        let ctx = Ctx::new();
        let (embedder, encoder) = (Arc::new(HashEmbedder::new(32)), Arc::new(HashSparseEncoder::default()));
        let words = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "yuzu"];
        let texts: Vec<String> =
            (0..40).map(|i| format!("{} {} {}", words[i % 8], words[i % 5], words[i % 3])).collect();
        let lean = Arc::new(Lean::default());
        let full = Arc::new(ragtune_testkit::MemoryStore::default());
        for store in [lean.clone() as Arc<dyn VectorStore>, full.clone()] {
            store.ensure_spaces(&ctx, Some(embedder.spec()), Some(encoder.spec())).await.unwrap();
            let mut records = Vec::new();
            for (i, text) in texts.iter().enumerate() {
                let dense = embedder.embed(&ctx, &[text.as_str()], TextRole::Passage).await.unwrap().pop();
                let sparse = encoder.encode(&ctx, &[text.as_str()], TextRole::Passage).await.unwrap().pop();
                let id = format!("d{i:02}");
                records.push(Record { chunk: Chunk::new(&id, &id, text.clone()), dense, sparse, spans: Vec::new() });
            }
            store.upsert(&ctx, records).await.unwrap();
        }
        let hybrid = |store: Arc<dyn VectorStore>| {
            let bm25 = crate::SparseRetriever::new("bm25", encoder.clone(), store.clone());
            let dense = crate::DenseRetriever::new("dense", embedder.clone(), store);
            let inputs = vec![Fused::new(Arc::new(bm25), 1.0), Fused::new(Arc::new(dense), 1.0)];
            HybridRetriever::new("hybrid", inputs, HybridConfig { depth: 30, ..HybridConfig::default() }).unwrap()
        };
        // The third query repeats the first: its kept chunks are wanted by two lists and read once.
        let queries = [
            Query::new("apple pear").with_top_k(3),
            Query::new("kiwi fig plum").with_top_k(4),
            Query::new("apple pear").with_top_k(3),
        ];
        let want = hybrid(full.clone()).retrieve(&ctx, &queries).await.unwrap();
        let got = hybrid(lean.clone()).retrieve(&ctx, &queries).await.unwrap();
        assert_eq!(got, want, "the same candidates, texts included");
        assert_eq!(got[0], got[2]);
        assert!(got.iter().flatten().all(|c| !c.chunk.text.is_empty()));
        let read = lean.read.load(std::sync::atomic::Ordering::SeqCst);
        assert!((1..=7).contains(&read), "{read} texts read for 7 distinct kept candidates (60 per query retrieved)");

        // A chunk deleted between the search and the fill is dropped from every list that kept it, and only it.
        let h = hybrid(lean.clone());
        let mut lists = vec![Vec::new(); queries.len()];
        for input in &h.inputs {
            let part = input.retriever.retrieve_without_text(&ctx, &queries).await.unwrap();
            for (list, part) in lists.iter_mut().zip(part) {
                list.extend(part.into_iter().take(2));
            }
        }
        let gone = lists[0][0].chunk.doc_id.clone();
        lean.delete_documents(&ctx, std::slice::from_ref(&gone)).await.unwrap();
        let before: Vec<usize> = lists.iter().map(|l| l.iter().filter(|c| c.chunk.doc_id != gone).count()).collect();
        for input in &h.inputs {
            input.retriever.fill_text(&ctx, &mut lists).await.unwrap();
        }
        assert_eq!(lists.iter().map(Vec::len).collect::<Vec<_>>(), before);
        assert!(lists.iter().flatten().all(|c| c.chunk.doc_id != gone && !c.chunk.text.is_empty()));
        let texts_of = |id: &str| texts[id[1..].parse::<usize>().unwrap()].clone();
        assert!(lists.iter().flatten().all(|c| c.chunk.text == texts_of(&c.chunk.id)));
    }

    #[test]
    fn bad_configurations_are_refused() {
        let r: Arc<dyn Retriever> = Arc::new(StaticRetriever::new("x"));
        let dup = vec![Fused::new(r.clone(), 1.0), Fused::new(r.clone(), 1.0)];
        assert!(HybridRetriever::new("h", dup, HybridConfig::default()).is_err());
        assert!(HybridRetriever::new("h", vec![], HybridConfig::default()).is_err());
        let neg = vec![Fused::new(r.clone(), -1.0)];
        assert!(HybridRetriever::new("h", neg, HybridConfig::default()).is_err());
        let ok = || vec![Fused::new(r.clone(), 1.0)];
        assert!(HybridRetriever::new("h", ok(), HybridConfig { depth: 0, ..HybridConfig::default() }).is_err());
        let fusion = FusionConfig { adaptive: -1.0, ..FusionConfig::default() };
        let err = HybridRetriever::new("h", ok(), HybridConfig { fusion, depth: 10 }).unwrap_err();
        assert!(err.message().contains("adaptive"), "{err}");
    }
}
