//! Fitting the hybrid fusion on a training split (`ragtune calibrate --fusion`): every query's BM25 and dense lists
//! are retrieved once, then fused by every method of a grid — fusion method × query-time strength (`adaptive`) ×
//! the dense weight `w` in `0..=1` (BM25 gets `1 - w`) — with the engine's own fusion function,
//! [`ragtune::retrieve::fuse`], and the setting with the best mean nDCG@10 on the split wins.
//!
//! The grid contains both retrievers alone (`w = 0` and `w = 1`), so on the split it is fitted on the winner is never
//! below the better of the two. The RRF constant and the depth are the configuration's, not fitted.
//!
//! A [`Stress`] fits the same split again with one retriever made weaker on purpose: its query text gets typos
//! ([`with_typos`]) while the other list stays as it was. On corpora where BM25 is the stronger retriever (SciFact,
//! CMU QA), such variants are how a fit that chooses one fusion for several datasets ([`joint_fit`]) also sees the
//! case where the dense list is the better one, as it is on many corpora (ADR 0019).
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
//!     bm25_terms: 3,
//! }];
//! let qrels = BTreeMap::from([("q1".to_owned(), BTreeMap::from([("d1".to_owned(), 1)]))]);
//! let fit = fit_fusion(&queries, &qrels, &HybridSettings::default(), &FusionGrid::default(), 100)?;
//! assert_eq!((fit.dense_alone, fit.best.ndcg_at_10), (1.0, 1.0));
//! assert!(fit.best.dense_weight > fit.best.bm25_weight);
//! # Ok::<(), ragtune::core::Error>(())
//! ```
//!
//! Over 1,000 lines with its unit tests (about 530 lines of them): the code itself is under 1,000 lines; the
//! settings of a fit's grid are enumerated and scored in `grid.rs`.

mod grid;

use std::collections::HashSet;
use std::path::Path;

use ragtune::core::{Candidate, Chunk, Ctx, Error, Query, Result, SparseEncoder, TextRole};
use ragtune::evaluators::metrics::{Metric, Qrels, Runs, evaluate};
use ragtune::retrieve::{FusionMethod, fuse_weighted, fusion_weights, scale_by_levels};
use ragtune::{EmbeddingMode, HybridSettings, Strategy};
use serde::{Deserialize, Serialize};

use crate::retrieval::{EvalChunking, EvalOptions, document_run};
use grid::{Setting, best_per_method, grid_settings, score_in_parallel};

/// The settings a fusion fit tries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FusionGrid {
    /// The fusion methods.
    pub methods: Vec<FusionMethod>,
    /// The strengths of the query-time weights (`[hybrid] adaptive`; 0 is fixed weights).
    pub adaptive: Vec<f32>,
    /// The dense weight goes from 0 to 1 in this many steps (20: steps of 0.05); BM25's is 1 minus it.
    pub steps: u32,
    /// Level weights tried besides (`[hybrid] bm25_level`, `dense_level`, `level_slope`), each with convex fusion
    /// and no `adaptive`; none by default.
    #[serde(default)]
    pub levels: Vec<Levels>,
}

impl Default for FusionGrid {
    fn default() -> Self {
        Self {
            methods: FusionMethod::ALL.to_vec(),
            adaptive: vec![0.0, 0.5, 1.0, 2.0, 3.0, 4.0],
            steps: 20,
            levels: Vec::new(),
        }
    }
}

impl FusionGrid {
    /// The level weights `ragtune calibrate --fusion --levels` adds: BM25's best score per query term centred on
    /// 1, 1.5, 2, 3 or 4, dense's best cosine on 0.45, 0.5 or 0.55, slopes 5 and 10 (30 settings).
    #[must_use]
    pub fn level_settings() -> Vec<Levels> {
        let mut out = Vec::new();
        for bm25 in [1.0, 1.5, 2.0, 3.0, 4.0] {
            for dense in [0.45, 0.5, 0.55] {
                for slope in [5.0, 10.0] {
                    out.push(Levels { bm25, dense, slope });
                }
            }
        }
        out
    }

    /// Adds the level weights of `configured` to the grid when it has them (both centres and the slope above 0) and
    /// the grid does not, so that the configured `[hybrid]` is a point of the fit and its row is printed and marked
    /// (without `--levels`, the configured levels are the only ones tried). A setting with one list levelled is no
    /// point of the grid and is left out.
    pub fn include_levels_of(&mut self, configured: &HybridSettings) {
        let h = configured;
        // Both lists levelled, as the engine reads the settings (`list_level`).
        if h.list_level(h.bm25_level, true).is_some() && h.list_level(h.dense_level, false).is_some() {
            let levels = Levels { bm25: h.bm25_level, dense: h.dense_level, slope: h.level_slope };
            if !self.levels.contains(&levels) {
                self.levels.push(levels);
            }
        }
    }
}

/// Level weights of the two lists (`[hybrid] bm25_level`, `dense_level`, `level_slope`; see
/// [`ragtune::retrieve::ListLevel`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Levels {
    /// The centre of BM25's best score per query term.
    pub bm25: f32,
    /// The centre of dense retrieval's best cosine.
    pub dense: f32,
    /// The slope of both.
    pub slope: f32,
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
    /// The number of terms BM25 searched with (its query vector's), for level weights per query term.
    pub bm25_terms: usize,
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
    /// The level weights, when the point has them.
    #[serde(default)]
    pub levels: Option<Levels>,
    /// Mean nDCG@10 over the split's queries.
    pub ndcg_at_10: f64,
}

impl FusionPoint {
    /// `rrf`, `convex, adaptive 1`, `convex, levels 1.5 / 0.5 / 5`: the method and its query-time weights, as
    /// tables print it.
    #[must_use]
    pub fn label(&self) -> String {
        label(self.method, self.adaptive, self.levels)
    }
}

/// `rrf`, `convex, adaptive 1`: a method and its query-time weights, as tables and file headers print them.
fn label(method: FusionMethod, adaptive: f32, levels: Option<Levels>) -> String {
    let mut out = method.to_string();
    if adaptive > 0.0 {
        out.push_str(&format!(", adaptive {adaptive}"));
    }
    if let Some(l) = levels {
        out.push_str(&format!(", levels {} / {} / {}", l.bm25, l.dense, l.slope));
    }
    out
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
    /// Where the setting the fit ran with (`base`: its method, strength and weights scaled to sum to 1) is in
    /// [`points`](Self::points), when the grid has it: how the configured fusion does on the split.
    #[serde(default)]
    pub configured: Option<usize>,
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
        .map(|q| FusionQuery {
            id: q.id.clone(),
            bm25: without_text(&q.bm25),
            dense: without_text(&q.dense),
            bm25_terms: q.bm25_terms,
        })
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
    let settings = grid_settings(grid, base)?;
    let score = |&(_, _, bm25_weight, dense_weight, levels, config): &Setting| {
        let runs: Runs = queries
            .iter()
            .map(|q| {
                let lists = [(bm25_weight, q.bm25.as_slice()), (dense_weight, q.dense.as_slice())];
                let mut weights = fusion_weights(&lists, &config);
                if let Some((_, [b, d])) = levels {
                    scale_by_levels(&mut weights, &lists, &[Some((b, q.bm25_terms)), Some((d, 1))]);
                }
                (q.id.clone(), document_run(&fuse_weighted(&lists, &weights, &config, top_k)))
            })
            .collect();
        ndcg(&runs)
    };
    let (points, per_method) = best_per_method(&settings, score_in_parallel(&settings, &score));
    let best = per_method
        .iter()
        .copied()
        .reduce(|a, b| if b.ndcg_at_10 > a.ndcg_at_10 { b } else { a })
        .ok_or_else(|| Error::invalid_input("the fusion grid is empty"))?;
    // Only the weights' ratio matters to every method, so the configured weights count scaled to sum to 1.
    let total = f64::from(base.bm25_weight) + f64::from(base.dense_weight);
    let base_levels = (base.level_slope > 0.0).then_some(Levels {
        bm25: base.bm25_level,
        dense: base.dense_level,
        slope: base.level_slope,
    });
    let configured = points.iter().position(|p| {
        p.method == base.fusion
            && p.levels == base_levels
            && p.adaptive.to_bits() == base.adaptive.to_bits()
            && (f64::from(p.dense_weight) - f64::from(base.dense_weight) / total).abs() < 1e-6
    });
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
        configured,
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

/// A retriever made weaker on purpose for a fusion fit ([`run_fusion_calibration`]): every query it is asked gets
/// typos at `typo_rate` ([`with_typos`]), the other retriever's query stays as it was.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stress {
    /// The weakened retriever: [`Strategy::Bm25`] or [`Strategy::Dense`].
    pub list: Strategy,
    /// The share of the query's words (of four letters or more) that get one typo, in `(0, 1]`.
    pub typo_rate: f64,
}

