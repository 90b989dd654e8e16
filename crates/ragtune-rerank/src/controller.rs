//! The controller: the single owner of the budget and of state transitions, running estimate → schedule →
//! rerank until the budget, the deadline, the scheduler or the candidates say stop.

use std::sync::Arc;
use std::time::Instant;

use ragtune_core::{Candidate, Cost, Ctx, Error, ErrorKind, Reranker, Result, SourceScore, TraceEvent, TraceSink};
use serde::Serialize;

use crate::estimate::{EstimateInput, Estimator, UncertaintyEstimator};
use crate::pool::{CandidatePool, ItemState, PoolItem};
use crate::schedule::{BudgetView, Decision, RerankerInfo, Scheduler, StopReason, UncertaintyScheduler};

/// Settings of the [`Controller`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerConfig {
    /// How many top results matter (the `k` estimators and schedulers aim at); at least 1.
    pub k: usize,
    /// The most iterations of one run (a guard; every iteration removes at least one candidate anyway).
    pub max_iterations: usize,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self { k: 10, max_iterations: 10_000 }
    }
}

/// What happened to one batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum BatchOutcome {
    /// The reranker scored every document; they are `RERANKED`.
    Reranked,
    /// The call failed (or returned unusable scores); its documents are `DROPPED` (no retries).
    Failed {
        /// The error's kind.
        kind: String,
        /// The error's message.
        message: String,
    },
}

/// One iteration of the controller loop, as recorded in the [`RerankReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IterationRecord {
    /// The iteration, from 0.
    pub iteration: usize,
    /// The reranker the batch went to.
    pub reranker: String,
    /// The documents of the batch.
    pub docs: Vec<String>,
    /// The cost reserved before the call: the reranker's declared cost model for this many documents.
    pub expected: Cost,
    /// The cost charged after the call: what the reranker reported, or `expected` when it reported nothing.
    pub charged: Cost,
    /// What happened.
    pub outcome: BatchOutcome,
    /// Wall time of the reranker call in microseconds (the only non-deterministic field).
    pub elapsed_us: u64,
}

/// What a controller run did: what it spent, why it stopped, and every batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RerankReport {
    /// The budget the run had (from the context).
    pub limit: Cost,
    /// Everything charged, the sum of the iterations' `charged`.
    pub spent: Cost,
    /// Why the loop ended.
    pub stopped_by: StopReason,
    /// Documents reranked.
    pub reranked: usize,
    /// Documents dropped because their batch failed.
    pub dropped: usize,
    /// Batches whose charged cost exceeded their reservation in some component (a reranker that spent more than
    /// it declared); the run stops after the first.
    pub overruns: usize,
    /// The estimator's name.
    pub estimator: String,
    /// The scheduler's name.
    pub scheduler: String,
    /// Every batch in order.
    pub iterations: Vec<IterationRecord>,
}

/// The result of a run: the pool in its final state and the report. Running out of budget is a normal outcome.
#[derive(Debug, Clone)]
pub struct RerankOutcome {
    /// The pool after the run; no item is left `IN_FLIGHT`.
    pub pool: CandidatePool,
    /// What the run did.
    pub report: RerankReport,
}

impl RerankOutcome {
    /// The active items (`CANDIDATE` or `RERANKED`) in the final order ([`cmp_final`](crate::cmp_final)).
    #[must_use]
    pub fn ranking(&self) -> Vec<&PoolItem> {
        self.pool.final_ranking()
    }

    /// The final ranking as candidates, for the next stage of the pipeline: `score` is the final score, and
    /// reranked candidates gain a `sources` entry for their reranker with its score and its rank among that
    /// reranker's results.
    #[must_use]
    pub fn candidates(&self) -> Vec<Candidate> {
        let ranking = self.ranking();
        let mut seen: Vec<(&str, u32)> = Vec::new();
        ranking
            .into_iter()
            .map(|item| {
                let mut c = item.candidate().clone();
                c.score = item.final_score();
                if let (Some(strategy), Some(score)) = (item.reranker_strategy(), item.reranker_score()) {
                    let rank = match seen.iter_mut().find(|(s, _)| *s == strategy) {
                        Some((_, n)) => {
                            *n += 1;
                            *n
                        }
                        None => {
                            seen.push((strategy, 1));
                            1
                        }
                    };
                    c.sources.insert(strategy.to_owned(), SourceScore { score, rank });
                }
                c
            })
            .collect()
    }
}

