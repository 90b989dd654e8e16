//! Property tests of the controller's eight guarantees (docs/rerank.md, "Guarantees") over random pools, budgets,
//! policies and failing rerankers:
//!
//! 1. stable identity and 3. monotone eligibility: a document is sent to a reranker at most once, and its final
//!    state is what its one batch made of it (never back to `CANDIDATE`);
//! 2. transition integrity: illegal pool transitions are errors that change nothing;
//! 4. budget: the controller never spends over the limit, and what it reports spent is the sum of its batches;
//! 5. assembly source: only `CANDIDATE` or `RERANKED` documents reach the ranking and the context;
//! 6. determinism and tie-breaking: the same inputs give the same result, and schedulers take ties by rank, id;
//! 7. no double counting: each batch is charged once, and only in-flight documents receive scores;
//! 8. score precedence: reranker score, then estimate, then retrieval score.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use proptest::prelude::*;
use ragtune_core::{Budget, Candidate, Chunk, Cost, CostModel, Ctx, Error, Reranker, Result, SourceScore, TraceEvent};
use ragtune_rerank::{
    Assembler, AssemblerConfig, BaselineEstimator, BatchConfig, BatchOutcome, BudgetView, CandidatePool, Controller,
    ControllerConfig, Cut, Decision, DynamicEstimator, EscalationLevel, EscalationScheduler, Estimator,
    GreedyScheduler, ItemState, RerankOutcome, RerankerInfo, Scheduler, ScoreSource, UncertaintyEstimator,
    UncertaintyScheduler, cmp_final, cmp_priority, render_ranking,
};

/// A fake reranker: scores each text by a fixed table, fails the calls whose bit is set in `failures`, records
/// every document it was sent, and optionally reports an actual cost of half its declared tokens.
#[derive(Debug)]
struct Recorder {
    name: &'static str,
    scores: BTreeMap<String, f32>,
    failures: u16,
    tokens_per_doc: u64,
    reports: bool,
    seen: Arc<Mutex<Vec<String>>>,
    calls: Mutex<u32>,
}

#[async_trait]
impl Reranker for Recorder {
    fn name(&self) -> &str {
        self.name
    }

    fn cost_model(&self) -> CostModel {
        CostModel { per_call: Cost::new(0, 0, 1), per_doc: Cost::new(self.tokens_per_doc, 1, 0), ms_per_doc: 0.0 }
    }

    async fn score(&self, ctx: &Ctx, _query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
        let call = {
            let mut calls = self.calls.lock().expect("calls lock");
            *calls += 1;
            *calls - 1
        };
        self.seen.lock().expect("seen lock").extend(candidates.iter().map(|c| c.chunk.id.clone()));
        if self.reports {
            let n = candidates.len() as u64;
            ctx.trace(TraceEvent::new("rerank", self.name).cost(Cost::new(self.tokens_per_doc * n / 2, n, 1)));
        }
        if call < 16 && self.failures & (1 << call) != 0 {
            return Err(Error::transient(format!("{} fails call {call}", self.name)));
        }
        Ok(candidates.iter().map(|c| self.scores.get(&c.chunk.text).copied().unwrap_or(0.0)).collect())
    }
}

/// One random request: the pool, the reranker behaviour, the budget and the policy.
#[derive(Debug, Clone)]
struct Scenario {
    /// Per candidate: retrieval score bucket, BM25 rank (0 = missed), dense rank (0 = missed), text id.
    items: Vec<(u8, u8, u8, u8)>,
    /// Reranker score per text id.
    text_scores: Vec<i8>,
    failures: u16,
    reports: bool,
    tokens_per_doc: u64,
    limit: Cost,
    estimator: u8,
    scheduler: u8,
    batch_size: usize,
    k: usize,
}

