//! Corrective-RAG statistics on a BEIR dataset: how the retrieval evaluators' decisions relate to whether
//! retrieval actually succeeded, threshold calibration on a training split, and nDCG with and without correction.
//!
//! "Retrieval succeeded" is explicit: at least one relevant document (qrels score > 0) in the top `k` (10 by
//! default) of the hybrid (or configured) retrieval. INCORRECT is read as a detector of failed retrieval: its
//! precision is the share of INCORRECT queries that really failed, its recall the share of failed queries judged
//! INCORRECT.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ragtune::core::{Candidate, Ctx, Error, Query, RelevanceEvaluator, Reranker, Result, Verdict, sort_ranked};
use ragtune::evaluators::crag::{
    Calibration, CalibrationSample, FEATURE_NAMES, FIRST_VERSION_FEATURES, FitOptions, FitSummary, HeuristicEvaluator,
    LearnedEvaluator, LearnedFit, LearnedModel, LearnedSample, ModelConfig, ModelEvaluator, ModelKind, RAW_AGGREGATE,
    RetrievalScoreScorer, ScoreScale, Stump, calibrate, failure_auc, features, fit_learned, fit_logit_map,
    heuristic_category,
};
use ragtune::evaluators::metrics::{Metric, Runs, evaluate};
use serde::{Deserialize, Serialize};

use crate::rerank::EvalReranker;
use crate::retrieval::EvalOptions;
use ragtune::{EmbeddingMode, EvaluatorKind, RerankSettings, RerankerKind, ScorerKind, Strategy, Transform};

/// One evaluator's decisions on a split.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DecisionStats {
    /// The evaluator (`heuristic`, `model:retrieval`, `model:cross-encoder:<model directory>`, `learned`).
    pub evaluator: String,
    /// Decision → queries.
    pub decisions: BTreeMap<String, usize>,
    /// Precision of INCORRECT as a detector of failed retrieval (no relevant document in the top k).
    pub incorrect_precision: f64,
    /// Recall of it.
    pub incorrect_recall: f64,
    /// Failed queries among those judged CORRECT, as a share (lower is better).
    pub correct_failure_rate: f64,
    /// The thresholds used (model-based and learned: upper, lower; heuristic: relevant, partial).
    pub thresholds: (f32, f32),
    /// How well the evaluator's score separates failed from successful retrievals whatever the thresholds: the
    /// probability that a failed query scores lower than a successful one (ROC AUC; 0.5 is chance). `None` when
    /// every query failed or every one succeeded.
    #[serde(default)]
    pub score_auc: Option<f64>,
}

/// The CRAG report of one split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CragEvalReport {
    /// Dataset name.
    pub dataset: String,
    /// Split.
    pub split: String,
    /// Queries judged.
    pub queries: usize,
    /// The cut-off of "retrieval succeeded".
    pub k: usize,
    /// Queries without a relevant document in the top k.
    pub failed_retrievals: usize,
    /// Per evaluator.
    pub evaluators: Vec<DecisionStats>,
    /// nDCG@10 of the retrieval as it is.
    pub ndcg_without_correction: f64,
    /// nDCG@10 after correcting the configured evaluator's non-CORRECT queries (synonym expansion, or an LLM
    /// rewrite for INCORRECT when an LLM is configured, fused with the original list by RRF).
    pub ndcg_with_correction: f64,
    /// Queries corrected.
    pub corrected: usize,
}

/// Per-query material: the candidates, whether retrieval succeeded.
struct Judged {
    id: String,
    text: String,
    candidates: Vec<Candidate>,
    succeeded: bool,
}

async fn retrieve_split(
    opts: &EvalOptions,
    config: &ragtune::Config,
    k: usize,
    log: &mut dyn FnMut(&str),
) -> Result<(ragtune::Engine, Vec<Judged>, ragtune::evaluators::metrics::Qrels, String)> {
    let data = ragtune::ingest::load_beir(&opts.dataset, &opts.split)?;
    let name = crate::retrieval::dataset_name(&opts.dataset);
    let strategy: Strategy = opts.retriever.parse()?;
    let embedder = match strategy {
        Strategy::Bm25 => None,
        _ => Some(ragtune::load_embedder(&ragtune::EmbeddingSettings {
            mode: EmbeddingMode::On,
            ..opts.embedding.clone()
        })?),
    };
    let llm = ragtune::load_llm(&config.llm)?;
    let crate::retrieval::IndexOpened { engine, location, .. } =
        crate::retrieval::open_index(opts, &name, &data.corpus, embedder, llm, log).await?;
    // The engine evaluating and correcting uses the CRAG settings of `config` on the cached index.
    let engine_cfg = ragtune::Config {
        crag: config.crag.clone(),
        llm: config.llm.clone(),
        transform: config.transform.clone(),
        cache: ragtune::CacheSettings { enabled: false, ..Default::default() },
        search: ragtune::SearchSettings { strategy, ..Default::default() },
        ..engine.config().clone()
    };
    let engine = engine.reconfigure(engine_cfg)?;
    let retriever = engine.retriever(strategy).await?;
    let mut queries = data.queries_with_qrels();
    if let Some(limit) = opts.limit {
        queries.truncate(limit);
    }
    log(&format!("judging {} queries of `{}` on {location}", queries.len(), opts.split));
    let mut judged = Vec::with_capacity(queries.len());
    for q in &queries {
        let query = Query::new(q.text.clone()).with_top_k(k);
        let candidates = retriever.retrieve(&Ctx::new(), std::slice::from_ref(&query)).await?.pop().unwrap_or_default();
        let relevant = data.qrels.get(&q.id);
        let succeeded =
            candidates.iter().take(k).any(|c| relevant.and_then(|r| r.get(&c.chunk.doc_id)).is_some_and(|&g| g > 0));
        judged.push(Judged { id: q.id.clone(), text: q.text.clone(), candidates, succeeded });
    }
    let evaluated: HashSet<&str> = queries.iter().map(|q| q.id.as_str()).collect();
    let qrels = data
        .qrels
        .iter()
        .filter(|(id, _)| evaluated.contains(id.as_str()))
        .map(|(a, b)| (a.clone(), b.clone()))
        .collect();
    Ok((engine, judged, qrels, name))
}