/// The budgeted reranking loop (docs/rerank.md): value the pool, let the scheduler propose a batch, spend
/// on it if it fits, record the scores; repeat until something says stop.
///
/// The controller alone spends budget and moves items between states. Per iteration:
///
/// 1. stop when the request is cancelled, its deadline passed, or no candidate is left;
/// 2. the [`Estimator`] values the candidates and the controller writes the valuation into the pool;
/// 3. the [`Scheduler`] sees the pool and a [`BudgetView`] snapshot and proposes a batch or stops;
/// 4. the controller recomputes the batch's expected cost from the reranker's declared
///    [`CostModel`](ragtune_core::CostModel) and trims the batch to the longest prefix whose expected cost fits
///    the remaining budget and whose expected time (`ms_per_doc`) fits before the deadline; if nothing fits, it
///    stops;
/// 5. the batch goes `IN_FLIGHT`, the reranker is called once, and the batch becomes `RERANKED`, or `DROPPED` if
///    the call failed or returned unusable scores (no retries);
/// 6. the batch is charged once: the cost the reranker reported, or the expected cost if it reported none.
///
/// **Budget.** The budget is `ctx.budget`. The controller only dispatches a batch whose *expected* cost fits what
/// is left, so `spent <= limit` holds whenever rerankers spend at most what their cost model declares (the seam's
/// contract: the cost model is the price the controller plans with). The actual cost is read from the `rerank`
/// stage [`TraceEvent`]s the reranker records during the call (the controller gives each call its own trace sink
/// and forwards the events to the caller's); events of other stages, such as an LLM client's own `llm` events
/// inside an LLM reranker, describe the same spending and are not added. A reranker that reports more than it
/// declared is still charged what it reported (spending is never hidden), the batch counts as an overrun, and
/// the run stops at once with [`StopReason::Overrun`], so an overrun is bounded by one batch. The reranker's
/// context carries the batch's reservation as its budget, so budget-aware rerankers (like
/// [`LlmReranker`](crate::LlmReranker)) can refuse to exceed it.
///
/// **Time.** A batch cut off by the deadline or by cancellation fails like any other and is dropped (the no-retry
/// rule of docs/rerank.md's guarantees: an item never returns to `CANDIDATE`); that is why step 4 only dispatches what
/// the reranker's declared `ms_per_doc` says will finish in time.
///
/// **Errors versus stopping.** Running out of budget or time, cancellation and failing rerankers are normal
/// outcomes with a report. Errors are for broken inputs and broken components: duplicate candidate ids, an
/// estimator valuing unknown items, a scheduler proposing an item that is not a candidate or an unknown
/// reranker.
///
/// Trace: one `rerank`/`batch` event per iteration (cost = charged) and one `rerank`/`stop` event at the end.
#[derive(Debug, Clone)]
pub struct Controller {
    rerankers: Vec<Arc<dyn Reranker>>,
    estimator: Arc<dyn Estimator>,
    scheduler: Arc<dyn Scheduler>,
    config: ControllerConfig,
}

impl Controller {
    /// A controller over one reranker with the [`UncertaintyEstimator`] and [`UncertaintyScheduler`] defaults.
    #[must_use]
    pub fn new(reranker: Arc<dyn Reranker>) -> Self {
        Self::with_rerankers(vec![reranker])
    }

    /// A controller over several rerankers, listed cheapest (least trusted) first: that order is the ladder of
    /// the final ranking (see [`FinalScore`](crate::FinalScore)). Pair it with an
    /// [`EscalationScheduler`](crate::EscalationScheduler) to use more than the first.
    #[must_use]
    pub fn with_rerankers(rerankers: Vec<Arc<dyn Reranker>>) -> Self {
        Self {
            rerankers,
            estimator: Arc::new(UncertaintyEstimator::default()),
            scheduler: Arc::new(UncertaintyScheduler::default()),
            config: ControllerConfig::default(),
        }
    }

    /// Sets the estimator.
    #[must_use]
    pub fn estimator(mut self, estimator: Arc<dyn Estimator>) -> Self {
        self.estimator = estimator;
        self
    }

