//! The queries of a retrieval evaluation, run one by one ([`QueryRunner`]): each retrieved (with a full rerank, its
//! head reranked) and timed, its trace added to the LLM spending and the routes, and its document and passage runs
//! recorded, or its failure ([`Gathered`]).

use std::collections::BTreeMap;
use std::time::Instant;

use ragtune::core::{Candidate, Ctx, Query, Result, Retriever, TraceEvent, TraceSink};
use ragtune::evaluators::metrics::{Runs, percentile};
use ragtune::ingest::BeirQuery;

use super::{
    BuiltReranker, EvalCost, EvalOptions, Latency, LatencySplit, document_run_with, reranked_document_run,
    reranked_list,
};
use crate::passages::{GoldPassages, Locator};

/// What one query's retrieval gave: the head (reranked, with a full rerank), the passages below the rerank depth,
/// and the pool the budget controller works on when it was cut before a full rerank.
type Retrieved = (Vec<Candidate>, Vec<Candidate>, Option<Vec<Candidate>>);

/// What running the queries gathered, query by query.
pub(super) struct Gathered {
    /// Document runs, cut at `top_k`.
    pub(super) runs: Runs,
    /// Passage runs, with passage judgements.
    pub(super) passage_runs: Runs,
    /// Milliseconds per query in all, in LLM calls, and in the rest.
    latencies: Vec<f64>,
    llm_ms: Vec<f64>,
    rest_ms: Vec<f64>,
    /// `id: error` of the queries that failed.
    pub(super) failed: Vec<String>,
    /// LLM spending (without the per-query means: [`Gathered::cost`]).
    cost: EvalCost,
    /// Queries per route taken.
    pub(super) routes: BTreeMap<String, usize>,
    /// (id, text, candidates in retrieval order) for the budget controller.
    pub(super) pools: Vec<(String, String, Vec<Candidate>)>,
}

impl Gathered {
    /// Nothing gathered yet, for `n` queries.
    fn with_capacity(n: usize) -> Self {
        Self {
            runs: BTreeMap::new(),
            passage_runs: BTreeMap::new(),
            latencies: Vec::with_capacity(n),
            llm_ms: Vec::with_capacity(n),
            rest_ms: Vec::with_capacity(n),
            failed: Vec::new(),
            cost: EvalCost::default(),
            routes: BTreeMap::new(),
            pools: Vec::new(),
        }
    }

    /// Adds one query's latency (`total` milliseconds) and its trace: LLM calls, tokens and time, transformation
    /// fallbacks and the route taken.
    fn account(&mut self, events: Vec<TraceEvent>, total: f64) {
        self.latencies.push(total);
        let cost = &mut self.cost;
        let mut in_llm = 0.0;
        for e in events {
            match (e.stage.as_str(), e.action.as_str()) {
                _ if e.is_llm_call() => {
                    cost.llm_calls += e.cost.calls;
                    cost.llm_tokens += e.cost.tokens;
                    cost.llm_cache_hits += u64::from(e.action == "cached") * e.cost.calls;
                    in_llm += e.elapsed_us as f64 / 1000.0;
                }
                ("llm", _) => in_llm += e.elapsed_us as f64 / 1000.0,
                ("transform", _) if e.detail.contains_key("fallback") => cost.transform_fallbacks += 1,
                ("route", action) => *self.routes.entry(action.to_owned()).or_default() += 1,
                _ => {}
            }
        }
        self.llm_ms.push(in_llm);
        self.rest_ms.push((total - in_llm).max(0.0));
    }

    /// The LLM spending, with its means over the `queries` (at least 1).
    pub(super) fn cost(&self, queries: usize) -> EvalCost {
        let n = queries.max(1) as f64;
        let mut cost = self.cost;
        cost.llm_calls_per_query = cost.llm_calls as f64 / n;
        cost.llm_tokens_per_query = cost.llm_tokens as f64 / n;
        cost
    }

    /// The per-query latency in all, and split into LLM calls and the rest.
    pub(super) fn latency(&mut self) -> (Latency, LatencySplit) {
        let all = latency_summary(&mut self.latencies);
        (all, LatencySplit { llm: latency_summary(&mut self.llm_ms), retrieval: latency_summary(&mut self.rest_ms) })
    }
}