/// The model-based evaluator of `config`'s `[crag]`: `scorer = "retrieval"` (the dense cosine the retrieval
/// computed, free) or `scorer = "cross_encoder"` (the `[rerank] model` cross-encoder, on `[embedding]`'s ONNX
/// Runtime, its logits read through a sigmoid, its scores cached on disk per model as `eval rerank` caches them, so
/// a calibration on `train` and an evaluation on `test` pay for each pair once; under `score_cache`, the
/// evaluation cache's `rerank-scores` by default); `[crag.model]`'s thresholds and aggregate. Its name is `model:<the scorer's name>` (`model:retrieval`, `model:cross-encoder:<directory>`).
///
/// # Errors
/// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) for the `dense` and `llm` scorers (not measured here)
/// and a cross-encoder without a model; a model that does not load; invalid thresholds.
fn model_evaluator(config: &ragtune::Config, score_cache: &Path) -> Result<ModelEvaluator> {
    let scorer: Arc<dyn Reranker> = match config.crag.scorer {
        ScorerKind::Retrieval => Arc::new(RetrievalScoreScorer::new("dense")),
        ScorerKind::CrossEncoder => {
            let reranker = EvalReranker {
                settings: RerankSettings { reranker: RerankerKind::CrossEncoder, ..config.rerank.clone() },
                score_cache: score_cache.to_path_buf(),
            };
            if let Some(problem) = reranker.problem() {
                return Err(Error::invalid_input(format!(
                    "[crag] scorer = \"cross_encoder\" scores with the [rerank] cross-encoder: {problem}"
                )));
            }
            reranker.build(None, &config.llm, &config.embedding)?.0
        }
        other @ (ScorerKind::Dense | ScorerKind::Llm) => {
            return Err(Error::invalid_input(format!(
                "the CRAG evaluation measures the model-based evaluator with the `retrieval` or `cross_encoder` \
                 scorer, not `{other}`: set [crag] scorer (or pass --scorer)"
            )));
        }
    };
    ModelEvaluator::new(scorer, config.crag.scorer.scale(), config.crag.model.clone())
}

/// Fits the two thresholds of `evaluator` on `opts.split` (use a training split) against "a relevant document in
/// the top `k`": for `Model`, the configured scorer (`[crag] scorer`: the free retrieval-score scorer, the dense
/// cosine the hybrid retrieval computed, or the `[rerank]` cross-encoder), aggregated as configured; for `Heuristic`, the heuristic evaluator's weighted score with the configured weights
/// (docs/pipeline.md, "Evaluate").
///
/// # Errors
/// Dataset, index or model failures; a split where every query succeeded or every one failed.
pub async fn run_calibration(
    opts: &EvalOptions,
    config: &ragtune::Config,
    evaluator: EvaluatorKind,
    k: usize,
    target_precision: f32,
    log: &mut dyn FnMut(&str),
) -> Result<Calibration> {
    // The evaluator (and a cross-encoder scorer's model) first: a configuration it refuses fails before anything is
    // indexed or retrieved.
    let cache = score_cache(&opts.cache_dir);
    threshold_evaluator(config, evaluator, &cache)?;
    let (_, judged, _, _) = retrieve_split(opts, config, k, log).await?;
    let judged: Vec<(String, Vec<Candidate>, bool)> =
        judged.into_iter().map(|j| (j.text, j.candidates, j.succeeded)).collect();
    calibrate_evaluator(config, evaluator, &judged, target_precision, &cache).await
}

/// Where the CRAG evaluation and calibration cache a cross-encoder scorer's scores: beside the cached indexes.
pub(crate) fn score_cache(cache_dir: &Path) -> PathBuf {
    cache_dir.join("rerank-scores")
}

/// Fits `evaluator`'s thresholds on judged retrievals: `(query, candidates, retrieval succeeded)`; a
/// cross-encoder scorer caches its scores under `score_cache`. A scorer whose scores are logits (the
/// cross-encoder) first gets its logit map ([`fit_logit_map`], Platt scaling on the same retrievals), and the
/// thresholds are fitted on the probabilities it gives: a trained model's logits reach 15 and more, where a plain
/// sigmoid is 1 in `f32` and no threshold can tell them apart.
pub(crate) async fn calibrate_evaluator(
    config: &ragtune::Config,
    evaluator: EvaluatorKind,
    judged: &[(String, Vec<Candidate>, bool)],
    target_precision: f32,
    score_cache: &Path,
) -> Result<Calibration> {
    let build = |model: &ModelConfig| {
        let mut config = config.clone();
        config.crag.model = model.clone();
        threshold_evaluator(&config, evaluator, score_cache)
    };
    if evaluator == EvaluatorKind::Model && config.crag.scorer.scale() == ScoreScale::Sigmoid {
        fit_on_logits(build, &config.crag.model, judged, target_precision).await
    } else {
        fit_thresholds(build(&config.crag.model)?.as_ref(), judged, target_precision).await
    }
}