    /// Sets the scheduler.
    #[must_use]
    pub fn scheduler(mut self, scheduler: Arc<dyn Scheduler>) -> Self {
        self.scheduler = scheduler;
        self
    }

    /// Sets the configuration.
    #[must_use]
    pub fn config(mut self, config: ControllerConfig) -> Self {
        self.config = config;
        self
    }

    /// Reranks `candidates` (in retrieval order; their position is the initial rank) for `query` within
    /// `ctx.budget` and `ctx.deadline`.
    ///
    /// # Errors
    /// As [`run_pool`](Self::run_pool), and [`InvalidInput`](ErrorKind::InvalidInput) for duplicate candidate ids
    /// or non-finite retrieval scores.
    pub async fn run(&self, ctx: &Ctx, query: &str, candidates: Vec<Candidate>) -> Result<RerankOutcome> {
        self.run_pool(ctx, query, CandidatePool::new(candidates)?).await
    }

    /// Reranks the candidates of an existing pool.
    ///
    /// # Errors
    /// [`InvalidInput`](ErrorKind::InvalidInput) for a controller without rerankers, two rerankers with the same
    /// name, `k == 0`, an estimator valuing unknown items or with non-finite values, or a scheduler proposing an
    /// empty batch, an unknown reranker, or an item that is not a candidate. Reranker failures are not errors:
    /// their batches are dropped and reported.
    pub async fn run_pool(&self, ctx: &Ctx, query: &str, mut pool: CandidatePool) -> Result<RerankOutcome> {
        self.validate()?;
        let infos = self.infos();
        pool.set_ladder(infos.iter().map(|i| i.name.clone()).collect());
        let limit = ctx.budget.limit;
        let mut spent = Cost::ZERO;
        let mut iterations: Vec<IterationRecord> = Vec::new();
        let mut overruns = 0;
        let mut iteration = 0;
        let stopped_by = loop {
            if let Some(reason) = interrupted(ctx) {
                break reason;
            }
            if pool.count(ItemState::Candidate) == 0 {
                break StopReason::NoCandidates;
            }
            if iteration >= self.config.max_iterations {
                break StopReason::IterationLimit;
            }
            let input = EstimateInput { query, k: self.config.k, iteration };
            let valuation = self.estimator.value(&pool, &input);
            pool.apply_valuation(&valuation)
                .map_err(|e| e.context(format!("estimator `{}`", self.estimator.name())))?;
            let view = BudgetView {
                limit,
                spent,
                remaining: limit.saturating_sub(&spent),
                time_left: ctx.remaining(),
                k: self.config.k,
                iteration,
            };
            let proposal = match self.scheduler.select(&pool, &view, &infos) {
                Decision::Stop(reason) => break reason,
                Decision::Rerank(p) => p,
            };
            let scheduler = self.scheduler.name();
            let Some(at) = infos.iter().position(|i| i.name == proposal.reranker) else {
                return Err(Error::invalid_input(format!(
                    "scheduler `{scheduler}` proposed the unknown reranker `{}`",
                    proposal.reranker
                )));
            };
            if proposal.ids.is_empty() {
                return Err(Error::invalid_input(format!("scheduler `{scheduler}` proposed an empty batch")));
            }
            // The controller is the source of truth for cost: trim to what the declared model says fits.
            let n = match infos[at].fit_batch(&view, proposal.ids.len()) {
                Ok(n) => n,
                Err(reason) => break reason,
            };
            let ids = &proposal.ids[..n];
            let expected = infos[at].cost_model.estimate(n);
            pool.send(ids, &infos[at].name).map_err(|e| e.context(format!("scheduler `{scheduler}`")))?;
            let batch: Vec<Candidate> = ids
                .iter()
                .map(|id| pool.get(id).map(|it| it.candidate().clone()))
                .collect::<Option<_>>()
                .expect("invariant: every id was just moved to in-flight, so it is in the pool");

            let (result, charged, elapsed) = self.score_batch(ctx, query, at, &infos[at].name, &batch, expected).await;
            spent += charged;
            let (outcome, interrupted_by) = settle_batch(&mut pool, &infos[at].name, ids, result);
            let overrun = !charged.fits_within(&expected);
            if ctx.trace.is_some() {
                let batch = TracedBatch { iteration, reranker: &infos[at].name, ids, expected, charged, elapsed };
                ctx.trace(self.batch_event(&batch, &outcome, &valuation.notes, overrun));
            }
            iterations.push(IterationRecord {
                iteration,
                reranker: infos[at].name.clone(),
                docs: ids.to_vec(),
                expected,
                charged,
                outcome,
                elapsed_us: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            });
            iteration += 1;
            if overrun {
                overruns += 1;
                break StopReason::Overrun;
            }
            if let Some(reason) = interrupted_by {
                break reason;
            }
        };
        let report = RerankReport {
            limit,
            spent,
            stopped_by,
            reranked: pool.count(ItemState::Reranked),
            dropped: pool.count(ItemState::Dropped),
            overruns,
            estimator: self.estimator.name().to_owned(),
            scheduler: self.scheduler.name().to_owned(),
            iterations,
        };
        ctx.trace(stop_event(&report));
        Ok(RerankOutcome { pool, report })
    }

