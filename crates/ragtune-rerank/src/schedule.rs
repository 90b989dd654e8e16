//! Schedulers: turn the valued pool and a snapshot of the budget into the next batch, or a reason to stop.

use std::fmt::{self, Debug};
use std::time::Duration;

use ragtune_core::{Cost, CostModel};
use serde::{Deserialize, Serialize};

use crate::pool::{CandidatePool, ItemState, PoolItem};

/// Why reranking stopped (the controller's report) or why a scheduler proposes nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// No candidate is left to rerank.
    NoCandidates,
    /// The next batch's expected cost does not fit what is left of the budget.
    BudgetExhausted,
    /// The deadline passed, or not even one document's expected time fits before it.
    Deadline,
    /// The request was cancelled.
    Cancelled,
    /// No remaining candidate can plausibly enter the top-k: reranking more cannot change it.
    Converged,
    /// The scheduler's configured depth or quotas are used up.
    DepthReached,
    /// The controller's iteration limit was reached.
    IterationLimit,
    /// A reranker reported spending more than its declared cost model allows; the controller stopped so that
    /// the budget is not overrun again.
    Overrun,
}

impl StopReason {
    /// A stable snake-case name for traces.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoCandidates => "no_candidates",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Deadline => "deadline",
            Self::Cancelled => "cancelled",
            Self::Converged => "converged",
            Self::DepthReached => "depth_reached",
            Self::IterationLimit => "iteration_limit",
            Self::Overrun => "overrun",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A read-only snapshot of the budget, taken by the controller before each scheduling step (invariant 4: the
/// scheduler sees a snapshot; the controller alone spends).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BudgetView {
    /// The budget's limit.
    pub limit: Cost,
    /// What was charged so far.
    pub spent: Cost,
    /// What is left (`limit - spent`, per component).
    pub remaining: Cost,
    /// Time left before the deadline, if there is one.
    pub time_left: Option<Duration>,
    /// How many top results matter.
    pub k: usize,
    /// The controller's iteration, from 0.
    pub iteration: usize,
}

/// A reranker as schedulers see it: its name, declared price and place in the trust ladder.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RerankerInfo {
    /// The reranker's [`name`](ragtune_core::Reranker::name), used in proposals.
    pub name: String,
    /// Its declared cost model.
    pub cost_model: CostModel,
    /// Its tier in the final order (1 = cheapest, least trusted).
    pub tier: u32,
}

impl RerankerInfo {
    /// The largest batch of at most `want` documents whose expected cost fits `view.remaining` and whose expected
    /// time (`ms_per_doc` each) fits before the deadline; or why not even one fits.
    ///
    /// # Errors
    /// [`StopReason::BudgetExhausted`] or [`StopReason::Deadline`] when no document fits (or `want` is 0, as
    /// `BudgetExhausted`).
    pub fn fit_batch(&self, view: &BudgetView, want: usize) -> Result<usize, StopReason> {
        let n = affordable(&self.cost_model, view.remaining, want);
        if n == 0 {
            return Err(StopReason::BudgetExhausted);
        }
        let n = match view.time_left {
            Some(left) if self.cost_model.ms_per_doc > 0.0 => {
                let fit = (left.as_secs_f64() * 1000.0 / self.cost_model.ms_per_doc).floor();
                if fit < 1.0 {
                    return Err(StopReason::Deadline);
                }
                // Saturating float-to-int cast: a huge time budget means no time limit on the batch.
                n.min(fit as usize)
            }
            _ => n,
        };
        Ok(n)
    }
}

/// The most documents (up to `want`) whose estimated cost under `model` fits within `remaining`.
#[must_use]
pub fn affordable(model: &CostModel, remaining: Cost, want: usize) -> usize {
    if want == 0 || !model.per_call.fits_within(&remaining) {
        return 0;
    }
    let left = remaining.saturating_sub(&model.per_call);
    let mut n = want as u64;
    for (per, rem) in
        [(model.per_doc.tokens, left.tokens), (model.per_doc.docs, left.docs), (model.per_doc.calls, left.calls)]
    {
        if let Some(fit) = rem.checked_div(per) {
            n = n.min(fit);
        }
    }
    usize::try_from(n).unwrap_or(want)
}

/// The next batch: which candidates, for which reranker, at what expected cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchProposal {
    /// The candidates to rerank, in the scheduler's order.
    pub ids: Vec<String>,
    /// The reranker to send them to.
    pub reranker: String,
    /// The cost the scheduler expects (the controller recomputes it from the cost model before spending).
    pub expected_cost: Cost,
}

