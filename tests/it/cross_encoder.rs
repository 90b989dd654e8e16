//! The cross-encoder reranker in the answer pipeline (as the reranker, the CRAG evaluator's scorer and the
//! extractive answer's sentence scorer) and in the evaluation bench, on the tiny model of
//! `crates/ragtune-embed/tests/data/tiny-cross-encoder`. Its weights are untrained: these tests check mechanics
//! (what is scored, within which budget, without an LLM, what the reports record), never ranking quality.
//!
//! They need ONNX Runtime (`cargo xtask models`); without it they print why they skip, unless
//! `RAGTUNE_REQUIRE_MODELS=1`, where its absence fails them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ragtune::core::Document;
use ragtune::pipeline::NoteKind;
use ragtune::rerank::RerankPolicy;
use ragtune::{
    Chunking, Config, ContextMode, EmbeddingMode, Engine, EvaluatorKind, RerankSettings, RerankerKind, ScorerKind,
    SentenceScorer,
};
use ragtune_eval::rerank::{EvalReranker, FullRerank, RerankEvalOptions};
use ragtune_eval::retrieval::{EvalOptions, run_eval};
use ragtune_testkit::fakes::{ScriptedFailure, ScriptedReranker};
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
        threads: 1,
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
async fn a_retrieval_weight_of_one_keeps_retrievals_order_among_the_reranked() {
    if !crate::onnx_runtime_provisioned() {
        return;
    }
    let question = "Which lack of a vitamin harmed crews on long voyages?";
    let order = |r: &ragtune::AskResponse| r.context.iter().map(|p| p.chunk_id.clone()).collect::<Vec<_>>();
    let dir = tempfile::tempdir().unwrap();
    let mut plain = config(dir.path(), &tiny_cross_encoder(), 5);
    plain.rerank.enabled = false;
    let retrieval = order(&indexed(plain).await.ask(question).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let mut blended = config(dir.path(), &tiny_cross_encoder(), 5);
    blended.rerank.retrieval_weight = 1.0;
    let r = indexed(blended).await.ask(question).await.unwrap();
    assert!(
        r.cost.stages["rerank"].docs >= 2,
        "the cross-encoder scored the candidates: {:?}",
        r.cost.stages["rerank"]
    );
    assert_eq!(order(&r), retrieval, "w = 1: the reranked passages keep retrieval's order");
    // The tiny model reorders this list (w = 0), so the test above is not the reranker agreeing with retrieval.
    let dir = tempfile::tempdir().unwrap();
    let alone = order(&indexed(config(dir.path(), &tiny_cross_encoder(), 5)).await.ask(question).await.unwrap());
    assert_ne!(alone, retrieval, "the cross-encoder alone orders the passages otherwise");
    let mut bad = config(dir.path(), &tiny_cross_encoder(), 5);
    bad.rerank.retrieval_weight = 1.5;
    let err = bad.validate().unwrap_err();
    assert!(err.to_string().contains("retrieval_weight must be between 0 and 1"), "{err}");
}

#[tokio::test]
async fn with_the_complexity_router_the_route_caps_the_pairs_reranked() {
    if !crate::onnx_runtime_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &tiny_cross_encoder(), 5);
    cfg.transform.kind = ragtune::Transform::Routed;
    // No LLM: every route retrieves without a transformation; the simple route may rerank one pair.
    for route in
        [&mut cfg.transform.routes.simple, &mut cfg.transform.routes.moderate, &mut cfg.transform.routes.complex]
    {
        route.transform = ragtune::Transform::None;
    }
    cfg.transform.routes.simple.rerank_docs = 1;
    let engine = indexed(cfg).await;
    let r = engine.ask("What causes scurvy?").await.unwrap();
    let budget =
        r.trace.iter().find(|e| e.stage == "rerank" && e.action == "route_budget").expect("the route's budget");
    assert_eq!((budget.detail["route"].as_str(), budget.detail["rerank_docs"].as_u64()), (Some("simple"), Some(1)));
    assert_eq!(r.cost.stages["rerank"].docs, 1, "the simple route's cap, under [rerank] max_docs = 5");
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

/// Evaluation options on the tiny BEIR set written under `dir` (cache beside it, top 10, no LLM).
fn tiny_eval(dir: &Path) -> EvalOptions {
    let data = dir.join("tiny");
    tiny_beir(&data);
    let mut opts = EvalOptions::new(&data);
    opts.cache_dir = dir.join("cache");
    opts.top_k = 10;
    opts.llm.url = String::new();
    opts
}

/// The tiny cross-encoder as the evaluations' reranker, its scores cached under `dir/scores`.
fn tiny_eval_reranker(dir: &Path) -> EvalReranker {
    let mut reranker = EvalReranker::new(RerankerKind::CrossEncoder, Some(tiny_cross_encoder().display().to_string()));
    reranker.score_cache = dir.join("scores");
    reranker
}

#[tokio::test]
async fn eval_rerank_sweeps_budgets_with_the_cross_encoder_and_no_llm() {
    if !crate::onnx_runtime_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut opts = tiny_eval(dir.path());
    let reranker = tiny_eval_reranker(dir.path());
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
    let mut opts = tiny_eval(dir.path());
    let plain = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert!(plain.config.get("rerank").is_none(), "a report without a rerank keeps its baseline's config");

    let reranker = tiny_eval_reranker(dir.path());
    opts.full_rerank = Some(FullRerank { reranker, depth: 2, retrieval_weight: 0.0 });
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

/// A lexical engine on a fresh store, no LLM, the cross-encoder `model` loaded for `[rerank]` with reranking off:
/// it is the model-based CRAG evaluator's scorer and the extractive answer's sentence scorer.
fn scorer_config(dir: &Path, model: &Path) -> Config {
    let mut cfg = config(dir, model, 2);
    cfg.rerank.enabled = false;
    cfg.crag.enabled = true;
    cfg.crag.evaluator = EvaluatorKind::Model;
    cfg.crag.scorer = ScorerKind::CrossEncoder;
    cfg.pipeline.sentence_scorer = SentenceScorer::CrossEncoder;
    cfg.pipeline.judge = false;
    cfg.pipeline.retry = false;
    cfg
}

fn generate_event(r: &ragtune::AskResponse) -> &ragtune::core::TraceEvent {
    r.trace.iter().find(|e| e.stage == "generate").unwrap_or_else(|| panic!("generated: {}", notes(r)))
}

fn model_calls(r: &ragtune::AskResponse) -> Vec<u64> {
    let calls = r.trace.iter().filter(|e| e.stage == "rerank" && e.action == "cross-encoder:tiny-cross-encoder");
    calls.map(|e| e.detail["pairs"].as_u64().unwrap()).collect()
}

#[tokio::test]
async fn the_cross_encoder_judges_the_retrieval_and_picks_the_extractive_sentences_without_reranking() {
    if !crate::onnx_runtime_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = indexed(scorer_config(dir.path(), &tiny_cross_encoder())).await;
    assert!(engine.notes().is_empty(), "loaded with reranking off: {:?}", engine.notes());
    let r = engine.ask("Which lack of a vitamin harmed crews on long voyages?").await.unwrap();
    assert_eq!(r.answer_kind, ragtune::AnswerKind::Extractive, "{}", notes(&r));

    // The CRAG judgement names the model; its score is a sigmoid of logits, in [0, 1].
    assert_eq!(r.crag.evaluator, "model:cross-encoder:tiny-cross-encoder", "{:?}", r.crag);
    assert!(r.crag.decision.is_some() && (0.0..=1.0).contains(&r.crag.score), "{:?}", r.crag);
    let evaluate = r.trace.iter().find(|e| e.stage == "evaluate").expect("evaluated");
    assert_eq!(evaluate.detail["evaluator"], "model:cross-encoder:tiny-cross-encoder", "{evaluate:?}");

    // The extractive answer's sentences were scored by the model in one call, and the trace says so.
    let generate = generate_event(&r);
    assert_eq!(generate.action, "extractive");
    assert_eq!(generate.detail["sentence_scorer"], "cross-encoder:tiny-cross-encoder", "{generate:?}");
    let sentences = generate.detail["sentences"].as_u64().expect("sentences counted");
    assert!(sentences >= 2, "{generate:?}");
    let calls = model_calls(&r);
    assert_eq!(calls.len(), 2, "one call to judge, one to pick sentences: {calls:?}");
    assert_eq!(calls[1], sentences, "every sentence of the context in the one call");
    assert!(r.answer.as_deref().is_some_and(|a| a.contains("[1]") || a.contains("[2]")), "{:?}", r.answer);
    // Nothing was reranked, and the model's tokens are not the LLM's.
    assert!(!r.trace.iter().any(|e| e.stage == "rerank" && e.action == "controller"));
    assert_eq!((r.cost.llm_calls, r.cost.tokens), (0, 0), "{:?}", r.cost);

    // Word overlap, today's default, asks the model nothing for the answer.
    let mut cfg = engine.config().clone();
    cfg.pipeline.sentence_scorer = SentenceScorer::Overlap;
    let engine = engine.reconfigure(cfg).unwrap();
    let r = engine.ask("Which lack of a vitamin harmed crews on long voyages?").await.unwrap();
    assert_eq!(generate_event(&r).detail["sentence_scorer"], "overlap");
    assert_eq!(model_calls(&r).len(), 1, "the judge's call only");
}

#[tokio::test]
async fn a_missing_or_failing_cross_encoder_scorer_falls_back_with_a_note() {
    // Needs nothing provisioned: without ONNX Runtime the model fails to load too.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-model");
    let engine = indexed(scorer_config(dir.path(), &missing)).await;
    let note = engine.notes().iter().find(|n| n.contains("the cross-encoder did not load")).cloned();
    let note = note.unwrap_or_else(|| panic!("{:?}", engine.notes()));
    assert!(
        note.starts_with(
            "the CRAG evaluator's cross-encoder scorer and cross-encoder sentence scoring of extractive answers are off"
        ),
        "{note}"
    );
    let r = engine.ask("What causes scurvy?").await.unwrap();
    assert!(r.answer.is_some(), "{}", notes(&r));
    assert!(r.notes.iter().any(|n| n.kind() == NoteKind::Capability && n.as_str() == note), "{}", notes(&r));
    let failed = r.notes.iter().find(|n| n.kind() == NoteKind::EvaluationFailed).expect("the judge failed, noted");
    assert!(failed.as_str().contains("cross-encoder scorer is unavailable"), "{failed}");
    let generate = generate_event(&r);
    assert_eq!(generate.detail["sentence_scorer"], "overlap", "{generate:?}");
    assert!(generate.detail.contains_key("sentence_scorer_unavailable"), "{generate:?}");

    // A scorer that fails at answer time: word overlap answers, and the answer says so.
    let failing = ScriptedReranker::new().named("cross-encoder:broken").failing(ScriptedFailure::Always);
    let engine = engine.with_cross_encoder(Some(Arc::new(failing)));
    assert!(engine.notes().iter().all(|n| !n.contains("cross-encoder")), "{:?}", engine.notes());
    let r = engine.ask("What causes scurvy?").await.unwrap();
    assert_eq!(r.answer_kind, ragtune::AnswerKind::Extractive, "{}", notes(&r));
    let fell_back = r.notes.iter().find(|n| n.kind() == NoteKind::SentenceScoring).expect("noted");
    assert!(fell_back.as_str().starts_with("sentence scoring fell back to word overlap"), "{fell_back}");
    assert!(r.notes.iter().any(|n| n.kind() == NoteKind::EvaluationFailed), "{}", notes(&r));
    let generate = generate_event(&r);
    assert_eq!(generate.detail["sentence_scorer"], "overlap", "{generate:?}");
    assert!(generate.detail.contains_key("sentence_scorer_error"), "{generate:?}");
    assert_eq!(r.answer, Some(ragtune_overlap_answer(&engine).await), "the answer word overlap gives");

    // The scorers ask for the [rerank] cross-encoder: with the LLM reranker configured there is none, and the
    // engine says why.
    let mut cfg = scorer_config(dir.path(), &missing);
    cfg.rerank.reranker = RerankerKind::Llm;
    let engine = engine.with_cross_encoder(None).reconfigure(cfg).unwrap();
    let note = engine.notes().iter().find(|n| n.contains("[rerank] reranker is not")).cloned();
    let note = note.unwrap_or_else(|| panic!("{:?}", engine.notes()));
    assert!(note.contains("set reranker = \"cross-encoder\" and model"), "{note}");
    let r = engine.ask("What causes scurvy?").await.unwrap();
    let failed = r.notes.iter().find(|n| n.kind() == NoteKind::EvaluationFailed).expect("noted");
    assert!(failed.as_str().contains("[rerank] reranker = \"cross-encoder\""), "{failed}");
    assert_eq!(generate_event(&r).detail["sentence_scorer"], "overlap");
}

/// The answer of `engine` to "What causes scurvy?" with word overlap picking the sentences.
async fn ragtune_overlap_answer(engine: &Engine) -> String {
    let mut cfg = engine.config().clone();
    cfg.pipeline.sentence_scorer = SentenceScorer::Overlap;
    let engine = engine.clone().reconfigure(cfg).unwrap();
    engine.ask("What causes scurvy?").await.unwrap().answer.unwrap()
}

#[tokio::test]
async fn eval_crag_and_calibrate_score_with_the_cross_encoder() {
    if !crate::onnx_runtime_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("crag");
    crate::crag_eval::tiny_beir(&data);
    let mut opts = EvalOptions::new(&data);
    opts.cache_dir = dir.path().join("cache");
    opts.split = "test".into();
    opts.retriever = "bm25".into();
    opts.llm.url = String::new();
    let mut cfg = Config::default();
    cfg.llm.url = String::new();
    cfg.crag.scorer = ScorerKind::CrossEncoder;
    cfg.rerank.reranker = RerankerKind::CrossEncoder;
    cfg.rerank.model = Some(tiny_cross_encoder().display().to_string());
    cfg.rerank.threads = 1;
    let report = ragtune_eval::crag::run_crag_eval(&opts, &cfg, 1, &mut |_| {}).await.unwrap();
    let row = &report.evaluators[1];
    assert_eq!(row.evaluator, "model:cross-encoder:tiny-cross-encoder", "{report:?}");
    assert!(report.failed_retrievals > 0 && report.failed_retrievals < report.queries, "{report:?}");
    let auc = row.score_auc.expect("an AUC over failed and successful retrievals");
    assert!((0.0..=1.0).contains(&auc), "{auc}");
    assert_eq!(row.decisions.values().sum::<usize>(), report.queries);
    assert!(ragtune_eval::crag::crag_table(&report).contains("model:cross-encoder:tiny-cross-encoder"));
    // The scores are cached beside the indexes, so the calibration below scores nothing again.
    let scores = opts.cache_dir.join("rerank-scores");
    let cached = std::fs::read_dir(&scores).unwrap().count();
    assert!(cached > 0);

    let c = ragtune_eval::crag::run_calibration(&opts, &cfg, EvaluatorKind::Model, 1, 0.9, &mut |_| {}).await.unwrap();
    assert!(0.0 <= c.lower && c.lower < c.upper && c.upper <= 1.0, "{c:?}");
    assert_eq!(std::fs::read_dir(&scores).unwrap().count(), cached);
    let text = ragtune_eval::crag::calibration_toml(&c, &cfg, EvaluatorKind::Model, "crag", "test", 1).unwrap();
    let sha = ragtune::provision::models::sha256_file(&tiny_cross_encoder().join("model.onnx")).unwrap();
    assert!(text.contains(&format!("sha256:{sha}")), "{text}");
    let written = Config::from_toml(&text).unwrap();
    assert_eq!((written.crag.evaluator, written.crag.scorer), (EvaluatorKind::Model, ScorerKind::CrossEncoder));
    assert_eq!((written.crag.model.upper, written.crag.model.lower), (c.upper, c.lower));
    assert_eq!(
        (written.rerank.reranker, written.rerank.model.as_deref()),
        (RerankerKind::CrossEncoder, cfg.rerank.model.as_deref())
    );
    assert!(!written.rerank.enabled, "reranking stays as it was");

    // The scorers this evaluation does not measure are refused before anything is indexed.
    cfg.crag.scorer = ScorerKind::Llm;
    let err = ragtune_eval::crag::run_crag_eval(&opts, &cfg, 1, &mut |_| {}).await.unwrap_err();
    assert!(err.to_string().contains("not `llm`"), "{err}");
}
