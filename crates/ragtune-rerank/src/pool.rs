//! The candidate pool: every candidate of one request, keyed by id, with its state, provenance and scores.
//!
//! The pool is the only place where an item's state changes, and every change is validated against the state
//! machine below (docs/rerank.md, "The parts"):
//!
//! ```text
//! CANDIDATE ──► IN_FLIGHT ──► RERANKED
//!     │             │             │
//!     └──────►   DROPPED   ◄──────┘
//! ```
//!
//! `IN_FLIGHT → RERANKED` happens only through [`CandidatePool::update_scores`]; every other move goes through
//! [`CandidatePool::transition`]. Anything else (a reranked item back in flight, a dropped one back to candidate,
//! scores for an item that was not in flight) is an [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput)
//! error that leaves the pool unchanged: calls are all-or-nothing.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};

use ragtune_core::{Candidate, Chunk, Error, Result, SourceScore};
use serde::{Deserialize, Serialize};

/// The lifecycle state of a [`PoolItem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemState {
    /// Eligible for scheduling.
    Candidate,
    /// Selected for a reranker call that has not returned yet; not eligible, not assembled.
    InFlight,
    /// Has its reranker score; never reranked again.
    Reranked,
    /// Excluded from the result (its rerank call failed, or it was pruned).
    Dropped,
}

impl ItemState {
    /// A stable lower-case name (`candidate`, `in_flight`, `reranked`, `dropped`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Candidate => "candidate",
            Self::InFlight => "in_flight",
            Self::Reranked => "reranked",
            Self::Dropped => "dropped",
        }
    }

    /// Whether the assembler may see an item in this state (`CANDIDATE` or `RERANKED`).
    #[must_use]
    pub fn is_active(self) -> bool {
        matches!(self, Self::Candidate | Self::Reranked)
    }

    /// Whether [`CandidatePool::transition`] may move an item from `self` to `target`.
    ///
    /// `IN_FLIGHT → RERANKED` is legal in the state machine but only through
    /// [`CandidatePool::update_scores`], which also records the score; `transition` refuses it.
    #[must_use]
    pub fn can_transition_to(self, target: Self) -> bool {
        matches!(
            (self, target),
            (Self::Candidate, Self::InFlight)
                | (Self::Candidate, Self::Dropped)
                | (Self::InFlight, Self::Dropped)
                | (Self::Reranked, Self::Dropped)
        )
    }
}

impl fmt::Display for ItemState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an item's final score comes from, in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoreSource {
    /// A reranker scored the item.
    Reranker,
    /// An estimator predicted the reranker score of the item from the reranked evidence.
    Estimate,
    /// Only the retrieval score is known.
    Retrieval,
}

/// The score an item is ranked by, with the scale it is on.
///
/// Scores of different rerankers, and retrieval scores, are on different scales and are never compared directly:
/// the final order sorts by `tier` first (higher first), then by `value`. Tier 0 is the retrieval scale; a
/// reranker's scale has tier `1 + its index in the pool's ladder` (see [`CandidatePool::set_ladder`]), so a more
/// trusted reranker's scores rank above a cheaper one's. An estimate is on the scale of the reranker it was fitted
/// to, and interleaves with that reranker's scores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FinalScore {
    /// Which score this is.
    pub source: ScoreSource,
    /// The scale's tier: 0 for retrieval, `1 + ladder index` for a reranker's scale.
    pub tier: u32,
    /// The score on that scale.
    pub value: f32,
}

/// An estimator's prediction of an item's reranker score, as stored on the item.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScoreEstimate {
    /// The expected reranker score.
    pub score: f32,
    /// A plausible upper bound of the reranker score (`score` when the estimator gives none).
    pub upper: f32,
}

/// One candidate in the pool: the retrieved chunk with its provenance, its state and its scores.
///
/// Identity is the chunk id ([`id`](Self::id)), which is stable for the whole request. Fields are read-only
/// outside the pool so that states and scores only change through validated pool calls.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolItem {
    candidate: Candidate,
    initial_rank: u32,
    state: ItemState,
    priority_value: f32,
    estimate: Option<ScoreEstimate>,
    estimate_tier: u32,
    reranker_score: Option<f32>,
    reranker_strategy: Option<String>,
    reranker_tier: u32,
    sent_to: Option<String>,
}