    /// What the schedulers know of each reranker, in ladder order (tier 1 first).
    fn infos(&self) -> Vec<RerankerInfo> {
        self.rerankers
            .iter()
            .enumerate()
            .map(|(i, r)| RerankerInfo {
                name: r.name().to_owned(),
                cost_model: r.cost_model(),
                tier: u32::try_from(i + 1).unwrap_or(u32::MAX),
            })
            .collect()
    }

    /// Scores one batch with reranker `at` under a budget of the batch's `expected` cost, forwarding its trace;
    /// the scores (checked: one finite score per document), what it is charged (what it reported, else what was
    /// expected) and how long it took.
    async fn score_batch(
        &self,
        ctx: &Ctx,
        query: &str,
        at: usize,
        name: &str,
        batch: &[Candidate],
        expected: Cost,
    ) -> (Result<Vec<f32>>, Cost, std::time::Duration) {
        let reranker = &self.rerankers[at];
        let sink = TraceSink::new();
        let call_ctx = Ctx {
            budget: ragtune_core::Budget::new(expected),
            deadline: ctx.deadline,
            cancel: ctx.cancel.clone(),
            trace: Some(sink.clone()),
        };
        let started = Instant::now();
        let result = reranker.score(&call_ctx, query, batch).await;
        let elapsed = started.elapsed();
        let mut reported = Cost::ZERO;
        for event in sink.take() {
            if event.stage == "rerank" {
                reported += event.cost;
            }
            ctx.trace(event);
        }
        let charged = if reported == Cost::ZERO { expected } else { reported };
        let n = batch.len();
        let result = result.and_then(|scores| {
            if scores.len() != n {
                return Err(Error::permanent(format!(
                    "reranker `{name}` returned {} scores for {n} documents",
                    scores.len()
                )));
            }
            if scores.iter().any(|s| !s.is_finite()) {
                return Err(Error::permanent(format!("reranker `{name}` returned a non-finite score")));
            }
            Ok(scores)
        });
        (result, charged, elapsed)
    }

    /// The `rerank/batch` trace event of one batch.
    fn batch_event(
        &self,
        b: &TracedBatch<'_>,
        outcome: &BatchOutcome,
        valuation_notes: &std::collections::BTreeMap<String, serde_json::Value>,
        overrun: bool,
    ) -> TraceEvent {
        let mut event = TraceEvent::new("rerank", "batch")
            .detail("iteration", b.iteration)
            .detail("reranker", b.reranker.to_owned())
            .detail("docs", b.ids.to_vec())
            .detail("expected", serde_json::to_value(b.expected).unwrap_or_default())
            .detail("outcome", serde_json::to_value(outcome).unwrap_or_default())
            .detail("estimator", self.estimator.name())
            .detail("scheduler", self.scheduler.name())
            .cost(b.charged)
            .elapsed(b.elapsed);
        if !valuation_notes.is_empty() {
            event = event.detail("valuation", serde_json::to_value(valuation_notes).unwrap_or_default());
        }
        if overrun {
            event = event.detail("overrun", true);
        }
        event
    }