/// The logit map first ([`fit_logit_map`] on each retrieval's `raw_aggregate`), then the thresholds on the
/// evaluator `build` makes with it; a cross-encoder scorer replays the first pass's scores from its cache.
async fn fit_on_logits(
    build: impl Fn(&ModelConfig) -> Result<Box<dyn RelevanceEvaluator>>,
    model: &ModelConfig,
    judged: &[(String, Vec<Candidate>, bool)],
    target_precision: f32,
) -> Result<Calibration> {
    let first = build(model)?;
    let (mut raw, mut succeeded) = (Vec::with_capacity(judged.len()), Vec::with_capacity(judged.len()));
    for (text, candidates, ok) in judged {
        let judgement = first.evaluate(&Ctx::new(), text, candidates).await?;
        raw.push(judgement.criteria.get(RAW_AGGREGATE).copied().unwrap_or(0.0));
        succeeded.push(*ok);
    }
    let (scale, shift) = fit_logit_map(&raw, &succeeded)?;
    let second = build(&ModelConfig { logit_scale: scale, logit_shift: shift, ..model.clone() })?;
    let mut fit = fit_thresholds(second.as_ref(), judged, target_precision).await?;
    fit.logit_map = Some((scale, shift));
    Ok(fit)
}

/// The evaluator whose two thresholds a calibration fits: the model-based one with the configured scorer, or the
/// heuristic one with the configured weights.
fn threshold_evaluator(
    config: &ragtune::Config,
    evaluator: EvaluatorKind,
    score_cache: &Path,
) -> Result<Box<dyn RelevanceEvaluator>> {
    Ok(match evaluator {
        EvaluatorKind::Model => Box::new(model_evaluator(config, score_cache)?),
        EvaluatorKind::Heuristic => Box::new(HeuristicEvaluator::new(config.crag.heuristic.clone())?),
        EvaluatorKind::Learned => {
            return Err(Error::invalid_input(
                "the learned evaluator is fitted with `run_learned_calibration` (`ragtune calibrate --evaluator \
                 learned`) on a BEIR dataset, not by fitting two thresholds",
            ));
        }
    })
}

/// Fits the two thresholds of `evaluator` on its scores of the judged retrievals.
async fn fit_thresholds(
    evaluator: &dyn RelevanceEvaluator,
    judged: &[(String, Vec<Candidate>, bool)],
    target_precision: f32,
) -> Result<Calibration> {
    let mut samples = Vec::with_capacity(judged.len());
    for (text, candidates, succeeded) in judged {
        let judgement = evaluator.evaluate(&Ctx::new(), text, candidates).await?;
        samples.push(CalibrationSample { score: judgement.score, succeeded: *succeeded });
    }
    calibrate(&samples, target_precision)
}

/// The learned evaluator's training samples: each judged retrieval's [`features`] and whether it succeeded.
#[must_use]
pub fn learned_samples(judged: &[(String, Vec<Candidate>, bool)]) -> Vec<LearnedSample> {
    judged
        .iter()
        .map(|(text, candidates, succeeded)| LearnedSample {
            values: features(text, candidates).values,
            succeeded: *succeeded,
        })
        .collect()
}

/// Fits the learned evaluator on `opts.split` (use a training split) of a BEIR dataset: every query retrieved with
/// `opts.retriever` (hybrid by default, so both BM25 and dense provenance exist), labelled by "a relevant document
/// in the top `k`", its [`features`] computed from the candidates as the pipeline would see them, and
/// [`fit_learned`] with `options` (settings by cross-validation, with `options.model` `None` the kind by
/// out-of-fold AUC, thresholds on out-of-fold probabilities). For comparison, the fit's `compared` also holds the
/// first version's model (logistic over the first [`FIRST_VERSION_FEATURES`] features) fitted the same way, unless
/// that is the model fitted.
///
/// # Errors
/// Dataset, index or model failures; the fit's errors (a split where every query succeeded or every one failed).
pub async fn run_learned_calibration(
    opts: &EvalOptions,
    config: &ragtune::Config,
    k: usize,
    options: &FitOptions,
    log: &mut dyn FnMut(&str),
) -> Result<LearnedFit> {
    if k == 0 {
        return Err(Error::invalid_input("k must be at least 1"));
    }
    let (_, judged, _, _) = retrieve_split(opts, config, k, log).await?;
    let judged: Vec<(String, Vec<Candidate>, bool)> =
        judged.into_iter().map(|j| (j.text, j.candidates, j.succeeded)).collect();
    let samples = learned_samples(&judged);
    let features = options.features.as_ref().map_or(FEATURE_NAMES.len(), Vec::len);
    log(&format!(
        "fitting the learned evaluator on {} queries ({} failed retrievals) with {features} features",
        samples.len(),
        samples.iter().filter(|s| !s.succeeded).count(),
    ));
    let mut fit = fit_learned(&samples, options)?;
    let first: Vec<String> = FEATURE_NAMES[..FIRST_VERSION_FEATURES].iter().map(|n| (*n).to_owned()).collect();
    if !(fit.model.model == ModelKind::Logistic && fit.model.features == first) {
        let reference = FitOptions { model: Some(ModelKind::Logistic), features: Some(first), ..options.clone() };
        fit.compared.insert(0, fit_learned(&samples, &reference)?.summary());
    }
    Ok(fit)
}