fn limit_component(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0..=max, 1 => Just(u64::MAX)]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec((0..6_u8, 0..12_u8, 0..12_u8, 0..24_u8), 0..40),
        prop::collection::vec(-5..15_i8, 24),
        any::<u16>().prop_map(|f| f & f.rotate_left(3)),
        any::<bool>(),
        0..50_u64,
        (limit_component(2000), limit_component(45), limit_component(12)),
        (0..3_u8, 0..3_u8, 1..9_usize, 1..7_usize),
    )
        .prop_map(
            |(items, text_scores, failures, reports, tokens_per_doc, (t, d, c), (estimator, scheduler, batch, k))| {
                Scenario {
                    items,
                    text_scores,
                    failures,
                    reports,
                    tokens_per_doc,
                    limit: Cost::new(t, d, c),
                    estimator,
                    scheduler,
                    batch_size: batch,
                    k,
                }
            },
        )
}

fn candidates(s: &Scenario) -> Vec<Candidate> {
    s.items
        .iter()
        .enumerate()
        .map(|(i, &(bucket, bm25, dense, text))| {
            let id = format!("d{i:02}");
            let mut sources = BTreeMap::new();
            for (name, rank) in [("bm25", bm25), ("dense", dense)] {
                if rank > 0 {
                    sources
                        .insert(name.to_owned(), SourceScore { score: 1.0 / f32::from(rank), rank: u32::from(rank) });
                }
            }
            // Few buckets: many ties, which must break by initial rank and id.
            let score = f32::from(bucket) * 0.25;
            Candidate { chunk: Chunk::new(&id, &id, format!("text {text} of {}", text % 5)), score, sources }
        })
        .collect()
}

fn recorder(s: &Scenario, name: &'static str, salt: i8, seen: &Arc<Mutex<Vec<String>>>) -> Recorder {
    let scores = (0..24_u8)
        .map(|t| (format!("text {t} of {}", t % 5), f32::from(s.text_scores[usize::from(t)].wrapping_add(salt))))
        .collect();
    Recorder {
        name,
        scores,
        failures: if name == "cheap" { s.failures } else { s.failures.rotate_right(5) },
        tokens_per_doc: s.tokens_per_doc,
        reports: s.reports,
        seen: seen.clone(),
        calls: Mutex::new(0),
    }
}

fn controller(s: &Scenario, seen: &Arc<Mutex<Vec<String>>>) -> Controller {
    let estimator: Arc<dyn Estimator> = match s.estimator {
        0 => Arc::new(BaselineEstimator),
        1 => Arc::new(DynamicEstimator::default()),
        _ => Arc::new(UncertaintyEstimator::default()),
    };
    let batch = BatchConfig { batch_size: s.batch_size, ..BatchConfig::default() };
    let scheduler: Arc<dyn Scheduler> = match s.scheduler {
        0 => Arc::new(GreedyScheduler::new(batch)),
        1 => Arc::new(UncertaintyScheduler::new(batch)),
        _ => Arc::new(EscalationScheduler::new(vec![
            EscalationLevel::new("cheap", 3 * s.batch_size, s.batch_size),
            EscalationLevel::new("llm", s.k, (s.batch_size / 2).max(1)),
        ])),
    };
    Controller::with_rerankers(vec![Arc::new(recorder(s, "cheap", 0, seen)), Arc::new(recorder(s, "llm", 3, seen))])
        .estimator(estimator)
        .scheduler(scheduler)
        .config(ControllerConfig { k: s.k, ..ControllerConfig::default() })
}

/// Runs the scenario; returns the outcome and every document the rerankers were sent, in order.
fn run(s: &Scenario) -> (RerankOutcome, Vec<String>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let ctx = Ctx::new().with_budget(Budget::new(s.limit));
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let outcome = rt.block_on(controller(s, &seen).run(&ctx, "query", candidates(s))).expect("a valid scenario runs");
    let sent = seen.lock().expect("seen lock").clone();
    (outcome, sent)
}

