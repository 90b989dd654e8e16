//! The hybrid fusion fitted on a training split end to end (`ragtune calibrate --fusion`), on the tiny BEIR dataset of
//! the CRAG test with the real embedding model: the grid's numbers are the ones `ragtune eval retrieval` measures for
//! the same settings, and the written file makes the evaluation measure the fitted fusion.
//!
//! Needs the model provisioned by `cargo xtask models`; without it the test says why it skips, unless
//! `RAGTUNE_REQUIRE_MODELS=1` (set by `cargo xtask ci`), where a missing model fails it.

use ragtune::Config;
use ragtune::retrieve::FusionMethod;
use ragtune_eval::fusion::{DatasetFit, FusionGrid, Levels, Stress, fusion_toml, joint_fit, run_fusion_calibration};
use ragtune_eval::retrieval::{EvalOptions, run_eval};

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_fusion_fitted_on_train_is_what_eval_measures_with_the_written_file() {
    if !crate::models_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tiny");
    crate::crag_eval::tiny_beir(&data);
    let mut opts = EvalOptions::new(&data);
    opts.cache_dir = dir.path().join("cache");
    opts.split = "train".into();
    opts.retriever = "hybrid".into();
    let log = &mut |_: &str| {};

    let stress: Stress = "bm25:1".parse().unwrap();
    let fits = run_fusion_calibration(&opts, &FusionGrid::default(), &[stress], log).await.unwrap();
    let names: Vec<&str> = fits.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["tiny", "tiny+bm25-typos-1"]);
    let (fit, stressed) = (fits[0].fit.clone(), &fits[1].fit);
    // The stressed variant asks BM25 the queries with typos and keeps the dense lists: dense alone is the same
    // number, BM25 alone loses, and the grid is the same one (so the joint fit can choose across both).
    assert_eq!(stressed.dense_alone, fit.dense_alone);
    assert!(stressed.bm25_alone < fit.bm25_alone, "{} >= {}", stressed.bm25_alone, fit.bm25_alone);
    assert_eq!(stressed.points.len(), fit.points.len());
    joint_fit(fits.clone(), None).unwrap();
    assert_eq!((fit.queries, fit.depth, fit.points.len()), (12, 100, 3 * 6 * 21), "{fit:?}");
    assert!(fit.best.ndcg_at_10 >= fit.bm25_alone.max(fit.dense_alone), "{fit:?}");

    // The grid fuses with the engine's function: convex fusion at BM25 0.5 / dense 0.5, adaptive 0.5 (ADR 0019's
    // default) and RRF at equal weights are points of the grid, and its ends are the retrievers alone, each scored
    // as `eval retrieval` scores it.
    let ndcg = |r: &ragtune_eval::EvalReport| r.metrics["ndcg@10"];
    let point = |m: FusionMethod, adaptive: f32, w: f32| {
        *fit.points
            .iter()
            .find(|p| p.method == m && p.adaptive == adaptive && p.levels.is_none() && p.dense_weight == w)
            .unwrap()
    };
    let adr19 = ragtune::HybridSettings {
        fusion: FusionMethod::Convex,
        bm25_weight: 0.5,
        dense_weight: 0.5,
        adaptive: 0.5,
        level_slope: 0.0,
        ..ragtune::HybridSettings::default()
    };
    let hybrid = run_eval(&EvalOptions { hybrid: adr19, ..opts.clone() }, log).await.unwrap();
    assert_eq!(ndcg(&hybrid), point(FusionMethod::Convex, 0.5, 0.5).ndcg_at_10);
    assert!(hybrid.config["fusion"].get("levels").is_none(), "{}", hybrid.config);
    // RRF at equal weights, fixed, levels off (as `adr19`).
    let rrf = ragtune::HybridSettings {
        fusion: FusionMethod::Rrf,
        bm25_weight: 1.0,
        dense_weight: 1.0,
        adaptive: 0.0,
        ..adr19
    };
    let report = run_eval(&EvalOptions { hybrid: rrf, ..opts.clone() }, log).await.unwrap();
    assert_eq!(ndcg(&report), point(FusionMethod::Rrf, 0.0, 0.5).ndcg_at_10);
    for (retriever, alone) in [("bm25", fit.bm25_alone), ("dense", fit.dense_alone)] {
        let report = run_eval(&EvalOptions { retriever: retriever.into(), ..opts.clone() }, log).await.unwrap();
        assert_eq!(ndcg(&report), alone, "{retriever}");
    }

    // Level weights: the engine's hybrid retriever (terms counted by its BM25 encoder) scores what the fit's point
    // with the same levels scores.
    let levels = Levels { bm25: 1.5, dense: 0.55, slope: 5.0 };
    let grid = FusionGrid { levels: vec![levels], ..FusionGrid::default() };
    let with_levels = run_fusion_calibration(&opts, &grid, &[], log).await.unwrap();
    let p = *with_levels[0].fit.points.iter().find(|p| p.levels == Some(levels) && p.dense_weight == 0.6).unwrap();
    let levelled = ragtune::HybridSettings {
        fusion: FusionMethod::Convex,
        adaptive: 0.0,
        bm25_weight: 0.4,
        dense_weight: 0.6,
        bm25_level: 1.5,
        dense_level: 0.55,
        level_slope: 5.0,
        ..ragtune::HybridSettings::default()
    };
    let report = run_eval(&EvalOptions { hybrid: levelled, ..opts.clone() }, log).await.unwrap();
    assert_eq!(ndcg(&report), p.ndcg_at_10);
    assert_eq!(
        report.config["fusion"]["levels"],
        serde_json::json!({"bm25": 1.5, "dense": f64::from(0.55f32), "slope": 5.0})
    );
    // The engine's default (ADR 0021) is the point of its own levels, as `calibrate` adds them to the grid.
    let d = ragtune::HybridSettings::default();
    let mut grid = FusionGrid::default();
    grid.include_levels_of(&d);
    let fits = run_fusion_calibration(&opts, &grid, &[], log).await.unwrap();
    let configured = fits[0].fit.points[fits[0].fit.configured.expect("the default is a point of the grid")];
    let report = run_eval(&opts, log).await.unwrap();
    assert_eq!(ndcg(&report), configured.ndcg_at_10);
    assert_eq!((configured.levels.map(|l| l.slope), configured.dense_weight), (Some(d.level_slope), d.dense_weight));

    // The written file, read as `--config` reads it, makes the evaluation measure the fitted fusion.
    let joint = joint_fit(vec![DatasetFit { name: "tiny".into(), fit: fit.clone() }], None).unwrap();
    let text = fusion_toml(&joint, "train");
    let cfg = Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let fitted = run_eval(&EvalOptions { hybrid: cfg.hybrid, ..opts.clone() }, log).await.unwrap();
    assert_eq!(ndcg(&fitted), fit.best.ndcg_at_10, "{text}");
    assert_eq!(fitted.config["fusion"]["method"], fit.best.method.name());
    assert_eq!(fitted.config["fusion"]["dense_weight"], f64::from(fit.best.dense_weight));
}

#[test]
fn the_engine_default_fusion_is_the_file_the_joint_fit_wrote() {
    // ADR 0019, 0022: `configs/fusion-default.toml` is what `ragtune calibrate --fusion` wrote from the SciFact and
    // CMU QA train splits, alone and with their corpora joined (`eval join-sets`), and the stressed variants of each;
    // the engine's `[hybrid]` default is that section, field for field.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/fusion-default.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(text.starts_with("# Written by `ragtune calibrate --fusion` from scifact `train`"), "{text}");
    assert!(text.contains("and cmu-qa `train`"), "{text}");
    assert!(text.contains("and union-scifact `train`") && text.contains("and union-cmu `train`"), "{text}");
    for stressed in ["bm25-typos-0.6", "bm25-typos-0.9", "dense-typos-0.6", "dense-typos-0.9"] {
        for dataset in ["scifact", "cmu-qa", "union-scifact", "union-cmu"] {
            assert!(text.contains(&format!(" {dataset}+{stressed} `train`")), "{dataset}+{stressed}: {text}");
        }
    }
    assert_eq!(Config::from_toml(&text).unwrap().hybrid, Config::default().hybrid);
}