/// The fitted learned evaluator as a configuration file: `[crag] evaluator = "learned"`, the `[crag.model]`
/// section of `config` (so `eval crag` with this file compares the model-based evaluator with its own thresholds),
/// and `[crag.learned]`, with a header saying what it was fitted on and how it did there.
///
/// # Errors
/// The sections cannot be serialised (they always can: numbers and strings).
pub fn learned_toml(
    fit: &LearnedFit,
    config: &ragtune::Config,
    dataset: &str,
    split: &str,
    retriever: &str,
    k: usize,
) -> Result<String> {
    let c = &fit.calibration;
    let auc = |a: Option<f64>| a.map_or_else(|| "-".to_owned(), |a| format!("{a:.3}"));
    let thresholds_on = if fit.out_of_fold {
        "out-of-fold (5-fold cross-validated) probabilities"
    } else {
        "the model's own probabilities (too few samples of a class to cross-validate)"
    };
    let what = match fit.model.model {
        ModelKind::Logistic => "A logistic regression of\n# \"retrieval succeeded\" over standardised features",
        ModelKind::Stumps => "Gradient-boosted decision stumps\n# of \"retrieval succeeded\"",
    };
    let mut header = format!(
        "# Written by `ragtune calibrate --evaluator learned` from {dataset} `{split}` with {retriever} retrieval\n\
         # ({samples} queries, {failures} without a relevant document in the top {k}). {what}, {n} features,\n\
         # {settings} (chosen by cross-validated log loss);\n\
         # failure AUC {cv} cross-validated, {train} in-sample. Thresholds fitted on\n\
         # {thresholds_on}{floor}: INCORRECT (p <= lower) precision {ip:.3}, recall {ir:.3};\n\
         # CORRECT (p >= upper) precision {cp:.3} on {share:.1} % of queries.\n",
        samples = c.samples,
        failures = c.failures,
        n = fit.model.features.len(),
        floor = fit.incorrect_floor.map_or_else(String::new, |f| {
            format!(
                "\n# for INCORRECT precision >= {} and recall >= {} (best F1 when none reaches both)",
                f.precision, f.recall
            )
        }),
        settings = fit.settings,
        cv = auc(fit.cv_auc),
        train = auc(fit.train_auc),
        ip = c.incorrect_precision,
        ir = c.incorrect_recall,
        cp = c.correct_precision,
        share = c.correct_share * 100.0,
    );
    if fit.compared.len() > 1 {
        header.push_str(
            "# Models compared (out-of-fold failure AUC; INCORRECT precision / recall at their own thresholds):\n",
        );
        for s in &fit.compared {
            header.push_str(&format!("#   {}\n", summary_line(s)));
        }
    }
    header.push_str("# [crag.model] is the configuration's, copied for `ragtune eval crag`.\n");
    let ser = |what: &str, e: toml::ser::Error| Error::permanent(format!("cannot serialise {what}")).with_source(e);
    let mut crag = toml::Table::new();
    crag.insert("evaluator".into(), toml::Value::String(EvaluatorKind::Learned.to_string()));
    crag.insert("scorer".into(), toml::Value::String(config.crag.scorer.to_string()));
    crag.insert(
        "model".into(),
        toml::Value::try_from(&config.crag.model).map_err(|e| ser("the model evaluator's settings", e))?,
    );
    crag.insert("learned".into(), toml::Value::try_from(&fit.model).map_err(|e| ser("the learned model", e))?);
    let mut doc = toml::Table::new();
    doc.insert("crag".into(), crag.into());
    let body = toml::to_string(&doc).map_err(|e| ser("the learned configuration", e))?;
    Ok(format!("{header}{body}{}", hybrid_section(config)))
}

/// The configuration's `[hybrid]` section under a comment, for the end of a calibrated CRAG file: an evaluator is
/// fitted on lists fused one way (its thresholds on their top k, the learned one on the fused scores' shape), so
/// its file fuses that way wherever it is used, whatever the default becomes (ADR 0019).
fn hybrid_section(config: &ragtune::Config) -> String {
    format!(
        "\n# The fusion of the retrievals it was fitted on: hybrid retrieval fuses this way with this file.\n{}",
        crate::fusion::hybrid_toml(&config.hybrid)
    )
}

/// One compared model on a line: kind, features, settings, out-of-fold AUC, INCORRECT precision and recall.
fn summary_line(s: &FitSummary) -> String {
    let auc = s.cv_auc.map_or_else(|| "-".to_owned(), |a| format!("{a:.3}"));
    format!(
        "{} over {} features ({}): AUC {auc}; INCORRECT precision {:.3}, recall {:.3} (lower {:.4})",
        s.kind,
        s.features,
        s.settings,
        s.calibration.incorrect_precision,
        s.calibration.incorrect_recall,
        s.calibration.lower
    )
}

/// The fit as text: the models compared, the weights by size (logistic) or each feature's stumps and the range of
/// its summed contribution (stumps), the thresholds and how they did on the training split.
#[must_use]
pub fn learned_table(fit: &LearnedFit) -> String {
    let c = &fit.calibration;
    let m = &fit.model;
    let auc = |a: Option<f64>| a.map_or_else(|| "-".to_owned(), |a| format!("{a:.3}"));
    let mut out = format!(
        "learned evaluator ({}): {} queries ({} failed), {} features, {}, failure AUC {} cross-validated, {} in-sample\n",
        m.model,
        c.samples,
        c.failures,
        m.features.len(),
        fit.settings,
        auc(fit.cv_auc),
        auc(fit.train_auc)
    );
    out.push_str("models compared:\n");
    for s in &fit.compared {
        out.push_str(&format!("  {}\n", summary_line(s)));
    }
    let best_losses = {
        let mut l = fit.cv_log_loss.clone();
        l.sort_by(|a, b| a.1.total_cmp(&b.1));
        l.truncate(5);
        l
    };
    if !best_losses.is_empty() {
        out.push_str(&format!("lowest cross-validated log loss of {} settings tried:\n", fit.cv_log_loss.len()));
        for (setting, loss) in &best_losses {
            out.push_str(&format!("  {setting:<40} {loss:.4}\n"));
        }
    }
    out.push_str(&feature_lines(m));
    out.push_str(&format!("{:<22} {:>+9.4}\n", "bias", m.bias));
    if !fit.operating_points.is_empty() {
        let parts: Vec<String> = fit
            .operating_points
            .iter()
            .map(|o| format!("recall {:.2}: precision {:.3} (lower {:.4})", o.recall, o.precision, o.lower))
            .collect();
        out.push_str(&format!(
            "INCORRECT on the out-of-fold probabilities at the lowest threshold reaching {}\n",
            parts.join("; ")
        ));
    }
    if !fit.fold_detection.is_empty() {
        let parts: Vec<String> = fit.fold_detection.iter().map(|(p, r)| format!("{p:.3} / {r:.3}")).collect();
        out.push_str(&format!("INCORRECT precision / recall at lower within each fold: {}\n", parts.join(", ")));
    }
    out.push_str(&format!(
        "thresholds on {}: lower {:.4}, upper {:.4}; INCORRECT precision {:.3}, recall {:.3}, F1 {:.3}; CORRECT \
         precision {:.3} on {:.1} % of queries\n",
        if fit.out_of_fold { "out-of-fold probabilities" } else { "in-sample probabilities" },
        m.lower,
        m.upper,
        c.incorrect_precision,
        c.incorrect_recall,
        c.incorrect_f1,
        c.correct_precision,
        c.correct_share * 100.0
    ));
    out
}