/// A scheduler's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Rerank this batch next.
    Rerank(BatchProposal),
    /// Stop reranking.
    Stop(StopReason),
}

/// Picks the next batch from the candidates, or stops.
///
/// A scheduler reads the pool (with the estimator's priorities already written) and a [`BudgetView`]; it never
/// changes the pool and never spends. It may only propose `CANDIDATE` items; the controller refuses anything else
/// with an error. Its choices must be deterministic, with ties broken by initial rank, then id (invariant 6) —
/// [`CandidatePool::by_priority`] is that order.
pub trait Scheduler: Send + Sync + Debug {
    /// The name recorded in reports and traces.
    fn name(&self) -> &str;
    /// Proposes the next batch or stops.
    fn select(&self, pool: &CandidatePool, budget: &BudgetView, rerankers: &[RerankerInfo]) -> Decision;
}

/// Finds the reranker a scheduler was configured with, or the first one. A configured name that the controller
/// does not have is passed through, and the controller refuses the proposal with an error.
fn pick<'a>(rerankers: &'a [RerankerInfo], name: Option<&'a str>) -> Result<&'a RerankerInfo, &'a str> {
    match name {
        Some(n) => rerankers.iter().find(|r| r.name == n).ok_or(n),
        None => rerankers.first().ok_or(""),
    }
}

fn propose(info: &RerankerInfo, items: &[&PoolItem]) -> Decision {
    Decision::Rerank(BatchProposal {
        ids: items.iter().map(|it| it.id().to_owned()).collect(),
        reranker: info.name.clone(),
        expected_cost: info.cost_model.estimate(items.len()),
    })
}

/// A proposal for a reranker the controller does not know; the controller turns it into an error.
fn unknown(name: &str, items: &[&PoolItem]) -> Decision {
    Decision::Rerank(BatchProposal {
        ids: items.iter().take(1).map(|it| it.id().to_owned()).collect(),
        reranker: name.to_owned(),
        expected_cost: Cost::ZERO,
    })
}

/// How many items have left `CANDIDATE` (sent to a reranker or dropped).
fn consumed(pool: &CandidatePool) -> usize {
    pool.len() - pool.count(ItemState::Candidate)
}

/// Settings shared by the single-reranker schedulers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchConfig {
    /// The reranker to use (by name); the controller's first reranker when `None`.
    pub reranker: Option<String>,
    /// Documents per batch (at least 1).
    pub batch_size: usize,
    /// The most documents that may leave `CANDIDATE` in one request (reranked or dropped); no limit when `None`.
    pub depth: Option<usize>,
    /// Offer one passage per document first ([`documents_first`]): a document's first passage in priority order
    /// before any second passage of a document already offered.
    pub documents_first: bool,
}

impl Default for BatchConfig {
    fn default() -> Self {
        // Documents first: docs/experiments/2026-11-29-reranker.md, "One passage per document".
        Self { reranker: None, batch_size: 8, depth: None, documents_first: true }
    }
}

/// `eligible` (in priority order) with one passage per document first: each document none of whose passages has
/// left `CANDIDATE`, at its passage of highest priority; then the remaining passages, in priority order. Rankings
/// are read per document, so a second passage of a document already scored rarely moves it, while an unscored
/// document can only be placed by scoring it.
#[must_use]
pub fn documents_first<'a>(pool: &'a CandidatePool, eligible: Vec<&'a PoolItem>) -> Vec<&'a PoolItem> {
    let mut covered: std::collections::HashSet<&str> = pool
        .items()
        .iter()
        .filter(|it| it.state() != ItemState::Candidate)
        .map(|it| it.chunk().doc_id.as_str())
        .collect();
    let (mut first, mut rest) = (Vec::with_capacity(eligible.len()), Vec::new());
    for item in eligible {
        if covered.insert(item.chunk().doc_id.as_str()) {
            first.push(item);
        } else {
            rest.push(item);
        }
    }
    first.extend(rest);
    first
}

/// The candidates a scheduler offers, in the order it offers them: by priority, documents first when configured.
fn offered<'a>(config: &BatchConfig, pool: &'a CandidatePool, eligible: Vec<&'a PoolItem>) -> Vec<&'a PoolItem> {
    if config.documents_first { documents_first(pool, eligible) } else { eligible }
}

