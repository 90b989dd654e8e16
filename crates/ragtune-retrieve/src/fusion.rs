//! Fusion of ranked lists: weighted Reciprocal Rank Fusion, normalised-score convex combination, distribution-based
//! score fusion, and query-time adaptive weights, behind one function, [`fuse`].
//!
//! Every method shares the same frame: candidates are deduplicated by chunk id (a chunk listed twice in one list
//! counts once, at its first position), keep the provenance of every list they came from (`sources`), receive one
//! contribution per list they appear in, and are ordered by the sum of their contributions, ties by chunk id
//! ([`sort_ranked`]). Only the contribution differs between methods.
//!
//! ```
//! use ragtune_core::{Candidate, Chunk, ScoredHit};
//! use ragtune_retrieve::{FusionConfig, FusionMethod, fuse};
//!
//! let hit = |id: &str, score: f32, strategy: &str, rank: u32| {
//!     Candidate::from_hit(ScoredHit { chunk: Chunk::new(id, id, id), score }, strategy, rank)
//! };
//! let bm25 = vec![hit("a", 12.0, "bm25", 1), hit("b", 3.0, "bm25", 2)];
//! let dense = vec![hit("b", 0.80, "dense", 1), hit("a", 0.79, "dense", 2)];
//! let config = FusionConfig { method: FusionMethod::Convex, ..FusionConfig::default() };
//! let fused = fuse(&[(1.0, bm25), (1.0, dense)], &config, 10);
//! // a: 1 (top of bm25) + 0 (bottom of dense); b: 0 + 1; the tie is broken by chunk id.
//! assert_eq!(fused.iter().map(|c| c.chunk.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
//! assert_eq!(fused[0].sources.len(), 2);
//! ```

use std::collections::BTreeMap;
use std::fmt;

use ragtune_core::{Candidate, Error, Result, SourceScore, sort_ranked};
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

/// How the lists of a fusion are combined: the contribution a candidate receives from each list it appears in,
/// weighted by the list's weight.
///
/// ```
/// use ragtune_retrieve::FusionMethod;
///
/// assert_eq!("dbsf".parse::<FusionMethod>()?, FusionMethod::Dbsf);
/// assert_eq!(FusionMethod::Convex.to_string(), "convex");
/// assert!("mean".parse::<FusionMethod>().is_err());
/// # Ok::<(), ragtune_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FusionMethod {
    /// Reciprocal Rank Fusion: `weight / (k + rank)`, scores ignored (Cormack et al., 2009).
    #[default]
    Rrf,
    /// Convex combination of min-max normalised scores: `weight * (score - min) / (max - min)` over the list's
    /// own scores, so the list's best gets 1 and its worst 0; a candidate missing from a list gets 0 from it. A list
    /// whose scores are all equal (or that has one candidate) gives each of them 0.5.
    Convex,
    /// Distribution-based score fusion (as in Qdrant): `weight * (score - (mean - 3 sd)) / (6 sd)`, clipped to
    /// [0, 1], with the mean and the sample standard deviation of the list's own scores; a list with fewer than two
    /// scores or no spread gives each of them 0.5.
    Dbsf,
}

impl FusionMethod {
    /// Every method, in the order they are listed to users.
    pub const ALL: [Self; 3] = [Self::Rrf, Self::Convex, Self::Dbsf];

    /// The method's name in configuration files and on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Rrf => "rrf",
            Self::Convex => "convex",
            Self::Dbsf => "dbsf",
        }
    }
}

impl fmt::Display for FusionMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FusionMethod {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|m| m.name()).collect();
            Error::invalid_input(format!("unknown fusion method `{s}`; available: {}", names.join(", ")))
        })
    }
}

/// The largest accepted [`FusionConfig::adaptive`]: enough to all but silence a flat list, small enough that the
/// query-time weights stay finite for any number of lists.
pub const MAX_ADAPTIVE: f32 = 8.0;

/// How a fusion combines its lists.
///
/// With `adaptive > 0` the weights change per query: a list that is guessing — whose best score hardly stands out
/// from the rest of its own list — counts less, and a list that found something that stands out counts more
/// (see [`fusion_weights`]). With `adaptive = 0` the weights are the ones given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusionConfig {
    /// How contributions are computed.
    pub method: FusionMethod,
    /// The RRF constant: a document at rank `r` of a list contributes `weight / (k + r)`; 60 in the original paper.
    /// Used by [`FusionMethod::Rrf`] only.
    pub k: f32,
    /// The strength of the query-time weights: each list's weight is multiplied by `(z / mean z)^adaptive`, where
    /// `z` is how many standard deviations the list's best score lies above its mean. 0 (the default) keeps the
    /// weights as given; at most [`MAX_ADAPTIVE`].
    pub adaptive: f32,
}