impl Stress {
    /// `bm25-typos-0.6`: how the variant's dataset is named (after the dataset's own name and a `+`).
    #[must_use]
    pub fn label(&self) -> String {
        let list = if self.list == Strategy::Bm25 { "bm25" } else { "dense" };
        format!("{list}-typos-{}", self.typo_rate)
    }
}

impl std::str::FromStr for Stress {
    type Err = Error;

    /// `bm25:0.6` or `dense:0.3`: the weakened retriever and the typo rate.
    fn from_str(s: &str) -> Result<Self> {
        let bad =
            || Error::invalid_input(format!("a stress is `bm25:RATE` or `dense:RATE` with RATE in (0, 1], got {s:?}"));
        let (list, rate) = s.split_once(':').ok_or_else(bad)?;
        let list = match list.trim() {
            "bm25" => Strategy::Bm25,
            "dense" => Strategy::Dense,
            _ => return Err(bad()),
        };
        let typo_rate: f64 = rate.trim().parse().map_err(|_| bad())?;
        if !(typo_rate > 0.0 && typo_rate <= 1.0) {
            return Err(bad());
        }
        Ok(Self { list, typo_rate })
    }
}

/// `text` with one typo in each word of four letters or more chosen with probability `rate`, deterministically
/// from `seed` (a query id), the word and its position: two adjacent letters swapped, a letter dropped, replaced or
/// added, one kind per word. Everything else (short words, digits, punctuation, spacing) is kept as it is.
///
/// ```
/// use ragtune_eval::fusion::with_typos;
/// let noisy = with_typos("Vitamin D deficiency increases fracture risk", 1.0, "q1");
/// assert_ne!(noisy, "Vitamin D deficiency increases fracture risk");
/// assert_eq!(noisy, with_typos("Vitamin D deficiency increases fracture risk", 1.0, "q1"));
/// assert_eq!(with_typos("Vitamin D deficiency", 0.0, "q1"), "Vitamin D deficiency");
/// ```
#[must_use]
pub fn with_typos(text: &str, rate: f64, seed: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let (mut word, mut position) = (String::new(), 0_u64);
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_alphabetic() {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            position += 1;
            push_word(&mut out, &word, rate, &format!("{seed}\u{1f}{position}"));
            word.clear();
        }
        out.push(c);
    }
    out.pop(); // the space chained on to end the last word
    out
}

/// Pushes `word` onto `out`, with one typo when it has four letters or more and the hash of `seed` and the word
/// falls under `rate`.
fn push_word(out: &mut String, word: &str, rate: f64, seed: &str) {
    let mut letters: Vec<char> = word.chars().collect();
    let h = xxhash_rust::xxh3::xxh3_64(format!("{seed}\u{1f}{word}").as_bytes());
    // The low 20 bits decide whether, the others where and how.
    if letters.len() < 4 || ((h & 0xF_FFFF) as f64) / f64::from(0x10_0000) >= rate {
        out.push_str(word);
        return;
    }
    let n = letters.len();
    let at = ((h >> 20) % n as u64) as usize;
    let replacement = char::from(b'a' + ((h >> 40) % 26) as u8);
    match (h >> 32) % 4 {
        0 => letters.swap(at.min(n - 2), at.min(n - 2) + 1),
        1 => {
            letters.remove(at);
        }
        2 => letters[at] = replacement,
        _ => letters.insert(at, replacement),
    }
    out.extend(letters);
}

/// The names of the fits [`run_fusion_calibration`] returns for `dataset` with `stress`, in order: the dataset's
/// own (its directory's name), then `<name>+<stress label>` for each stress.
#[must_use]
pub fn fit_names(dataset: &Path, stress: &[Stress]) -> Vec<String> {
    let name = crate::retrieval::dataset_name(dataset);
    std::iter::once(name.clone()).chain(stress.iter().map(|s| format!("{name}+{}", s.label()))).collect()
}

/// An error naming the first fit name given twice: a dataset counted twice would weigh twice in a joint choice.
///
/// # Errors
/// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) for a name given twice.
pub fn distinct_fit_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let mut seen = HashSet::new();
    match names.into_iter().find(|n| !seen.insert(*n)) {
        Some(twice) => Err(Error::invalid_input(format!(
            "the dataset `{twice}` is given twice: it would count twice in the choice"
        ))),
        None => Ok(()),
    }
}

/// Retrieves every query of `opts.split` from BM25 and from dense retrieval once, on the cached index of
/// `opts.dataset` (built when missing), as deep as the hybrid retrieval would (`opts.hybrid.depth`, at least
/// `opts.top_k`), and fits the fusion on them (see [`fit_fusion`]); then, for each of `stress`, retrieves the
/// weakened retriever's lists again for the queries with typos and fits the fusion of those with the other
/// retriever's unchanged lists.
///
/// The fits are named by [`fit_names`].
///
/// # Errors
/// Dataset, index or model failures (the embedding model is required); no query with judgements; a stress that
/// weakens neither BM25 nor dense.
pub async fn run_fusion_calibration(
    opts: &EvalOptions,
    grid: &FusionGrid,
    stress: &[Stress],
    log: &mut dyn FnMut(&str),
) -> Result<Vec<DatasetFit>> {
    opts.hybrid.validate().map_err(|e| e.context("[hybrid]"))?;
    if let Some(s) = stress.iter().find(|s| !matches!(s.list, Strategy::Bm25 | Strategy::Dense)) {
        return Err(Error::invalid_input(format!("a stress weakens bm25 or dense, not {:?}", s.list)));
    }
    let data = ragtune::ingest::load_beir(&opts.dataset, &opts.split)?;
    let names = fit_names(&opts.dataset, stress);
    let name = names[0].clone();
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
    let ask = |id: &str, text: String| Query { id: Some(id.to_owned()), ..Query::new(text).with_top_k(depth) };
    // The terms BM25 searches with, as the hybrid retriever counts them for level weights.
    let encoder = engine.encoder().cloned();
    let count_terms = |text: String| {
        let encoder = encoder.clone();
        async move {
            match encoder {
                Some(e) => Ok::<usize, Error>(
                    e.encode(&Ctx::new(), &[text.as_str()], TextRole::Query)
                        .await?
                        .first()
                        .map_or(1, |v| v.indices.len()),
                ),
                None => Ok(1),
            }
        }
    };
    let mut lists = Vec::with_capacity(queries.len());
    for q in &queries {
        let one = [ask(&q.id, q.text.clone())];
        let bm25 = bm25.retrieve(&Ctx::new(), &one).await?.pop().unwrap_or_default();
        let dense = dense.retrieve(&Ctx::new(), &one).await?.pop().unwrap_or_default();
        let bm25_terms = count_terms(q.text.clone()).await?;
        lists.push(FusionQuery { id: q.id.clone(), bm25, dense, bm25_terms });
    }
    let points = (grid.methods.len() * grid.adaptive.len() + grid.levels.len()) * (grid.steps as usize + 1);
    log(&format!("fusing them with {points} settings"));
    let top_k = opts.passage_depth();
    let mut fits =
        vec![DatasetFit { name: name.clone(), fit: fit_fusion(&lists, &data.qrels, &opts.hybrid, grid, top_k)? }];
    for (s, stressed_name) in stress.iter().zip(&names[1..]) {
        let which = if s.list == Strategy::Bm25 { "BM25" } else { "dense" };
        log(&format!("{stressed_name}: retrieving the {which} lists again for the queries with typos"));
        let weakened = if s.list == Strategy::Bm25 { &bm25 } else { &dense };
        let mut stressed = Vec::with_capacity(lists.len());
        for (q, clean) in queries.iter().zip(&lists) {
            let noisy = with_typos(&q.text, s.typo_rate, &q.id);
            let one = [ask(&q.id, noisy.clone())];
            let list = weakened.retrieve(&Ctx::new(), &one).await?.pop().unwrap_or_default();
            stressed.push(if s.list == Strategy::Bm25 {
                let bm25_terms = count_terms(noisy).await?;
                FusionQuery { id: q.id.clone(), bm25: list, dense: clean.dense.clone(), bm25_terms }
            } else {
                FusionQuery { id: q.id.clone(), bm25: clean.bm25.clone(), dense: list, bm25_terms: clean.bm25_terms }
            });
        }
        let fit = fit_fusion(&stressed, &data.qrels, &opts.hybrid, grid, top_k)?;
        fits.push(DatasetFit { name: stressed_name.clone(), fit });
    }
    Ok(fits)
}

