//! Corrective-RAG statistics and threshold calibration end to end, on a tiny BEIR dataset with hybrid retrieval
//! and the real embedding model (the model-based evaluator scores with the dense cosine hybrid retrieval computed).
//!
//! Needs the model provisioned by `cargo xtask models`; without it the test says why it skips, unless
//! `RAGTUNE_REQUIRE_MODELS=1` (set by `cargo xtask ci`), where a missing model fails it.

use std::io::Write;
use std::path::Path;

use ragtune::evaluators::crag::FitOptions;
use ragtune::provision::ModelLayout;
use ragtune::{Config, EvaluatorKind};
use ragtune_eval::crag::{
    calibration_toml, crag_table, heuristic_thresholds, learned_table, learned_toml, run_calibration, run_crag_eval,
    run_learned_calibration,
};
use ragtune_eval::retrieval::EvalOptions;

fn provisioned() -> bool {
    let layout = ModelLayout::new(ragtune::ragtune_home());
    if layout.is_provisioned() {
        return true;
    }
    let msg = format!("models are not provisioned under {}: run `cargo xtask models`", layout.home().display());
    assert!(std::env::var("RAGTUNE_REQUIRE_MODELS").map_or(true, |v| v != "1"), "RAGTUNE_REQUIRE_MODELS=1 but {msg}");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {msg}");
    false
}