impl PoolItem {
    /// The item's identity: the chunk id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.candidate.chunk.id
    }

    /// The retrieved chunk.
    #[must_use]
    pub fn chunk(&self) -> &Chunk {
        &self.candidate.chunk
    }

    /// The candidate as retrieval returned it (chunk, retrieval score, sources).
    #[must_use]
    pub fn candidate(&self) -> &Candidate {
        &self.candidate
    }

    /// Provenance: every retrieval strategy that produced the chunk, with its score and rank.
    #[must_use]
    pub fn sources(&self) -> &BTreeMap<String, SourceScore> {
        &self.candidate.sources
    }

    /// The score retrieval ranked by (the fused score for a hybrid retriever).
    #[must_use]
    pub fn retrieval_score(&self) -> f32 {
        self.candidate.score
    }

    /// The 1-based position in the list the pool was built from.
    #[must_use]
    pub fn initial_rank(&self) -> u32 {
        self.initial_rank
    }

    /// The lifecycle state.
    #[must_use]
    pub fn state(&self) -> ItemState {
        self.state
    }

    /// The estimator's value of reranking this item next (higher first); the retrieval score until an estimator
    /// has run. It orders scheduling, never the final ranking.
    #[must_use]
    pub fn priority_value(&self) -> f32 {
        self.priority_value
    }

    /// The estimator's prediction of this item's reranker score, if it made one.
    #[must_use]
    pub fn estimate(&self) -> Option<ScoreEstimate> {
        self.estimate
    }

    /// The reranker score, once reranked.
    #[must_use]
    pub fn reranker_score(&self) -> Option<f32> {
        self.reranker_score
    }

    /// The reranker that scored this item (its [`Reranker::name`](ragtune_core::Reranker::name)).
    #[must_use]
    pub fn reranker_strategy(&self) -> Option<&str> {
        self.reranker_strategy.as_deref()
    }

    /// The reranker this item was sent to ([`CandidatePool::send`]), whether or not the call succeeded.
    #[must_use]
    pub fn sent_to(&self) -> Option<&str> {
        self.sent_to.as_deref()
    }

    /// The final score with its source and scale; precedence reranker > estimate > retrieval (invariant 8).
    #[must_use]
    pub fn final_rank_score(&self) -> FinalScore {
        if let Some(value) = self.reranker_score {
            FinalScore { source: ScoreSource::Reranker, tier: self.reranker_tier, value }
        } else if let Some(estimate) = self.estimate {
            FinalScore { source: ScoreSource::Estimate, tier: self.estimate_tier, value: estimate.score }
        } else {
            FinalScore { source: ScoreSource::Retrieval, tier: 0, value: self.candidate.score }
        }
    }

    /// The final score's value: the reranker score if there is one, else the estimated reranker score, else the
    /// retrieval score. Values of different sources are on different scales; order items with
    /// [`cmp_final`], which compares scales first.
    #[must_use]
    pub fn final_score(&self) -> f32 {
        self.final_rank_score().value
    }
}

/// The one final order of the pool: higher scale tier first, then higher score, then lower initial rank, then
/// lower id. Deterministic for any scores (NaN cannot enter the pool).
#[must_use]
pub fn cmp_final(a: &PoolItem, b: &PoolItem) -> Ordering {
    let (fa, fb) = (a.final_rank_score(), b.final_rank_score());
    fb.tier
        .cmp(&fa.tier)
        .then_with(|| fb.value.total_cmp(&fa.value))
        .then_with(|| a.initial_rank.cmp(&b.initial_rank))
        .then_with(|| a.id().cmp(b.id()))
}

/// The scheduling order: higher priority first, ties by lower initial rank, then lower id (invariant 6).
#[must_use]
pub fn cmp_priority(a: &PoolItem, b: &PoolItem) -> Ordering {
    b.priority_value
        .total_cmp(&a.priority_value)
        .then_with(|| a.initial_rank.cmp(&b.initial_rank))
        .then_with(|| a.id().cmp(b.id()))
}

