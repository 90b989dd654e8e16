//! The controller's own overhead per query: a pool of 100 fused candidates, an instant fake reranker, and each
//! estimator/scheduler policy. The goal is well under a millisecond per query, so that the controller is never
//! what a reranking budget is spent on.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ragtune_core::{Budget, Candidate, Chunk, Cost, CostModel, Ctx, Reranker, Result, SourceScore};
use ragtune_rerank::{
    Assembler, BaselineEstimator, BatchConfig, Controller, ControllerConfig, DynamicEstimator, EscalationLevel,
    EscalationScheduler, Estimator, GreedyScheduler, Scheduler, UncertaintyEstimator, UncertaintyScheduler,
};

/// A reranker that costs nothing and answers at once: a score from a hash of the chunk id, so the benchmark
/// measures the controller, not a model.
#[derive(Debug)]
struct Instant(&'static str);

#[async_trait]
impl Reranker for Instant {
    fn name(&self) -> &str {
        self.0
    }

    fn cost_model(&self) -> CostModel {
        CostModel { per_call: Cost::new(0, 0, 1), per_doc: Cost::new(0, 1, 0), ms_per_doc: 0.0 }
    }

    async fn score(&self, _ctx: &Ctx, _query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
        Ok(candidates
            .iter()
            .map(|c| {
                let h = c.chunk.id.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
                // Relevance falls with the retrieval score, plus noise: a realistic shape for a reranker.
                c.score * 8.0 + (h % 1000) as f32 / 250.0
            })
            .collect())
    }
}

/// 100 candidates fused from two strategies that disagree somewhat.
fn pool() -> Vec<Candidate> {
    (0..100_u32)
        .map(|i| {
            let id = format!("doc-{i:03}");
            let mut sources = BTreeMap::new();
            sources.insert("bm25".to_owned(), SourceScore { score: 10.0 - i as f32 * 0.1, rank: i + 1 });
            if i % 3 != 0 {
                let rank = (i * 7 + 3) % 100 + 1;
                sources.insert("dense".to_owned(), SourceScore { score: 1.0 - rank as f32 * 0.01, rank });
            }
            let text = format!("passage {i} about topic {} with some words to count", i % 17);
            Candidate { chunk: Chunk::new(&id, &id, text), score: 1.0 / (60.0 + i as f32), sources }
        })
        .collect()
}

/// A named policy and the documents its budget allows.
type Policy = (&'static str, Arc<dyn Estimator>, Arc<dyn Scheduler>, u64);

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let candidates = pool();
    let batch = BatchConfig { batch_size: 8, ..BatchConfig::default() };
    let policies: Vec<Policy> = vec![
        ("greedy+baseline/40 docs", Arc::new(BaselineEstimator), Arc::new(GreedyScheduler::new(batch.clone())), 40),
        (
            "greedy+dynamic/100 docs",
            Arc::new(DynamicEstimator::default()),
            Arc::new(GreedyScheduler::new(batch.clone())),
            100,
        ),
        (
            "uncertainty+uncertainty/40 docs",
            Arc::new(UncertaintyEstimator::default()),
            Arc::new(UncertaintyScheduler::new(batch.clone())),
            40,
        ),
        (
            "uncertainty+uncertainty/100 docs",
            Arc::new(UncertaintyEstimator::default()),
            Arc::new(UncertaintyScheduler::new(batch)),
            100,
        ),
    ];
    let mut group = c.benchmark_group("controller");
    for (name, estimator, scheduler, docs) in policies {
        let controller = Controller::new(Arc::new(Instant("instant")))
            .estimator(estimator)
            .scheduler(scheduler)
            .config(ControllerConfig { k: 10, ..ControllerConfig::default() });
        let ctx = Ctx::new().with_budget(Budget::new(Cost::new(u64::MAX, docs, u64::MAX)));
        group.bench_function(name, |b| {
            b.iter_batched(
                || candidates.clone(),
                |pool| black_box(rt.block_on(controller.run(&ctx, "query", pool)).expect("the run succeeds")),
                BatchSize::SmallInput,
            );
        });
    }
    let escalation = Controller::with_rerankers(vec![Arc::new(Instant("cheap")), Arc::new(Instant("expensive"))])
        .estimator(Arc::new(UncertaintyEstimator::default()))
        .scheduler(Arc::new(EscalationScheduler::new(vec![
            EscalationLevel::new("cheap", 40, 10),
            EscalationLevel::new("expensive", 10, 5),
        ])));
    let ctx = Ctx::new();
    group.bench_function("escalation+uncertainty/50 docs", |b| {
        b.iter_batched(
            || candidates.clone(),
            |pool| black_box(rt.block_on(escalation.run(&ctx, "query", pool)).expect("the run succeeds")),
            BatchSize::SmallInput,
        );
    });
    let outcome = rt.block_on(escalation.run(&ctx, "query", candidates.clone())).expect("the run succeeds");
    let assembler = Assembler::default();
    group.bench_function("assemble/100 items", |b| b.iter(|| black_box(assembler.assemble(&outcome.pool))));
    group.finish();
}

criterion_group!(controller, benches);
criterion_main!(controller);