/// The learned model's features: the weights by size (logistic), or each feature's stumps and the range of its summed
/// contribution (stumps).
fn feature_lines(m: &LearnedModel) -> String {
    let mut out = String::new();
    match m.model {
        ModelKind::Logistic => {
            let mut order: Vec<usize> = (0..m.features.len()).collect();
            order.sort_by(|&a, &b| m.weights[b].abs().total_cmp(&m.weights[a].abs()).then(a.cmp(&b)));
            out.push_str(&format!("{:<22} {:>9} {:>10} {:>10}\n", "feature", "weight", "mean", "scale"));
            for i in order {
                out.push_str(&format!(
                    "{:<22} {:>+9.4} {:>10.4} {:>10.4}\n",
                    m.features[i], m.weights[i], m.means[i], m.scales[i]
                ));
            }
        }
        ModelKind::Stumps => {
            // Each feature's summed contribution is a step function; its range says how far the feature moves the
            // logit.
            let mut rows: Vec<(String, usize, f64)> = m
                .features
                .iter()
                .map(|f| {
                    let own: Vec<&Stump> = m.stumps.iter().filter(|s| s.feature == *f).collect();
                    let at = |x: f64| own.iter().map(|s| s.output(Some(x))).sum::<f64>();
                    let mut points: Vec<f64> = own.iter().map(|s| s.threshold).collect();
                    if let Some(last) = points.last().copied() {
                        points.push(last + 1.0);
                    }
                    let values: Vec<f64> = points.iter().map(|x| at(*x)).collect();
                    let range = values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                        - values.iter().copied().fold(f64::INFINITY, f64::min);
                    (f.clone(), own.len(), if own.is_empty() { 0.0 } else { range })
                })
                .collect();
            rows.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
            out.push_str(&format!("{:<22} {:>7} {:>14}\n", "feature", "stumps", "logit range"));
            for (f, count, range) in rows {
                out.push_str(&format!("{f:<22} {count:>7} {range:>14.4}\n"));
            }
        }
    }
    out
}

/// The heuristic evaluator's thresholds for a calibration: RELEVANT is `score > relevant_threshold` and
/// IRRELEVANT `score <= partial_threshold`, so `relevant_threshold` is the float just below `upper` (CORRECT is
/// `score >= upper`) and `partial_threshold` is `lower`.
#[must_use]
pub fn heuristic_thresholds(c: &Calibration) -> (f32, f32) {
    let relevant = c.upper.next_down();
    (if relevant > c.lower { relevant } else { c.upper }, c.lower)
}

/// The calibrated thresholds of `evaluator` as a configuration file the engine and `ragtune ask --config` read.
///
/// # Errors
/// The heuristic section cannot be serialised (it always can: numbers and strings).
pub fn calibration_toml(
    c: &Calibration,
    config: &ragtune::Config,
    evaluator: EvaluatorKind,
    dataset: &str,
    split: &str,
    k: usize,
) -> Result<String> {
    let header = format!(
        "# Written by `cargo xtask calibrate` from {dataset} `{split}` ({samples} queries, {failures} without a relevant\n\
         # document in the top {k}). INCORRECT (score <= lower) detected failed retrieval there with precision\n\
         # {ip:.3}, recall {ir:.3}; CORRECT (score >= upper) held a relevant document with precision {cp:.3}.\n",
        samples = c.samples,
        failures = c.failures,
        ip = c.incorrect_precision,
        ir = c.incorrect_recall,
        cp = c.correct_precision,
    );
    let text = match evaluator {
        EvaluatorKind::Model => {
            let logit_map = c.logit_map.map_or_else(String::new, |(scale, shift)| {
                format!("# Platt scaling of the scorer's logits, fitted on the same queries:\nlogit_scale = {scale}\nlogit_shift = {shift}\n")
            });
            let text = format!(
                "{header}[crag]\nevaluator = \"model\"\nscorer = \"{scorer}\"\n\n[crag.model]\nupper = {upper}\nlower = {lower}\n\
             aggregate = {aggregate}\ntop_k = {top_k}\n{logit_map}",
                scorer = config.crag.scorer,
                upper = c.upper,
                lower = c.lower,
                aggregate = toml::Value::try_from(config.crag.model.aggregate)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|_| "\"max\"".into()),
                top_k = config.crag.model.top_k,
            );
            if config.crag.scorer == ScorerKind::CrossEncoder { text + &cross_encoder_section(config)? } else { text }
        }
        EvaluatorKind::Learned => {
            return Err(Error::invalid_input(
                "the learned evaluator's file is written by `learned_toml` from a `LearnedFit`, not from two thresholds",
            ));
        }
        EvaluatorKind::Heuristic => {
            let (relevant, partial) = heuristic_thresholds(c);
            let heuristic = ragtune::evaluators::crag::HeuristicConfig {
                relevant_threshold: relevant,
                partial_threshold: partial,
                ..config.crag.heuristic.clone()
            };
            // The whole heuristic section, so the weights it was calibrated with travel with its thresholds.
            let mut crag = toml::Table::new();
            crag.insert("evaluator".into(), toml::Value::String("heuristic".into()));
            let section = toml::Value::try_from(&heuristic)
                .map_err(|e| Error::permanent("cannot serialise the heuristic evaluator's settings").with_source(e))?;
            crag.insert("heuristic".into(), section);
            let mut doc = toml::Table::new();
            doc.insert("crag".into(), crag.into());
            let body = toml::to_string(&doc)
                .map_err(|e| Error::permanent("cannot serialise the calibrated configuration").with_source(e))?;
            format!("{header}{body}")
        }
    };
    Ok(text + &hybrid_section(config))
}

