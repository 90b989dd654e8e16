//! Hybrid retrieval: any number of retrievers fused by one of the methods of [`crate::fusion`].

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::{Candidate, Ctx, Error, Query, Result, Retriever, TraceEvent, TraceSink};

use crate::fusion::{FusionConfig, fuse, fusion_weights};
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

/// One input of a fusion: a retriever and its weight.
#[derive(Debug, Clone)]
pub struct Fused {
    /// The retriever.
    pub retriever: Arc<dyn Retriever>,
    /// Its weight; 0 removes it (it is not even called).
    pub weight: f32,
}

/// Fuses several retrievers: weighted RRF by default, or a normalised-score method, with fixed or query-time
/// weights ([`FusionConfig`]).
///
/// Every retriever is asked for `depth` candidates; the lists are fused by [`fuse`]: candidates are deduplicated by
/// chunk id, keep the provenance of every list they came from (`sources`: strategy → score and rank), and are
/// ordered by fused score, ties by chunk id. The result does not depend on the order of the inputs.
///
/// The fused retrievers run one after the other (each is batch-oriented over the queries).
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
            async move { (input.retriever.retrieve(&child, deep).await, sink) }
        });
        let mut per_input: Vec<(f32, Vec<Vec<Candidate>>)> = Vec::new();
        for (input, (lists, sink)) in active.iter().zip(futures_util::future::join_all(runs).await) {
            for event in sink.take() {
                ctx.trace(event);
            }
            per_input.push((input.weight, lists?));
        }
        // The query-time weights of each query, by retriever name, for the trace (adaptive fusion only).
        let mut adaptive: Vec<serde_json::Value> = Vec::new();
        let out: Vec<Vec<Candidate>> = queries
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let lists: Vec<(f32, &[Candidate])> =
                    per_input.iter().map(|(w, lists)| (*w, lists.get(i).map_or(&[][..], Vec::as_slice))).collect();
                if self.config.fusion.adaptive > 0.0 {
                    let w = fusion_weights(&lists, &self.config.fusion);
                    let named: serde_json::Map<String, serde_json::Value> = active
                        .iter()
                        .zip(w)
                        .map(|(f, w)| (f.retriever.name().to_owned(), f64::from(w).into()))
                        .collect();
                    adaptive.push(named.into());
                }
                fuse(&lists, &self.config.fusion, q.top_k)
            })
            .collect();
        let weights: serde_json::Map<String, serde_json::Value> =
            self.inputs.iter().map(|f| (f.retriever.name().to_owned(), f64::from(f.weight).into())).collect();
        let fusion = self.config.fusion;
        let mut event = TraceEvent::new("retrieve", self.name.clone())
            .detail("fusion", fusion.method.name())
            .detail("k", f64::from(fusion.k))
            .detail("depth", self.config.depth)
            .detail("weights", serde_json::Value::Object(weights));
        if fusion.adaptive > 0.0 {
            event = event.detail("adaptive", f64::from(fusion.adaptive)).detail("query_weights", adaptive);
        }
        ctx.trace(event.elapsed(started.elapsed()));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FusionMethod;
    use ragtune_core::TraceSink;
    use ragtune_testkit::fakes::StaticRetriever;

    fn ids(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.chunk.id.as_str()).collect()
    }

    #[tokio::test]
    async fn hybrid_retriever_fuses_and_skips_zero_weights() {
        let bm25 = StaticRetriever::new("bm25").with_ranking("q", &[("a", 9.0), ("b", 8.0)]);
        let dense = StaticRetriever::new("dense").with_ranking("q", &[("c", 0.9), ("b", 0.8)]);
        let inputs =
            vec![Fused { retriever: Arc::new(bm25), weight: 1.0 }, Fused { retriever: Arc::new(dense), weight: 0.0 }];
        let h = HybridRetriever::new("hybrid", inputs, HybridConfig::default()).unwrap();
        let out = h.retrieve(&Ctx::new(), &[Query::new("q")]).await.unwrap();
        assert_eq!(ids(&out[0]), vec!["a", "b"]);
        assert!(out[0].iter().all(|c| !c.sources.contains_key("dense")));
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
            Fused { retriever: Arc::new(Slow { inner: bm25, yields: 5 }), weight: 1.0 },
            Fused { retriever: Arc::new(Slow { inner: dense, yields: 0 }), weight: 1.0 },
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
        let inputs =
            vec![Fused { retriever: Arc::new(bm25), weight: 1.0 }, Fused { retriever: Arc::new(dense), weight: 1.0 }];
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

    #[test]
    fn bad_configurations_are_refused() {
        let r: Arc<dyn Retriever> = Arc::new(StaticRetriever::new("x"));
        let dup = vec![Fused { retriever: r.clone(), weight: 1.0 }, Fused { retriever: r.clone(), weight: 1.0 }];
        assert!(HybridRetriever::new("h", dup, HybridConfig::default()).is_err());
        assert!(HybridRetriever::new("h", vec![], HybridConfig::default()).is_err());
        let neg = vec![Fused { retriever: r.clone(), weight: -1.0 }];
        assert!(HybridRetriever::new("h", neg, HybridConfig::default()).is_err());
        let ok = || vec![Fused { retriever: r.clone(), weight: 1.0 }];
        assert!(HybridRetriever::new("h", ok(), HybridConfig { depth: 0, ..HybridConfig::default() }).is_err());
        let fusion = FusionConfig { adaptive: -1.0, ..FusionConfig::default() };
        let err = HybridRetriever::new("h", ok(), HybridConfig { fusion, depth: 10 }).unwrap_err();
        assert!(err.message().contains("adaptive"), "{err}");
    }
}