/// The report without its wall times, for comparisons.
fn timeless(outcome: &RerankOutcome) -> String {
    let mut report = outcome.report.clone();
    for it in &mut report.iterations {
        it.elapsed_us = 0;
    }
    serde_json::to_string(&report).expect("reports serialise")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Invariants 1 and 3: no document is reranked twice or re-enters the candidates, and every final state is
    /// what its single batch made of it.
    #[test]
    fn documents_are_sent_once_and_end_in_the_state_their_batch_gave_them(s in scenario()) {
        let (outcome, sent) = run(&s);
        let unique: BTreeSet<&String> = sent.iter().collect();
        prop_assert_eq!(unique.len(), sent.len(), "sent twice: {:?}", sent);
        let mut batch_of: BTreeMap<&str, &BatchOutcome> = BTreeMap::new();
        for it in &outcome.report.iterations {
            for id in &it.docs {
                prop_assert!(batch_of.insert(id.as_str(), &it.outcome).is_none(), "{} in two batches", id);
            }
        }
        let recorded: Vec<&str> = outcome.report.iterations.iter().flat_map(|i| i.docs.iter().map(String::as_str)).collect();
        prop_assert_eq!(recorded, sent.iter().map(String::as_str).collect::<Vec<_>>());
        for item in outcome.pool.items() {
            let expect = match batch_of.get(item.id()) {
                None => ItemState::Candidate,
                Some(BatchOutcome::Reranked) => ItemState::Reranked,
                Some(BatchOutcome::Failed { .. }) => ItemState::Dropped,
            };
            prop_assert_eq!(item.state(), expect, "{}", item.id());
            prop_assert_eq!(item.reranker_score().is_some(), expect == ItemState::Reranked);
        }
        prop_assert_eq!(outcome.report.reranked, outcome.pool.count(ItemState::Reranked));
        prop_assert_eq!(outcome.report.dropped, outcome.pool.count(ItemState::Dropped));
    }

    /// Invariants 4 and 7: never over budget, and the spent total is each batch charged exactly once (its
    /// reported cost, or its reservation when the reranker reports none).
    #[test]
    fn the_controller_never_overspends_and_charges_each_batch_once(s in scenario()) {
        let (outcome, _) = run(&s);
        let r = &outcome.report;
        prop_assert!(r.spent.fits_within(&s.limit), "spent {:?} over {:?}", r.spent, s.limit);
        let total = r.iterations.iter().fold(Cost::ZERO, |a, i| a + i.charged);
        prop_assert_eq!(r.spent, total);
        prop_assert_eq!(r.overruns, 0);
        for it in &r.iterations {
            let n = it.docs.len() as u64;
            prop_assert!(n > 0);
            prop_assert_eq!(it.expected, Cost::new(s.tokens_per_doc * n, n, 1));
            let charged = if s.reports { Cost::new(s.tokens_per_doc * n / 2, n, 1) } else { it.expected };
            prop_assert_eq!(it.charged, charged);
        }
        // Stopping for the budget means the next batch of one really did not fit.
        if r.stopped_by == ragtune_rerank::StopReason::BudgetExhausted {
            let one = Cost::new(s.tokens_per_doc, 1, 1);
            prop_assert!(!(r.spent + one).fits_within(&s.limit), "stopped with room left: {:?}", r.spent);
        }
    }

    /// Invariant 6: the same inputs give the same ranking, report and reranker calls.
    #[test]
    fn runs_are_deterministic(s in scenario()) {
        let (a, sent_a) = run(&s);
        let (b, sent_b) = run(&s);
        prop_assert_eq!(render_ranking(a.ranking()), render_ranking(b.ranking()));
        prop_assert_eq!(timeless(&a), timeless(&b));
        prop_assert_eq!(sent_a, sent_b);
        let assembler = Assembler::default();
        prop_assert_eq!(assembler.assemble(&a.pool), assembler.assemble(&b.pool));
    }

    /// Invariants 5 and 8: the ranking holds exactly the active items in final order, and each final score comes
    /// from the reranker, else the estimate, else retrieval.
    #[test]
    fn the_ranking_holds_active_items_by_precedence(s in scenario()) {
        let (outcome, _) = run(&s);
        let ranking = outcome.ranking();
        let active: BTreeSet<&str> = outcome.pool.active_items().map(|it| it.id()).collect();
        prop_assert_eq!(ranking.iter().map(|it| it.id()).collect::<BTreeSet<_>>(), active);
        prop_assert_eq!(outcome.pool.count(ItemState::InFlight), 0);
        for pair in ranking.windows(2) {
            prop_assert_ne!(cmp_final(pair[0], pair[1]), std::cmp::Ordering::Greater);
        }
        for item in outcome.pool.items() {
            let f = item.final_rank_score();
            match (item.reranker_score(), item.estimate()) {
                (Some(r), _) => {
                    prop_assert_eq!((f.source, f.value), (ScoreSource::Reranker, r));
                    prop_assert_eq!(f.tier, outcome.pool.tier(item.reranker_strategy().unwrap_or_default()));
                }
                (None, Some(e)) => {
                    prop_assert_eq!(item.state(), ItemState::Candidate);
                    prop_assert_eq!((f.source, f.value), (ScoreSource::Estimate, e.score));
                    prop_assert!(e.upper >= e.score);
                }
                (None, None) => prop_assert_eq!((f.source, f.value, f.tier), (ScoreSource::Retrieval, item.retrieval_score(), 0)),
            }
            prop_assert_eq!(item.final_score(), f.value);
        }
    }

    /// Invariant 5 for the assembler: only active, distinct documents in final order, within the token budget;
    /// a larger budget extends the context (a prefix property).
    #[test]
    fn the_assembler_sees_only_active_items_and_keeps_its_budget(
        s in scenario(), max_tokens in 0..200_usize, reserve in 0..50_usize, fill in any::<bool>(),
    ) {
        let (outcome, _) = run(&s);
        let config = AssemblerConfig {
            max_tokens,
            reserve_tokens: reserve,
            cut: if fill { Cut::Fill } else { Cut::Prefix },
            ..AssemblerConfig::default()
        };
        let a = Assembler::new(config).assemble(&outcome.pool);
        prop_assert!(a.tokens <= max_tokens.saturating_sub(reserve));
        prop_assert_eq!(a.tokens, a.items.iter().map(|i| i.tokens).sum::<usize>());
        let mut texts = BTreeSet::new();
        let mut ids = BTreeSet::new();
        for item in &a.items {
            let state = outcome.pool.get(&item.chunk.id).map(|it| it.state());
            prop_assert!(state.is_some_and(ItemState::is_active), "{} is {:?}", item.chunk.id, state);
            prop_assert!(ids.insert(item.chunk.id.clone()));
            prop_assert!(texts.insert(item.chunk.text.clone()));
        }
        let order: Vec<&str> = outcome.ranking().into_iter().map(|it| it.id()).filter(|id| ids.contains(*id)).collect();
        prop_assert_eq!(order, a.items.iter().map(|i| i.chunk.id.as_str()).collect::<Vec<_>>());
        if !fill {
            let bigger = Assembler::new(AssemblerConfig { max_tokens: max_tokens + 40, ..config }).assemble(&outcome.pool);
            prop_assert!(bigger.items.len() >= a.items.len());
            prop_assert_eq!(&bigger.items[..a.items.len()], &a.items[..]);
        }
    }

    /// Invariant 6 for the schedulers: a greedy batch is the head of the priority order, which sorts by priority,
    /// then initial rank, then id.
    #[test]
    fn schedulers_take_ties_by_rank_then_id(s in scenario(), remaining_docs in 0..20_u64) {
        let mut pool = CandidatePool::new(candidates(&s)).expect("distinct ids");
        let estimator = DynamicEstimator::default();
        let order = pool.by_priority();
        for pair in order.windows(2) {
            prop_assert_eq!(cmp_priority(pair[0], pair[1]), std::cmp::Ordering::Less);
            let (a, b) = (pair[0], pair[1]);
            if a.priority_value() == b.priority_value() {
                prop_assert!((a.initial_rank(), a.id()) < (b.initial_rank(), b.id()));
            }
        }
        let valuation = estimator.value(&pool, &ragtune_rerank::EstimateInput { query: "q", k: s.k, iteration: 0 });
        pool.apply_valuation(&valuation).expect("a valid valuation");
        let remaining = Cost::new(u64::MAX, remaining_docs, u64::MAX);
        let view = BudgetView { limit: remaining, spent: Cost::ZERO, remaining, time_left: None, k: s.k, iteration: 0 };
        let info = RerankerInfo {
            name: "cheap".into(),
            cost_model: CostModel { per_call: Cost::ZERO, per_doc: Cost::new(0, 1, 0), ms_per_doc: 0.0 },
            tier: 1,
        };
        let greedy = GreedyScheduler::new(BatchConfig { batch_size: s.batch_size, ..BatchConfig::default() });
        let head: Vec<String> = pool.by_priority().iter().map(|it| it.id().to_owned()).collect();
        match greedy.select(&pool, &view, std::slice::from_ref(&info)) {
            Decision::Rerank(p) => {
                let n = s.batch_size.min(usize::try_from(remaining_docs).unwrap_or(usize::MAX)).min(head.len());
                prop_assert_eq!(&p.ids[..], &head[..n]);
            }
            Decision::Stop(_) => prop_assert!(head.is_empty() || remaining_docs == 0),
        }
    }
}