/// Highest priority first, in batches of `batch_size`, until the candidates, the depth or the budget run out.
#[derive(Debug, Clone, Default)]
pub struct GreedyScheduler {
    /// Settings.
    pub config: BatchConfig,
}

impl GreedyScheduler {
    /// A greedy scheduler with `config`.
    #[must_use]
    pub fn new(config: BatchConfig) -> Self {
        Self { config }
    }
}

/// The batch size left after the depth limit, or `DepthReached`.
fn want(config: &BatchConfig, pool: &CandidatePool) -> Result<usize, StopReason> {
    let left = config.depth.map_or(usize::MAX, |d| d.saturating_sub(consumed(pool)));
    if left == 0 {
        return Err(StopReason::DepthReached);
    }
    Ok(config.batch_size.max(1).min(left))
}

impl Scheduler for GreedyScheduler {
    fn name(&self) -> &str {
        "greedy"
    }

    fn select(&self, pool: &CandidatePool, budget: &BudgetView, rerankers: &[RerankerInfo]) -> Decision {
        let eligible = offered(&self.config, pool, pool.by_priority());
        if eligible.is_empty() {
            return Decision::Stop(StopReason::NoCandidates);
        }
        let info = match pick(rerankers, self.config.reranker.as_deref()) {
            Ok(info) => info,
            Err(name) => return unknown(name, &eligible),
        };
        let n = match want(&self.config, pool).and_then(|w| info.fit_batch(budget, w)) {
            Ok(n) => n,
            Err(reason) => return Decision::Stop(reason),
        };
        propose(info, &eligible[..n.min(eligible.len())])
    }
}

/// The score a candidate must be able to reach to matter: the k-th highest reranker score on the estimates'
/// scale, once at least `k` items are reranked on it.
fn top_k_bound(pool: &CandidatePool, k: usize) -> Option<f32> {
    pool.kth_reranked_score(pool.estimate_scale()?, k.max(1))
}

/// Whether a candidate can plausibly enter the top-k: it has no estimate (nothing is known against it), or its
/// estimated upper bound reaches the bound.
fn plausible(item: &PoolItem, bound: Option<f32>) -> bool {
    match (bound, item.estimate()) {
        (Some(b), Some(e)) => e.upper >= b,
        _ => true,
    }
}

/// Like [`GreedyScheduler`], but stops as soon as no remaining candidate can plausibly enter the top-k.
///
/// The rule: once `k` items are reranked on the estimates' scale, a candidate whose estimated upper bound (from
/// [`DynamicEstimator`](crate::DynamicEstimator) or [`UncertaintyEstimator`](crate::UncertaintyEstimator)) lies
/// below the k-th reranked score cannot enter the top-k, so it is skipped; when every candidate is skipped, the
/// scheduler stops with [`StopReason::Converged`] and the rest of the budget is saved. Candidates without an
/// estimate always count as plausible, so with [`BaselineEstimator`](crate::BaselineEstimator) it never stops
/// early.
#[derive(Debug, Clone, Default)]
pub struct UncertaintyScheduler {
    /// Settings.
    pub config: BatchConfig,
}

impl UncertaintyScheduler {
    /// A scheduler with `config`.
    #[must_use]
    pub fn new(config: BatchConfig) -> Self {
        Self { config }
    }
}

impl Scheduler for UncertaintyScheduler {
    fn name(&self) -> &str {
        "uncertainty"
    }

    fn select(&self, pool: &CandidatePool, budget: &BudgetView, rerankers: &[RerankerInfo]) -> Decision {
        let eligible = pool.by_priority();
        if eligible.is_empty() {
            return Decision::Stop(StopReason::NoCandidates);
        }
        let bound = top_k_bound(pool, budget.k);
        let contenders: Vec<&PoolItem> =
            offered(&self.config, pool, eligible.iter().copied().filter(|it| plausible(it, bound)).collect());
        if contenders.is_empty() {
            return Decision::Stop(StopReason::Converged);
        }
        let info = match pick(rerankers, self.config.reranker.as_deref()) {
            Ok(info) => info,
            Err(name) => return unknown(name, &contenders),
        };
        let n = match want(&self.config, pool).and_then(|w| info.fit_batch(budget, w)) {
            Ok(n) => n,
            Err(reason) => return Decision::Stop(reason),
        };
        propose(info, &contenders[..n.min(contenders.len())])
    }
}