/// Eight documents on distinct topics; every query is judged against one of them. At k = 1 the queries asking
/// for their own topic succeed, and the ones judged against another topic's document fail.
pub(crate) fn tiny_beir(dir: &Path) {
    std::fs::create_dir_all(dir.join("qrels")).unwrap();
    let docs = [
        ("d1", "Scurvy", "Scurvy is a disease caused by a lack of vitamin C in the diet of sailors."),
        ("d2", "Rickets", "Rickets softens the bones of children and is caused by a lack of vitamin D."),
        ("d3", "Goitre", "A goitre is a swelling of the thyroid gland linked to iodine deficiency."),
        ("d4", "Volcano", "A volcano is a rupture in the crust of a planet where lava and ash escape."),
        ("d5", "Violin", "The violin is a wooden string instrument played with a bow."),
        ("d6", "Chess", "Chess is a board game for two players on a checkered board of 64 squares."),
        ("d7", "Glacier", "A glacier is a persistent body of dense ice moving under its own weight."),
        ("d8", "Espresso", "Espresso is coffee brewed by forcing hot water through finely ground beans."),
    ];
    let corpus: Vec<String> = docs
        .iter()
        .map(|(id, title, text)| format!(r#"{{"_id": "{id}", "title": "{title}", "text": "{text}"}}"#))
        .collect();
    std::fs::write(dir.join("corpus.jsonl"), corpus.join("\n")).unwrap();
    let queries = [
        ("q1", "what causes scurvy in sailors"),
        ("q2", "why do children get soft bones"),
        ("q3", "swelling of the thyroid gland"),
        ("q4", "where does lava come from"),
        ("q5", "which instrument is played with a bow"),
        ("q6", "how many squares on a chess board"),
        ("q7", "how fast do glaciers of ice move"),
        ("q8", "how is espresso coffee brewed"),
        ("q9", "best recipe for apple pie"),
        ("q10", "stock market prices today"),
        ("q11", "the rules of rugby football"),
        ("q12", "how to repair a bicycle tyre"),
    ];
    let lines: Vec<String> =
        queries.iter().map(|(id, text)| format!(r#"{{"_id": "{id}", "text": "{text}"}}"#)).collect();
    std::fs::write(dir.join("queries.jsonl"), lines.join("\n")).unwrap();
    // Off-topic queries are judged against a document they cannot retrieve first: failed retrievals.
    let judged = [
        ("q1", "d1"),
        ("q2", "d2"),
        ("q3", "d3"),
        ("q4", "d4"),
        ("q5", "d5"),
        ("q6", "d6"),
        ("q7", "d7"),
        ("q8", "d8"),
        ("q9", "d3"),
        ("q10", "d7"),
        ("q11", "d2"),
        ("q12", "d5"),
    ];
    let qrels: String = judged.iter().map(|(q, d)| format!("{q}\t{d}\t1\n")).collect();
    for split in ["train", "test"] {
        std::fs::write(dir.join(format!("qrels/{split}.tsv")), format!("query-id\tcorpus-id\tscore\n{qrels}")).unwrap();
    }
}

/// The tiny dataset written under `dir`, its train split retrieved with hybrid retrieval, indexes cached there.
fn tiny_train(dir: &Path) -> EvalOptions {
    let data = dir.join("tiny");
    tiny_beir(&data);
    let mut opts = EvalOptions::new(&data);
    opts.cache_dir = dir.join("cache");
    opts.retriever = "hybrid".into();
    opts.split = "train".into();
    opts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn calibration_on_train_and_decision_statistics_on_test() {
    if !provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut opts = tiny_train(dir.path());
    let config = Config::default();

    // Calibration on train: the two thresholds are ordered, and they separate on-topic from off-topic queries.
    let fit = run_calibration(&opts, &config, EvaluatorKind::Model, 1, 0.9, &mut |_| {}).await.unwrap();
    assert_eq!((fit.samples, fit.failures), (12, 4), "{fit:?}");
    assert!(0.0 <= fit.lower && fit.lower < fit.upper && fit.upper <= 1.0, "{fit:?}");
    assert!(fit.incorrect_recall > 0.0 && fit.incorrect_precision > 0.0, "{fit:?}");

    // The written configuration is one the engine reads, with the fitted thresholds.
    let toml = calibration_toml(&fit, &config, EvaluatorKind::Model, "tiny", "train", 1).unwrap();
    let calibrated = Config::from_toml(&toml).unwrap();
    assert_eq!((calibrated.crag.model.upper, calibrated.crag.model.lower), (fit.upper, fit.lower));
    // It carries the fusion of the retrievals it was fitted on, so a later default fusion leaves it as fitted.
    assert_eq!(calibrated.hybrid, config.hybrid);
    let mut other = config.clone();
    other.hybrid = ragtune::HybridSettings {
        fusion: ragtune::FusionMethod::Rrf,
        adaptive: 2.0,
        bm25_weight: 0.35,
        ..config.hybrid
    };
    let text = calibration_toml(&fit, &other, EvaluatorKind::Model, "tiny", "train", 1).unwrap();
    assert_eq!(Config::from_toml(&text).unwrap().hybrid, other.hybrid, "{text}");
    assert!(text.contains("bm25_weight = 0.35\n"), "numbers as given: {text}");

    // Decision statistics on test with those thresholds.
    opts.split = "test".into();
    let mut log = Vec::new();
    let report = run_crag_eval(&opts, &calibrated, 1, &mut |l| log.push(l.to_owned())).await.unwrap();
    assert_eq!((report.queries, report.failed_retrievals, report.k), (12, 4, 1), "{report:?}");
    assert_eq!(report.evaluators.len(), 2);
    for s in &report.evaluators {
        assert_eq!(s.decisions.values().sum::<usize>(), 12, "every query gets one decision: {s:?}");
        for v in [s.incorrect_precision, s.incorrect_recall, s.correct_failure_rate] {
            assert!((0.0..=1.0).contains(&v), "{s:?}");
        }
        let auc = s.score_auc.expect("some queries failed and some succeeded");
        assert!((0.0..=1.0).contains(&auc), "{s:?}");
    }
    // The model-based evaluator uses the calibrated thresholds, and its score ranks the off-topic queries lower.
    let model = &report.evaluators[1];
    assert_eq!(model.thresholds, (fit.upper, fit.lower));
    assert!(model.score_auc.unwrap() > 0.5, "{model:?}");
    // Here the separation is clean: INCORRECT flags exactly the four off-topic queries.
    assert_eq!(model.decisions.get("INCORRECT"), Some(&4), "{model:?}");
    assert_eq!((model.incorrect_precision, model.incorrect_recall), (1.0, 1.0), "{model:?}");
    assert!(report.corrected <= report.queries);
    assert!((0.0..=1.0).contains(&report.ndcg_without_correction));
    let table = crag_table(&report);
    assert!(table.contains("score AUC") && table.contains("model:retrieval"), "{table}");

    // Same inputs, same report.
    let again = run_crag_eval(&opts, &calibrated, 1, &mut |_| {}).await.unwrap();
    assert_eq!(again, report);

    // The heuristic evaluator calibrated the same way: its file sets its thresholds and keeps its weights, and
    // with them it flags the off-topic queries (with the default thresholds it never flags one on SciFact).
    opts.split = "train".into();
    let hfit = run_calibration(&opts, &config, EvaluatorKind::Heuristic, 1, 0.9, &mut |_| {}).await.unwrap();
    assert!(0.0 <= hfit.lower && hfit.lower < hfit.upper && hfit.upper <= 1.0, "{hfit:?}");
    let htoml = calibration_toml(&hfit, &config, EvaluatorKind::Heuristic, "tiny", "train", 1).unwrap();
    let hcal = Config::from_toml(&htoml).unwrap_or_else(|e| panic!("{e}\n{htoml}"));
    assert_eq!(hcal.crag.evaluator, EvaluatorKind::Heuristic);
    let (relevant, partial) = heuristic_thresholds(&hfit);
    assert_eq!((hcal.crag.heuristic.relevant_threshold, hcal.crag.heuristic.partial_threshold), (relevant, partial));
    assert!(relevant < hfit.upper && partial == hfit.lower, "RELEVANT is `> relevant`, CORRECT `>= upper`");
    assert_eq!(hcal.crag.heuristic.weights, config.crag.heuristic.weights);
    assert_eq!(hcal.hybrid, config.hybrid);
    opts.split = "test".into();
    let hreport = run_crag_eval(&opts, &hcal, 1, &mut |_| {}).await.unwrap();
    let heuristic = &hreport.evaluators[0];
    assert_eq!(heuristic.thresholds, (relevant, partial));
    assert!(heuristic.incorrect_recall > 0.0, "{heuristic:?}");

    // k = 0 is refused with a clear error.
    let err = run_crag_eval(&opts, &calibrated, 0, &mut |_| {}).await.unwrap_err();
    assert!(err.to_string().contains("k must be at least 1"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_learned_evaluator_is_fitted_on_train_and_compared_on_test() {
    if !provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut opts = tiny_train(dir.path());
    let config = Config::default();

    // Fitted on train: 12 queries, 4 failed; too few failures for 5 folds, so the thresholds come from the model's
    // own probabilities, and it ranks the off-topic queries below the others.
    let fit = run_learned_calibration(&opts, &config, 1, &FitOptions::default(), &mut |_| {}).await.unwrap();
    assert_eq!((fit.calibration.samples, fit.calibration.failures), (12, 4), "{fit:?}");
    assert!(!fit.out_of_fold);
    assert!(fit.train_auc.unwrap() > 0.9, "{}", learned_table(&fit));
    assert!(learned_table(&fit).contains("dense_top"));
    // Same split, same model.
    let again = run_learned_calibration(&opts, &config, 1, &FitOptions::default(), &mut |_| {}).await.unwrap();
    assert_eq!(again.model, fit.model);

    // The written file is a configuration the engine reads, with the model and the evaluator selected.
    let toml = learned_toml(&fit, &config, "tiny", "train", "hybrid", 1).unwrap();
    let learned = Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    assert_eq!(learned.crag.evaluator, EvaluatorKind::Learned);
    assert_eq!(learned.crag.learned.as_ref(), Some(&fit.model));
    assert_eq!(learned.crag.model, config.crag.model);
    assert_eq!(learned.hybrid, config.hybrid);
    assert!(toml.starts_with("# Written by `ragtune calibrate --evaluator learned` from tiny `train`"), "{toml}");

    // On test (the same queries in this fixture), the report has a third row, the learned evaluator's.
    opts.split = "test".into();
    let report = run_crag_eval(&opts, &learned, 1, &mut |_| {}).await.unwrap();
    assert_eq!(report.evaluators.len(), 3);
    let row = &report.evaluators[2];
    assert_eq!(row.evaluator, "learned");
    assert_eq!(row.thresholds, (fit.model.upper, fit.model.lower));
    assert_eq!(row.decisions.values().sum::<usize>(), 12, "{row:?}");
    assert!(row.score_auc.unwrap() > 0.9, "{row:?}");
    assert!(row.incorrect_recall > 0.0, "{row:?}");
    assert!(crag_table(&report).contains("learned"));
    assert_eq!(run_crag_eval(&opts, &learned, 1, &mut |_| {}).await.unwrap(), report);

    // A split where every retrieval succeeds cannot be fitted: a clear error.
    opts.split = "train".into();
    opts.limit = Some(3);
    let err = run_learned_calibration(&opts, &config, 1, &FitOptions::default(), &mut |_| {}).await.unwrap_err();
    assert!(err.to_string().contains("every one of the 3 retrievals succeeded"), "{err}");
}
