//! The budgeted reranking controller with the real LLM reranker (`ragtune_llm::prompts::RELEVANCE`) on the local
//! LLM: structure and budget, not wording.

use std::sync::Arc;

use ragtune::core::{Budget, Candidate, Chunk, Cost, Ctx, Llm, Reranker, ScoredHit};
use ragtune::llm::{LlmConfig, OpenAiClient, prompts};
use ragtune::rerank::{
    BatchConfig, Controller, ControllerConfig, LlmReranker, LlmRerankerConfig, StopReason, UncertaintyConfig,
    UncertaintyEstimator, UncertaintyScheduler,
};

fn candidates() -> Vec<Candidate> {
    let texts = [
        "Scurvy is a disease caused by a lack of vitamin C.",
        "The stock market fell sharply on Monday.",
        "James Lind showed that citrus fruit cures scurvy.",
        "Rickets is caused by a lack of vitamin D.",
        "A recipe for apple pie with cinnamon.",
        "Sailors on long voyages suffered from scurvy.",
    ];
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let id = format!("d{i}");
            #[allow(clippy::cast_precision_loss)]
            let hit = ScoredHit { chunk: Chunk::new(&id, &id, *t), score: 1.0 - i as f32 * 0.1 };
            Candidate::from_hit(hit, "bm25", u32::try_from(i + 1).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn local_llm_reranker_scores_passages_and_the_controller_keeps_to_its_budget() {
    let url = std::env::var("RAGTUNE_LLM_URL").ok().filter(|u| !u.is_empty()).or_else(ragtune::local_llm_url);
    let Some(url) = url else {
        assert!(
            std::env::var("RAGTUNE_REQUIRE_LLM").map_or(true, |v| v != "1"),
            "RAGTUNE_REQUIRE_LLM=1 but RAGTUNE_LLM_URL is not set"
        );
        eprintln!("SKIPPED: RAGTUNE_LLM_URL is not set; run `cargo xtask llm start` to test the LLM reranker");
        return;
    };
    let llm: Arc<dyn Llm> = Arc::new(
        OpenAiClient::new(LlmConfig {
            base_url: url,
            timeout: std::time::Duration::from_secs(120),
            ..LlmConfig::default()
        })
        .unwrap(),
    );
    let reranker = Arc::new(
        LlmReranker::new(
            llm,
            LlmRerankerConfig { repair: Some(prompts::REPAIR_JSON), ..LlmRerankerConfig::new(prompts::RELEVANCE) },
        )
        .unwrap(),
    );

    // The seam directly: one score in 0..=10 per candidate.
    let scores = reranker.score(&Ctx::new(), "what causes scurvy?", &candidates()[..2]).await.unwrap();
    assert_eq!(scores.len(), 2);
    assert!(scores.iter().all(|s| (0.0..=10.0).contains(s)), "{scores:?}");

    // The controller with room for three documents: it reranks at most three and never spends more.
    let controller = Controller::new(reranker)
        .estimator(Arc::new(UncertaintyEstimator::new(UncertaintyConfig::default())))
        .scheduler(Arc::new(UncertaintyScheduler::new(BatchConfig { batch_size: 2, ..BatchConfig::default() })))
        .config(ControllerConfig { k: 2, ..ControllerConfig::default() });
    let ctx = Ctx::new().with_budget(Budget::new(Cost::new(u64::MAX, 3, u64::MAX)));
    let outcome = controller.run(&ctx, "what causes scurvy?", candidates()).await.unwrap();
    let r = &outcome.report;
    assert!(r.spent.docs <= 3 && r.reranked + r.dropped <= 3, "{r:?}");
    assert!(r.spent.calls >= u64::try_from(r.reranked).unwrap(), "every reranked document cost a call: {r:?}");
    assert!(
        matches!(r.stopped_by, StopReason::BudgetExhausted | StopReason::Converged | StopReason::NoCandidates),
        "{r:?}"
    );
    assert_eq!(outcome.ranking().len(), 6, "every active candidate is still ranked");
}