impl Default for FusionConfig {
    fn default() -> Self {
        Self { method: FusionMethod::Rrf, k: 60.0, adaptive: 0.0 }
    }
}

impl FusionConfig {
    /// Plain weighted RRF with constant `k`.
    #[must_use]
    pub fn rrf(k: f32) -> Self {
        Self { k, ..Self::default() }
    }

    /// Checks `k` and `adaptive`.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming the setting: `k` negative or not finite,
    /// `adaptive` outside `0..=MAX_ADAPTIVE`.
    pub fn validate(&self) -> Result<()> {
        if !(self.k.is_finite() && self.k >= 0.0) {
            return Err(Error::invalid_input(format!("k must be a finite number >= 0, got {}", self.k)));
        }
        if !(self.adaptive.is_finite() && (0.0..=MAX_ADAPTIVE).contains(&self.adaptive)) {
            return Err(Error::invalid_input(format!(
                "adaptive must be between 0 and {MAX_ADAPTIVE}, got {}",
                self.adaptive
            )));
        }
        Ok(())
    }
}

/// The statistics of one list's scores (first occurrence of each chunk, finite scores only).
#[derive(Debug, Clone, Copy)]
struct ListStats {
    n: usize,
    min: f64,
    max: f64,
    mean: f64,
    /// Sample standard deviation (0 for one score).
    sd: f64,
}

impl ListStats {
    fn of(list: &[Candidate]) -> Option<Self> {
        let mut seen = FxHashSet::with_capacity_and_hasher(list.len(), FxBuildHasher);
        let scores: Vec<f64> = list
            .iter()
            .filter(|c| seen.insert(c.chunk.id.as_str()))
            .map(|c| f64::from(c.score))
            .filter(|s| s.is_finite())
            .collect();
        if scores.is_empty() {
            return None;
        }
        let n = scores.len();
        let mean = scores.iter().sum::<f64>() / n as f64;
        let sd =
            if n < 2 { 0.0 } else { (scores.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() };
        let min = scores.iter().copied().fold(f64::INFINITY, f64::min);
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Self { n, min, max, mean, sd })
    }

    /// How many standard deviations the best score lies above the mean; `None` without two scores. 0 when every
    /// score is the same. It is at most `(n - 1) / sqrt(n)`, so it is always finite.
    fn top_z(&self) -> Option<f64> {
        if self.n < 2 {
            return None;
        }
        Some(if self.sd > 0.0 { ((self.max - self.mean) / self.sd).max(0.0) } else { 0.0 })
    }

    /// A score mapped to [0, 1] by `method` (not used for RRF); a non-finite score maps to 0.
    fn normalise(&self, method: FusionMethod, score: f32) -> f64 {
        let s = f64::from(score);
        if !s.is_finite() {
            return 0.0;
        }
        let (lo, hi) = match method {
            FusionMethod::Rrf | FusionMethod::Convex => (self.min, self.max),
            FusionMethod::Dbsf => (self.mean - 3.0 * self.sd, self.mean + 3.0 * self.sd),
        };
        if hi - lo > 0.0 && (hi - lo).is_finite() { ((s - lo) / (hi - lo)).clamp(0.0, 1.0) } else { 0.5 }
    }
}

