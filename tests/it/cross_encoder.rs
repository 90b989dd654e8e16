//! The cross-encoder reranker in the answer pipeline and in the evaluation bench, on the tiny model of
//! `crates/ragtune-embed/tests/data/tiny-cross-encoder`. Its weights are untrained: these tests check mechanics
//! (what is scored, within which budget, without an LLM, what the reports record), never ranking quality.
//!
//! They need ONNX Runtime (`cargo xtask models`); without it they print why they skip, unless
//! `RAGTUNE_REQUIRE_MODELS=1`, where its absence fails them.

use std::path::{Path, PathBuf};

use ragtune::core::Document;
use ragtune::pipeline::NoteKind;
use ragtune::rerank::RerankPolicy;
use ragtune::{Chunking, Config, ContextMode, EmbeddingMode, Engine, RerankSettings, RerankerKind};
use ragtune_eval::rerank::{EvalReranker, FullRerank, RerankEvalOptions};
use ragtune_eval::retrieval::{EvalOptions, run_eval};
use ragtune_testkit::fixtures::tiny_beir;

fn tiny_cross_encoder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/ragtune-embed/tests/data/tiny-cross-encoder")
}

/// A lexical engine on a fresh store, no LLM, reranking with the cross-encoder `model` (at most `max_docs`
/// documents a question).
fn config(dir: &Path, model: &Path, max_docs: u64) -> Config {
    let mut cfg = Config::default();
    cfg.store.path = dir.join("store");
    cfg.embedding.mode = EmbeddingMode::Off;
    cfg.pipeline.context = ContextMode::Full;
    cfg.rerank = RerankSettings {
        enabled: true,
        reranker: RerankerKind::CrossEncoder,
        model: Some(model.display().to_string()),
        max_docs,
        policy: RerankPolicy::Greedy,
        ..RerankSettings::default()
    };
    cfg
}

async fn indexed(cfg: Config) -> Engine {
    let mut engine = Engine::open(cfg).await.expect("the engine opens");
    let docs: Vec<Document> = crate::pipeline::DOCS.iter().map(|(id, text)| Document::new(*id, *text)).collect();
    engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    engine
}

