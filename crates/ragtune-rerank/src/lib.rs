//! Budgeted reranking for ragtune (the RAGtune controller, docs/rerank.md): spend an explicit reranking budget only
//! where reranking can change the top of the ranking, then assemble the context under a token budget.
//!
//! Retrieval gives a large pool of candidates cheaply; a reranker (a cross-encoder, an LLM) is precise but
//! expensive. This crate decides, batch by batch, which candidates are worth reranking next and stops when the
//! budget, the deadline or the usefulness of more reranking runs out:
//!
//! - [`CandidatePool`]: the candidates keyed by chunk id, with provenance and a validated state machine
//!   (`CANDIDATE → IN_FLIGHT → RERANKED`, `→ DROPPED`);
//! - [`Estimator`]s value the pool: [`BaselineEstimator`] (retrieval score), [`DynamicEstimator`] (a
//!   calibration from retrieval evidence to reranker scores, refitted after every batch),
//!   [`UncertaintyEstimator`] (candidates whose reranking is most likely to change the top-k);
//! - [`Scheduler`]s pick the next batch or stop: [`GreedyScheduler`], [`UncertaintyScheduler`] (stops early when
//!   no candidate can plausibly enter the top-k), [`EscalationScheduler`] (cheap rerankers wide, the expensive
//!   one on the contested head);
//! - a [`RerankPolicy`] names one estimator with one scheduler (`greedy`, `dynamic`, `uncertainty`), for
//!   configuration files and the budget evaluation alike;
//! - the [`Controller`] owns the budget and every transition, never dispatches a batch whose expected cost does
//!   not fit, and returns the ranking with a [`RerankReport`];
//! - the [`Assembler`] builds the final context: active items in final order, deduplicated, cut to a token
//!   budget;
//! - [`LlmReranker`] scores passages pointwise with any [`Llm`](ragtune_core::Llm); [`CachedReranker`] keeps
//!   any reranker's scores on disk so policies and budgets replay without the model.
//!
//! **Final order.** Reranked items rank by their reranker score; unreranked items rank by the estimator's
//! prediction of their reranker score, interleaved with the reranked ones on the same scale; items with neither
//! come after them in retrieval order. Scores of different scales are never compared: the scale's tier decides
//! first (a more trusted reranker above a cheaper one, any reranker above retrieval), see [`FinalScore`].
//!
//! ```
//! use std::sync::Arc;
//! use ragtune_core::{Budget, Candidate, Chunk, Cost, Ctx, ScoredHit};
//! use ragtune_rerank::{Assembler, Controller, ControllerConfig, StopReason, render_ranking};
//! use ragtune_testkit::fakes::ScriptedReranker;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> ragtune_core::Result<()> {
//! let texts = ["scurvy is a lack of vitamin c", "ships and sailors", "stock markets", "citrus fruit"];
//! let candidates: Vec<Candidate> = texts
//!     .iter()
//!     .enumerate()
//!     .map(|(i, text)| {
//!         let id = format!("doc-{i}");
//!         let hit = ScoredHit { chunk: Chunk::new(&id, &id, *text), score: 1.0 - i as f32 * 0.1 };
//!         Candidate::from_hit(hit, "bm25", i as u32 + 1)
//!     })
//!     .collect();
//! // A cross-encoder stand-in: one call per batch, one document per candidate.
//! let reranker = ScriptedReranker::new().with_score(texts[0], 0.9).with_score(texts[1], 0.2).with_default(0.0);
//! let controller = Controller::new(Arc::new(reranker)).config(ControllerConfig { k: 2, ..Default::default() });
//!
//! // Room for two reranked documents.
//! let ctx = Ctx::new().with_budget(Budget::new(Cost::new(u64::MAX, 2, u64::MAX)));
//! let outcome = controller.run(&ctx, "what causes scurvy?", candidates).await?;
//! assert_eq!(outcome.report.spent.docs, 2);
//! assert_eq!(outcome.report.stopped_by, StopReason::BudgetExhausted);
//! assert_eq!(
//!     render_ranking(outcome.ranking()),
//!     "1. doc-0  0.9000  (scripted)\n2. doc-1  0.2000  (scripted)\n3. doc-2  0.8000  (retrieval)\n4. doc-3  0.7000  (retrieval)\n"
//! );
//! let context = Assembler::default().assemble(&outcome.pool);
//! assert_eq!(context.items[0].chunk.id, "doc-0");
//! # Ok(())
//! # }
//! ```

mod assemble;
mod blend;
mod cache;
mod calibrate;
mod controller;
mod estimate;
mod llm;
mod policy;
mod pool;
mod schedule;

pub use assemble::{AssembledItem, Assembler, AssemblerConfig, Assembly, Cut, SkipReason, approx_tokens};
pub use blend::{blend, blend_reranked, standardised};
pub use cache::CachedReranker;
pub use calibrate::CalibrationConfig;
pub use controller::{BatchOutcome, Controller, ControllerConfig, IterationRecord, RerankOutcome, RerankReport};
pub use estimate::{
    BaselineEstimator, DynamicEstimator, EstimateInput, Estimator, UncertaintyConfig, UncertaintyEstimator,
};
pub use llm::{LlmReranker, LlmRerankerConfig};
pub use policy::RerankPolicy;
pub use pool::{
    CandidatePool, Estimate, FinalScore, ItemState, PoolItem, ScoreEstimate, ScoreSource, Valuation, cmp_final,
    cmp_priority, render_ranking,
};
pub use schedule::{
    BatchConfig, BatchProposal, BudgetView, Decision, EscalationLevel, EscalationScheduler, GreedyScheduler,
    RerankerInfo, Scheduler, StopReason, UncertaintyScheduler, affordable,
};