/// A pool operation for the state-machine property.
#[derive(Debug, Clone)]
enum Op {
    Transition(Vec<usize>, ItemState),
    Scores(Vec<usize>),
}

fn op() -> impl Strategy<Value = Op> {
    let ids = prop::collection::vec(0..8_usize, 0..4);
    let state =
        prop::sample::select(vec![ItemState::Candidate, ItemState::InFlight, ItemState::Reranked, ItemState::Dropped]);
    prop_oneof![(ids.clone(), state).prop_map(|(i, s)| Op::Transition(i, s)), ids.prop_map(Op::Scores)]
}

fn legal(from: ItemState, to: ItemState) -> bool {
    matches!(
        (from, to),
        (ItemState::Candidate, ItemState::InFlight)
            | (ItemState::Candidate, ItemState::Dropped)
            | (ItemState::InFlight, ItemState::Dropped)
            | (ItemState::Reranked, ItemState::Dropped)
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Invariants 2, 3 and 7: random operations succeed exactly when every move is legal for the state-machine
    /// model (ids 6 and 7 do not exist), apply all or nothing, and scores land only on in-flight items.
    #[test]
    fn pool_operations_follow_the_state_machine(ops in prop::collection::vec(op(), 0..24)) {
        let cands: Vec<Candidate> = (0..6)
            .map(|i| {
                let id = format!("d{i}");
                Candidate { chunk: Chunk::new(&id, &id, &id), score: 1.0, sources: BTreeMap::new() }
            })
            .collect();
        let mut pool = CandidatePool::new(cands).expect("distinct ids");
        let mut model = [ItemState::Candidate; 6];
        let mut left_candidate = [false; 6];
        for op in ops {
            let (ids, ok, target) = match &op {
                Op::Transition(ids, to) => {
                    let distinct = ids.iter().collect::<BTreeSet<_>>().len() == ids.len();
                    let ok = distinct && ids.iter().all(|&i| i < 6 && legal(model[i], *to));
                    (ids.clone(), ok, *to)
                }
                Op::Scores(ids) => {
                    let distinct = ids.iter().collect::<BTreeSet<_>>().len() == ids.len();
                    let ok = distinct && ids.iter().all(|&i| i < 6 && model[i] == ItemState::InFlight);
                    (ids.clone(), ok, ItemState::Reranked)
                }
            };
            let names: Vec<String> = ids.iter().map(|i| format!("d{i}")).collect();
            let before: Vec<ItemState> = pool.items().iter().map(|it| it.state()).collect();
            let result = match &op {
                Op::Transition(_, to) => pool.transition(&names, *to),
                Op::Scores(_) => pool.update_scores("ce", &names.iter().map(|n| (n.as_str(), 1.0)).collect::<Vec<_>>()),
            };
            prop_assert_eq!(result.is_ok(), ok, "{:?} from {:?}", op, model);
            if ok {
                for &i in &ids {
                    model[i] = target;
                }
            } else {
                let after: Vec<ItemState> = pool.items().iter().map(|it| it.state()).collect();
                prop_assert_eq!(before, after, "a refused operation changed the pool");
            }
            for (i, state) in model.iter().enumerate() {
                left_candidate[i] |= *state != ItemState::Candidate;
                prop_assert!(!(left_candidate[i] && *state == ItemState::Candidate), "d{} re-entered", i);
                let item = pool.get(&format!("d{i}")).expect("present");
                prop_assert_eq!(item.state(), *state);
                prop_assert_eq!(item.reranker_score().is_some(), item.reranker_strategy().is_some());
            }
        }
    }
}