/// One dataset's fit, named, as part of a [`JointFusionFit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetFit {
    /// The dataset's name (its directory's name).
    pub name: String,
    /// The fit on its split.
    pub fit: FusionFit,
}

/// One setting of the grid scored on every dataset of a [`JointFusionFit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JointPoint {
    /// The method.
    pub method: FusionMethod,
    /// The strength of the query-time weights.
    pub adaptive: f32,
    /// The BM25 weight.
    pub bm25_weight: f32,
    /// The dense weight.
    pub dense_weight: f32,
    /// The level weights, when the setting has them.
    #[serde(default)]
    pub levels: Option<Levels>,
    /// Mean nDCG@10 on each dataset, in the order of [`JointFusionFit::datasets`].
    pub ndcg_at_10: Vec<f64>,
    /// The smallest, over the datasets, of this setting's nDCG@10 minus the better of BM25 alone and dense alone
    /// there: negative when the fusion loses to its better part somewhere.
    pub worst_gain: f64,
    /// The mean of [`ndcg_at_10`](Self::ndcg_at_10) over the datasets.
    pub mean_ndcg_at_10: f64,
}

impl JointPoint {
    /// `rrf`, `convex, adaptive 1`: the method and its strength, as tables print it.
    #[must_use]
    pub fn label(&self) -> String {
        label(self.method, self.adaptive, self.levels)
    }

    /// Whether `self` is chosen over `other` under the floor `min_gain`: a setting whose worst gain reaches the
    /// floor beats one that does not; between two that reach it, the larger mean nDCG@10 wins (then the larger
    /// worst gain); between two that do not, and always without a floor, the larger worst gain wins (then the
    /// larger mean). Grid order decides among equals, the earlier one staying.
    fn beats(&self, other: &Self, min_gain: Option<f64>) -> bool {
        let reaches = |p: &Self| min_gain.is_some_and(|floor| p.worst_gain >= floor);
        let (mine, theirs) = (reaches(self), reaches(other));
        let by_gain = self.worst_gain.total_cmp(&other.worst_gain);
        let by_mean = self.mean_ndcg_at_10.total_cmp(&other.mean_ndcg_at_10);
        match (mine, theirs) {
            (true, false) => true,
            (false, true) => false,
            (true, true) => by_mean.then(by_gain).is_gt(),
            (false, false) => by_gain.then(by_mean).is_gt(),
        }
    }
}

/// One fusion for several datasets, each fitted on its own split with the same grid. A setting's *worst gain* is
/// its smallest gain over the better of BM25 alone and dense alone, across the datasets. By default the setting
/// whose worst gain is largest is chosen ("never lose to the better part" as the objective; ties: mean nDCG@10, then
/// grid order). With a floor `min_gain`, "never lose" is a constraint instead: among the settings whose worst gain
/// reaches the floor, the one with the best mean nDCG@10 over the datasets is chosen (ties: the larger worst gain,
/// then grid order); when none reaches it, the one whose worst gain is largest, as without a floor (ADR 0022).
///
/// On one dataset the better part is a constant, so the choice is that dataset's best nDCG@10 ([`FusionFit::best`])
/// whatever the floor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JointFusionFit {
    /// The datasets and their fits, in the order given.
    pub datasets: Vec<DatasetFit>,
    /// The chosen setting of each method and strength, in grid order.
    pub per_method: Vec<JointPoint>,
    /// The chosen setting of all.
    pub best: JointPoint,
    /// The setting the fits ran with (the configuration's `[hybrid]`), scored the same way, when the grid has it.
    #[serde(default)]
    pub configured: Option<JointPoint>,
    /// The floor on the worst gain the choice was made with, if any (see [`JointFusionFit`]).
    #[serde(default)]
    pub min_gain: Option<f64>,
}

/// Chooses one fusion for `datasets`, with or without a floor `min_gain` on the worst gain (see
/// [`JointFusionFit`]).
///
/// # Errors
/// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) for no dataset, two datasets of one name, a floor that
/// is not finite, or fits of different grids, RRF constants or depths.
pub fn joint_fit(datasets: Vec<DatasetFit>, min_gain: Option<f64>) -> Result<JointFusionFit> {
    if let Some(min_gain) = min_gain.filter(|g| !g.is_finite()) {
        return Err(Error::invalid_input(format!(
            "the floor on the worst gain must be a finite number, got {min_gain}"
        )));
    }
    let first = datasets.first().ok_or_else(|| Error::invalid_input("no dataset to fit the fusion on"))?;
    distinct_fit_names(datasets.iter().map(|d| d.name.as_str()))?;
    let setting = |p: &FusionPoint| {
        (
            p.method,
            p.adaptive.to_bits(),
            p.bm25_weight.to_bits(),
            p.dense_weight.to_bits(),
            p.levels.map(|l| (l.bm25.to_bits(), l.dense.to_bits(), l.slope.to_bits())),
        )
    };
    for d in &datasets[1..] {
        let same_grid = d.fit.points.len() == first.fit.points.len()
            && d.fit.points.iter().zip(&first.fit.points).all(|(a, b)| setting(a) == setting(b));
        if !same_grid || d.fit.k.to_bits() != first.fit.k.to_bits() || d.fit.depth != first.fit.depth {
            return Err(Error::invalid_input(format!(
                "the fusion fits of {} and {} differ in grid, RRF k or depth: they cannot be chosen from jointly",
                first.name, d.name
            )));
        }
    }
    let n = datasets.len() as f64;
    let joint = |i: usize| {
        let p = first.fit.points[i];
        let ndcg_at_10: Vec<f64> = datasets.iter().map(|d| d.fit.points[i].ndcg_at_10).collect();
        let worst_gain = datasets
            .iter()
            .map(|d| d.fit.points[i].ndcg_at_10 - d.fit.bm25_alone.max(d.fit.dense_alone))
            .fold(f64::INFINITY, f64::min);
        let mean_ndcg_at_10 = ndcg_at_10.iter().sum::<f64>() / n;
        JointPoint {
            method: p.method,
            adaptive: p.adaptive,
            bm25_weight: p.bm25_weight,
            dense_weight: p.dense_weight,
            levels: p.levels,
            ndcg_at_10,
            worst_gain,
            mean_ndcg_at_10,
        }
    };
    let mut per_method: Vec<JointPoint> = Vec::new();
    for i in 0..first.fit.points.len() {
        let point = joint(i);
        match per_method.last_mut() {
            Some(last)
                if last.method == point.method
                    && last.adaptive.to_bits() == point.adaptive.to_bits()
                    && last.levels == point.levels =>
            {
                if point.beats(last, min_gain) {
                    *last = point;
                }
            }
            _ => per_method.push(point),
        }
    }
    let best = per_method
        .iter()
        .cloned()
        .reduce(|a, b| if b.beats(&a, min_gain) { b } else { a })
        .ok_or_else(|| Error::invalid_input("the fusion grid is empty"))?;
    let configured = first.fit.configured.map(joint);
    Ok(JointFusionFit { datasets, per_method, best, configured, min_gain })
}

