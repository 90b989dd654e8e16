//! Fitting the hybrid fusion on a training split (`ragtune calibrate --fusion`): every query's BM25 and dense lists
//! are retrieved once, then fused by every method of a grid — fusion method × query-time strength (`adaptive`) ×
//! the dense weight `w` in `0..=1` (BM25 gets `1 - w`) — with the engine's own fusion function,
//! [`ragtune::retrieve::fuse`], and the setting with the best mean nDCG@10 on the split wins.
//!
//! The grid contains both retrievers alone (`w = 0` and `w = 1`), so on the split it is fitted on the winner is never
//! below the better of the two. The RRF constant and the depth are the configuration's, not fitted.
//!
//! ```
//! use std::collections::BTreeMap;
//! use ragtune::core::{Candidate, Chunk, ScoredHit};
//! use ragtune::HybridSettings;
//! use ragtune_eval::fusion::{FusionGrid, FusionQuery, fit_fusion};
//!
//! let list = |strategy: &str, ids: &[&str]| -> Vec<Candidate> {
//!     let hit = |(i, id): (usize, &&str)| {
//!         let chunk = Chunk::new(*id, *id, "");
//!         Candidate::from_hit(ScoredHit { chunk, score: 1.0 / (i + 1) as f32 }, strategy, i as u32 + 1)
//!     };
//!     ids.iter().enumerate().map(hit).collect()
//! };
//! // Dense finds the relevant document first, BM25 last.
//! let queries = vec![FusionQuery {
//!     id: "q1".into(),
//!     bm25: list("bm25", &["d2", "d3", "d1"]),
//!     dense: list("dense", &["d1", "d2", "d3"]),
//! }];
//! let qrels = BTreeMap::from([("q1".to_owned(), BTreeMap::from([("d1".to_owned(), 1)]))]);
//! let fit = fit_fusion(&queries, &qrels, &HybridSettings::default(), &FusionGrid::default(), 100)?;
//! assert_eq!((fit.dense_alone, fit.best.ndcg_at_10), (1.0, 1.0));
//! assert!(fit.best.dense_weight > fit.best.bm25_weight);
//! # Ok::<(), ragtune::core::Error>(())
//! ```

use std::collections::HashSet;

use ragtune::core::{Candidate, Chunk, Ctx, Error, Query, Result};
use ragtune::evaluators::metrics::{Metric, Qrels, Runs, evaluate};
use ragtune::retrieve::{FusionMethod, fuse};
use ragtune::{EmbeddingMode, HybridSettings, Strategy};
use serde::{Deserialize, Serialize};

use crate::retrieval::{EvalOptions, document_run};

/// The settings a fusion fit tries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FusionGrid {
    /// The fusion methods.
    pub methods: Vec<FusionMethod>,
    /// The strengths of the query-time weights (`[hybrid] adaptive`; 0 is fixed weights).
    pub adaptive: Vec<f32>,
    /// The dense weight goes from 0 to 1 in this many steps (20: steps of 0.05); BM25's is 1 minus it.
    pub steps: u32,
}

impl Default for FusionGrid {
    fn default() -> Self {
        Self { methods: FusionMethod::ALL.to_vec(), adaptive: vec![0.0, 0.5, 1.0, 2.0], steps: 20 }
    }
}

/// One query's two lists, each as deep as the hybrid retrieval takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct FusionQuery {
    /// The query id in the qrels.
    pub id: String,
    /// The BM25 list, in rank order.
    pub bm25: Vec<Candidate>,
    /// The dense list, in rank order.
    pub dense: Vec<Candidate>,
}

/// One setting of the grid and its mean nDCG@10 on the split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FusionPoint {
    /// The method.
    pub method: FusionMethod,
    /// The strength of the query-time weights.
    pub adaptive: f32,
    /// The BM25 weight (1 minus the dense weight).
    pub bm25_weight: f32,
    /// The dense weight.
    pub dense_weight: f32,
    /// Mean nDCG@10 over the split's queries.
    pub ndcg_at_10: f64,
}

impl FusionPoint {
    /// `rrf`, `convex, adaptive 1`: the method and its strength, as tables print it.
    #[must_use]
    pub fn label(&self) -> String {
        if self.adaptive > 0.0 {
            format!("{}, adaptive {}", self.method, self.adaptive)
        } else {
            self.method.to_string()
        }
    }
}