/// One rung of an [`EscalationScheduler`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscalationLevel {
    /// The reranker (by name).
    pub reranker: String,
    /// The most documents this reranker may be sent in one request.
    pub quota: usize,
    /// Documents per batch (at least 1).
    pub batch_size: usize,
}

impl EscalationLevel {
    /// A level for `reranker` with `quota` documents in batches of `batch_size`.
    pub fn new(reranker: impl Into<String>, quota: usize, batch_size: usize) -> Self {
        Self { reranker: reranker.into(), quota, batch_size }
    }
}

/// Several rerankers of rising cost: cheap ones first over a wider set, the expensive one only for the
/// contested head.
///
/// Levels are listed cheapest first. Each document is reranked once (invariant: never double-reranked), so the
/// levels split the plausible candidates by priority: the top of the priority order is reserved for the more
/// expensive levels (as many documents as their remaining quotas), and a cheaper level works below that
/// reservation, within its own quota. Cheaper levels go first; their scores calibrate the estimator, so by the
/// time the expensive level runs, the head it reranks is the contested one (with
/// [`UncertaintyEstimator`](crate::UncertaintyEstimator), the candidates closest to the top-k boundary).
///
/// A level that cannot afford even one document (budget or deadline) releases its reservation, so a cheaper
/// level takes the head instead of leaving it unreranked. Like [`UncertaintyScheduler`] it only considers
/// candidates that can plausibly enter the top-k and stops with [`StopReason::Converged`] when none can; it
/// stops with [`StopReason::DepthReached`] when every quota is used.
///
/// The final order ranks the most trusted (last) level's scores above the cheaper ones' (see
/// [`FinalScore`](crate::FinalScore)), which is the shape of a classic cascade.
#[derive(Debug, Clone, Default)]
pub struct EscalationScheduler {
    /// The levels, cheapest first.
    pub levels: Vec<EscalationLevel>,
}

impl EscalationScheduler {
    /// A scheduler over `levels`, cheapest first.
    #[must_use]
    pub fn new(levels: Vec<EscalationLevel>) -> Self {
        Self { levels }
    }
}

impl Scheduler for EscalationScheduler {
    fn name(&self) -> &str {
        "escalation"
    }