/// The median, 99th percentile and mean of per-query milliseconds (sorted in place).
fn latency_summary(v: &mut [f64]) -> Latency {
    v.sort_by(f64::total_cmp);
    let mean = if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    Latency { p50: percentile(v, 50.0), p99: percentile(v, 99.0), mean }
}

/// What every query of an evaluation runs with.
pub(super) struct QueryRunner<'a> {
    pub(super) opts: &'a EvalOptions,
    pub(super) retriever: &'a dyn Retriever,
    /// The full rerank's reranker and depth.
    pub(super) full_reranker: Option<&'a (BuiltReranker, usize)>,
    pub(super) retrieval_weight: f32,
    /// The passage judgements located in the corpus, when passages are scored.
    pub(super) gold: Option<&'a GoldPassages>,
}

impl QueryRunner<'_> {
    /// Runs every query in turn (with a transformation that calls the LLM, a progress line every 25 queries).
    ///
    /// # Errors
    /// A failing full rerank; a failing retrieval is only the query's failure.
    pub(super) async fn run_all(
        &self,
        queries: &[&BeirQuery],
        locator: &mut Locator<'_>,
        log: &mut dyn FnMut(&str),
    ) -> Result<Gathered> {
        let mut gathered = Gathered::with_capacity(queries.len());
        for (i, q) in queries.iter().enumerate() {
            let (result, events, total) = self.retrieve(q).await?;
            gathered.account(events, total);
            if self.opts.transform.kind.needs_llm() && (i + 1) % 25 == 0 {
                log(&format!("{} of {} queries", i + 1, queries.len()));
            }
            self.record(q, result, &mut gathered, locator);
        }
        Ok(gathered)
    }

    /// Retrieves one query's passages (and reranks the head, with a full rerank): what it gave or the retrieval's
    /// error, its trace, and the milliseconds it took.
    async fn retrieve(&self, q: &BeirQuery) -> Result<(Result<Retrieved>, Vec<TraceEvent>, f64)> {
        let opts = self.opts;
        let query = Query { id: Some(q.id.clone()), ..Query::new(q.text.clone()).with_top_k(opts.passage_depth()) };
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let t = Instant::now();
        let result = self.retriever.retrieve(&ctx, std::slice::from_ref(&query)).await;
        // The reranked head and the passages below it, with a full rerank.
        let result = match (result, self.full_reranker) {
            (Ok(mut lists), Some(((reranker, _), depth))) => {
                let list = lists.pop().unwrap_or_default();
                let pool = opts.rerank.as_ref().map(|r| list.iter().take(r.pool).cloned().collect::<Vec<_>>());
                let (head, tail) =
                    crate::rerank::rerank_head(reranker.as_ref(), &ctx, &q.text, list, *depth, self.retrieval_weight)
                        .await
                        .map_err(|e| e.context(format!("reranking query {}", q.id)))?;
                Ok((head, tail, pool))
            }
            (Ok(mut lists), None) => Ok((lists.pop().unwrap_or_default(), Vec::new(), None)),
            (Err(e), _) => Err(e),
        };
        let total = t.elapsed().as_secs_f64() * 1000.0;
        Ok((result, sink.take(), total))
    }

    /// Records one query's outcome: its pool for the budget controller, its document run cut at `top_k` and its
    /// passage run, or its failure.
    fn record(&self, q: &BeirQuery, result: Result<Retrieved>, out: &mut Gathered, locator: &mut Locator<'_>) {
        let opts = self.opts;
        match result {
            Ok((head, tail, pool)) => {
                if let Some(r) = &opts.rerank {
                    // The controller works on the retrieval order, whatever a full rerank made of it.
                    let pool = pool.unwrap_or_else(|| head.iter().take(r.pool).cloned().collect());
                    out.pools.push((q.id.clone(), q.text.clone(), pool));
                }
                let (mut run, list) = if self.full_reranker.is_some() {
                    (reranked_document_run(&head, &tail, opts.doc_score), reranked_list(head, tail))
                } else {
                    (document_run_with(&head, opts.doc_score), head)
                };
                if let Some(g) = self.gold {
                    out.passage_runs.insert(q.id.clone(), g.passage_run(&list, locator, opts.top_k));
                }
                run.truncate(opts.top_k);
                out.runs.insert(q.id.clone(), run);
            }
            Err(e) => out.failed.push(format!("{}: {e}", q.id)),
        }
    }
}