/// The `[rerank]` section of a file calibrated with the cross-encoder scorer: the model its thresholds were fitted
/// with (the thresholds hold for those weights only, so the header names its sha256) and the sizes that change its
/// scores; reranking stays as `enabled` was.
fn cross_encoder_section(config: &ragtune::Config) -> Result<String> {
    let r = &config.rerank;
    let fingerprint = ragtune::cross_encoder_fingerprint(r)?;
    let ser = |e: toml::ser::Error| Error::permanent("cannot serialise the cross-encoder's settings").with_source(e);
    let mut rerank = toml::Table::new();
    rerank.insert("enabled".into(), toml::Value::Boolean(r.enabled));
    rerank.insert("reranker".into(), toml::Value::String(RerankerKind::CrossEncoder.to_string()));
    rerank.insert("model".into(), toml::Value::String(r.model.clone().unwrap_or_default()));
    rerank.insert("max_length".into(), toml::Value::Integer(i64::try_from(r.max_length).unwrap_or(i64::MAX)));
    rerank.insert("batch_size".into(), toml::Value::Integer(i64::try_from(r.batch_size).unwrap_or(i64::MAX)));
    let mut doc = toml::Table::new();
    doc.insert("rerank".into(), rerank.into());
    let body = toml::to_string(&doc).map_err(ser)?;
    Ok(format!("\n# The cross-encoder the thresholds were fitted with ({fingerprint}); they hold for it only.\n{body}"))
}

/// Decision statistics of the heuristic, the model-based and (with `[crag.learned]`) the learned evaluator on
/// `opts.split`, and nDCG@10 with and without correction by the configured evaluator.
///
/// # Errors
/// Dataset, index or model failures.
pub async fn run_crag_eval(
    opts: &EvalOptions,
    config: &ragtune::Config,
    k: usize,
    log: &mut dyn FnMut(&str),
) -> Result<CragEvalReport> {
    if k == 0 {
        return Err(Error::invalid_input("k must be at least 1"));
    }
    // The evaluators are built before anything is indexed or retrieved: a configuration they refuse fails the run
    // at once, not after every query ran.
    let mut rows = evaluator_rows(opts, config)?;
    let (engine, judged, qrels, name) = retrieve_split(opts, config, k, log).await?;
    let verdicts = judge_all(&mut rows, &judged).await?;
    let which = rows.iter().position(|(_, _, kind)| *kind == config.crag.evaluator).unwrap_or(0);
    let stats: Vec<DecisionStats> = rows.into_iter().map(|(s, _, _)| s).collect();

    // nDCG@10 with and without correcting the configured evaluator's non-CORRECT queries.
    let mut without: Runs = BTreeMap::new();
    let mut with: Runs = BTreeMap::new();
    let mut corrected = 0usize;
    let correction = if engine.llm().is_some() { Transform::Rewrite } else { Transform::Expand };
    let (strategy, _) = engine.resolve(engine.config().search.strategy).await?;
    let expand = engine.transformed_retriever(strategy, Transform::Expand).await?;
    let incorrect_retriever = engine.transformed_retriever(strategy, correction).await?;
    for (j, v) in judged.iter().zip(&verdicts) {
        let run = to_run(&j.candidates);
        without.insert(j.id.clone(), run.clone());
        let verdict = v[which];
        let retriever = match verdict {
            Verdict::Correct => None,
            Verdict::Ambiguous => Some(&expand),
            Verdict::Incorrect => Some(&incorrect_retriever),
        };
        let Some(retriever) = retriever else {
            with.insert(j.id.clone(), run);
            continue;
        };
        corrected += 1;
        let query = Query::new(j.text.clone()).with_top_k(k);
        let extra = retriever.retrieve(&Ctx::new(), std::slice::from_ref(&query)).await?.pop().unwrap_or_default();
        let fused = ragtune::pipeline::fuse_lists(&j.candidates, &extra, k.max(10) * 2);
        with.insert(j.id.clone(), to_run(&fused));
    }
    let metrics = [Metric::Ndcg(10)];
    let ndcg = |runs: &Runs| evaluate(&qrels, runs, &metrics).mean.get("ndcg@10").copied().unwrap_or(0.0);
    Ok(CragEvalReport {
        dataset: name,
        split: opts.split.clone(),
        queries: judged.len(),
        k,
        failed_retrievals: judged.iter().filter(|j| !j.succeeded).count(),
        evaluators: stats,
        ndcg_without_correction: ndcg(&without),
        ndcg_with_correction: ndcg(&with),
        corrected,
    })
}