/// The result of a fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FusionFit {
    /// Queries fitted on.
    pub queries: usize,
    /// The RRF constant used (the configuration's).
    pub k: f32,
    /// Candidates per list (the configuration's `[hybrid] depth`).
    pub depth: usize,
    /// The steps of the dense weight.
    pub steps: u32,
    /// Mean nDCG@10 of BM25 alone.
    pub bm25_alone: f64,
    /// Mean nDCG@10 of dense retrieval alone.
    pub dense_alone: f64,
    /// The best setting of each method and strength, in grid order.
    pub per_method: Vec<FusionPoint>,
    /// The best setting of all (the first in grid order among equals).
    pub best: FusionPoint,
    /// Every setting tried, in grid order (method, strength, dense weight ascending).
    pub points: Vec<FusionPoint>,
}

/// Fits the fusion on `queries` against `qrels`: every setting of `grid`, with `base`'s RRF constant, fused to the
/// top `top_k` by [`fuse`] and scored by mean nDCG@10 (documents counted once, at their best chunk, as `ragtune eval
/// retrieval` counts them).
///
/// # Errors
/// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) for no queries, an empty grid, or a strength outside
/// the range `[hybrid] adaptive` accepts.
pub fn fit_fusion(
    queries: &[FusionQuery],
    qrels: &Qrels,
    base: &HybridSettings,
    grid: &FusionGrid,
    top_k: usize,
) -> Result<FusionFit> {
    if queries.is_empty() {
        return Err(Error::invalid_input("no queries to fit the fusion on"));
    }
    if grid.methods.is_empty() || grid.adaptive.is_empty() || grid.steps == 0 || top_k == 0 {
        return Err(Error::invalid_input(
            "the fusion grid needs a method, a strength, at least one step and top_k >= 1",
        ));
    }
    // Fusion reads ids, scores and provenance only: dropping the texts makes the many fusions cheap.
    let queries: Vec<FusionQuery> = queries
        .iter()
        .map(|q| FusionQuery { id: q.id.clone(), bm25: without_text(&q.bm25), dense: without_text(&q.dense) })
        .collect();
    let judged: HashSet<&str> = queries.iter().map(|q| q.id.as_str()).collect();
    let qrels: Qrels =
        qrels.iter().filter(|(id, _)| judged.contains(id.as_str())).map(|(a, b)| (a.clone(), b.clone())).collect();
    let ndcg = |runs: &Runs| evaluate(&qrels, runs, &[Metric::Ndcg(10)]).mean.get("ndcg@10").copied().unwrap_or(0.0);
    let alone = |pick: fn(&FusionQuery) -> &[Candidate]| {
        let runs: Runs =
            queries.iter().map(|q| (q.id.clone(), document_run(&pick(q)[..pick(q).len().min(top_k)]))).collect();
        ndcg(&runs)
    };
    let bm25_alone = alone(|q| &q.bm25);
    let dense_alone = alone(|q| &q.dense);

    let mut points = Vec::new();
    let mut per_method: Vec<FusionPoint> = Vec::new();
    for &method in &grid.methods {
        for &adaptive in &grid.adaptive {
            let settings = HybridSettings { fusion: method, adaptive, ..*base };
            let config = settings.fusion_config();
            config.validate()?;
            let mut best: Option<FusionPoint> = None;
            for step in 0..=grid.steps {
                // Both weights from integers, so they print as written (0.35, not 0.35000002).
                let dense_weight = step as f32 / grid.steps as f32;
                let bm25_weight = (grid.steps - step) as f32 / grid.steps as f32;
                let runs: Runs = queries
                    .iter()
                    .map(|q| {
                        let lists = [(bm25_weight, q.bm25.as_slice()), (dense_weight, q.dense.as_slice())];
                        (q.id.clone(), document_run(&fuse(&lists, &config, top_k)))
                    })
                    .collect();
                let point = FusionPoint { method, adaptive, bm25_weight, dense_weight, ndcg_at_10: ndcg(&runs) };
                if best.is_none_or(|b| point.ndcg_at_10 > b.ndcg_at_10) {
                    best = Some(point);
                }
                points.push(point);
            }
            per_method.extend(best);
        }
    }
    let best = per_method
        .iter()
        .copied()
        .reduce(|a, b| if b.ndcg_at_10 > a.ndcg_at_10 { b } else { a })
        .ok_or_else(|| Error::invalid_input("the fusion grid is empty"))?;
    Ok(FusionFit {
        queries: queries.len(),
        k: base.k,
        depth: base.depth,
        steps: grid.steps,
        bm25_alone,
        dense_alone,
        per_method,
        best,
        points,
    })
}