/// The weight each list gets for this query: its given weight, times its confidence when `config.adaptive > 0`.
///
/// The confidence of a list is `(z / mean z)^adaptive`, where `z` is how many (sample) standard deviations its best
/// score lies above the mean of its own scores, and the mean is over the lists with a positive weight and at least
/// two scores. A list whose best result stands out as much as the others' keeps its weight; a flat list, one that is
/// guessing, loses weight to the lists that are not. Lists with fewer than two scores, and every list when all are
/// flat, keep their weights. The result depends only on the lists themselves, never on their order.
#[must_use]
pub fn fusion_weights<L: AsRef<[Candidate]>>(lists: &[(f32, L)], config: &FusionConfig) -> Vec<f32> {
    let given = lists.iter().map(|(w, _)| *w);
    if config.adaptive == 0.0 {
        return given.collect();
    }
    let z: Vec<Option<f64>> = lists
        .iter()
        .map(|(w, l)| if *w == 0.0 { None } else { ListStats::of(l.as_ref()).and_then(|s| s.top_z()) })
        .collect();
    // Summed in ascending order, so the mean does not depend on the order of the lists.
    let mut present: Vec<f64> = z.iter().flatten().copied().collect();
    present.sort_by(f64::total_cmp);
    let mean = present.iter().sum::<f64>() / present.len().max(1) as f64;
    given
        .zip(&z)
        .map(|(w, z)| match z {
            Some(z) if mean > 0.0 => (f64::from(w) * (z / mean).powf(f64::from(config.adaptive))) as f32,
            _ => w,
        })
        .collect()
}

/// Fuses ranked lists; `lists` holds `(weight, candidates in rank order)`, the candidates owned or borrowed.
///
/// A list of weight 0 is ignored. Each candidate's score is the sum of its contributions (see [`FusionMethod`]),
/// added in a canonical order (by strategy name, then value), so the result is the same for any order of `lists`.
/// Each list's ranks are its positions (1-based); duplicates within a list count once, at their first position.
/// The scores a score-based method reads are the candidates' `score`s (the producing retriever's).
#[must_use]
pub fn fuse<L: AsRef<[Candidate]>>(lists: &[(f32, L)], config: &FusionConfig, top_k: usize) -> Vec<Candidate> {
    fuse_weighted(lists, &fusion_weights(lists, config), config, top_k)
}

/// [`fuse`] with the query-time weights already computed: `weights` is what [`fusion_weights`] returned for the same
/// `lists` and `config` (a caller that reports the weights computes them once).
///
/// Only the `top_k` candidates kept are built (their chunk cloned, their sources merged); every other candidate
/// is scored from a borrowed reference, so fusing two lists of a hundred costs a hundred hash inserts, not a
/// hundred chunk copies.
///
/// A missing weight (`weights` shorter than `lists`) counts as the list's given weight.
#[must_use]
pub fn fuse_weighted<L: AsRef<[Candidate]>>(
    lists: &[(f32, L)],
    weights: &[f32],
    config: &FusionConfig,
    top_k: usize,
) -> Vec<Candidate> {
    /// One contribution: the fused candidate it belongs to, the list's strategy name, the value, and the
    /// candidate as that list gave it (for its chunk and sources).
    struct Entry<'a> {
        slot: usize,
        key: &'a str,
        value: f32,
        candidate: &'a Candidate,
    }
    let total: usize = lists.iter().map(|(_, l)| l.as_ref().len()).sum();
    let k = config.k;
    let mut slots: FxHashMap<&str, usize> = FxHashMap::with_capacity_and_hasher(total, FxBuildHasher);
    // The last list each slot was seen in: a second occurrence within one list counts once, at its first position.
    let mut last_list: Vec<usize> = Vec::with_capacity(total);
    let mut entries: Vec<Entry<'_>> = Vec::with_capacity(total);
    for (li, (given, list)) in lists.iter().enumerate() {
        if *given == 0.0 {
            continue;
        }
        let weight = weights.get(li).copied().unwrap_or(*given);
        let list = list.as_ref();
        let stats = match config.method {
            FusionMethod::Rrf => None,
            FusionMethod::Convex | FusionMethod::Dbsf => ListStats::of(list),
        };
        for (pos, c) in list.iter().enumerate() {
            let next = slots.len();
            let slot = *slots.entry(c.chunk.id.as_str()).or_insert(next);
            if slot == next {
                last_list.push(li);
            } else if last_list[slot] == li {
                continue;
            } else {
                last_list[slot] = li;
            }
            let value = match stats {
                None => {
                    let rank = pos as f32 + 1.0;
                    weight / (k + rank)
                }
                Some(s) => (f64::from(weight) * s.normalise(config.method, c.score)) as f32,
            };
            let key = c.sources.keys().next().map_or("", String::as_str);
            entries.push(Entry { slot, key, value, candidate: c });
        }
    }
    // Each slot's contributions summed in the canonical order (strategy name, then value).
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        let (a, b) = (&entries[a], &entries[b]);
        a.slot.cmp(&b.slot).then_with(|| a.key.cmp(b.key)).then(a.value.total_cmp(&b.value))
    });
    let mut scored: Vec<(f32, &str, usize)> = Vec::with_capacity(slots.len());
    for group in order.chunk_by(|&a, &b| entries[a].slot == entries[b].slot) {
        let score: f32 = group.iter().map(|&e| entries[e].value).sum();
        // The slot's first entry in list order (the sort above reordered only `order`).
        let first = group.iter().copied().min().unwrap_or(group[0]);
        scored.push((score, entries[first].candidate.chunk.id.as_str(), first));
    }
    sort_ranked(&mut scored, |s| (s.0, s.1));
    scored.truncate(top_k);
    // Only the kept candidates are built: the chunk from the first list that has it, the sources of every list in
    // list order (the first list's entry for a strategy wins).
    scored
        .into_iter()
        .map(|(score, _, first)| {
            let slot = entries[first].slot;
            let mut sources: BTreeMap<String, SourceScore> = BTreeMap::new();
            for e in entries[first..].iter().filter(|e| e.slot == slot) {
                for (name, s) in &e.candidate.sources {
                    if !sources.contains_key(name) {
                        sources.insert(name.clone(), *s);
                    }
                }
            }
            Candidate { chunk: entries[first].candidate.chunk.clone(), score, sources }
        })
        .collect()
}

