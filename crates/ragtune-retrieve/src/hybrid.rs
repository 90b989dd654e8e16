//! Hybrid retrieval: Reciprocal Rank Fusion of any number of retrievers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::{Candidate, Ctx, Error, Query, Result, Retriever, TraceEvent, sort_ranked};

use crate::validate_all;

/// Reciprocal Rank Fusion settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RrfConfig {
    /// The RRF constant: a document at rank `r` of a list contributes `weight / (k + r)`. 60 in the original paper.
    pub k: f32,
    /// How many candidates each fused retriever contributes (at least the query's `top_k` are always fetched).
    pub depth: usize,
}

impl Default for RrfConfig {
    fn default() -> Self {
        Self { k: 60.0, depth: 100 }
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

/// Fuses several retrievers with weighted Reciprocal Rank Fusion.
///
/// Each candidate's score is `sum_i weight_i / (k + rank_i)` over the lists it appears in; candidates are deduplicated
/// by chunk id, keep the provenance of every list they came from (`sources`: strategy → score and rank), and are
/// ordered by fused score, ties by chunk id. The result does not depend on the order of the inputs.
///
/// The fused retrievers run one after the other (each is batch-oriented over the queries).
#[derive(Debug, Clone)]
pub struct HybridRetriever {
    name: String,
    inputs: Vec<Fused>,
    config: RrfConfig,
}

impl HybridRetriever {
    /// A hybrid retriever over `inputs`.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for no inputs, two inputs with the same name, a
    /// negative or non-finite weight or `k`, or a depth of 0.
    pub fn new(name: impl Into<String>, inputs: Vec<Fused>, config: RrfConfig) -> Result<Self> {
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
        if !(config.k.is_finite() && config.k >= 0.0) || config.depth == 0 {
            return Err(Error::invalid_input(format!(
                "RRF needs k >= 0 and depth >= 1, got k = {} and depth = {}",
                config.k, config.depth
            )));
        }
        Ok(Self { name: name.into(), inputs, config })
    }

    /// The fusion settings.
    #[must_use]
    pub fn config(&self) -> RrfConfig {
        self.config
    }
}

/// Fuses ranked lists with weighted RRF; `lists` holds `(strategy weight, candidates in rank order)`.
///
/// Contributions to a candidate are added in a canonical order (by strategy name), so the result is the same for
/// any order of `lists`. Each list's ranks are its positions (1-based); duplicates within a list count once, at
/// their best rank.
#[must_use]
pub fn rrf_fuse(lists: &[(f32, Vec<Candidate>)], k: f32, top_k: usize) -> Vec<Candidate> {
    struct Acc {
        chunk: ragtune_core::Chunk,
        contributions: Vec<(String, f32)>,
        sources: BTreeMap<String, ragtune_core::SourceScore>,
    }
    let mut by_id: BTreeMap<String, Acc> = BTreeMap::new();
    for (weight, list) in lists {
        if *weight == 0.0 {
            continue;
        }
        let mut seen = std::collections::HashSet::new();
        for (pos, c) in list.iter().enumerate() {
            if !seen.insert(c.chunk.id.as_str()) {
                continue;
            }
            let rank = pos as f32 + 1.0;
            let acc = by_id.entry(c.chunk.id.clone()).or_insert_with(|| Acc {
                chunk: c.chunk.clone(),
                contributions: Vec::new(),
                sources: BTreeMap::new(),
            });
            let key = c.sources.keys().next().cloned().unwrap_or_default();
            acc.contributions.push((key, weight / (k + rank)));
            for (name, s) in &c.sources {
                acc.sources.entry(name.clone()).or_insert(*s);
            }
        }
    }
    let mut fused: Vec<Candidate> = by_id
        .into_values()
        .map(|mut acc| {
            acc.contributions.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
            let score = acc.contributions.iter().map(|c| c.1).sum();
            Candidate { chunk: acc.chunk, score, sources: acc.sources }
        })
        .collect();
    sort_ranked(&mut fused, |c| (c.score, c.chunk.id.as_str()));
    fused.truncate(top_k);
    fused
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
        let mut per_input: Vec<(f32, Vec<Vec<Candidate>>)> = Vec::new();
        for input in self.inputs.iter().filter(|f| f.weight > 0.0) {
            per_input.push((input.weight, input.retriever.retrieve(ctx, &deep).await?));
        }
        let out: Vec<Vec<Candidate>> = queries
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let lists: Vec<(f32, Vec<Candidate>)> =
                    per_input.iter().map(|(w, lists)| (*w, lists.get(i).cloned().unwrap_or_default())).collect();
                rrf_fuse(&lists, self.config.k, q.top_k)
            })
            .collect();
        let weights: serde_json::Map<String, serde_json::Value> =
            self.inputs.iter().map(|f| (f.retriever.name().to_owned(), f64::from(f.weight).into())).collect();
        ctx.trace(
            TraceEvent::new("retrieve", self.name.clone())
                .detail("fusion", "rrf")
                .detail("k", f64::from(self.config.k))
                .detail("depth", self.config.depth)
                .detail("weights", serde_json::Value::Object(weights))
                .elapsed(started.elapsed()),
        );
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ragtune_testkit::fakes::StaticRetriever;

    fn cand(id: &str, strategy: &str, rank: u32) -> Candidate {
        let mut c = Candidate::from_hit(
            ragtune_core::ScoredHit { chunk: ragtune_core::Chunk::new(id, id, id), score: 1.0 / rank as f32 },
            strategy,
            rank,
        );
        c.score = 1.0 / rank as f32;
        c
    }

    fn list(strategy: &str, ids: &[&str]) -> Vec<Candidate> {
        ids.iter().enumerate().map(|(i, id)| cand(id, strategy, i as u32 + 1)).collect()
    }