/// The candidates with their chunks reduced to the ids.
fn without_text(list: &[Candidate]) -> Vec<Candidate> {
    list.iter()
        .map(|c| Candidate {
            chunk: Chunk::new(c.chunk.id.clone(), c.chunk.doc_id.clone(), ""),
            score: c.score,
            sources: c.sources.clone(),
        })
        .collect()
}

/// Retrieves every query of `opts.split` from BM25 and from dense retrieval once, on the cached index of
/// `opts.dataset` (built when missing), as deep as the hybrid retrieval would (`opts.hybrid.depth`, at least
/// `opts.top_k`), and fits the fusion on them (see [`fit_fusion`]).
///
/// # Errors
/// Dataset, index or model failures (the embedding model is required); no query with judgements.
pub async fn run_fusion_calibration(
    opts: &EvalOptions,
    grid: &FusionGrid,
    log: &mut dyn FnMut(&str),
) -> Result<FusionFit> {
    opts.hybrid.validate().map_err(|e| e.context("[hybrid]"))?;
    let data = ragtune::ingest::load_beir(&opts.dataset, &opts.split)?;
    let name = crate::retrieval::dataset_name(&opts.dataset);
    let settings = ragtune::EmbeddingSettings { mode: EmbeddingMode::On, ..opts.embedding.clone() };
    let embedder = ragtune::load_embedder(&settings)?;
    let crate::retrieval::IndexOpened { engine, location, .. } =
        crate::retrieval::open_index(opts, &name, &data.corpus, Some(embedder), None, log).await?;
    // The retrievers the hybrid strategy fuses, asked as deep as it asks them.
    let bm25 = engine.retriever(Strategy::Bm25).await?;
    let dense = engine.retriever(Strategy::Dense).await?;
    // With chunking, `eval retrieval` asks for `passage_depth` passages (three per wanted document), so the grid
    // fuses as deep for its points to be the numbers `eval retrieval` reports.
    let depth = opts.hybrid.depth.max(opts.passage_depth());
    let mut queries = data.queries_with_qrels();
    if let Some(limit) = opts.limit {
        queries.truncate(limit);
    }
    log(&format!(
        "retrieving {} queries of `{}` from BM25 and dense retrieval on {location}",
        queries.len(),
        opts.split
    ));
    let mut lists = Vec::with_capacity(queries.len());
    for q in &queries {
        let query = Query { id: Some(q.id.clone()), ..Query::new(q.text.clone()).with_top_k(depth) };
        let one = std::slice::from_ref(&query);
        let bm25 = bm25.retrieve(&Ctx::new(), one).await?.pop().unwrap_or_default();
        let dense = dense.retrieve(&Ctx::new(), one).await?.pop().unwrap_or_default();
        lists.push(FusionQuery { id: q.id.clone(), bm25, dense });
    }
    let points = grid.methods.len() * grid.adaptive.len() * (grid.steps as usize + 1);
    log(&format!("fusing them with {points} settings"));
    fit_fusion(&lists, &data.qrels, &opts.hybrid, grid, opts.passage_depth())
}

/// The fitted fusion as a configuration file `--config` reads: a `[hybrid]` section, under a comment that says what
/// it was fitted on and the best train nDCG@10 of every method.
#[must_use]
pub fn fusion_toml(fit: &FusionFit, dataset: &str, split: &str) -> String {
    let step = 1.0 / f64::from(fit.steps);
    let mut out = format!(
        "# Written by `ragtune calibrate --fusion` from {dataset} `{split}` ({queries} queries): the BM25 and dense lists\n\
         # (depth {depth}) of every query fused by each method with dense_weight w from 0 to 1 in steps of {step}\n\
         # and bm25_weight 1 - w (RRF k = {k}), keeping the best mean nDCG@10 on that split.\n\
         # nDCG@10 there: BM25 alone {bm25:.4}, dense alone {dense:.4}; the best of each method:\n",
        queries = fit.queries,
        depth = fit.depth,
        k = fit.k,
        bm25 = fit.bm25_alone,
        dense = fit.dense_alone,
    );
    for p in &fit.per_method {
        out.push_str(&format!(
            "#   {:<20} {:.4}  (bm25_weight {}, dense_weight {})\n",
            p.label(),
            p.ndcg_at_10,
            p.bm25_weight,
            p.dense_weight
        ));
    }
    let b = &fit.best;
    out.push_str(&format!(
        "[hybrid]\nfusion = \"{}\"\nk = {:?}\ndepth = {}\nbm25_weight = {:?}\ndense_weight = {:?}\nadaptive = {:?}\n",
        b.method, fit.k, fit.depth, b.bm25_weight, b.dense_weight, b.adaptive
    ));
    out
}