/// Renders items as a numbered ranking, one per line: `1. doc-17  0.8123  (reranker-name)`.
///
/// The parenthesis names the score's source: the reranker's name, `estimate` or `retrieval`.
#[must_use]
pub fn render_ranking<'a>(items: impl IntoIterator<Item = &'a PoolItem>) -> String {
    let mut out = String::new();
    for (i, item) in items.into_iter().enumerate() {
        let f = item.final_rank_score();
        let source = match f.source {
            ScoreSource::Reranker => item.reranker_strategy().unwrap_or("reranker"),
            ScoreSource::Estimate => "estimate",
            ScoreSource::Retrieval => "retrieval",
        };
        let _ = writeln!(out, "{}. {}  {:.4}  ({source})", i + 1, item.id(), f.value);
    }
    out
}

/// What an estimator says about one item: written into the pool by the controller.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The value of reranking this item next; schedulers take higher values first.
    pub priority: f32,
    /// The predicted reranker score on the valuation's scale, if the estimator can predict one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    /// A plausible upper bound of the reranker score (early stopping uses it); defaults to `score`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper: Option<f32>,
}

impl Estimate {
    /// A priority without a score prediction.
    #[must_use]
    pub fn priority(priority: f32) -> Self {
        Self { priority, score: None, upper: None }
    }
}

/// An estimator's output for one iteration: an [`Estimate`] per item and the scale the predicted scores are on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Valuation {
    /// The reranker whose scale the predicted scores are on; `None` when no estimate predicts a score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<String>,
    /// One estimate per valued item, by id.
    pub estimates: Vec<(String, Estimate)>,
    /// What the estimator wants recorded in the trace (fit quality, evidence size).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub notes: BTreeMap<String, serde_json::Value>,
}

/// Every candidate of one request, keyed by chunk id, with validated state transitions.
///
/// Items keep the order of the list the pool was built from ([`items`](Self::items)); lookups by id are O(1).
#[derive(Debug, Clone, Default)]
pub struct CandidatePool {
    items: Vec<PoolItem>,
    index: HashMap<String, usize>,
    ladder: Vec<String>,
    estimate_scale: Option<String>,
}

impl CandidatePool {
    /// A pool of `candidates` in the given order: ranks are 1-based positions, every item starts as
    /// [`ItemState::Candidate`] with its retrieval score as priority.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for two candidates with the same chunk id (identity
    /// must be unique; merge unions before building the pool) or a non-finite retrieval score.
    pub fn new(candidates: Vec<Candidate>) -> Result<Self> {
        let mut items = Vec::with_capacity(candidates.len());
        let mut index = HashMap::with_capacity(candidates.len());
        for (i, candidate) in candidates.into_iter().enumerate() {
            if !candidate.score.is_finite() {
                return Err(Error::invalid_input(format!(
                    "candidate `{}` has a non-finite retrieval score",
                    candidate.chunk.id
                )));
            }
            if index.insert(candidate.chunk.id.clone(), i).is_some() {
                return Err(Error::invalid_input(format!(
                    "candidate `{}` appears twice; a pool needs unique ids (merge the lists first)",
                    candidate.chunk.id
                )));
            }
            items.push(PoolItem {
                priority_value: candidate.score,
                candidate,
                initial_rank: u32::try_from(i + 1).unwrap_or(u32::MAX),
                state: ItemState::Candidate,
                estimate: None,
                estimate_tier: 0,
                reranker_score: None,
                reranker_strategy: None,
                reranker_tier: 0,
                sent_to: None,
            });
        }
        Ok(Self { items, index, ladder: Vec::new(), estimate_scale: None })
    }

    /// Sets the reranker ladder, least trusted (cheapest) first: the scale of `ladder[i]` gets tier `i + 1` in the
    /// final order. A reranker not in the ladder gets tier 1. The controller sets this from its rerankers.
    pub fn set_ladder(&mut self, ladder: Vec<String>) {
        self.ladder = ladder;
        for item in &mut self.items {
            if let Some(s) = &item.reranker_strategy {
                item.reranker_tier = tier_of(&self.ladder, s);
            }
            if item.estimate.is_some() {
                item.estimate_tier = self.estimate_scale.as_deref().map_or(1, |s| tier_of(&self.ladder, s));
            }
        }
    }