/// What a fusion fit ran on besides its datasets and grid: the split, the indexing and the query limit. `calibrate
/// --fit-json` records them, and saved fits are chosen from only with fits of the same conditions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FitConditions {
    /// The split the datasets were fitted on.
    pub split: String,
    /// How the corpora were indexed.
    pub chunking: EvalChunking,
    /// Only the first N queries of each dataset, or all of them.
    pub limit: Option<usize>,
}

/// A joint fit saved for later (`calibrate --fit-json`): the conditions it ran on and the fit. Files of the first
/// versions of the flag have no `chunking` and `limit` (then `chunking` reads as `None`), or hold the bare fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SavedFit {
    split: String,
    #[serde(default)]
    chunking: Option<EvalChunking>,
    #[serde(default)]
    limit: Option<usize>,
    fit: JointFusionFit,
}

/// `joint`, fitted under `conditions`, as the JSON `calibrate --fit-json` writes and [`read_saved_fit`] reads.
///
/// # Errors
/// The fit cannot be serialised (it always can: numbers and strings).
pub fn saved_fit_json(joint: &JointFusionFit, conditions: &FitConditions) -> Result<String> {
    let saved = SavedFit {
        split: conditions.split.clone(),
        chunking: Some(conditions.chunking),
        limit: conditions.limit,
        fit: joint.clone(),
    };
    serde_json::to_string(&saved).map_err(|e| Error::permanent("cannot serialise the fusion fit").with_source(e))
}

/// Reads a fit [`saved_fit_json`] wrote, for choosing again under `want`: the fit, and a warning when the file does
/// not record a condition (files of the flag's first versions); the missing ones are taken as `want`'s.
///
/// # Errors
/// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) when the text is not a saved fit (saying which field is
/// wrong), or was fitted on another split, with another indexing or with another query limit.
pub fn read_saved_fit(text: &str, want: &FitConditions) -> Result<(JointFusionFit, Option<String>)> {
    let not_a_fit =
        |e: &dyn std::fmt::Display| Error::invalid_input(format!("not a fit `calibrate --fit-json` wrote: {e}"));
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| not_a_fit(&e))?;
    let Some(object) = value.as_object() else { return Err(not_a_fit(&"the JSON is not an object")) };
    if !object.contains_key("split") {
        if !object.contains_key("datasets") {
            return Err(not_a_fit(&"it has neither `split` nor `datasets`"));
        }
        let fit: JointFusionFit = serde_json::from_value(value).map_err(|e| not_a_fit(&e))?;
        let warning = format!(
            "the file does not record its split, indexing or query limit; taken as `{}`, {}, {}",
            want.split,
            want.chunking,
            limit_words(want.limit)
        );
        return Ok((fit, Some(warning)));
    }
    let saved: SavedFit = serde_json::from_value(value).map_err(|e| not_a_fit(&e))?;
    if saved.split != want.split {
        return Err(Error::invalid_input(format!(
            "fitted on the `{}` split, not on `{}`: fits of different splits are not chosen from together",
            saved.split, want.split
        )));
    }
    let Some(chunking) = saved.chunking else {
        let warning = format!(
            "the file does not record its indexing or query limit; taken as {}, {}",
            want.chunking,
            limit_words(want.limit)
        );
        return Ok((saved.fit, Some(warning)));
    };
    if chunking != want.chunking || saved.limit != want.limit {
        return Err(Error::invalid_input(format!(
            "fitted with {chunking} indexing on {}, not with {} indexing on {}: fits of different conditions are \
             not chosen from together (pass the file's --chunking and --limit)",
            limit_words(saved.limit),
            want.chunking,
            limit_words(want.limit)
        )));
    }
    Ok((saved.fit, None))
}

fn limit_words(limit: Option<usize>) -> String {
    limit.map_or_else(|| "every query".to_owned(), |n| format!("the first {n} queries"))
}

/// The fitted fusion as a configuration file `--config` reads: a `[hybrid]` section, under a comment that says what
/// it was fitted on, how it was chosen and the best train nDCG@10 of every method.
#[must_use]
pub fn fusion_toml(joint: &JointFusionFit, split: &str) -> String {
    let Some(first) = joint.datasets.first() else { return String::new() };
    let fit = &first.fit;
    let step = 1.0 / f64::from(fit.steps);
    let sources: Vec<String> =
        joint.datasets.iter().map(|d| format!("{} `{split}` ({} queries)", d.name, d.fit.queries)).collect();
    let one = joint.datasets.len() == 1;
    let rule = if one {
        "keeping the best mean nDCG@10 on that split.\n".to_owned()
    } else if let Some(floor) = joint.min_gain {
        format!(
            "keeping, among the settings whose smallest gain over\n# the better of BM25 alone and dense alone, \
             across the datasets, reaches {floor:+}, the one with the best mean nDCG@10\n# (when none reaches it: \
             the largest smallest gain).\n"
        )
    } else {
        "keeping the setting whose smallest gain over\n# the better of BM25 alone and dense alone, across the datasets, is largest (ties: mean nDCG@10).\n"
            .to_owned()
    };
    let mut out = format!(
        "# Written by `ragtune calibrate --fusion` from {sources}: the BM25 and dense lists\n\
         # (depth {depth}) of every query fused by each method with dense_weight w from 0 to 1 in steps of {step}\n\
         # and bm25_weight 1 - w (RRF k = {k}), {rule}",
        sources = sources.join(" and "),
        depth = fit.depth,
        k = fit.k,
    );
    let alone: Vec<String> = joint
        .datasets
        .iter()
        .map(|d| {
            let name = if one { String::new() } else { format!("{} ", d.name) };
            format!("{name}BM25 alone {:.4}, dense alone {:.4}", d.fit.bm25_alone, d.fit.dense_alone)
        })
        .collect();
    let names: Vec<&str> = joint.datasets.iter().map(|d| d.name.as_str()).collect();
    let each = if one { String::new() } else { format!(" (on {})", names.join(" / ")) };
    out.push_str(&format!("# nDCG@10 there: {}; the best of each method{each}:\n", alone.join("; ")));
    for p in &joint.per_method {
        let ndcg: Vec<String> = p.ndcg_at_10.iter().map(|v| format!("{v:.4}")).collect();
        out.push_str(&format!(
            "#   {:<20} {}  (bm25_weight {}, dense_weight {})\n",
            p.label(),
            ndcg.join(" / "),
            p.bm25_weight,
            p.dense_weight
        ));
    }
    let b = &joint.best;
    let chosen = HybridSettings {
        fusion: b.method,
        k: fit.k,
        depth: fit.depth,
        bm25_weight: b.bm25_weight,
        dense_weight: b.dense_weight,
        adaptive: b.adaptive,
        bm25_level: b.levels.map_or(0.0, |l| l.bm25),
        dense_level: b.levels.map_or(0.0, |l| l.dense),
        level_slope: b.levels.map_or(0.0, |l| l.slope),
    };
    out.push_str(&hybrid_toml(&chosen));
    out
}

