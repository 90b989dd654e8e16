//! The components the pipeline's stages use, built from the engine's configuration, and the cached retrieval and
//! evaluation calls. Nothing here notes, charges or traces a stage: the run's wrapper does that.

use std::sync::Arc;

use ragtune_core::{
    Budget, Candidate, Cost, Ctx, Error, Llm, Query, RelevanceEvaluator, RelevanceJudgement, Result, Retriever,
};
use ragtune_evaluators::crag::{
    DenseSimilarityScorer, HeuristicEvaluator, LearnedEvaluator, ModelEvaluator, RetrievalScoreScorer,
};
use ragtune_evaluators::faithfulness::FaithfulnessJudge;
use ragtune_llm::prompts;

use crate::config::{EvaluatorKind, RerankerKind, ScorerKind, Transform};
use crate::engine::Engine;
use crate::pipeline::normalize_query;

/// What a retrieval produced.
pub(crate) struct Retrieved {
    pub(crate) candidates: Vec<Candidate>,
    /// The retriever that ran, or `cache_hit`.
    pub(crate) source: String,
    pub(crate) cache_hit: bool,
}

impl Engine {
    /// The evaluator's name in the CRAG metadata: `heuristic`, `model:<scorer>` or `learned`.
    pub(crate) fn evaluator_name(&self) -> String {
        match self.config().crag.evaluator {
            EvaluatorKind::Heuristic => "heuristic".into(),
            EvaluatorKind::Model => match self.config().crag.scorer {
                // The loaded model's name (`cross-encoder:<its directory>`), as the evaluator names itself.
                ScorerKind::CrossEncoder => match self.cross_encoder() {
                    Ok(reranker) => format!("model:{}", reranker.name()),
                    Err(_) => "model:cross_encoder".into(),
                },
                scorer => format!("model:{}", scorer_name(scorer)),
            },
            EvaluatorKind::Learned => "learned".into(),
        }
    }

    /// The faithfulness judge: with the embedder when one is loaded, with the LLM when configured to use it.
    pub(crate) fn judge(&self) -> Arc<FaithfulnessJudge> {
        self.built().judge.get_or_init(|| Arc::new(self.build_judge())).clone()
    }

    fn build_judge(&self) -> FaithfulnessJudge {
        let cfg = self.config();
        // The configuration was validated when it was loaded; an invalid one here falls back to the defaults.
        let mut judge = FaithfulnessJudge::new(cfg.judge.clone())
            .or_else(|_| FaithfulnessJudge::new(Default::default()))
            .unwrap_or_else(|_| unreachable_judge());
        if let Some(e) = self.embedder() {
            judge = judge.with_embedder(e.clone());
        }
        if cfg.pipeline.judge_with_llm
            && let Some(llm) = self.llm()
        {
            judge = judge.with_llm(llm.clone(), prompts::JUDGE, prompts::REPAIR_JSON);
        }
        judge
    }

    /// The configured strategy with `transform` around it.
    async fn base_retriever(&self, transform: Transform) -> Result<Arc<dyn Retriever>> {
        let (strategy, _) = self.resolve(self.config().search.strategy).await?;
        self.transformed_retriever(strategy, transform).await
    }

    /// Retrieves `k` candidates for `text`; the first attempt reads the retrieval cache (`use_cache`), every
    /// retrieval fills it.
    pub(crate) async fn retrieve_cached(
        &self,
        ctx: &Ctx,
        text: &str,
        k: usize,
        use_cache: bool,
        transform: Transform,
    ) -> Result<Retrieved> {
        let key = self.caches().map(|c| {
            format!("{}|{}|{}|{k}|{}", c.fingerprint, self.store_generation(), transform, normalize_query(text))
        });
        if use_cache
            && let (Some(c), Some(key)) = (self.caches(), &key)
            && let Some(hit) = c.retrieval.get(key)
        {
            return Ok(Retrieved { candidates: hit.as_ref().clone(), source: "cache_hit".into(), cache_hit: true });
        }
        let retriever = self.base_retriever(transform).await?;
        let query = Query::new(text).with_top_k(k);
        let mut lists = retriever.retrieve(ctx, std::slice::from_ref(&query)).await?;
        let candidates = lists.pop().unwrap_or_default();
        if let (Some(c), Some(key)) = (self.caches(), key) {
            c.retrieval.insert(key, Arc::new(candidates.clone()));
        }
        Ok(Retrieved { candidates, source: retriever.name().to_owned(), cache_hit: false })
    }