    /// The reranker ladder, least trusted first.
    #[must_use]
    pub fn ladder(&self) -> &[String] {
        &self.ladder
    }

    /// The tier of a reranker's scale in the final order (`1 + ladder index`; 1 when not in the ladder).
    #[must_use]
    pub fn tier(&self, strategy: &str) -> u32 {
        tier_of(&self.ladder, strategy)
    }

    /// The scale of the current estimates (the reranker they predict), if any.
    #[must_use]
    pub fn estimate_scale(&self) -> Option<&str> {
        self.estimate_scale.as_deref()
    }

    /// Number of items.
    #[must_use]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the pool has no items.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Every item in initial order.
    #[must_use]
    pub fn items(&self) -> &[PoolItem] {
        &self.items
    }

    /// The item with this id.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<&PoolItem> {
        self.index.get(id).map(|&i| &self.items[i])
    }

    /// Items in `state`, in initial order.
    pub fn in_state(&self, state: ItemState) -> impl Iterator<Item = &PoolItem> {
        self.items.iter().filter(move |it| it.state == state)
    }

    /// How many items are in `state`.
    #[must_use]
    pub fn count(&self, state: ItemState) -> usize {
        self.in_state(state).count()
    }

    /// Items the scheduler may select (`CANDIDATE`), in initial order.
    pub fn eligible(&self) -> impl Iterator<Item = &PoolItem> {
        self.in_state(ItemState::Candidate)
    }

    /// Items the assembler may see (`CANDIDATE` or `RERANKED`), in initial order (invariant 5).
    pub fn active_items(&self) -> impl Iterator<Item = &PoolItem> {
        self.items.iter().filter(|it| it.state.is_active())
    }

    /// The active items in the final order ([`cmp_final`]).
    #[must_use]
    pub fn final_ranking(&self) -> Vec<&PoolItem> {
        let mut out: Vec<&PoolItem> = self.active_items().collect();
        out.sort_by(|a, b| cmp_final(a, b));
        out
    }

    /// The eligible items in scheduling order ([`cmp_priority`]).
    #[must_use]
    pub fn by_priority(&self) -> Vec<&PoolItem> {
        let mut out: Vec<&PoolItem> = self.eligible().collect();
        out.sort_by(|a, b| cmp_priority(a, b));
        out
    }

    /// The `n`-th highest reranker score (1-based) among items reranked by `strategy` that are not dropped.
    #[must_use]
    pub fn kth_reranked_score(&self, strategy: &str, n: usize) -> Option<f32> {
        if n == 0 {
            return None;
        }
        let mut scores: Vec<f32> = self
            .in_state(ItemState::Reranked)
            .filter(|it| it.reranker_strategy.as_deref() == Some(strategy))
            .filter_map(|it| it.reranker_score)
            .collect();
        if scores.len() < n {
            return None;
        }
        scores.select_nth_unstable_by(n - 1, |a, b| b.total_cmp(a));
        Some(scores[n - 1])
    }

    fn position(&self, id: &str) -> Result<usize> {
        self.index.get(id).copied().ok_or_else(|| Error::invalid_input(format!("no document `{id}` in the pool")))
    }

    /// Positions of `ids`, refusing unknown and repeated ids.
    fn positions<S: AsRef<str>>(&self, ids: &[S]) -> Result<Vec<usize>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let p = self.position(id.as_ref())?;
            if out.contains(&p) {
                return Err(Error::invalid_input(format!(
                    "document `{}` is named twice in one transition",
                    id.as_ref()
                )));
            }
            out.push(p);
        }
        Ok(out)
    }

    /// Moves every item in `ids` to `target`, after checking that each move is legal; all or nothing.
    ///
    /// Legal moves: `CANDIDATE → IN_FLIGHT`, `CANDIDATE → DROPPED`, `IN_FLIGHT → DROPPED`, `RERANKED → DROPPED`.
    /// `IN_FLIGHT → RERANKED` goes through [`update_scores`](Self::update_scores).
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming the first illegal move, unknown id or
    /// repeated id; the pool is unchanged.
    pub fn transition<S: AsRef<str>>(&mut self, ids: &[S], target: ItemState) -> Result<()> {
        let positions = self.positions(ids)?;
        for &p in &positions {
            let item = &self.items[p];
            if !item.state.can_transition_to(target) {
                let why = match (item.state, target) {
                    (ItemState::InFlight, ItemState::Reranked) => " (record the score with update_scores)",
                    (ItemState::Reranked, ItemState::InFlight | ItemState::Candidate) => {
                        " (a reranked document is never reranked again)"
                    }
                    (_, ItemState::Candidate) => " (a document never re-enters the candidates)",
                    _ => "",
                };
                return Err(Error::invalid_input(format!(
                    "illegal transition of `{}`: {} -> {target}{why}",
                    item.id(),
                    item.state
                )));
            }
        }
        for p in positions {
            let item = &mut self.items[p];
            item.state = target;
            if target != ItemState::Candidate {
                item.estimate = None;
            }
        }
        Ok(())
    }

    /// Moves `ids` from `CANDIDATE` to `IN_FLIGHT` for a call to `strategy`, recording where each was sent
    /// ([`PoolItem::sent_to`]); all or nothing.
    ///
    /// # Errors
    /// As [`transition`](Self::transition).
    pub fn send<S: AsRef<str>>(&mut self, ids: &[S], strategy: &str) -> Result<()> {
        self.transition(ids, ItemState::InFlight)?;
        for id in ids {
            if let Some(&p) = self.index.get(id.as_ref()) {
                self.items[p].sent_to = Some(strategy.to_owned());
            }
        }
        Ok(())
    }

    /// How many items were sent to `strategy` (in flight, reranked or dropped after it).
    #[must_use]
    pub fn sent_count(&self, strategy: &str) -> usize {
        self.items.iter().filter(|it| it.sent_to.as_deref() == Some(strategy)).count()
    }

    /// Records reranker scores for items that are `IN_FLIGHT` and moves them to `RERANKED`; all or nothing.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for an item that is not in flight (invariant 7: no
    /// double counting), an unknown or repeated id, or a non-finite score; the pool is unchanged.
    pub fn update_scores<S: AsRef<str>>(&mut self, strategy: &str, scores: &[(S, f32)]) -> Result<()> {
        let ids: Vec<&str> = scores.iter().map(|(id, _)| id.as_ref()).collect();
        let positions = self.positions(&ids)?;
        for (&p, (id, score)) in positions.iter().zip(scores) {
            let item = &self.items[p];
            if item.state != ItemState::InFlight {
                return Err(Error::invalid_input(format!(
                    "illegal transition of `{}`: {} -> reranked (only documents in flight receive scores)",
                    id.as_ref(),
                    item.state
                )));
            }
            if !score.is_finite() {
                return Err(Error::invalid_input(format!(
                    "reranker `{strategy}` gave `{}` a non-finite score",
                    id.as_ref()
                )));
            }
        }
        let tier = self.tier(strategy);
        for (p, (_, score)) in positions.into_iter().zip(scores) {
            let item = &mut self.items[p];
            item.state = ItemState::Reranked;
            item.reranker_score = Some(*score);
            item.reranker_strategy = Some(strategy.to_owned());
            item.reranker_tier = tier;
            item.estimate = None;
        }
        Ok(())
    }

    /// Writes an estimator's valuation into the candidates (the controller's step 1).
    ///
    /// Every candidate's previous estimate is cleared first, so estimates are always on the valuation's scale;
    /// a candidate the valuation does not mention keeps its priority. Items that are not candidates are left
    /// alone (estimates only matter for what can still be scheduled or is unreranked).
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for an unknown id, a non-finite value, or a score
    /// without a scale; the pool is unchanged.
    pub fn apply_valuation(&mut self, valuation: &Valuation) -> Result<()> {
        let mut positions = Vec::with_capacity(valuation.estimates.len());
        for (id, e) in &valuation.estimates {
            let p = self.position(id)?;
            let finite =
                e.priority.is_finite() && e.score.is_none_or(f32::is_finite) && e.upper.is_none_or(f32::is_finite);
            if !finite {
                return Err(Error::invalid_input(format!("the estimate of `{id}` is not finite")));
            }
            if e.score.is_some() && valuation.scale.is_none() {
                return Err(Error::invalid_input(format!(
                    "the estimate of `{id}` predicts a score but the valuation names no scale"
                )));
            }
            positions.push(p);
        }
        let tier = valuation.scale.as_deref().map_or(0, |s| self.tier(s));
        self.estimate_scale.clone_from(&valuation.scale);
        for item in &mut self.items {
            if item.state == ItemState::Candidate {
                item.estimate = None;
            }
        }
        for (p, (_, e)) in positions.into_iter().zip(&valuation.estimates) {
            let item = &mut self.items[p];
            if item.state != ItemState::Candidate {
                continue;
            }
            item.priority_value = e.priority;
            item.estimate = e.score.map(|score| ScoreEstimate { score, upper: e.upper.unwrap_or(score).max(score) });
            item.estimate_tier = tier;
        }
        Ok(())
    }
}