    fn select(&self, pool: &CandidatePool, budget: &BudgetView, rerankers: &[RerankerInfo]) -> Decision {
        let eligible = pool.by_priority();
        if eligible.is_empty() {
            return Decision::Stop(StopReason::NoCandidates);
        }
        let bound = top_k_bound(pool, budget.k);
        let contenders: Vec<&PoolItem> = eligible.iter().copied().filter(|it| plausible(it, bound)).collect();
        if contenders.is_empty() {
            return Decision::Stop(StopReason::Converged);
        }
        // Per level: the remaining quota and what one batch could hold, or why it cannot run.
        let mut open: Vec<Result<(usize, usize, &RerankerInfo), StopReason>> = Vec::with_capacity(self.levels.len());
        for level in &self.levels {
            let Some(info) = rerankers.iter().find(|r| r.name == level.reranker) else {
                return unknown(&level.reranker, &contenders);
            };
            let quota = level.quota.saturating_sub(pool.sent_count(&level.reranker));
            open.push(if quota == 0 {
                Err(StopReason::DepthReached)
            } else {
                info.fit_batch(budget, level.batch_size.max(1).min(quota)).map(|n| (quota, n, info))
            });
        }
        for (i, level) in open.iter().enumerate() {
            let Ok((_, n, info)) = level else { continue };
            let reserved: usize = open[i + 1..].iter().filter_map(|l| l.as_ref().ok()).map(|l| l.0).sum();
            let batch: Vec<&PoolItem> = contenders.iter().copied().skip(reserved).take(*n).collect();
            if !batch.is_empty() {
                return propose(info, &batch);
            }
        }
        // Nothing to propose: every quota is used, or the open levels cannot pay (the most expensive reason
        // wins), or everything left is reserved for levels that cannot run.
        let reasons: Vec<StopReason> = open.iter().filter_map(|l| l.as_ref().err().copied()).collect();
        if reasons.is_empty() {
            return Decision::Stop(StopReason::Converged);
        }
        if reasons.iter().all(|r| *r == StopReason::DepthReached) {
            return Decision::Stop(StopReason::DepthReached);
        }
        Decision::Stop(
            reasons.into_iter().rev().find(|r| *r != StopReason::DepthReached).unwrap_or(StopReason::BudgetExhausted),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::pool::{Estimate, Valuation};
    use ragtune_core::{Candidate, Chunk, ScoredHit};

    fn pool(n: usize) -> CandidatePool {
        let candidates = (0..n)
            .map(|i| {
                let id = format!("d{i}");
                // Pairs of equal scores, so ties must break by initial rank.
                let score = 1.0 - (i / 2) as f32 * 0.1;
                Candidate::from_hit(ScoredHit { chunk: Chunk::new(&id, &id, &id), score }, "bm25", 1 + i as u32)
            })
            .collect();
        CandidatePool::new(candidates).unwrap()
    }

    fn info(name: &str, per_doc: Cost) -> RerankerInfo {
        RerankerInfo {
            name: name.into(),
            cost_model: CostModel { per_call: Cost::new(0, 0, 1), per_doc, ms_per_doc: 0.0 },
            tier: 1,
        }
    }

    fn view(remaining: Cost, k: usize) -> BudgetView {
        BudgetView { limit: remaining, spent: Cost::ZERO, remaining, time_left: None, k, iteration: 0 }
    }

    fn render(d: &Decision) -> String {
        match d {
            Decision::Rerank(p) => format!("{} {}", p.reranker, p.ids.join(",")),
            Decision::Stop(r) => format!("stop {r}"),
        }
    }

    /// Runs `scheduler` on `pool` with `remaining` budget and checks its decision, rendered as
    /// `reranker id,id,...` or `stop reason`.
    fn check(scheduler: &dyn Scheduler, pool: &CandidatePool, remaining: Cost, infos: &[RerankerInfo], expect: &str) {
        assert_eq!(render(&scheduler.select(pool, &view(remaining, 2), infos)), expect, "{}", scheduler.name());
    }

    #[test]
    fn greedy_takes_the_highest_priorities_and_breaks_ties_by_rank() {
        let p = pool(5);
        let ce = [info("ce", Cost::new(0, 1, 0))];
        let greedy = GreedyScheduler::new(BatchConfig { batch_size: 3, ..BatchConfig::default() });
        check(&greedy, &p, Cost::new(0, 10, 10), &ce, "ce d0,d1,d2");
        check(&greedy, &p, Cost::new(0, 2, 10), &ce, "ce d0,d1");
        check(&greedy, &p, Cost::new(0, 0, 10), &ce, "stop budget_exhausted");
        check(&greedy, &p, Cost::new(0, 10, 0), &ce, "stop budget_exhausted");
        let shallow = GreedyScheduler::new(BatchConfig { batch_size: 3, depth: Some(0), ..BatchConfig::default() });
        check(&shallow, &p, Cost::new(0, 10, 10), &ce, "stop depth_reached");
        check(&greedy, &pool(0), Cost::new(0, 10, 10), &ce, "stop no_candidates");
        let named = GreedyScheduler::new(BatchConfig { reranker: Some("llm".into()), ..BatchConfig::default() });
        check(&named, &p, Cost::new(0, 10, 10), &ce, "llm d0");
    }

    /// Passages of documents `docs` (one letter each, in retrieval order), ids `<doc><n>`.
    fn passages(docs: &str) -> CandidatePool {
        let mut seen: BTreeMap<char, usize> = BTreeMap::new();
        let candidates = docs
            .chars()
            .enumerate()
            .map(|(i, d)| {
                let n = seen.entry(d).or_default();
                let id = format!("{d}{n}");
                *n += 1;
                let hit = ScoredHit { chunk: Chunk::new(&id, d.to_string(), &id), score: 1.0 - i as f32 * 0.05 };
                Candidate::from_hit(hit, "bm25", 1 + i as u32)
            })
            .collect();
        CandidatePool::new(candidates).unwrap()
    }

    #[test]
    fn one_passage_per_document_is_offered_before_second_passages() {
        let ce = [info("ce", Cost::new(0, 1, 0))];
        let batch = |documents_first| BatchConfig { batch_size: 3, documents_first, ..BatchConfig::default() };
        let mut p = passages("aabac");
        check(&GreedyScheduler::new(batch(true)), &p, Cost::new(0, 10, 10), &ce, "ce a0,b0,c0");
        check(&GreedyScheduler::new(batch(false)), &p, Cost::new(0, 10, 10), &ce, "ce a0,a1,b0");
        check(&UncertaintyScheduler::new(batch(true)), &p, Cost::new(0, 10, 10), &ce, "ce a0,b0,c0");
        // A document with a passage already sent is covered: its other passages wait for every new document.
        p.transition(&["b0"], ItemState::InFlight).unwrap();
        check(&GreedyScheduler::new(batch(true)), &p, Cost::new(0, 10, 10), &ce, "ce a0,c0,a1");
        assert_eq!(
            documents_first(&p, p.by_priority()).iter().map(|it| it.id()).collect::<Vec<_>>(),
            ["a0", "c0", "a1", "a2"]
        );
        assert!(BatchConfig::default().documents_first, "the default offers documents first");
    }

    #[test]
    fn the_deadline_limits_batches_by_expected_time() {
        let mut ce = info("ce", Cost::new(0, 1, 0));
        ce.cost_model.ms_per_doc = 40.0;
        let mut v = view(Cost::new(0, 10, 10), 2);
        v.time_left = Some(Duration::from_millis(100));
        assert_eq!(ce.fit_batch(&v, 8), Ok(2));
        v.time_left = Some(Duration::from_millis(39));
        assert_eq!(ce.fit_batch(&v, 8), Err(StopReason::Deadline));
    }

    #[test]
    fn affordability_respects_every_component() {
        let m = CostModel { per_call: Cost::new(10, 0, 1), per_doc: Cost::new(100, 1, 0), ms_per_doc: 0.0 };
        assert_eq!(affordable(&m, Cost::new(310, 10, 1), 8), 3);
        assert_eq!(affordable(&m, Cost::new(1000, 2, 1), 8), 2);
        assert_eq!(affordable(&m, Cost::new(1000, 10, 0), 8), 0);
        assert_eq!(affordable(&CostModel::FREE, Cost::ZERO, 8), 8);
    }

    /// A pool where d0..d3 are reranked on `ce` with 9, 8, 1, 0 and the rest carry the given upper bounds.
    fn converging_pool(uppers: &[f32]) -> CandidatePool {
        let mut p = pool(4 + uppers.len());
        p.send(&["d0", "d1", "d2", "d3"], "ce").unwrap();
        p.update_scores("ce", &[("d0", 9.0), ("d1", 8.0), ("d2", 1.0), ("d3", 0.0)]).unwrap();
        let estimates = uppers
            .iter()
            .enumerate()
            .map(|(i, &u)| (format!("d{}", i + 4), Estimate { priority: u, score: Some(u - 1.0), upper: Some(u) }))
            .collect();
        p.apply_valuation(&Valuation { scale: Some("ce".into()), estimates, notes: Default::default() }).unwrap();
        p
    }

    #[test]
    fn uncertainty_stops_when_nothing_can_enter_the_top_k() {
        let ce = [info("ce", Cost::new(0, 1, 0))];
        let s = UncertaintyScheduler::new(BatchConfig { batch_size: 4, ..BatchConfig::default() });
        // k = 2: the bound is the 2nd reranked score, 8. Only d5 (upper 8.5) can still reach it.
        check(&s, &converging_pool(&[7.9, 8.5, 3.0]), Cost::new(0, 10, 10), &ce, "ce d5");
        check(&s, &converging_pool(&[7.9, 2.0]), Cost::new(0, 10, 10), &ce, "stop converged");
    }

    #[test]
    fn escalation_sends_the_head_to_the_expensive_reranker_and_the_rest_to_the_cheap_one() {
        let p = pool(10);
        let infos = [info("cheap", Cost::new(0, 1, 0)), info("llm", Cost::new(100, 1, 1))];
        let s = EscalationScheduler::new(vec![EscalationLevel::new("cheap", 6, 4), EscalationLevel::new("llm", 3, 2)]);
        // The top 3 are reserved for the LLM; the cheap reranker goes first, below them.
        check(&s, &p, Cost::new(10_000, 100, 100), &infos, "cheap d3,d4,d5,d6");
        // When the LLM cannot be paid for, its reservation is released and the cheap reranker takes the head.
        check(&s, &p, Cost::new(50, 100, 100), &infos, "cheap d0,d1,d2,d3");
        // Once the cheap quota is used, the LLM takes the head.
        let mut used = pool(10);
        used.send(&["d3", "d4", "d5", "d6", "d7", "d8"], "cheap").unwrap();
        check(&s, &used, Cost::new(10_000, 100, 100), &infos, "llm d0,d1");
        used.send(&["d0", "d1", "d2"], "llm").unwrap();
        check(&s, &used, Cost::new(10_000, 100, 100), &infos, "stop depth_reached");
    }
}