    fn validate(&self) -> Result<()> {
        if self.rerankers.is_empty() {
            return Err(Error::invalid_input("the rerank controller needs at least one reranker"));
        }
        if self.config.k == 0 {
            return Err(Error::invalid_input("the rerank controller's k must be at least 1"));
        }
        for (i, r) in self.rerankers.iter().enumerate() {
            if self.rerankers[..i].iter().any(|o| o.name() == r.name()) {
                return Err(Error::invalid_input(format!(
                    "two rerankers are named `{}`; names identify rerankers in the pool and in proposals",
                    r.name()
                )));
            }
        }
        Ok(())
    }
}

fn interrupted(ctx: &Ctx) -> Option<StopReason> {
    match ctx.check() {
        Ok(()) => None,
        Err(e) if e.kind() == ErrorKind::Cancelled => Some(StopReason::Cancelled),
        Err(_) => Some(StopReason::Deadline),
    }
}

/// Applies a batch's result to the pool: its scores, or its documents dropped on failure; the batch's outcome and
/// the stop a cancellation or deadline calls for.
fn settle_batch(
    pool: &mut CandidatePool,
    reranker: &str,
    ids: &[String],
    result: Result<Vec<f32>>,
) -> (BatchOutcome, Option<StopReason>) {
    match result {
        Ok(scores) => {
            let pairs: Vec<(&str, f32)> = ids.iter().map(String::as_str).zip(scores).collect();
            pool.update_scores(reranker, &pairs)
                .expect("invariant: the batch is in flight, unique and its scores are finite");
            (BatchOutcome::Reranked, None)
        }
        Err(e) => {
            pool.transition(ids, ItemState::Dropped)
                .expect("invariant: the batch is in flight, and in-flight items may always be dropped");
            let interrupted_by = match e.kind() {
                ErrorKind::Cancelled => Some(StopReason::Cancelled),
                ErrorKind::DeadlineExceeded => Some(StopReason::Deadline),
                _ => None,
            };
            (
                BatchOutcome::Failed { kind: e.kind().as_str().to_owned(), message: e.message().to_owned() },
                interrupted_by,
            )
        }
    }
}

/// The `rerank/stop` trace event of a run.
fn stop_event(report: &RerankReport) -> TraceEvent {
    TraceEvent::new("rerank", "stop")
        .detail("stopped_by", report.stopped_by.as_str())
        .detail("iterations", report.iterations.len())
        .detail("reranked", report.reranked)
        .detail("dropped", report.dropped)
        .detail("spent", serde_json::to_value(report.spent).unwrap_or_default())
        .detail("limit", serde_json::to_value(report.limit).unwrap_or_default())
}