    fn render(c: &[Candidate]) -> String {
        c.iter().map(|c| format!("{} {:.5}", c.chunk.id, c.score)).collect::<Vec<_>>().join(", ")
    }

    #[test]
    fn rrf_by_hand() {
        // a: 1/(60+1) + 1/(60+2) = 0.032522; b: 1/62 + 1/61 = 0.032522 (tie -> id order); c: 1/63 = 0.015873.
        let out = rrf_fuse(&[(1.0, list("bm25", &["a", "b", "c"])), (1.0, list("dense", &["b", "a"]))], 60.0, 10);
        assert_eq!(render(&out), "a 0.03252, b 0.03252, c 0.01587");
        assert_eq!(out[0].sources["bm25"].rank, 1);
        assert_eq!(out[0].sources["dense"].rank, 2);
        // Weights: dense counts double, so b wins.
        let out = rrf_fuse(&[(1.0, list("bm25", &["a", "b"])), (2.0, list("dense", &["b", "a"]))], 60.0, 10);
        assert_eq!(out[0].chunk.id, "b");
    }

    #[tokio::test]
    async fn hybrid_retriever_fuses_and_skips_zero_weights() {
        let bm25 = StaticRetriever::new("bm25").with_ranking("q", &[("a", 9.0), ("b", 8.0)]);
        let dense = StaticRetriever::new("dense").with_ranking("q", &[("c", 0.9), ("b", 0.8)]);
        let inputs =
            vec![Fused { retriever: Arc::new(bm25), weight: 1.0 }, Fused { retriever: Arc::new(dense), weight: 0.0 }];
        let h = HybridRetriever::new("hybrid", inputs, RrfConfig::default()).unwrap();
        let out = h.retrieve(&Ctx::new(), &[Query::new("q")]).await.unwrap();
        assert_eq!(out[0].iter().map(|c| c.chunk.id.as_str()).collect::<Vec<_>>(), vec!["a", "b"]);
        assert!(out[0].iter().all(|c| !c.sources.contains_key("dense")));
    }

    #[test]
    fn bad_configurations_are_refused() {
        let r: Arc<dyn Retriever> = Arc::new(StaticRetriever::new("x"));
        let dup = vec![Fused { retriever: r.clone(), weight: 1.0 }, Fused { retriever: r.clone(), weight: 1.0 }];
        assert!(HybridRetriever::new("h", dup, RrfConfig::default()).is_err());
        assert!(HybridRetriever::new("h", vec![], RrfConfig::default()).is_err());
        let neg = vec![Fused { retriever: r.clone(), weight: -1.0 }];
        assert!(HybridRetriever::new("h", neg, RrfConfig::default()).is_err());
        let ok = vec![Fused { retriever: r, weight: 1.0 }];
        assert!(HybridRetriever::new("h", ok, RrfConfig { k: 60.0, depth: 0 }).is_err());
    }

    fn arb_lists() -> impl Strategy<Value = Vec<(f32, Vec<Candidate>)>> {
        let ids = prop::collection::vec(0u8..30, 0..25);
        prop::collection::vec((prop::sample::select(vec![0.0f32, 0.5, 1.0, 2.0]), ids), 1..5).prop_map(|lists| {
            lists
                .into_iter()
                .enumerate()
                .map(|(n, (w, ids))| {
                    let names: Vec<String> = ids.iter().map(|i| format!("d{i}")).collect();
                    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                    (w, list(&format!("s{n}"), &refs))
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn fusion_is_invariant_to_the_order_of_inputs(lists in arb_lists(), seed in any::<u64>()) {
            let mut shuffled = lists.clone();
            // A deterministic permutation from the seed.
            let n = shuffled.len();
            for i in (1..n).rev() {
                let j = (seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64) % (i as u64 + 1)) as usize;
                shuffled.swap(i, j);
            }
            prop_assert_eq!(rrf_fuse(&lists, 60.0, 20), rrf_fuse(&shuffled, 60.0, 20));
        }

        #[test]
        fn a_zero_weight_removes_a_list(lists in arb_lists()) {
            let without: Vec<_> = lists.iter().filter(|(w, _)| *w != 0.0).cloned().collect();
            prop_assert_eq!(rrf_fuse(&lists, 60.0, 50), rrf_fuse(&without, 60.0, 50));
            let zero_ids: std::collections::HashSet<String> = rrf_fuse(&lists, 60.0, 1000)
                .into_iter().map(|c| c.chunk.id).collect();
            let kept: std::collections::HashSet<String> = without.iter()
                .flat_map(|(_, l)| l.iter().map(|c| c.chunk.id.clone())).collect();
            prop_assert!(zero_ids.is_subset(&kept));
        }

        #[test]
        fn top_k_is_a_prefix_of_top_k_plus_one(lists in arb_lists(), k in 0usize..30) {
            let a = rrf_fuse(&lists, 60.0, k);
            let b = rrf_fuse(&lists, 60.0, k + 1);
            prop_assert_eq!(&a[..], &b[..a.len()]);
        }

        #[test]
        fn fused_ids_are_unique_and_sorted(lists in arb_lists()) {
            let out = rrf_fuse(&lists, 60.0, 100);
            let mut ids: Vec<&str> = out.iter().map(|c| c.chunk.id.as_str()).collect();
            for w in out.windows(2) {
                prop_assert!(w[0].score > w[1].score || (w[0].score == w[1].score && w[0].chunk.id < w[1].chunk.id));
            }
            ids.sort_unstable();
            ids.dedup();
            prop_assert_eq!(ids.len(), out.len());
        }
    }
}