fn notes(r: &ragtune::AskResponse) -> String {
    r.notes.iter().map(ragtune::pipeline::Note::as_str).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn the_cross_encoder_reranks_inside_the_pipeline_within_its_budget_and_without_an_llm() {
    if !crate::onnx_runtime_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = indexed(config(dir.path(), &tiny_cross_encoder(), 2)).await;
    assert!(engine.llm().is_none(), "no LLM is configured");
    assert!(engine.notes().is_empty(), "{:?}", engine.notes());
    let r = engine.ask("Which lack of a vitamin harmed crews on long voyages?").await.unwrap();
    assert!(r.answer.is_some(), "{}", notes(&r));
    assert!(r.notes.iter().all(|n| n.kind() != NoteKind::RerankSkipped), "{}", notes(&r));
    assert!(r.crag.final_count > 2, "more candidates than the budget: {:?}", r.crag);

    // The stage names its reranker and what it scored; the controller stopped at the budget.
    let stage = r.trace.iter().find(|e| e.stage == "rerank" && e.action == "controller");
    let stage = stage.unwrap_or_else(|| panic!("the rerank stage ran: {}", notes(&r)));
    assert_eq!(stage.detail["reranker"], "cross-encoder:tiny-cross-encoder", "{stage:?}");
    assert_eq!(stage.detail["pairs"], 2, "{stage:?}");
    let stop = r.trace.iter().find(|e| e.stage == "rerank" && e.action == "stop").expect("the controller stopped");
    assert_eq!(stop.detail["reranked"], 2, "{stop:?}");
    assert!(stop.detail["stopped_by"].as_str().unwrap_or("").contains("budget"), "{stop:?}");

    // Every pair went through the model, which traced its calls: pairs, tokens, one call each.
    let calls: Vec<_> =
        r.trace.iter().filter(|e| e.stage == "rerank" && e.action == "cross-encoder:tiny-cross-encoder").collect();
    assert!(!calls.is_empty(), "the model was called");
    let pairs: u64 = calls.iter().map(|e| e.detail["pairs"].as_u64().unwrap()).sum();
    assert_eq!(pairs, 2);
    assert!(calls.iter().all(|e| e.cost.tokens > 0 && e.cost.calls == 1), "{calls:?}");
    assert_eq!(r.cost.stages["rerank"].docs, 2);
    // Its tokens are the cross-encoder's, not the LLM's.
    assert_eq!((r.cost.llm_calls, r.cost.tokens), (0, 0), "{:?}", r.cost);
    assert!(r.trace.iter().all(|e| !e.is_llm_call()));
}

#[tokio::test]
async fn a_cross_encoder_that_does_not_load_is_an_engine_note_and_questions_still_answer() {
    // Needs nothing provisioned: without ONNX Runtime the model fails to load too, for that reason.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-model");
    let engine = indexed(config(dir.path(), &missing, 2)).await;
    let note = engine.notes().iter().find(|n| n.starts_with("reranking is off: the cross-encoder did not load"));
    let note = note.unwrap_or_else(|| panic!("{:?}", engine.notes())).clone();
    if crate::onnx_runtime_provisioned() {
        assert!(note.contains("no-such-model"), "{note}");
    }
    let r = engine.ask("What causes scurvy?").await.unwrap();
    assert!(r.answer.is_some(), "{}", notes(&r));
    let capability: Vec<&str> =
        r.notes.iter().filter(|n| n.kind() == NoteKind::Capability).map(ragtune::pipeline::Note::as_str).collect();
    assert!(capability.contains(&note.as_str()), "{}", notes(&r));
    assert!(r.notes.iter().any(|n| n.kind() == NoteKind::RerankSkipped), "{}", notes(&r));
    assert!(!r.trace.iter().any(|e| e.stage == "rerank" && e.action.starts_with("cross-encoder")));

    // Reconfigured with a model that loads, the note goes and the cross-encoder reranks.
    if crate::onnx_runtime_provisioned() {
        let cfg = config(dir.path(), &tiny_cross_encoder(), 1);
        let engine = engine.reconfigure(cfg).unwrap();
        assert!(engine.notes().is_empty(), "{:?}", engine.notes());
        let r = engine.ask("What causes scurvy?").await.unwrap();
        let stage = r.trace.iter().find(|e| e.stage == "rerank" && e.action == "controller").expect("reranked");
        assert_eq!(stage.detail["pairs"], 1, "{stage:?}");
    }
}

#[tokio::test]
async fn eval_rerank_sweeps_budgets_with_the_cross_encoder_and_no_llm() {
    if !crate::onnx_runtime_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tiny");
    tiny_beir(&data);
    let mut opts = EvalOptions::new(&data);
    opts.cache_dir = dir.path().join("cache");
    opts.top_k = 10;
    opts.llm.url = String::new();
    let mut reranker = EvalReranker::new(RerankerKind::CrossEncoder, Some(tiny_cross_encoder().display().to_string()));
    reranker.score_cache = dir.path().join("scores");
    opts.rerank = Some(RerankEvalOptions {
        reranker,
        pool: 3,
        budgets: vec![0.5, 1.0],
        policies: vec![RerankPolicy::Greedy, RerankPolicy::Uncertainty],
        ..RerankEvalOptions::default()
    });
    let report = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert_eq!(report.cost.llm_calls, 0);
    let r = report.rerank.expect("the rerank section");
    assert_eq!(r.reranker, "cross-encoder:tiny-cross-encoder");
    assert_eq!(r.queries, 2);
    assert!(r.full_pairs_per_query > 0.0 && r.full_pairs_per_query <= 3.0, "{r:?}");
    assert_eq!(r.points.len(), 6, "baseline + 2 policies at 2 budgets");
    for p in &r.points {
        assert!(p.pairs_per_query <= (p.budget * 3.0).ceil() + 1e-9, "{p:?} stays within its budget");
        assert!((0.0..=1.0).contains(&p.ndcg_at_10), "{p:?}");
    }
    // Every pair's score is cached once; a second run replays them and writes no more.
    let cached = || std::fs::read_dir(dir.path().join("scores")).unwrap().count();
    let files = cached();
    assert!(files > 0);
    let again = run_eval(&opts, &mut |_| {}).await.unwrap().rerank.unwrap();
    assert_eq!(cached(), files);
    let sweep = |r: &ragtune_eval::RerankEvalReport| -> Vec<String> {
        r.points.iter().map(|p| format!("{} {} {} {}", p.policy, p.budget, p.ndcg_at_10, p.pairs_per_query)).collect()
    };
    assert_eq!(again.full_ndcg_at_10, r.full_ndcg_at_10);
    assert_eq!(sweep(&again), sweep(&r), "the replay scores as the first run did");
}

#[tokio::test]
async fn eval_retrieval_reports_the_run_the_cross_encoder_reranked_and_names_the_model() {
    if !crate::onnx_runtime_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tiny");
    tiny_beir(&data);
    let mut opts = EvalOptions::new(&data);
    opts.cache_dir = dir.path().join("cache");
    opts.top_k = 10;
    opts.llm.url = String::new();
    let plain = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert!(plain.config.get("rerank").is_none(), "a report without a rerank keeps its baseline's config");

    let mut reranker = EvalReranker::new(RerankerKind::CrossEncoder, Some(tiny_cross_encoder().display().to_string()));
    reranker.score_cache = dir.path().join("scores");
    opts.full_rerank = Some(FullRerank { reranker, depth: 2 });
    let report = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert_eq!(report.queries, 2);
    assert_eq!(report.cost.llm_calls, 0);
    let rerank = &report.config["rerank"];
    assert_eq!(rerank["reranker"], "cross-encoder");
    assert_eq!(rerank["model"], "tiny-cross-encoder");
    assert_eq!(rerank["depth"], 2);
    assert_eq!(rerank["max_length"], 256);
    let sha = ragtune::provision::models::sha256_file(&tiny_cross_encoder().join("model.onnx")).unwrap();
    assert_eq!(rerank["model_sha256"], sha.as_str());
    assert_ne!(report.config, plain.config, "a reranked report never compares with a plain baseline");
    for (k, v) in &report.metrics {
        assert!((0.0..=1.0).contains(v), "{k} {v}");
    }
    assert!(ragtune_eval::summary_table(&report).contains("reranked     the top 2 passages by cross-encoder"));
    // Each query's top two passages were scored once, and cached.
    assert!(std::fs::read_dir(dir.path().join("scores")).unwrap().count() <= 4);
}