/// One evaluator of [`run_crag_eval`]: its decision statistics, the evaluator, and the kind it is.
type EvaluatorRow = (DecisionStats, Box<dyn RelevanceEvaluator>, EvaluatorKind);

/// The evaluators compared, built from `config`: heuristic and model-based always, the learned one when configured.
fn evaluator_rows(opts: &EvalOptions, config: &ragtune::Config) -> Result<Vec<EvaluatorRow>> {
    let h = &config.crag.heuristic;
    let m = &config.crag.model;
    // (stats, evaluator, the kind it is): heuristic and model-based always, the learned one when configured.
    let row = |name: &str, thresholds: (f32, f32), evaluator: Box<dyn RelevanceEvaluator>, kind: EvaluatorKind| {
        (DecisionStats { evaluator: name.into(), thresholds, ..Default::default() }, evaluator, kind)
    };
    let model = model_evaluator(config, &score_cache(&opts.cache_dir))?;
    // The retrieval scorer's row keeps its name of old reports; a cross-encoder's names its model.
    let model_name = if config.crag.scorer == ScorerKind::Retrieval {
        "model:retrieval".to_owned()
    } else {
        model.name().to_owned()
    };
    let mut rows: Vec<EvaluatorRow> = vec![
        row(
            "heuristic",
            (h.relevant_threshold, h.partial_threshold),
            Box::new(HeuristicEvaluator::new(h.clone())?),
            EvaluatorKind::Heuristic,
        ),
        row(&model_name, (m.upper, m.lower), Box::new(model), EvaluatorKind::Model),
    ];
    if let Some(learned) = &config.crag.learned {
        let evaluator = Box::new(LearnedEvaluator::new(learned.clone())?);
        rows.push(row("learned", (learned.upper, learned.lower), evaluator, EvaluatorKind::Learned));
    } else if config.crag.evaluator == EvaluatorKind::Learned {
        return Err(Error::invalid_input("[crag] evaluator = \"learned\" needs a [crag.learned] section"));
    }
    Ok(rows)
}

/// Every evaluator's verdict on every judged query (per query, in the order of `rows`), with each row's decisions,
/// score AUC and INCORRECT precision, recall and CORRECT failure rate counted.
async fn judge_all(rows: &mut [EvaluatorRow], judged: &[Judged]) -> Result<Vec<Vec<Verdict>>> {
    let mut verdicts: Vec<Vec<Verdict>> = Vec::with_capacity(judged.len());
    let mut samples: Vec<Vec<(Verdict, bool)>> = vec![Vec::new(); rows.len()];
    let mut scores: Vec<Vec<CalibrationSample>> = vec![Vec::new(); rows.len()];
    for j in judged {
        let mut these = Vec::with_capacity(rows.len());
        for (r, (stats, evaluator, kind)) in rows.iter_mut().enumerate() {
            let v = evaluator.evaluate(&Ctx::new(), &j.text, &j.candidates).await?;
            let name = match kind {
                EvaluatorKind::Heuristic => heuristic_category(v.verdict).to_owned(),
                EvaluatorKind::Model | EvaluatorKind::Learned => format!("{:?}", v.verdict).to_uppercase(),
            };
            *stats.decisions.entry(name).or_default() += 1;
            scores[r].push(CalibrationSample { score: v.score, succeeded: j.succeeded });
            samples[r].push((v.verdict, j.succeeded));
            these.push(v.verdict);
        }
        verdicts.push(these);
    }
    for (((s, _, _), samples), scored) in rows.iter_mut().zip(&samples).zip(&scores) {
        s.score_auc = failure_auc(scored);
        let failed = samples.iter().filter(|(_, ok)| !ok).count();
        let flagged = samples.iter().filter(|(v, _)| *v == Verdict::Incorrect).count();
        let hit = samples.iter().filter(|(v, ok)| *v == Verdict::Incorrect && !ok).count();
        let correct = samples.iter().filter(|(v, _)| *v == Verdict::Correct).count();
        let correct_failed = samples.iter().filter(|(v, ok)| *v == Verdict::Correct && !ok).count();
        s.incorrect_precision = hit as f64 / flagged.max(1) as f64;
        s.incorrect_recall = hit as f64 / failed.max(1) as f64;
        s.correct_failure_rate = correct_failed as f64 / correct.max(1) as f64;
    }
    Ok(verdicts)
}

fn to_run(candidates: &[Candidate]) -> Vec<(String, f32)> {
    let mut seen = HashSet::new();
    let mut list: Vec<&Candidate> = candidates.iter().collect();
    sort_ranked(&mut list, |c| (c.score, c.chunk.id.as_str()));
    let n = list.len();
    list.into_iter()
        .filter(|c| seen.insert(c.chunk.doc_id.clone()))
        .enumerate()
        // Scores encode the order only: fused and plain lists are on different scales.
        .map(|(i, c)| (c.chunk.doc_id.clone(), (n - i) as f32))
        .collect()
}