    /// The configured Corrective-RAG evaluator, built on the first question.
    fn evaluator(&self) -> Result<Arc<dyn RelevanceEvaluator>> {
        if let Some(e) = self.built().evaluator.get() {
            return Ok(e.clone());
        }
        let built = self.build_evaluator()?;
        Ok(self.built().evaluator.get_or_init(|| built).clone())
    }

    fn build_evaluator(&self) -> Result<Arc<dyn RelevanceEvaluator>> {
        let cfg = &self.config().crag;
        Ok(match cfg.evaluator {
            EvaluatorKind::Heuristic => Arc::new(HeuristicEvaluator::new(cfg.heuristic.clone())?),
            EvaluatorKind::Model => Arc::new(self.model_evaluator()?),
            EvaluatorKind::Learned => {
                let model = cfg.learned.clone().ok_or_else(|| {
                    Error::invalid_input("[crag] evaluator = \"learned\" needs a [crag.learned] section")
                })?;
                Arc::new(LearnedEvaluator::new(model)?)
            }
        })
    }

    /// The model-based CRAG evaluator of `[crag]`: its `scorer` (the retrieval's dense cosine, the embedding
    /// model, the LLM judge or the `[rerank]` cross-encoder) read on [`ScorerKind::scale`], with `[crag.model]`'s
    /// thresholds and aggregate, whatever `[crag] evaluator` says.
    ///
    /// # Errors
    /// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the scorer's model is missing (no embedding
    /// model, no LLM, no cross-encoder loaded: `[rerank] reranker` is not `cross-encoder` or its model did not
    /// load); [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for invalid thresholds.
    fn model_evaluator(&self) -> Result<ModelEvaluator> {
        let cfg = &self.config().crag;
        let scorer: Arc<dyn ragtune_core::Reranker> = match cfg.scorer {
            ScorerKind::Retrieval => Arc::new(RetrievalScoreScorer::new("dense")),
            ScorerKind::Dense => {
                let e = self
                    .embedder()
                    .ok_or_else(|| Error::unavailable("the dense-similarity scorer needs the embedding model"))?;
                Arc::new(DenseSimilarityScorer::new(e.clone()))
            }
            ScorerKind::Llm => {
                let llm =
                    self.llm().ok_or_else(|| Error::unavailable("the LLM relevance scorer needs an LLM (llm.url)"))?;
                llm_reranker(llm.clone())?
            }
            ScorerKind::CrossEncoder => self
                .cross_encoder()
                .map_err(|e| Error::unavailable(format!("the cross-encoder scorer is unavailable: {}", e.message())))?,
        };
        ModelEvaluator::new(scorer, cfg.scorer.scale(), cfg.model.clone())
    }

    /// Judges `candidates` for `question`, through the evaluation cache.
    pub(crate) async fn evaluate_cached(
        &self,
        ctx: &Ctx,
        question: &str,
        candidates: &[Candidate],
    ) -> Result<RelevanceJudgement> {
        let key = self.caches().map(|c| {
            let ids: Vec<&str> = candidates.iter().map(|c| c.chunk.id.as_str()).collect();
            format!(
                "{}|{}|{}|{}|{}",
                c.fingerprint,
                self.store_generation(),
                self.evaluator_name(),
                normalize_query(question),
                ids.join(",")
            )
        });
        if let (Some(c), Some(key)) = (self.caches(), &key)
            && let Some(hit) = c.evaluation.get(key)
        {
            return Ok(hit.as_ref().clone());
        }
        let judgement = self.evaluator()?.evaluate(ctx, question, candidates).await?;
        if let (Some(c), Some(key)) = (self.caches(), key) {
            c.evaluation.insert(key, Arc::new(judgement.clone()));
        }
        Ok(judgement)
    }