/// Fuses ranked lists with weighted RRF: [`fuse`] with [`FusionConfig::rrf`]`(k)`.
#[must_use]
pub fn rrf_fuse<L: AsRef<[Candidate]>>(lists: &[(f32, L)], k: f32, top_k: usize) -> Vec<Candidate> {
    fuse(lists, &FusionConfig::rrf(k), top_k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ragtune_core::Chunk;
    use std::collections::HashSet;

    fn cand(id: &str, strategy: &str, rank: u32, score: f32) -> Candidate {
        Candidate::from_hit(ragtune_core::ScoredHit { chunk: Chunk::new(id, id, id), score }, strategy, rank)
    }

    /// A list of `strategy` with scores `1 / rank`.
    fn list(strategy: &str, ids: &[&str]) -> Vec<Candidate> {
        ids.iter().zip(1u32..).map(|(id, r)| cand(id, strategy, r, 1.0 / r as f32)).collect()
    }

    /// A list of `strategy` from `id:score` pairs, in the order given.
    fn scored(strategy: &str, items: &[(&str, f32)]) -> Vec<Candidate> {
        items.iter().zip(1u32..).map(|((id, s), r)| cand(id, strategy, r, *s)).collect()
    }

    /// The ranking as text: `1. a  0.03252` per line.
    fn render(c: &[Candidate]) -> String {
        c.iter().zip(1..).map(|(c, i)| format!("{i}. {}  {:.5}\n", c.chunk.id, c.score)).collect()
    }

    /// Fuses `lists` with `config` (top 10) and compares the ranking with `expect`.
    #[track_caller]
    fn check(lists: &[(f32, Vec<Candidate>)], config: FusionConfig, expect: &str) {
        let got = render(&fuse(lists, &config, 10));
        let expect: String =
            expect.lines().map(str::trim).filter(|l| !l.is_empty()).map(|l| format!("{l}\n")).collect();
        assert_eq!(got, expect, "\ngot:\n{got}\nexpected:\n{expect}");
    }

    /// The first implementation of [`fuse`], which cloned every candidate into a map by id: the one that builds only
    /// the kept top k must agree with it bit for bit.
    fn reference_fuse<L: AsRef<[Candidate]>>(
        lists: &[(f32, L)],
        config: &FusionConfig,
        top_k: usize,
    ) -> Vec<Candidate> {
        struct Acc {
            chunk: Chunk,
            contributions: Vec<(String, f32)>,
            sources: BTreeMap<String, SourceScore>,
        }
        let weights = fusion_weights(lists, config);
        let k = config.k;
        let mut by_id: BTreeMap<String, Acc> = BTreeMap::new();
        for ((given, list), weight) in lists.iter().zip(weights) {
            if *given == 0.0 {
                continue;
            }
            let list = list.as_ref();
            let stats = match config.method {
                FusionMethod::Rrf => None,
                FusionMethod::Convex | FusionMethod::Dbsf => ListStats::of(list),
            };
            let mut seen = HashSet::new();
            for (pos, c) in list.iter().enumerate() {
                if !seen.insert(c.chunk.id.as_str()) {
                    continue;
                }
                let contribution = match stats {
                    None => {
                        let rank = pos as f32 + 1.0;
                        weight / (k + rank)
                    }
                    Some(s) => (f64::from(weight) * s.normalise(config.method, c.score)) as f32,
                };
                let acc = by_id.entry(c.chunk.id.clone()).or_insert_with(|| Acc {
                    chunk: c.chunk.clone(),
                    contributions: Vec::new(),
                    sources: BTreeMap::new(),
                });
                let key = c.sources.keys().next().cloned().unwrap_or_default();
                acc.contributions.push((key, contribution));
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

    fn method(method: FusionMethod, adaptive: f32) -> FusionConfig {
        FusionConfig { method, adaptive, ..FusionConfig::default() }
    }

    #[test]
    fn rrf_by_hand() {
        // a: 1/(60+1) + 1/(60+2) = 0.032522; b: 1/62 + 1/61 (tie -> id order); c: 1/63 = 0.015873.
        let lists = [(1.0, list("bm25", &["a", "b", "c"])), (1.0, list("dense", &["b", "a"]))];
        check(&lists, FusionConfig::default(), "1. a  0.03252\n2. b  0.03252\n3. c  0.01587");
        let out = rrf_fuse(&lists, 60.0, 10);
        assert_eq!(out[0].sources["bm25"].rank, 1);
        assert_eq!(out[0].sources["dense"].rank, 2);
        // Weights: dense counts double, so b wins.
        let out = rrf_fuse(&[(1.0, list("bm25", &["a", "b"])), (2.0, list("dense", &["b", "a"]))], 60.0, 10);
        assert_eq!(out[0].chunk.id, "b");
    }

    #[test]
    fn rrf_scores_are_those_of_the_formula_bit_for_bit() {
        // The engine's rankings before fusion methods existed: weight / (k + rank), summed by strategy name.
        let lists = [(0.7, list("bm25", &["a", "b", "a", "c"])), (1.3, list("dense", &["c", "a"]))];
        let out = rrf_fuse(&lists, 60.0, 10);
        let a = 0.7f32 / (60.0 + 1.0) + 1.3f32 / (60.0 + 2.0);
        let c = 0.7f32 / (60.0 + 4.0) + 1.3f32 / (60.0 + 1.0);
        let b = 0.7f32 / (60.0 + 2.0);
        let got: Vec<(&str, f32)> = out.iter().map(|c| (c.chunk.id.as_str(), c.score)).collect();
        assert_eq!(got, vec![("a", a), ("c", c), ("b", b)]);
    }

    #[test]
    fn convex_normalises_each_list_by_its_range() {
        // bm25: a 1, b 0.5, c 0; dense: c 1, b 0.
        let lists = [
            (1.0, scored("bm25", &[("a", 30.0), ("b", 20.0), ("c", 10.0)])),
            (1.0, scored("dense", &[("c", 0.9), ("b", 0.5)])),
        ];
        check(&lists, method(FusionMethod::Convex, 0.0), "1. a  1.00000\n2. c  1.00000\n3. b  0.50000");
        // Dense weighted 3 to 1: c 3 + 0, a 1, b 0.5.
        let lists = [(1.0, lists[0].1.clone()), (3.0, lists[1].1.clone())];
        check(&lists, method(FusionMethod::Convex, 0.0), "1. c  3.00000\n2. a  1.00000\n3. b  0.50000");
        // One candidate, or no spread: 0.5 each.
        let flat = [(1.0, scored("bm25", &[("a", 2.0), ("b", 2.0)])), (1.0, scored("dense", &[("c", 0.3)]))];
        check(&flat, method(FusionMethod::Convex, 0.0), "1. a  0.50000\n2. b  0.50000\n3. c  0.50000");
    }

    #[test]
    fn dbsf_normalises_by_mean_and_three_standard_deviations() {
        // Scores 1, 2, 3: mean 2, sample sd 1, so [-1, 5] maps to [0, 1]: 1 -> 1/3, 2 -> 1/2, 3 -> 2/3.
        let lists = [(1.0, scored("bm25", &[("c", 3.0), ("b", 2.0), ("a", 1.0)]))];
        check(&lists, method(FusionMethod::Dbsf, 0.0), "1. c  0.66667\n2. b  0.50000\n3. a  0.33333");
        // An outlier is clipped at 1: nineteen scores of 0 and one of 100 (mean 5, sd 22.4, so [-62.1, 72.1]).
        let mut items: Vec<(String, f32)> = (0..19).map(|i| (format!("z{i}"), 0.0)).collect();
        items.insert(0, ("top".into(), 100.0));
        let refs: Vec<(&str, f32)> = items.iter().map(|(i, s)| (i.as_str(), *s)).collect();
        let out = fuse(&[(1.0, scored("bm25", &refs))], &method(FusionMethod::Dbsf, 0.0), 2);
        assert_eq!(render(&out), "1. top  1.00000\n2. z0  0.46273\n");
        let out = fuse(&[(2.0, scored("bm25", &[("a", 1e6), ("b", -1e6)]))], &method(FusionMethod::Dbsf, 0.0), 2);
        assert!(out.iter().all(|c| (0.0..=2.0).contains(&c.score)), "{}", render(&out));
    }

    #[test]
    fn adaptive_weights_favour_the_list_whose_top_stands_out() {
        // bm25 is flat (guessing): its top is 1.26 sd above its mean; dense's top stands out more (1.78 sd).
        let bm25 = scored("bm25", &[("a", 10.0), ("b", 9.9), ("c", 9.8), ("d", 9.7), ("e", 9.6)]);
        let dense = scored("dense", &[("e", 0.9), ("d", 0.5), ("c", 0.48), ("b", 0.47), ("a", 0.46)]);
        let lists = [(1.0, bm25), (1.0, dense)];
        let w = fusion_weights(&lists, &method(FusionMethod::Convex, 1.0));
        assert!(w[0] < 1.0 && w[1] > 1.0 && (w[0] + w[1] - 2.0).abs() < 1e-6, "{w:?}");
        assert_eq!(fusion_weights(&lists, &method(FusionMethod::Convex, 0.0)), vec![1.0, 1.0]);
        // Equal weights tie a and e under plain convex fusion; adaptive fusion trusts dense.
        check(
            &lists,
            method(FusionMethod::Convex, 0.0),
            "1. a  1.00000\n2. e  1.00000\n3. b  0.77273\n4. c  0.54545\n5. d  0.34091",
        );
        let out = fuse(&lists, &method(FusionMethod::Convex, 1.0), 10);
        assert_eq!(out[0].chunk.id, "e");
        // The same signal reweights RRF and DBSF.
        assert_eq!(fuse(&lists, &method(FusionMethod::Rrf, 2.0), 1)[0].chunk.id, "e");
        assert_eq!(fuse(&lists, &method(FusionMethod::Dbsf, 1.0), 1)[0].chunk.id, "e");
        // Lists too short to judge keep their weights.
        let short = [(1.0, scored("bm25", &[("a", 1.0)])), (2.0, scored("dense", &[("b", 1.0)]))];
        assert_eq!(fusion_weights(&short, &method(FusionMethod::Rrf, 1.0)), vec![1.0, 2.0]);
    }

    #[test]
    fn names_parse_back_and_match_the_serde_spelling() {
        for m in FusionMethod::ALL {
            assert_eq!(m.name().parse::<FusionMethod>().unwrap(), m);
            assert_eq!(serde_json::to_value(m).unwrap(), serde_json::json!(m.name()));
        }
        let err = "mean".parse::<FusionMethod>().unwrap_err();
        assert_eq!(err.message(), "unknown fusion method `mean`; available: rrf, convex, dbsf");
    }

    #[test]
    fn invalid_settings_are_refused_by_name() {
        assert!(FusionConfig::default().validate().is_ok());
        let err = FusionConfig { k: -1.0, ..FusionConfig::default() }.validate().unwrap_err();
        assert!(err.message().starts_with("k must"), "{err}");
        for adaptive in [-0.5, f32::NAN, MAX_ADAPTIVE + 1.0] {
            let err = FusionConfig { adaptive, ..FusionConfig::default() }.validate().unwrap_err();
            assert!(err.message().starts_with("adaptive must"), "{err}");
        }
    }

    /// Up to four lists of up to 25 candidates from 30 ids, with weights from a small set and scores that are
    /// arbitrary (not sorted, negative, repeated) when `scores` says so, else `1 / rank`.
    fn arb_lists() -> impl Strategy<Value = Vec<(f32, Vec<Candidate>)>> {
        let item = (0u8..30, prop::sample::select(vec![-3.0f32, 0.0, 0.25, 1.0, 1.0, 7.5, 1e6]));
        let ids = prop::collection::vec(item, 0..25);
        let lists = prop::collection::vec((prop::sample::select(vec![0.0f32, 0.5, 1.0, 2.0]), ids), 1..5);
        (lists, any::<bool>()).prop_map(|(lists, scores)| {
            lists
                .into_iter()
                .enumerate()
                .map(|(n, (w, items))| {
                    let strategy = format!("s{n}");
                    let list = items
                        .iter()
                        .zip(1u32..)
                        .map(|((i, s), r)| {
                            cand(&format!("d{i}"), &strategy, r, if scores { *s } else { 1.0 / r as f32 })
                        })
                        .collect();
                    (w, list)
                })
                .collect()
        })
    }

    /// Every method, with and without adaptive weights.
    fn arb_config() -> impl Strategy<Value = FusionConfig> {
        (prop::sample::select(FusionMethod::ALL.to_vec()), prop::sample::select(vec![0.0f32, 1.0, 2.0]))
            .prop_map(|(m, a)| method(m, a))
    }

    fn permuted<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
        let mut out = items.to_vec();
        for i in (1..out.len()).rev() {
            let j = (seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64) % (i as u64 + 1)) as usize;
            out.swap(i, j);
        }
        out
    }

    proptest! {
        #[test]
        fn fuse_agrees_bit_for_bit_with_the_first_implementation(lists in arb_lists(), config in arb_config(), k in 0usize..60) {
            let got = fuse(&lists, &config, k);
            let want = reference_fuse(&lists, &config, k);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g.score.to_bits(), w.score.to_bits());
                prop_assert_eq!(g, w);
            }
        }

        #[test]
        fn fusion_is_invariant_to_the_order_of_inputs(lists in arb_lists(), config in arb_config(), seed in any::<u64>()) {
            prop_assert_eq!(fuse(&lists, &config, 20), fuse(&permuted(&lists, seed), &config, 20));
        }

        #[test]
        fn a_zero_weight_removes_a_list(lists in arb_lists(), config in arb_config()) {
            let without: Vec<_> = lists.iter().filter(|(w, _)| *w != 0.0).cloned().collect();
            prop_assert_eq!(fuse(&lists, &config, 50), fuse(&without, &config, 50));
            let ids: HashSet<String> = fuse(&lists, &config, 1000).into_iter().map(|c| c.chunk.id).collect();
            let kept: HashSet<String> = without.iter().flat_map(|(_, l)| l.iter().map(|c| c.chunk.id.clone())).collect();
            prop_assert!(ids.is_subset(&kept));
        }

        #[test]
        fn top_k_is_a_prefix_of_top_k_plus_one(lists in arb_lists(), config in arb_config(), k in 0usize..30) {
            let a = fuse(&lists, &config, k);
            let b = fuse(&lists, &config, k + 1);
            prop_assert_eq!(&a[..], &b[..a.len()]);
        }

        #[test]
        fn fused_ids_are_unique_sorted_and_scores_finite(lists in arb_lists(), config in arb_config()) {
            let out = fuse(&lists, &config, 100);
            for w in out.windows(2) {
                prop_assert!(w[0].score > w[1].score || (w[0].score == w[1].score && w[0].chunk.id < w[1].chunk.id));
            }
            prop_assert!(out.iter().all(|c| c.score.is_finite() && c.score >= 0.0));
            let mut ids: Vec<&str> = out.iter().map(|c| c.chunk.id.as_str()).collect();
            ids.sort_unstable();
            ids.dedup();
            prop_assert_eq!(ids.len(), out.len());
        }

        #[test]
        fn score_methods_stay_within_the_sum_of_the_weights(lists in arb_lists(), a in prop::sample::select(vec![0.0f32, 1.0])) {
            // Normalised scores lie in [0, 1], so no candidate gets more than all the (query-time) weights together.
            for m in [FusionMethod::Convex, FusionMethod::Dbsf] {
                let config = method(m, a);
                let total: f32 = fusion_weights(&lists, &config).iter().sum();
                prop_assert!(fuse(&lists, &config, 100).iter().all(|c| c.score <= total * (1.0 + 1e-5)));
            }
        }
    }
}