fn tier_of(ladder: &[String], strategy: &str) -> u32 {
    ladder.iter().position(|s| s == strategy).map_or(1, |i| u32::try_from(i + 1).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::ScoredHit;

    fn pool(scores: &[f32]) -> CandidatePool {
        let candidates = scores
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let id = format!("d{i}");
                Candidate::from_hit(ScoredHit { chunk: Chunk::new(&id, &id, &id), score: s }, "bm25", 1 + i as u32)
            })
            .collect();
        CandidatePool::new(candidates).expect("valid pool")
    }

    /// Applies `ops` in order and renders the final states and either `ok` or the error of each op.
    fn check(ops: &[(&[&str], Option<ItemState>)], expect: &str) {
        let mut p = pool(&[0.9, 0.8, 0.7]);
        let mut out = String::new();
        for (ids, target) in ops {
            let r = match target {
                Some(t) => p.transition(ids, *t),
                None => p.update_scores("ce", &ids.iter().map(|id| (*id, 1.0)).collect::<Vec<_>>()),
            };
            out.push_str(&match r {
                Ok(()) => "ok\n".to_owned(),
                Err(e) => format!("{}\n", e.message()),
            });
        }
        for it in p.items() {
            let _ = writeln!(out, "{} {}", it.id(), it.state());
        }
        assert_eq!(out.trim_end(), expect.trim(), "ops: {ops:?}");
    }

    #[test]
    fn legal_transitions_follow_the_state_machine() {
        check(
            &[(&["d0", "d1"], Some(ItemState::InFlight)), (&["d0"], None), (&["d1"], Some(ItemState::Dropped))],
            "ok\nok\nok\nd0 reranked\nd1 dropped\nd2 candidate",
        );
        check(&[(&["d2"], Some(ItemState::Dropped))], "ok\nd0 candidate\nd1 candidate\nd2 dropped");
        check(
            &[(&["d0"], Some(ItemState::InFlight)), (&["d0"], None), (&["d0"], Some(ItemState::Dropped))],
            "ok\nok\nok\nd0 dropped\nd1 candidate\nd2 candidate",
        );
    }

    #[test]
    fn illegal_transitions_are_errors_and_change_nothing() {
        check(
            &[(&["d0"], Some(ItemState::InFlight)), (&["d0"], None), (&["d0", "d1"], Some(ItemState::InFlight))],
            "ok\nok\nillegal transition of `d0`: reranked -> in_flight (a reranked document is never reranked again)\n\
             d0 reranked\nd1 candidate\nd2 candidate",
        );
        check(
            &[(&["d1"], Some(ItemState::Dropped)), (&["d1"], Some(ItemState::Candidate))],
            "ok\nillegal transition of `d1`: dropped -> candidate (a document never re-enters the candidates)\n\
             d0 candidate\nd1 dropped\nd2 candidate",
        );
        check(
            &[(&["d0"], None)],
            "illegal transition of `d0`: candidate -> reranked (only documents in flight receive scores)\n\
             d0 candidate\nd1 candidate\nd2 candidate",
        );
        check(
            &[(&["d0"], Some(ItemState::InFlight)), (&["d0"], Some(ItemState::Reranked))],
            "ok\nillegal transition of `d0`: in_flight -> reranked (record the score with update_scores)\n\
             d0 in_flight\nd1 candidate\nd2 candidate",
        );
        check(
            &[(&["d0", "d0"], Some(ItemState::InFlight)), (&["x"], Some(ItemState::Dropped))],
            "document `d0` is named twice in one transition\nno document `x` in the pool\n\
             d0 candidate\nd1 candidate\nd2 candidate",
        );
    }

    #[test]
    fn pools_refuse_duplicate_ids_and_nan_scores() {
        let c = |id: &str, s: f32| Candidate::from_hit(ScoredHit { chunk: Chunk::new(id, id, id), score: s }, "x", 1);
        assert!(CandidatePool::new(vec![c("a", 1.0), c("a", 0.5)]).unwrap_err().message().contains("twice"));
        assert!(CandidatePool::new(vec![c("a", f32::NAN)]).unwrap_err().message().contains("non-finite"));
    }

    #[test]
    fn final_order_puts_reranker_scales_above_retrieval_and_interleaves_estimates() {
        let mut p = pool(&[0.9, 0.8, 0.7, 0.6]);
        p.set_ladder(vec!["ce".into()]);
        p.transition(&["d1", "d2"], ItemState::InFlight).unwrap();
        p.update_scores("ce", &[("d1", 2.0), ("d2", -1.0)]).unwrap();
        assert_eq!(
            render_ranking(p.final_ranking()),
            "1. d1  2.0000  (ce)\n2. d2  -1.0000  (ce)\n3. d0  0.9000  (retrieval)\n4. d3  0.6000  (retrieval)\n"
        );
        let valuation = Valuation {
            scale: Some("ce".into()),
            estimates: vec![
                ("d0".into(), Estimate { priority: 1.0, score: Some(0.5), upper: Some(3.0) }),
                ("d3".into(), Estimate { priority: 2.0, score: Some(-2.0), upper: None }),
            ],
            notes: BTreeMap::new(),
        };
        p.apply_valuation(&valuation).unwrap();
        assert_eq!(
            render_ranking(p.final_ranking()),
            "1. d1  2.0000  (ce)\n2. d0  0.5000  (estimate)\n3. d2  -1.0000  (ce)\n4. d3  -2.0000  (estimate)\n"
        );
        assert_eq!(p.get("d3").unwrap().estimate().unwrap().upper, -2.0);
        assert_eq!(p.by_priority().iter().map(|it| it.id()).collect::<Vec<_>>(), ["d3", "d0"]);
        assert_eq!(p.kth_reranked_score("ce", 2), Some(-1.0));
        assert_eq!(p.kth_reranked_score("ce", 3), None);
    }

    #[test]
    fn a_more_trusted_reranker_ranks_above_a_cheaper_one() {
        let mut p = pool(&[0.9, 0.8]);
        p.set_ladder(vec!["cheap".into(), "llm".into()]);
        p.transition(&["d0", "d1"], ItemState::InFlight).unwrap();
        p.update_scores("cheap", &[("d0", 9.0)]).unwrap();
        p.update_scores("llm", &[("d1", 1.0)]).unwrap();
        assert_eq!(render_ranking(p.final_ranking()), "1. d1  1.0000  (llm)\n2. d0  9.0000  (cheap)\n");
    }

    #[test]
    fn valuations_are_validated() {
        let mut p = pool(&[0.9]);
        let bad = |priority: f32, score: Option<f32>, scale: Option<&str>| Valuation {
            scale: scale.map(str::to_owned),
            estimates: vec![("d0".into(), Estimate { priority, score, upper: None })],
            notes: BTreeMap::new(),
        };
        assert!(p.apply_valuation(&bad(f32::NAN, None, None)).is_err());
        assert!(p.apply_valuation(&bad(1.0, Some(1.0), None)).is_err());
        assert!(p.apply_valuation(&bad(1.0, Some(f32::INFINITY), Some("ce"))).is_err());
        let mut unknown = bad(1.0, None, None);
        unknown.estimates[0].0 = "nope".into();
        assert!(p.apply_valuation(&unknown).is_err());
        assert_eq!(p.get("d0").unwrap().priority_value(), 0.9, "a refused valuation changes nothing");
    }
}