/// `settings` as the `[hybrid]` section of a configuration file, every field written, numbers as they were given
/// (`0.35`, not `0.3499999940395355`).
#[must_use]
pub fn hybrid_toml(settings: &HybridSettings) -> String {
    let h = settings;
    let mut out = format!(
        "[hybrid]\nfusion = \"{}\"\nk = {:?}\ndepth = {}\nbm25_weight = {:?}\ndense_weight = {:?}\nadaptive = {:?}\n",
        h.fusion, h.k, h.depth, h.bm25_weight, h.dense_weight, h.adaptive
    );
    // The level fields are written even when off (`level_slope = 0.0`), so the file means the same whatever the
    // engine's default levels are.
    out.push_str(&format!(
        "bm25_level = {:?}\ndense_level = {:?}\nlevel_slope = {:?}\n",
        h.bm25_level, h.dense_level, h.level_slope
    ));
    out
}

/// The fit as the table `ragtune calibrate --fusion` prints: per dataset the two retrievers alone, then each
/// method's chosen setting with its nDCG@10 on every dataset (and, with several datasets, its worst gain).
#[must_use]
pub fn fusion_table(joint: &JointFusionFit) -> String {
    let one = joint.datasets.len() == 1;
    let mut out = String::new();
    for d in &joint.datasets {
        let own = &d.fit.best;
        out.push_str(&format!(
            "{}: {} queries; nDCG@10 BM25 alone {:.4}, dense alone {:.4}; its own best {} {:.4} (bm25_weight {}, \
             dense_weight {})\n",
            d.name,
            d.fit.queries,
            d.fit.bm25_alone,
            d.fit.dense_alone,
            own.label(),
            own.ndcg_at_10,
            own.bm25_weight,
            own.dense_weight
        ));
    }
    let names: Vec<&str> = joint.datasets.iter().map(|d| d.name.as_str()).collect();
    let gain = if one { String::new() } else { format!(" {:>10} {:>8}", "worst gain", "mean") };
    out.push_str(&format!(
        "{:<22} {:>8} {:>12} {:>13}{gain}\n",
        "fusion",
        if one { "nDCG@10".to_owned() } else { names.join(" / ") },
        "bm25_weight",
        "dense_weight"
    ));
    let configured = joint.configured.iter().map(|p| (p, "  <- the configured [hybrid]"));
    for (p, mark) in
        joint.per_method.iter().map(|p| (p, if *p == joint.best { "  <- best" } else { "" })).chain(configured)
    {
        let ndcg: Vec<String> = p.ndcg_at_10.iter().map(|v| format!("{v:.4}")).collect();
        let gain = if one { String::new() } else { format!(" {:>+10.4} {:>8.4}", p.worst_gain, p.mean_ndcg_at_10) };
        out.push_str(&format!(
            "{:<22} {:>8} {:>12} {:>13}{gain}{mark}\n",
            p.label(),
            ndcg.join(" / "),
            p.bm25_weight,
            p.dense_weight
        ));
    }
    if !one {
        out.push_str(&match joint.min_gain {
            None => "chosen: the largest worst gain\n".to_owned(),
            Some(floor) if joint.best.worst_gain >= floor => {
                format!("chosen: the best mean nDCG@10 among the settings whose worst gain reaches {floor:+}\n")
            }
            Some(floor) => format!("chosen: no setting's worst gain reaches {floor:+}, so the largest worst gain\n"),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune::retrieve::fuse;

    /// A list of `strategy` from `doc:score` pairs in rank order (one chunk per document, with a text).
    fn list(strategy: &str, items: &[(&str, f32)]) -> Vec<Candidate> {
        ragtune_testkit::fixtures::ranked_list(strategy, items)
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
                bm25_terms: 2,
            },
            FusionQuery {
                id: "q2".into(),
                bm25: list("bm25", &[("a2", 18.0), ("x2", 6.0), ("y2", 5.5), ("z2", 5.0)]),
                dense: list("dense", &[("y2", 0.70), ("a2", 0.69), ("x2", 0.66), ("z2", 0.65)]),
                bm25_terms: 2,
            },
            FusionQuery {
                id: "q3".into(),
                bm25: list("bm25", &[("x3", 4.1), ("y3", 4.0), ("z3", 3.9), ("a3", 3.8)]),
                dense: list("dense", &[("a3", 0.64), ("x3", 0.60), ("y3", 0.59), ("z3", 0.58)]),
                bm25_terms: 2,
            },
            FusionQuery {
                id: "q4".into(),
                bm25: list("bm25", &[("y4", 7.1), ("x4", 7.0), ("a4", 6.9), ("z4", 6.8)]),
                dense: list("dense", &[("a4", 0.55), ("z4", 0.52), ("x4", 0.51), ("y4", 0.50)]),
                bm25_terms: 2,
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
        // from a guessing one, so RRF stays below the score-based methods, which put every relevant document first,
        // unless strong adaptive weights (3 and 4) discount the flat BM25 lists from their scores; adaptive weights
        // already discount those lists, so the score-based methods need less weight on dense for it.
        let fit = check(
            FusionGrid::default(),
            "bm25 0.7327
             dense 0.8155
             rrf 0.8750 0.55/0.45
             rrf, adaptive 0.5 0.9077 0.5/0.5
             rrf, adaptive 1 0.9077 0.55/0.45
             rrf, adaptive 2 0.9077 0.6/0.4
             rrf, adaptive 3 1.0000 0.35/0.65 best
             rrf, adaptive 4 1.0000 0.4/0.6
             convex 1.0000 0.35/0.65
             convex, adaptive 0.5 1.0000 0.4/0.6
             convex, adaptive 1 1.0000 0.4/0.6
             convex, adaptive 2 1.0000 0.5/0.5
             convex, adaptive 3 1.0000 0.55/0.45
             convex, adaptive 4 1.0000 0.6/0.4
             dbsf 1.0000 0.35/0.65
             dbsf, adaptive 0.5 1.0000 0.4/0.6
             dbsf, adaptive 1 1.0000 0.4/0.6
             dbsf, adaptive 2 1.0000 0.45/0.55
             dbsf, adaptive 3 1.0000 0.5/0.5
             dbsf, adaptive 4 1.0000 0.55/0.45",
        );
        assert_eq!(fit.points.len(), 3 * 6 * 21);
        assert!(fit.best.ndcg_at_10 >= fit.bm25_alone.max(fit.dense_alone));
        // The grid's ends are the lists alone.
        let ends: Vec<f64> = fit.points[..21].iter().step_by(20).map(|p| p.ndcg_at_10).collect();
        assert_eq!(ends, vec![fit.bm25_alone, fit.dense_alone]);
    }

    #[test]
    fn a_point_of_the_grid_is_the_engine_fusion_of_the_lists() {
        // The fit calls the retrieval layer's `fuse`: one point recomputed by hand from it agrees.
        let (queries, qrels) = synthetic();
        let grid = FusionGrid { methods: vec![FusionMethod::Dbsf], adaptive: vec![1.0], steps: 4, levels: Vec::new() };
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

    /// The fit of the synthetic set alone, named `name`.
    fn one(name: &str) -> DatasetFit {
        let (queries, qrels) = synthetic();
        let fit = fit_fusion(&queries, &qrels, &HybridSettings::default(), &FusionGrid::default(), 100).unwrap();
        DatasetFit { name: name.into(), fit }
    }

    #[test]
    fn the_written_file_is_a_configuration_the_engine_reads() {
        let joint = joint_fit(vec![one("tiny")], None).unwrap();
        let text = fusion_toml(&joint, "train");
        let cfg = ragtune::Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let h = cfg.hybrid;
        assert_eq!((h.fusion, h.bm25_weight, h.dense_weight, h.adaptive), (FusionMethod::Rrf, 0.35, 0.65, 3.0));
        assert_eq!((h.k, h.depth), (60.0, 100));
        assert!(text.starts_with("# Written by `ragtune calibrate --fusion` from tiny `train` (4 queries)"), "{text}");
        assert!(text.contains("keeping the best mean nDCG@10 on that split."), "{text}");
        assert!(text.contains("BM25 alone 0.7327, dense alone 0.8155"), "{text}");
        assert!(text.contains("#   dbsf, adaptive 4"), "{text}");
        assert!(text.contains("bm25_weight = 0.35\ndense_weight = 0.65\n"), "{text}");
        assert!(fusion_table(&joint).contains("<- best"));
    }

    #[test]
    fn on_one_dataset_the_joint_choice_is_its_own_best() {
        let single = one("tiny");
        let joint = joint_fit(vec![single.clone()], None).unwrap();
        let b = &joint.best;
        let own = single.fit.best;
        assert_eq!(
            (b.method, b.adaptive, b.bm25_weight, b.dense_weight),
            (own.method, own.adaptive, own.bm25_weight, own.dense_weight)
        );
        assert_eq!(b.ndcg_at_10, vec![own.ndcg_at_10]);
        assert_eq!(b.worst_gain, own.ndcg_at_10 - single.fit.bm25_alone.max(single.fit.dense_alone));
        let per: Vec<(FusionMethod, f32, f32)> =
            joint.per_method.iter().map(|p| (p.method, p.adaptive, p.dense_weight)).collect();
        let own: Vec<(FusionMethod, f32, f32)> =
            single.fit.per_method.iter().map(|p| (p.method, p.adaptive, p.dense_weight)).collect();
        assert_eq!(per, own);
    }

    /// Dataset `a`, the synthetic set, and the fit of `b`: the same four queries judged by BM25's first document.
    fn a_and_b() -> (DatasetFit, FusionFit) {
        let (queries, _) = synthetic();
        let q = qrels(&[("q1", "a1"), ("q2", "a2"), ("q3", "x3"), ("q4", "y4")]);
        let b = fit_fusion(&queries, &q, &HybridSettings::default(), &FusionGrid::default(), 100).unwrap();
        (one("a"), b)
    }

    #[test]
    fn several_datasets_get_the_setting_with_the_largest_smallest_gain() {
        // Dataset `a` is the synthetic set (dense alone 0.8155 is its better part); on `b` the same four queries are
        // judged by BM25's first document, so there BM25 alone is perfect and weight on dense can only lose. No
        // setting gains on both; the joint choice is the one that loses least to the worse-served dataset: RRF with
        // BM25 ahead, which keeps `b` perfect and gives `a` 0.7827 (0.0327 below dense alone). It is neither
        // dataset's own best (convex on `a`, BM25 alone on `b`).
        let (a, b) = a_and_b();
        assert_eq!(b.bm25_alone, 1.0);
        let joint = joint_fit(vec![a.clone(), DatasetFit { name: "b".into(), fit: b.clone() }], None).unwrap();
        let best = &joint.best;
        // No setting of the grid beats it on the worst gain, and it is neither dataset's own choice.
        let worst = |i: usize| {
            (a.fit.points[i].ndcg_at_10 - a.fit.bm25_alone.max(a.fit.dense_alone))
                .min(b.points[i].ndcg_at_10 - b.bm25_alone.max(b.dense_alone))
        };
        let top = (0..a.fit.points.len()).map(worst).fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(best.worst_gain, top);
        let i =
            a.fit.points.iter().position(|p| {
                (p.method, p.adaptive, p.dense_weight) == (best.method, best.adaptive, best.dense_weight)
            });
        let i = i.unwrap();
        assert_eq!(best.ndcg_at_10, vec![a.fit.points[i].ndcg_at_10, b.points[i].ndcg_at_10]);
        assert_eq!(
            (best.method, best.adaptive, best.bm25_weight, best.dense_weight),
            (FusionMethod::Rrf, 0.0, 0.65, 0.35)
        );
        assert_eq!(
            format!("{:.4} {:.4} {:.4}", best.ndcg_at_10[0], best.ndcg_at_10[1], best.worst_gain),
            "0.7827 1.0000 -0.0327"
        );
        assert_ne!((best.method, best.dense_weight), (a.fit.best.method, a.fit.best.dense_weight));
        assert_ne!((best.method, best.dense_weight), (b.best.method, b.best.dense_weight));
        let text = fusion_toml(&joint, "train");
        assert!(text.starts_with("# Written by `ragtune calibrate --fusion` from a `train` (4 queries) and b `train`"));
        assert!(text.contains("a BM25 alone 0.7327, dense alone 0.8155; b BM25 alone 1.0000"), "{text}");
        assert!(text.contains("smallest gain over\n# the better of BM25 alone and dense alone"), "{text}");
        assert!(ragtune::Config::from_toml(&text).is_ok(), "{text}");
        assert!(fusion_table(&joint).contains("worst gain"));
    }

    #[test]
    fn a_floor_on_the_worst_gain_chooses_the_best_mean_among_the_settings_that_reach_it() {
        // The pair of `several_datasets_get_the_setting_with_the_largest_smallest_gain`, where the largest worst gain
        // is -0.0327 (RRF with BM25 ahead).
        let (a, b) = a_and_b();
        let pair = vec![a.clone(), DatasetFit { name: "b".into(), fit: b.clone() }];
        let maximin = joint_fit(pair.clone(), None).unwrap();
        assert_eq!(maximin.min_gain, None);
        let maximin = maximin.best;
        assert_eq!(format!("{:+.4}", maximin.worst_gain), "-0.0327");
        // A floor no setting reaches (0 here) chooses as no floor does: the largest worst gain.
        let unreached = joint_fit(pair.clone(), Some(0.0)).unwrap();
        assert_eq!(unreached.best, maximin);
        assert_eq!(unreached.min_gain, Some(0.0));
        assert!(
            fusion_table(&unreached).contains("no setting's worst gain reaches +0"),
            "{}",
            fusion_table(&unreached)
        );
        // A floor every setting reaches chooses by mean nDCG@10 alone: the grid's best mean, found here by hand.
        let mean = |i: usize| (a.fit.points[i].ndcg_at_10 + b.points[i].ndcg_at_10) / 2.0;
        let top = (0..b.points.len()).map(mean).fold(f64::NEG_INFINITY, f64::max);
        let loose = joint_fit(pair.clone(), Some(-1.0)).unwrap();
        assert_eq!(loose.best.mean_ndcg_at_10, top);
        assert!(loose.best.mean_ndcg_at_10 > maximin.mean_ndcg_at_10, "{:?} {maximin:?}", loose.best);
        assert!(loose.best.worst_gain < maximin.worst_gain, "{:?} {maximin:?}", loose.best);
        // A floor between the two: only settings reaching it compete, and the best mean among them wins.
        let floor = (maximin.worst_gain + loose.best.worst_gain) / 2.0;
        let between = joint_fit(pair.clone(), Some(floor)).unwrap();
        let reaching: Vec<usize> = (0..b.points.len())
            .filter(|&i| {
                (a.fit.points[i].ndcg_at_10 - a.fit.bm25_alone.max(a.fit.dense_alone))
                    .min(b.points[i].ndcg_at_10 - b.bm25_alone.max(b.dense_alone))
                    >= floor
            })
            .collect();
        let best_reaching = reaching.iter().map(|&i| mean(i)).fold(f64::NEG_INFINITY, f64::max);
        assert!(between.best.worst_gain >= floor);
        assert_eq!(between.best.mean_ndcg_at_10, best_reaching);
        // The file says which floor it was chosen with; a floor that is not a number is refused.
        let text = fusion_toml(&between, "train");
        assert!(text.contains(&format!("reaches {:+}, the one with the best mean nDCG@10", floor)), "{text}");
        assert!(fusion_table(&between).contains("chosen: the best mean nDCG@10 among"));
        // The whole fit, as `calibrate --fit-json` writes it, reads back the same on its own split only; a bare fit
        // (the flag's first format) is read with a warning; anything else is refused.
        let train = FitConditions { split: "train".into(), chunking: EvalChunking::Passages, limit: None };
        let json = saved_fit_json(&between, &train).unwrap();
        assert_eq!(read_saved_fit(&json, &train).unwrap(), (between.clone(), None));
        let other = |f: fn(&mut FitConditions)| {
            let mut c = train.clone();
            f(&mut c);
            read_saved_fit(&json, &c).unwrap_err().to_string()
        };
        let err = other(|c| c.split = "test".into());
        assert!(err.contains("fitted on the `train` split, not on `test`"), "{err}");
        let err = other(|c| c.chunking = EvalChunking::Whole);
        assert!(err.contains("fitted with passages indexing on every query, not with whole indexing"), "{err}");
        let err = other(|c| c.limit = Some(50));
        assert!(err.contains("not with passages indexing on the first 50 queries"), "{err}");
        let (bare, warning) = read_saved_fit(&serde_json::to_string(&between).unwrap(), &train).unwrap();
        assert_eq!(bare, between);
        assert!(warning.unwrap().contains("does not record its split, indexing or query limit"));
        let mut split_only: serde_json::Value = serde_json::from_str(&json).unwrap();
        split_only.as_object_mut().unwrap().retain(|k, _| k == "split" || k == "fit");
        let (fit, warning) = read_saved_fit(&split_only.to_string(), &train).unwrap();
        assert_eq!(fit, between);
        assert!(warning.unwrap().contains("does not record its indexing or query limit"));
        // A malformed file says what is wrong, not only that no format matched.
        let err = |text: &str| read_saved_fit(text, &train).unwrap_err().to_string();
        assert!(err("{}").contains("neither `split` nor `datasets`"), "{}", err("{}"));
        assert!(err("[1]").contains("not an object"));
        assert!(err(r#"{"split": "train"}"#).contains("missing field `fit`"), "{}", err(r#"{"split": "train"}"#));
        assert!(err(r#"{"datasets": 3}"#).contains("invalid type"), "{}", err(r#"{"datasets": 3}"#));
        // A dataset counted twice would weigh twice in the choice.
        let twice = joint_fit(vec![a.clone(), a.clone()], None).unwrap_err().to_string();
        assert!(twice.contains("the dataset `a` is given twice"), "{twice}");
        assert!(joint_fit(pair, Some(f64::NAN)).unwrap_err().to_string().contains("finite"));
    }

    #[test]
    fn the_floor_breaks_ties_by_worst_gain_then_keeps_the_earlier_setting() {
        let point = |worst_gain: f64, mean: f64| JointPoint {
            method: FusionMethod::Convex,
            adaptive: 0.0,
            bm25_weight: 0.5,
            dense_weight: 0.5,
            levels: None,
            ndcg_at_10: vec![mean],
            worst_gain,
            mean_ndcg_at_10: mean,
        };
        let floor = Some(0.0);
        // Both reach the floor: the mean decides, then the worst gain.
        assert!(point(0.01, 0.6).beats(&point(0.05, 0.5), floor));
        assert!(point(0.02, 0.5).beats(&point(0.01, 0.5), floor));
        // Reaching the floor beats any mean below it; exactly at the floor counts as reaching it.
        assert!(point(0.0, 0.4).beats(&point(-0.001, 0.9), floor));
        // Neither reaches it, or no floor: the worst gain decides, then the mean.
        assert!(point(-0.01, 0.4).beats(&point(-0.02, 0.9), floor));
        assert!(point(-0.01, 0.5).beats(&point(-0.01, 0.4), None));
        assert!(point(0.01, 0.4).beats(&point(0.0, 0.9), None));
        // Equal in both: neither beats the other, so the earlier in grid order stays.
        assert!(!point(0.01, 0.5).beats(&point(0.01, 0.5), floor));
        assert!(!point(0.01, 0.5).beats(&point(0.01, 0.5), None));
    }

    #[test]
    fn choosing_from_saved_fits_is_choosing_from_the_fresh_ones() {
        // `calibrate --fusion --from-fit-json`: fits saved one dataset per file, alone or beside a fresh fit, give
        // the choice (and the file) that fitting them together gives.
        let (a, b) = a_and_b();
        let b = DatasetFit { name: "b".into(), fit: b };
        let conditions = FitConditions { split: "train".into(), chunking: EvalChunking::Passages, limit: None };
        let together = joint_fit(vec![a.clone(), b.clone()], Some(0.0)).unwrap();
        let saved = |d: &DatasetFit| {
            let json = saved_fit_json(&joint_fit(vec![d.clone()], None).unwrap(), &conditions).unwrap();
            read_saved_fit(&json, &conditions).unwrap().0.datasets
        };
        let from_files = joint_fit([saved(&a), saved(&b)].concat(), Some(0.0)).unwrap();
        let mixed = joint_fit([vec![a.clone()], saved(&b)].concat(), Some(0.0)).unwrap();
        assert_eq!(from_files, together);
        assert_eq!(mixed, together);
        assert_eq!(fusion_toml(&from_files, "train"), fusion_toml(&together, "train"));
        // A saved fit of another grid is refused beside a fresh one, naming both datasets.
        let (queries, qrels) = synthetic();
        let coarse = FusionGrid { steps: 4, ..FusionGrid::default() };
        let c = DatasetFit {
            name: "coarse".into(),
            fit: fit_fusion(&queries, &qrels, &HybridSettings::default(), &coarse, 100).unwrap(),
        };
        let err = joint_fit([vec![a], saved(&c)].concat(), None).unwrap_err().to_string();
        assert!(err.contains("a and coarse differ in grid"), "{err}");
        // A saved dataset given again fresh counts twice: refused.
        let err = joint_fit([vec![b.clone()], saved(&b)].concat(), None).unwrap_err().to_string();
        assert!(err.contains("the dataset `b` is given twice"), "{err}");
    }

    #[test]
    fn fits_of_different_grids_are_not_chosen_from_jointly() {
        let (queries, qrels) = synthetic();
        let grid = FusionGrid { steps: 4, ..FusionGrid::default() };
        let coarse = fit_fusion(&queries, &qrels, &HybridSettings::default(), &grid, 100).unwrap();
        let err = joint_fit(vec![one("a"), DatasetFit { name: "b".into(), fit: coarse }], None).unwrap_err();
        assert!(err.to_string().contains("a and b differ in grid"), "{err}");
        assert!(joint_fit(Vec::new(), None).is_err());
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

    #[test]
    fn typos_are_deterministic_and_touch_only_long_words() {
        let text = "Does Vitamin-D deficiency raise the risk of hip fractures in 2024? Ça dépend, naïvement.";
        assert_eq!(with_typos(text, 0.0, "q"), text);
        let noisy = with_typos(text, 1.0, "q");
        assert_eq!(noisy, with_typos(text, 1.0, "q"), "the same seed gives the same typos");
        assert_ne!(noisy, with_typos(text, 1.0, "another query"));
        // Short words, digits, punctuation and spacing are kept; every word of four letters or more changed.
        let words = |t: &str| -> Vec<String> {
            t.split(|c: char| !c.is_alphabetic()).filter(|w| !w.is_empty()).map(str::to_owned).collect()
        };
        let (before, after) = (words(text), words(&noisy));
        assert_eq!(before.len(), after.len(), "{noisy}");
        for (b, a) in before.iter().zip(&after) {
            if b.chars().count() < 4 {
                assert_eq!(a, b);
            } else {
                assert_ne!(a, b, "{noisy}");
                let (nb, na) = (b.chars().count() as i64, a.chars().count() as i64);
                assert!((nb - na).abs() <= 1, "one edit: {b} -> {a}");
            }
        }
        let shape = |t: &str| t.chars().filter(|c| !c.is_alphabetic()).collect::<String>();
        assert_eq!(shape(&noisy), shape(text));
        // At a rate in between, about that share of the long words changes.
        let long: String = (0..400).map(|i| format!("word{} ", ["alpha", "bravo", "delta", "gamma"][i % 4])).collect();
        let changed = words(&with_typos(&long, 0.3, "q")).iter().zip(words(&long)).filter(|(a, b)| *a != b).count();
        assert!((90..150).contains(&changed), "{changed} of 400");
    }

    #[test]
    fn a_stress_parses_from_list_and_rate() {
        let s: Stress = "bm25:0.6".parse().unwrap();
        assert_eq!((s.list, s.typo_rate, s.label()), (Strategy::Bm25, 0.6, "bm25-typos-0.6".to_owned()));
        let s: Stress = " dense : 1 ".parse().unwrap();
        assert_eq!((s.list, s.label()), (Strategy::Dense, "dense-typos-1".to_owned()));
        for bad in ["bm25", "hybrid:0.5", "bm25:0", "dense:1.5", "bm25:x", "dense:NaN"] {
            let err = bad.parse::<Stress>().unwrap_err();
            assert!(err.to_string().contains("bm25:RATE"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_configured_setting_is_reported_beside_the_fit() {
        let (queries, qrels) = synthetic();
        let d = HybridSettings::default();
        // The grid as `calibrate` makes it: the configured level weights (the default's) join it.
        let mut grid = FusionGrid::default();
        grid.include_levels_of(&d);
        let fit = |base: HybridSettings| fit_fusion(&queries, &qrels, &base, &grid, 100).unwrap();
        // The default is a point of the grid.
        let default = fit(d);
        let p = default.points[default.configured.unwrap()];
        let levels = Levels { bm25: d.bm25_level, dense: d.dense_level, slope: d.level_slope };
        assert_eq!((p.method, p.adaptive, p.bm25_weight, p.dense_weight), (d.fusion, d.adaptive, 0.4, 0.6));
        assert_eq!(p.levels, Some(levels));
        // Weights count by their ratio: RRF at 1 / 1 (levels off) is the grid's 0.5 / 0.5.
        let rrf = HybridSettings {
            fusion: FusionMethod::Rrf,
            bm25_weight: 1.0,
            dense_weight: 1.0,
            adaptive: 0.0,
            level_slope: 0.0,
            ..d
        };
        let rrf_fit = fit(rrf);
        let p = rrf_fit.points[rrf_fit.configured.unwrap()];
        assert_eq!((p.method, p.adaptive, p.dense_weight), (FusionMethod::Rrf, 0.0, 0.5));
        // A strength the grid does not try is not reported.
        assert_eq!(fit(HybridSettings { adaptive: 0.7, level_slope: 0.0, ..d }).configured, None);
        // The joint fit scores it like its own choices and the table marks it.
        let joint = joint_fit(
            vec![
                DatasetFit { name: "a".into(), fit: default.clone() },
                DatasetFit { name: "b".into(), fit: default.clone() },
            ],
            None,
        )
        .unwrap();
        let c = joint.configured.clone().unwrap();
        assert_eq!(c.ndcg_at_10, vec![p_ndcg(&default); 2]);
        assert!(fusion_table(&joint).contains("<- the configured [hybrid]"), "{}", fusion_table(&joint));
        assert_eq!(
            joint_fit(
                vec![DatasetFit {
                    name: "c".into(),
                    fit: fit(HybridSettings { adaptive: 0.7, level_slope: 0.0, ..d }),
                }],
                None
            )
            .unwrap()
            .configured,
            None
        );
    }

    fn p_ndcg(fit: &FusionFit) -> f64 {
        fit.points[fit.configured.unwrap()].ndcg_at_10
    }

    #[test]
    fn level_weights_are_points_of_the_grid_and_written_to_the_file() {
        // BM25 is right where its best score is high (q1, q2: 10 and 9 per term) and guessing where it is low (q3,
        // q4: about 2 and 3.5 per term); dense's best cosines say less. A BM25 level centred at 4 per term hands
        // q3 and q4 to dense, so convex fusion with levels puts every relevant document first.
        let (queries, qrels) = synthetic();
        let levels = Levels { bm25: 4.0, dense: 0.6, slope: 10.0 };
        let grid = FusionGrid { methods: vec![FusionMethod::Rrf], adaptive: vec![0.0], steps: 4, levels: vec![levels] };
        let fit = fit_fusion(&queries, &qrels, &HybridSettings::default(), &grid, 100).unwrap();
        assert_eq!(fit.points.len(), 2 * 5);
        let with: Vec<&FusionPoint> = fit.points.iter().filter(|p| p.levels == Some(levels)).collect();
        assert_eq!(with.len(), 5);
        assert!(with.iter().all(|p| p.method == FusionMethod::Convex && p.adaptive == 0.0));
        assert_eq!(fit.best.levels, Some(levels), "{:?}", fit.per_method);
        assert_eq!(fit.best.ndcg_at_10, 1.0);
        assert_eq!(fit.best.label(), "convex, levels 4 / 0.6 / 10");
        // The file sets the levels, and the engine reads them back.
        let joint = joint_fit(vec![DatasetFit { name: "tiny".into(), fit: fit.clone() }], None).unwrap();
        let text = fusion_toml(&joint, "train");
        let h = ragtune::Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}")).hybrid;
        assert_eq!((h.bm25_level, h.dense_level, h.level_slope), (4.0, 0.6, 10.0), "{text}");
        // The configured setting with the same levels is found in the grid.
        let base = HybridSettings {
            fusion: FusionMethod::Convex,
            adaptive: 0.0,
            bm25_level: 4.0,
            dense_level: 0.6,
            level_slope: 10.0,
            ..h
        };
        let again = fit_fusion(&queries, &qrels, &base, &grid, 100).unwrap();
        assert_eq!(again.points[again.configured.unwrap()].levels, Some(levels));
        // A level of 0 is refused.
        let bad = FusionGrid { levels: vec![Levels { bm25: 0.0, ..levels }], ..grid };
        assert!(fit_fusion(&queries, &qrels, &HybridSettings::default(), &bad, 100).is_err());
        assert_eq!(FusionGrid::level_settings().len(), 30);
    }

    #[test]
    fn the_configured_levels_join_the_grid_once() {
        let levelled =
            HybridSettings { bm25_level: 1.5, dense_level: 0.55, level_slope: 5.0, ..HybridSettings::default() };
        let mut grid = FusionGrid::default();
        grid.include_levels_of(&levelled);
        grid.include_levels_of(&levelled);
        assert_eq!(grid.levels, vec![Levels { bm25: 1.5, dense: 0.55, slope: 5.0 }]);
        // Already among `--levels`'s settings: not added twice.
        let mut wide = FusionGrid { levels: FusionGrid::level_settings(), ..FusionGrid::default() };
        wide.include_levels_of(&levelled);
        assert_eq!(wide.levels.len(), 30);
        // Off, or one list only: nothing to add.
        let mut grid = FusionGrid::default();
        grid.include_levels_of(&HybridSettings { level_slope: 0.0, ..levelled });
        grid.include_levels_of(&HybridSettings { dense_level: 0.0, ..levelled });
        assert!(grid.levels.is_empty());
    }
}