/// One batch as its trace event describes it.
struct TracedBatch<'a> {
    iteration: usize,
    reranker: &'a str,
    ids: &'a [String],
    expected: Cost,
    charged: Cost,
    elapsed: std::time::Duration,
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;
    use std::time::Duration;

    use async_trait::async_trait;
    use ragtune_core::{Budget, Chunk, CostModel, ScoredHit};
    use ragtune_testkit::fakes::{ScriptedFailure, ScriptedReranker};

    use super::*;
    use crate::estimate::{BaselineEstimator, DynamicEstimator};
    use crate::pool::render_ranking;
    use crate::schedule::{BatchConfig, EscalationLevel, EscalationScheduler, GreedyScheduler};

    /// `n` candidates `d00..` with retrieval scores 1.0, 0.97, 0.94, ... and their ids as texts.
    fn candidates(n: usize) -> Vec<Candidate> {
        (0..n)
            .map(|i| {
                let id = format!("d{i:02}");
                let score = 1.0 - i as f32 * 0.03;
                Candidate::from_hit(ScoredHit { chunk: Chunk::new(&id, &id, &id), score }, "bm25", 1 + i as u32)
            })
            .collect()
    }

    /// A scripted reranker that gives every `d..` text `10 × its retrieval score` except for `overrides`.
    fn calibrated(n: usize, overrides: &[(&str, f32)]) -> ScriptedReranker {
        let mut r = ScriptedReranker::new();
        for c in candidates(n) {
            let score = overrides.iter().find(|o| o.0 == c.chunk.id).map_or(c.score * 10.0, |o| o.1);
            r = r.with_score(c.chunk.text, score);
        }
        r
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().expect("a runtime").block_on(f)
    }

    fn budget(docs: u64) -> Ctx {
        Ctx::new().with_budget(Budget::new(Cost::new(u64::MAX, docs, u64::MAX)))
    }

    /// Renders the report (stop reason, spent docs/calls, one line per batch) and the top of the ranking.
    fn render(outcome: &RerankOutcome, top: usize) -> String {
        let r = &outcome.report;
        let mut out = format!("stopped by {}, spent {} docs in {} calls\n", r.stopped_by, r.spent.docs, r.spent.calls);
        for it in &r.iterations {
            let status = match &it.outcome {
                BatchOutcome::Reranked => "reranked".to_owned(),
                BatchOutcome::Failed { kind, .. } => format!("failed ({kind})"),
            };
            let _ = writeln!(out, "#{} {} [{}] {status}", it.iteration, it.reranker, it.docs.join(","));
        }
        out + &render_ranking(outcome.ranking().into_iter().take(top))
    }

    /// Runs `controller` over `n` candidates under `ctx` and compares the rendering with `expect`.
    fn check(controller: &Controller, ctx: &Ctx, n: usize, top: usize, expect: &str) {
        let outcome = block_on(controller.run(ctx, "q", candidates(n))).expect("the run succeeds");
        assert_eq!(render(&outcome, top).trim_end(), expect.trim());
    }

    fn greedy(batch_size: usize) -> Arc<dyn Scheduler> {
        Arc::new(GreedyScheduler::new(BatchConfig { batch_size, ..BatchConfig::default() }))
    }

    #[test]
    fn greedy_spends_the_budget_and_trims_the_last_batch() {
        let c = Controller::new(Arc::new(calibrated(6, &[("d02", 9.9)])))
            .estimator(Arc::new(BaselineEstimator))
            .scheduler(greedy(2));
        check(
            &c,
            &budget(3),
            6,
            6,
            "stopped by budget_exhausted, spent 3 docs in 2 calls\n\
             #0 scripted [d00,d01] reranked\n\
             #1 scripted [d02] reranked\n\
             1. d00  10.0000  (scripted)\n\
             2. d02  9.9000  (scripted)\n\
             3. d01  9.7000  (scripted)\n\
             4. d03  0.9100  (retrieval)\n\
             5. d04  0.8800  (retrieval)\n\
             6. d05  0.8500  (retrieval)",
        );
    }

    #[test]
    fn a_failed_batch_is_dropped_and_not_retried() {
        let r = calibrated(4, &[]).failing(ScriptedFailure::FirstCalls(1));
        let c = Controller::new(Arc::new(r)).estimator(Arc::new(BaselineEstimator)).scheduler(greedy(2));
        check(
            &c,
            &Ctx::new(),
            4,
            4,
            "stopped by no_candidates, spent 4 docs in 2 calls\n\
             #0 scripted [d00,d01] failed (transient)\n\
             #1 scripted [d02,d03] reranked\n\
             1. d02  9.4000  (scripted)\n\
             2. d03  9.1000  (scripted)",
        );
    }

    #[test]
    fn uncertainty_stops_early_once_nothing_can_enter_the_top_k() {
        let c = Controller::new(Arc::new(calibrated(30, &[]))).config(ControllerConfig { k: 3, ..Default::default() });
        check(
            &c,
            &budget(30),
            30,
            4,
            "stopped by converged, spent 8 docs in 1 calls\n\
             #0 scripted [d00,d01,d02,d03,d04,d05,d06,d07] reranked\n\
             1. d00  10.0000  (scripted)\n\
             2. d01  9.7000  (scripted)\n\
             3. d02  9.4000  (scripted)\n\
             4. d03  9.1000  (scripted)",
        );
    }

    #[test]
    fn a_surprise_in_the_evidence_keeps_uncertainty_going() {
        // d01 scores far below what its retrieval score predicts, so the calibration is loose and more candidates
        // stay plausible for a while.
        let c = Controller::new(Arc::new(calibrated(30, &[("d01", 3.0)])))
            .estimator(Arc::new(DynamicEstimator::default()))
            .scheduler(Arc::new(UncertaintyScheduler::new(BatchConfig { batch_size: 4, ..BatchConfig::default() })))
            .config(ControllerConfig { k: 3, ..Default::default() });
        check(
            &c,
            &budget(30),
            30,
            3,
            "stopped by converged, spent 20 docs in 5 calls\n\
             #0 scripted [d00,d01,d02,d03] reranked\n\
             #1 scripted [d04,d05,d06,d07] reranked\n\
             #2 scripted [d08,d09,d10,d11] reranked\n\
             #3 scripted [d12,d13,d14,d15] reranked\n\
             #4 scripted [d16,d17,d18,d19] reranked\n\
             1. d00  10.0000  (scripted)\n\
             2. d02  9.4000  (scripted)\n\
             3. d03  9.1000  (scripted)",
        );
    }

    #[test]
    fn deadline_and_cancellation_stop_before_spending() {
        let c = Controller::new(Arc::new(calibrated(3, &[])));
        let expect = "stopped by {}, spent 0 docs in 0 calls\n\
                      1. d00  1.0000  (retrieval)\n2. d01  0.9700  (retrieval)\n3. d02  0.9400  (retrieval)";
        check(&c, &Ctx::new().with_timeout(Duration::ZERO), 3, 3, &expect.replace("{}", "deadline"));
        let cancelled = Ctx::new();
        cancelled.cancel.cancel();
        check(&c, &cancelled, 3, 3, &expect.replace("{}", "cancelled"));
        // A reranker that takes longer per document than is left is not called at all.
        let slow = calibrated(3, &[]).with_cost_model(CostModel {
            per_call: Cost::ZERO,
            per_doc: Cost::new(0, 1, 0),
            ms_per_doc: 1e9,
        });
        let c = Controller::new(Arc::new(slow));
        check(&c, &Ctx::new().with_timeout(Duration::from_secs(60)), 3, 3, &expect.replace("{}", "deadline"));
    }

    #[test]
    fn escalation_ranks_the_expensive_scale_above_the_cheap_one() {
        let cheap = calibrated(8, &[]).named("cheap");
        let llm = calibrated(8, &[("d01", 1.0)]).named("llm");
        let c = Controller::with_rerankers(vec![Arc::new(cheap), Arc::new(llm)])
            .estimator(Arc::new(BaselineEstimator))
            .scheduler(Arc::new(EscalationScheduler::new(vec![
                EscalationLevel::new("cheap", 4, 4),
                EscalationLevel::new("llm", 2, 2),
            ])));
        check(
            &c,
            &Ctx::new(),
            8,
            8,
            "stopped by depth_reached, spent 6 docs in 2 calls\n\
             #0 cheap [d02,d03,d04,d05] reranked\n\
             #1 llm [d00,d01] reranked\n\
             1. d00  10.0000  (llm)\n\
             2. d01  1.0000  (llm)\n\
             3. d02  9.4000  (cheap)\n\
             4. d03  9.1000  (cheap)\n\
             5. d04  8.8000  (cheap)\n\
             6. d05  8.5000  (cheap)\n\
             7. d06  0.8200  (retrieval)\n\
             8. d07  0.7900  (retrieval)",
        );
    }

    /// A reranker that scores 1.0 and reports `reported` per document in a `rerank` trace event.
    #[derive(Debug)]
    struct Reporting {
        declared: Cost,
        reported: Cost,
    }

    #[async_trait]
    impl Reranker for Reporting {
        fn name(&self) -> &str {
            "reporting"
        }

        fn cost_model(&self) -> CostModel {
            CostModel { per_call: Cost::ZERO, per_doc: self.declared, ms_per_doc: 0.0 }
        }

        async fn score(&self, ctx: &Ctx, _query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
            let n = candidates.len() as u64;
            let r = self.reported;
            ctx.trace(TraceEvent::new("rerank", "reporting").cost(Cost::new(r.tokens * n, r.docs * n, r.calls * n)));
            // Events of other stages describe the same spending and are not charged again.
            ctx.trace(TraceEvent::new("llm", "generate").cost(Cost::new(999, 0, 1)));
            Ok(vec![1.0; candidates.len()])
        }
    }

    #[test]
    fn the_reported_cost_is_charged_and_an_overrun_stops_the_run() {
        let honest = Reporting { declared: Cost::new(100, 1, 1), reported: Cost::new(40, 1, 1) };
        let c = Controller::new(Arc::new(honest)).estimator(Arc::new(BaselineEstimator)).scheduler(greedy(2));
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_budget(Budget::new(Cost::new(250, 10, 10))).with_trace(sink.clone());
        let outcome = block_on(c.run(&ctx, "q", candidates(5))).unwrap();
        // Two docs reserve 200 tokens; after charging 80 the rest (170) reserves one more doc, and so on.
        let charged: Vec<Cost> = outcome.report.iterations.iter().map(|i| i.charged).collect();
        assert_eq!(charged, [Cost::new(80, 2, 2), Cost::new(40, 1, 1), Cost::new(40, 1, 1)]);
        assert_eq!(outcome.report.spent, Cost::new(160, 4, 4));
        assert_eq!(outcome.report.stopped_by, StopReason::BudgetExhausted);
        let events = sink.take();
        let actions: Vec<&str> = events.iter().map(|e| e.action.as_str()).collect();
        let batch = ["reporting", "generate", "batch"];
        assert_eq!(actions, [&batch[..], &batch[..], &batch[..], &["stop"][..]].concat());

        let greedy_reranker = Reporting { declared: Cost::new(10, 1, 1), reported: Cost::new(40, 1, 1) };
        let c = Controller::new(Arc::new(greedy_reranker)).scheduler(greedy(2));
        let outcome = block_on(c.run(&Ctx::new(), "q", candidates(5))).unwrap();
        assert_eq!((outcome.report.stopped_by, outcome.report.overruns), (StopReason::Overrun, 1));
        assert_eq!(outcome.report.spent, Cost::new(80, 2, 2), "an overrun is charged, never hidden");
    }

    #[derive(Debug)]
    struct Rogue(&'static str);

    impl Scheduler for Rogue {
        fn name(&self) -> &str {
            "rogue"
        }

        fn select(&self, _pool: &CandidatePool, _budget: &BudgetView, _rerankers: &[RerankerInfo]) -> Decision {
            let ids = if self.0 == "empty" { vec![] } else { vec!["d00".to_owned(), "d00".to_owned()] };
            let reranker = if self.0 == "unknown" { "nope" } else { "scripted" };
            Decision::Rerank(crate::BatchProposal { ids, reranker: reranker.into(), expected_cost: Cost::ZERO })
        }
    }

    #[test]
    fn broken_components_and_configurations_are_errors() {
        let run = |c: Controller| block_on(c.run(&Ctx::new(), "q", candidates(3))).unwrap_err().message().to_owned();
        let r = || Arc::new(ScriptedReranker::new()) as Arc<dyn Reranker>;
        assert_eq!(
            run(Controller::new(r()).scheduler(Arc::new(Rogue("unknown")))),
            "scheduler `rogue` proposed the unknown reranker `nope`"
        );
        assert_eq!(
            run(Controller::new(r()).scheduler(Arc::new(Rogue("empty")))),
            "scheduler `rogue` proposed an empty batch"
        );
        assert_eq!(
            run(Controller::new(r()).scheduler(Arc::new(Rogue("twice")))),
            "scheduler `rogue`: document `d00` is named twice in one transition"
        );
        assert!(run(Controller::with_rerankers(vec![r(), r()])).contains("two rerankers are named `scripted`"));
        assert!(run(Controller::new(r()).config(ControllerConfig { k: 0, ..Default::default() })).contains("k must"));
        let mut dup = candidates(2);
        dup.push(dup[0].clone());
        assert!(block_on(Controller::new(r()).run(&Ctx::new(), "q", dup)).is_err());
    }

    #[test]
    fn reranked_candidates_carry_their_reranker_in_the_sources() {
        let c =
            Controller::new(Arc::new(calibrated(3, &[]))).estimator(Arc::new(BaselineEstimator)).scheduler(greedy(2));
        let outcome = block_on(c.run(&budget(2), "q", candidates(3))).unwrap();
        let out = outcome.candidates();
        assert_eq!(out[1].sources["scripted"].rank, 2);
        assert!((out[1].sources["scripted"].score - 9.7).abs() < 1e-5);
        assert_eq!(out[1].score, out[1].sources["scripted"].score);
        assert!(out[1].sources.contains_key("bm25"));
        assert!(!out[2].sources.contains_key("scripted"));
    }
}