/// Renders the report.
#[must_use]
pub fn crag_table(r: &CragEvalReport) -> String {
    let mut out = format!(
        "{} `{}`: {} queries, {} without a relevant document in the top {}\n",
        r.dataset, r.split, r.queries, r.failed_retrievals, r.k
    );
    out.push_str(&format!(
        "{:<16} {:>28} {:>10} {:>10} {:>14} {:>14} {:>10}\n",
        "evaluator", "decisions", "INC prec", "INC rec", "CORRECT fail", "thresholds", "score AUC"
    ));
    for s in &r.evaluators {
        let d: Vec<String> = s.decisions.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "{:<16} {:>28} {:>10.3} {:>10.3} {:>14.3} {:>14} {:>10}\n",
            s.evaluator,
            d.join(", "),
            s.incorrect_precision,
            s.incorrect_recall,
            s.correct_failure_rate,
            format!("{:.3}/{:.3}", s.thresholds.0, s.thresholds.1),
            s.score_auc.map_or_else(|| "-".to_owned(), |a| format!("{a:.3}"))
        ));
    }
    out.push_str(&format!(
        "nDCG@10 without correction {:.4}, with correction {:.4} ({} queries corrected)\n",
        r.ndcg_without_correction, r.ndcg_with_correction, r.corrected
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_configuration_the_evaluators_refuse_fails_before_anything_is_indexed() {
        let dir = tempfile::tempdir().unwrap();
        ragtune_testkit::fixtures::tiny_beir(&dir.path().join("tiny"));
        let mut opts = EvalOptions::new(dir.path().join("tiny"));
        opts.cache_dir = dir.path().join("cache");
        let mut config = ragtune::Config::default();
        config.crag.evaluator = EvaluatorKind::Learned;
        let err = run_crag_eval(&opts, &config, 10, &mut |_| {}).await.unwrap_err();
        assert!(err.to_string().contains("needs a [crag.learned] section"), "{err}");
        assert!(!opts.cache_dir.exists(), "nothing was indexed or retrieved");
    }

    /// Retrievals whose top candidate carries a logit as its text: a trained cross-encoder's range, 9 to 19, where
    /// `sigmoid` in `f32` is 1 from about 16.6 on.
    fn logit_retrievals() -> (Vec<(String, Vec<Candidate>, bool)>, ragtune_testkit::fakes::ScriptedReranker) {
        let mut scorer = ragtune_testkit::fakes::ScriptedReranker::new().named("logits");
        let mut judged = Vec::new();
        for i in 0..40_u8 {
            let logit = 9.0 + f32::from(i) * 0.25;
            // Failures at the low end, one among the successes and one success among them.
            let succeeded = (i >= 12 && i != 30) || i == 5;
            let text = format!("passage {i}");
            scorer = scorer.with_score(text.clone(), logit);
            let candidate = Candidate {
                chunk: ragtune::core::Chunk::new(format!("c{i}"), format!("d{i}"), text),
                score: 1.0,
                sources: BTreeMap::new(),
            };
            judged.push((format!("query {i}"), vec![candidate], succeeded));
        }
        (judged, scorer)
    }

    #[tokio::test]
    async fn logits_get_a_logit_map_before_their_thresholds_so_large_ones_stay_apart() {
        let (judged, scorer) = logit_retrievals();
        let scorer: Arc<dyn Reranker> = Arc::new(scorer);
        let build = |model: &ModelConfig| -> Result<Box<dyn RelevanceEvaluator>> {
            Ok(Box::new(ModelEvaluator::new(scorer.clone(), ScoreScale::Sigmoid, model.clone())?))
        };
        // A plain sigmoid: every logit above ~16.6 is 1.0, so the upper threshold can only be "exactly 1".
        let plain = fit_thresholds(build(&ModelConfig::default()).unwrap().as_ref(), &judged, 0.95).await.unwrap();
        assert!(plain.upper > 0.9999 && plain.logit_map.is_none(), "{plain:?}");

        let fit = fit_on_logits(build, &ModelConfig::default(), &judged, 0.95).await.unwrap();
        let (scale, shift) = fit.logit_map.expect("a logit map was fitted");
        assert!(scale > 0.0 && scale < 1.0, "{scale}");
        assert!(fit.lower < fit.upper && fit.upper < 0.999, "{fit:?}");
        // The thresholds hold with the map: the evaluator with it judges the same retrievals as the fit says.
        let mapped = ModelEvaluator::new(
            scorer.clone(),
            ScoreScale::Sigmoid,
            ModelConfig {
                upper: fit.upper,
                lower: fit.lower,
                logit_scale: scale,
                logit_shift: shift,
                ..ModelConfig::default()
            },
        )
        .unwrap();
        let mut incorrect = 0;
        for (text, candidates, _) in &judged {
            let j = mapped.evaluate(&Ctx::new(), text, candidates).await.unwrap();
            assert!(j.criteria["raw_aggregate"] >= 9.0, "the raw logit is kept: {:?}", j.criteria);
            incorrect += usize::from(j.verdict == Verdict::Incorrect);
        }
        let expected = f64::from(fit.incorrect_recall) * fit.failures as f64 / f64::from(fit.incorrect_precision);
        assert_eq!(incorrect, expected.round() as usize, "{fit:?}");
        // And the file written from the fit carries the map beside the thresholds.
        let text =
            calibration_toml(&fit, &ragtune::Config::default(), EvaluatorKind::Model, "tiny", "train", 10).unwrap();
        assert!(text.contains(&format!("logit_scale = {scale}\nlogit_shift = {shift}\n")), "{text}");
        let written: ragtune::Config = toml::from_str(&text).unwrap();
        assert_eq!((written.crag.model.logit_scale, written.crag.model.logit_shift), (scale, shift));
    }

    #[tokio::test]
    async fn a_scorer_whose_high_scores_go_with_failure_is_refused_not_turned_upside_down() {
        let (judged, scorer) = logit_retrievals();
        let flipped: Vec<_> = judged.into_iter().map(|(q, c, ok)| (q, c, !ok)).collect();
        let scorer: Arc<dyn Reranker> = Arc::new(scorer);
        let build = |model: &ModelConfig| -> Result<Box<dyn RelevanceEvaluator>> {
            Ok(Box::new(ModelEvaluator::new(scorer.clone(), ScoreScale::Sigmoid, model.clone())?))
        };
        let err = fit_on_logits(build, &ModelConfig::default(), &flipped, 0.95).await.unwrap_err();
        assert!(err.to_string().contains("do not go with successful retrieval"), "{err}");
    }
}