    /// Reranks `candidates` with the budgeted controller and the configured reranker (the LLM relevance judge or
    /// the cross-encoder); returns them, what it spent and the reranker's name.
    pub(crate) async fn rerank(
        &self,
        ctx: &Ctx,
        question: &str,
        candidates: Vec<Candidate>,
    ) -> Result<(Vec<Candidate>, Cost, String)> {
        let cfg = &self.config().rerank;
        let reranker = match cfg.reranker {
            RerankerKind::Llm => {
                let llm = self.llm().ok_or_else(|| Error::unavailable("reranking needs the LLM (llm.url)"))?;
                llm_reranker(llm.clone())?
            }
            // The engine's note says why when there is none.
            RerankerKind::CrossEncoder => self.cross_encoder()?,
        };
        let name = reranker.name().to_owned();
        let (estimator, scheduler) = cfg.policy.parts(1);
        let controller = ragtune_rerank::Controller::new(reranker).estimator(estimator).scheduler(scheduler).config(
            ragtune_rerank::ControllerConfig {
                k: self.config().pipeline.top_k.max(1).min(candidates.len().max(1)),
                ..Default::default()
            },
        );
        // With the complexity router, the question's route caps the pairs scored (`transform.routes.*.rerank_docs`).
        let mut max_docs = cfg.max_docs;
        let t = &self.config().transform;
        if t.kind == Transform::Routed {
            let (route, _) = ragtune_retrieve::transform::classify_heuristic(question);
            let cap = u64::from(t.routes.plan(route).rerank_docs);
            ctx.trace(
                ragtune_core::TraceEvent::new("rerank", "route_budget")
                    .detail("route", route.as_str())
                    .detail("rerank_docs", cap),
            );
            max_docs = max_docs.min(cap);
        }
        let mut rctx = ctx.clone();
        rctx.budget = Budget::new(Cost::new(u64::MAX, max_docs, u64::MAX));
        // The controller traces every batch and why it stopped; the reranker traces every call it makes.
        let retrieval: std::collections::HashMap<String, f32> =
            candidates.iter().map(|c| (c.chunk.id.clone(), c.score)).collect();
        let outcome = controller.run(&rctx, question, candidates).await?;
        let mut ranked = outcome.candidates();
        if cfg.retrieval_weight > 0.0 {
            ragtune_rerank::blend_reranked(&mut ranked, &name, &retrieval, cfg.retrieval_weight);
        }
        Ok((ranked, outcome.report.spent, name))
    }
}

/// The LLM as a relevance scorer (0–10), with one repair round for malformed output.
pub(crate) fn llm_reranker(llm: Arc<dyn Llm>) -> Result<Arc<dyn ragtune_core::Reranker>> {
    let inner = ragtune_rerank::LlmReranker::new(
        llm,
        ragtune_rerank::LlmRerankerConfig {
            repair: Some(prompts::REPAIR_JSON),
            ..ragtune_rerank::LlmRerankerConfig::new(prompts::RELEVANCE)
        },
    )?;
    Ok(Arc::new(inner))
}

fn unreachable_judge() -> FaithfulnessJudge {
    // The default configuration is valid (tested in ragtune-evaluators); this exists so that no code path panics.
    FaithfulnessJudge::new(ragtune_evaluators::faithfulness::JudgeConfig {
        supported_threshold: 0.7,
        partial_threshold: 0.4,
        embedding_weight: 0.0,
        max_context_chars: 6000,
        llm_only_when_unsure: true,
    })
    .expect("invariant: fixed thresholds are valid")
}

fn scorer_name(s: ScorerKind) -> &'static str {
    match s {
        ScorerKind::Retrieval => "retrieval",
        ScorerKind::Dense => "dense",
        ScorerKind::Llm => "llm",
        ScorerKind::CrossEncoder => "cross_encoder",
    }
}