/// The fit as the table `ragtune calibrate --fusion` prints.
#[must_use]
pub fn fusion_table(fit: &FusionFit) -> String {
    let mut out = format!(
        "{} queries; nDCG@10 BM25 alone {:.4}, dense alone {:.4}\n{:<22} {:>8} {:>12} {:>13}\n",
        fit.queries, fit.bm25_alone, fit.dense_alone, "fusion", "nDCG@10", "bm25_weight", "dense_weight"
    );
    for p in &fit.per_method {
        let mark = if *p == fit.best { "  <- best" } else { "" };
        out.push_str(&format!(
            "{:<22} {:>8.4} {:>12} {:>13}{mark}\n",
            p.label(),
            p.ndcg_at_10,
            p.bm25_weight,
            p.dense_weight
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune::core::ScoredHit;

    /// A list of `strategy` from `doc:score` pairs in rank order (one chunk per document, with a text).
    fn list(strategy: &str, items: &[(&str, f32)]) -> Vec<Candidate> {
        items
            .iter()
            .zip(1u32..)
            .map(|((id, score), rank)| {
                let chunk = Chunk::new(*id, *id, format!("the text of {id}"));
                Candidate::from_hit(ScoredHit { chunk, score: *score }, strategy, rank)
            })
            .collect()
    }

    fn qrels(pairs: &[(&str, &str)]) -> Qrels {
        let mut q = Qrels::new();
        for (query, doc) in pairs {
            q.entry((*query).to_owned()).or_default().insert((*doc).to_owned(), 1);
        }
        q
    }

    /// Four queries. BM25 is sure and right on q1 and q2; on q3 and q4 it is guessing (flat scores) and wrong, while
    /// dense retrieval, whose scores are always close together, has the relevant document at rank 2 on q1 and q2 and
    /// at rank 1 on q3 and q4.
    fn synthetic() -> (Vec<FusionQuery>, Qrels) {
        let queries = vec![
            FusionQuery {
                id: "q1".into(),
                bm25: list("bm25", &[("a1", 20.0), ("x1", 5.0), ("y1", 4.0), ("z1", 3.9)]),
                dense: list("dense", &[("x1", 0.61), ("a1", 0.60), ("y1", 0.58), ("z1", 0.57)]),
            },
            FusionQuery {
                id: "q2".into(),
                bm25: list("bm25", &[("a2", 18.0), ("x2", 6.0), ("y2", 5.5), ("z2", 5.0)]),
                dense: list("dense", &[("y2", 0.70), ("a2", 0.69), ("x2", 0.66), ("z2", 0.65)]),
            },
            FusionQuery {
                id: "q3".into(),
                bm25: list("bm25", &[("x3", 4.1), ("y3", 4.0), ("z3", 3.9), ("a3", 3.8)]),
                dense: list("dense", &[("a3", 0.64), ("x3", 0.60), ("y3", 0.59), ("z3", 0.58)]),
            },
            FusionQuery {
                id: "q4".into(),
                bm25: list("bm25", &[("y4", 7.1), ("x4", 7.0), ("a4", 6.9), ("z4", 6.8)]),
                dense: list("dense", &[("a4", 0.55), ("z4", 0.52), ("x4", 0.51), ("y4", 0.50)]),
            },
        ];
        (queries, qrels(&[("q1", "a1"), ("q2", "a2"), ("q3", "a3"), ("q4", "a4")]))
    }

    /// Fits the synthetic set with `grid` and renders the fit: the two lists alone, then each method's best.
    #[track_caller]
    fn check(grid: FusionGrid, expect: &str) -> FusionFit {
        let (queries, qrels) = synthetic();
        let fit = fit_fusion(&queries, &qrels, &HybridSettings::default(), &grid, 100).unwrap();
        let mut got = format!("bm25 {:.4}\ndense {:.4}\n", fit.bm25_alone, fit.dense_alone);
        for p in &fit.per_method {
            let best = if *p == fit.best { " best" } else { "" };
            got.push_str(&format!("{} {:.4} {}/{}{best}\n", p.label(), p.ndcg_at_10, p.bm25_weight, p.dense_weight));
        }
        let expect: String =
            expect.lines().map(str::trim).filter(|l| !l.is_empty()).map(|l| format!("{l}\n")).collect();
        assert_eq!(got, expect, "\ngot:\n{got}\nexpected:\n{expect}");
        fit
    }

    #[test]
    fn the_grid_finds_the_fusion_that_beats_both_lists() {
        // nDCG@10 with one relevant document: 1 at rank 1, 1/log2(3) = 0.6309 at rank 2, 0.5 at rank 3, 0.4307 at 4.
        // BM25 alone: 1, 1, 0.4307, 0.5; dense alone: 0.6309, 0.6309, 1, 1. Ranks alone cannot tell a sure list
        // from a guessing one, so RRF stays below the score-based methods, which put every relevant document first;
        // adaptive weights already discount the flat BM25 lists, so they need less weight on dense for it.
        let fit = check(
            FusionGrid::default(),
            "bm25 0.7327
             dense 0.8155
             rrf 0.8750 0.55/0.45
             rrf, adaptive 0.5 0.9077 0.5/0.5
             rrf, adaptive 1 0.9077 0.55/0.45
             rrf, adaptive 2 0.9077 0.6/0.4
             convex 1.0000 0.35/0.65 best
             convex, adaptive 0.5 1.0000 0.4/0.6
             convex, adaptive 1 1.0000 0.4/0.6
             convex, adaptive 2 1.0000 0.5/0.5
             dbsf 1.0000 0.35/0.65
             dbsf, adaptive 0.5 1.0000 0.4/0.6
             dbsf, adaptive 1 1.0000 0.4/0.6
             dbsf, adaptive 2 1.0000 0.45/0.55",
        );
        assert_eq!(fit.points.len(), 3 * 4 * 21);
        assert!(fit.best.ndcg_at_10 >= fit.bm25_alone.max(fit.dense_alone));
        // The grid's ends are the lists alone.
        let ends: Vec<f64> = fit.points[..21].iter().step_by(20).map(|p| p.ndcg_at_10).collect();
        assert_eq!(ends, vec![fit.bm25_alone, fit.dense_alone]);
    }

    #[test]
    fn a_point_of_the_grid_is_the_engine_fusion_of_the_lists() {
        // The fit calls the retrieval layer's `fuse`: one point recomputed by hand from it agrees.
        let (queries, qrels) = synthetic();
        let grid = FusionGrid { methods: vec![FusionMethod::Dbsf], adaptive: vec![1.0], steps: 4 };
        let fit = fit_fusion(&queries, &qrels, &HybridSettings::default(), &grid, 100).unwrap();
        let settings = HybridSettings { fusion: FusionMethod::Dbsf, adaptive: 1.0, ..HybridSettings::default() };
        let runs: Runs = queries
            .iter()
            .map(|q| {
                let lists = [(0.25, q.bm25.clone()), (0.75, q.dense.clone())];
                (q.id.clone(), document_run(&fuse(&lists, &settings.fusion_config(), 100)))
            })
            .collect();
        let by_hand = evaluate(&qrels, &runs, &[Metric::Ndcg(10)]).mean["ndcg@10"];
        let point = fit.points.iter().find(|p| p.dense_weight == 0.75).unwrap();
        assert_eq!(point.ndcg_at_10, by_hand);
    }

    #[test]
    fn the_written_file_is_a_configuration_the_engine_reads() {
        let (queries, qrels) = synthetic();
        let fit = fit_fusion(&queries, &qrels, &HybridSettings::default(), &FusionGrid::default(), 100).unwrap();
        let text = fusion_toml(&fit, "tiny", "train");
        let cfg = ragtune::Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let h = cfg.hybrid;
        assert_eq!((h.fusion, h.bm25_weight, h.dense_weight, h.adaptive), (FusionMethod::Convex, 0.35, 0.65, 0.0));
        assert_eq!((h.k, h.depth), (60.0, 100));
        assert!(text.starts_with("# Written by `ragtune calibrate --fusion` from tiny `train` (4 queries)"), "{text}");
        assert!(text.contains("BM25 alone 0.7327, dense alone 0.8155"), "{text}");
        assert!(text.contains("#   dbsf, adaptive 2"), "{text}");
        assert!(text.contains("bm25_weight = 0.35\ndense_weight = 0.65\n"), "{text}");
        assert!(fusion_table(&fit).contains("<- best"));
    }

    #[test]
    fn empty_inputs_are_refused() {
        let (queries, qrels) = synthetic();
        let base = HybridSettings::default();
        assert!(fit_fusion(&[], &qrels, &base, &FusionGrid::default(), 100).is_err());
        let grid = FusionGrid { methods: vec![], ..FusionGrid::default() };
        assert!(fit_fusion(&queries, &qrels, &base, &grid, 100).is_err());
        let grid = FusionGrid { adaptive: vec![-1.0], ..FusionGrid::default() };
        assert!(fit_fusion(&queries, &qrels, &base, &grid, 100).unwrap_err().to_string().contains("adaptive"));
    }
}
