//! `ragtune calibrate`: fit a CRAG evaluator's two thresholds, the learned CRAG evaluator (`--evaluator learned`),
//! or with `--fusion` the hybrid fusion, on a training split and write them to a config file.

use std::path::{Path, PathBuf};

use ragtune_eval::EvalOptions;

use crate::args::{Overrides, load_config};

/// Fit the model-based CRAG evaluator's two thresholds (or, with --fusion, the hybrid fusion) on a training split
/// and write them to a config file.
#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// Fit the hybrid fusion instead (method, BM25 and dense weights, query-time strength) by mean nDCG@10; the
    /// RRF k and the depth are the config's `[hybrid]` ones.
    #[arg(
        long,
        conflicts_with_all = ["retriever", "k", "target_precision", "evaluator", "local_semester", "incorrect_precision", "incorrect_recall", "model", "scorer", "rerank_model"]
    )]
    fusion: bool,
    /// The BEIR dataset directory. With --fusion it may be given more than once: each dataset is fitted on its own
    /// split and one setting is chosen for all (the largest smallest gain over the better of BM25 and dense alone;
    /// see `--min-gain`).
    #[arg(long, value_name = "DIR", required_unless_present = "from_fit_json")]
    dataset: Vec<PathBuf>,
    /// With --fusion: fit every dataset again with one retriever made weaker on purpose, `bm25:RATE` or
    /// `dense:RATE` (that retriever's queries get typos in RATE of their words of four letters or more; the other
    /// list is unchanged), and choose the setting for those variants too, so that the fusion also holds where the
    /// other retriever is the better one. May be given more than once, or comma-separated.
    #[arg(long, value_name = "LIST:RATE", value_delimiter = ',', requires = "fusion")]
    stress: Vec<ragtune_eval::fusion::Stress>,
    /// With --fusion: also try level weights (`[hybrid] bm25_level`, `dense_level`, `level_slope`: each list's
    /// weight scaled per query by how high its best score is), 30 settings with convex fusion.
    #[arg(long, requires = "fusion")]
    levels: bool,
    /// With --fusion and several datasets or `--stress`: a floor on the worst gain (a setting's smallest gain over
    /// the better of BM25 alone and dense alone, across the datasets). Among the settings that reach it, the one
    /// with the best mean nDCG@10 is chosen; when none does, the one with the largest worst gain, which is the
    /// choice without this flag.
    #[arg(long, value_name = "GAIN", allow_negative_numbers = true, requires = "fusion")]
    min_gain: Option<f64>,
    /// With --fusion: also write the whole fit (every setting of the grid scored on every dataset) as JSON to FILE,
    /// so a choice can be re-examined without fusing again.
    #[arg(long, value_name = "FILE", requires = "fusion")]
    fit_json: Option<PathBuf>,
    /// With --fusion: also choose from the fits in FILE, written earlier by `--fit-json` (the same grid, RRF k and
    /// depth), as if their datasets had been given again; may be given more than once, and without any --dataset.
    #[arg(long, value_name = "FILE", requires = "fusion")]
    from_fit_json: Vec<PathBuf>,
    /// The split to fit on (never the test split you report on).
    #[arg(long, default_value = "train")]
    split: String,
    /// The retriever whose results are judged: bm25, dense, hybrid.
    #[arg(long, default_value = "hybrid")]
    retriever: String,
    /// "Retrieval succeeded" means a relevant document in the top K.
    #[arg(long, value_name = "K", default_value_t = 10)]
    k: usize,
    /// The precision CORRECT must reach on the split (sets the upper threshold).
    #[arg(long, value_name = "P", default_value_t = 0.9)]
    target_precision: f32,
    /// The evaluator fitted: `model` (upper/lower of its scorer, see `--scorer`), `heuristic` (the heuristic
    /// evaluator's relevant/partial thresholds, its weights as configured) or `learned` (a logistic regression or
    /// gradient-boosted stumps over retrieval features, see `--model`, with its two thresholds; BEIR datasets only;
    /// the written file also carries the configuration's `[crag.model]`).
    #[arg(long, value_name = "NAME", default_value = "model")]
    evaluator: String,
    /// With `--evaluator model`: its scorer (default: the config's `[crag] scorer`), `retrieval` (the dense cosine
    /// of the retrieval) or `cross-encoder` (the `[rerank]` cross-encoder, --rerank-model; its logits read through
    /// a sigmoid). The written file names the scorer, and for the cross-encoder its `[rerank]` model.
    #[arg(long, value_name = "NAME")]
    scorer: Option<ragtune::ScorerKind>,
    #[command(flatten)]
    rerank: crate::eval::RerankModelArgs,
    /// With `--evaluator learned`: the kind of model, `logistic` (a logistic regression), `stumps` (gradient-boosted
    /// decision stumps) or `auto` (both, keeping the one with the higher cross-validated failure AUC on the split).
    #[arg(long, value_name = "KIND", default_value = "auto")]
    model: String,
    /// With `--evaluator learned`: the INCORRECT precision the lower threshold should reach on the split's
    /// cross-validated probabilities (with `--incorrect-recall`; when no threshold reaches both, the best F1).
    #[arg(long, value_name = "P", default_value_t = 0.4)]
    incorrect_precision: f32,
    /// With `--evaluator learned`: the INCORRECT recall the lower threshold should reach (see
    /// `--incorrect-precision`).
    #[arg(long, value_name = "R", default_value_t = 0.6)]
    incorrect_recall: f32,
    /// Where to write the fitted settings (a config file `ragtune --config` reads; default
    /// configs/crag-calibrated.toml, with --fusion configs/fusion-calibrated.toml).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Where cached indexes live (default: $RAGTUNE_HOME/eval-cache).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Use only the first N queries.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// With a QA dataset (CMU Wikipedia QA): index only this semester's articles (a knowledge split); "retrieval
    /// succeeded" then means a passage of the question's article in the top K, and the pool is the questions
    /// evaluations never sample (docs/eval.md, "Calibrating the web trigger").
    #[arg(long, value_name = "SEMESTER")]
    local_semester: Option<String>,
    /// How a BEIR corpus is indexed, as in `ragtune eval retrieval`: `passages` (the default: long documents chunked
    /// so passages fit the model's window) or `whole` (one passage per document). Fit on the indexing you evaluate.
    #[arg(long, value_name = "MODE", default_value = "passages")]
    chunking: ragtune_eval::EvalChunking,
}

impl CalibrateArgs {
    /// What the parser cannot check: several datasets are for `--fusion` only; `--min-gain` is a finite number.
    ///
    /// # Errors
    /// The message of the usage error.
    pub fn validate(&self) -> Result<(), String> {
        if !self.fusion && self.dataset.len() > 1 {
            return Err(format!(
                "--dataset is given {} times: only --fusion fits on several datasets",
                self.dataset.len()
            ));
        }
        if let Some(gain) = self.min_gain.filter(|g| !g.is_finite()) {
            return Err(format!("--min-gain must be a finite number, got {gain}"));
        }
        Ok(())
    }

    /// The one dataset of a calibration other than `--fusion` (`main` refuses several, see [`Self::validate`];
    /// the parser requires one).
    fn dataset(&self) -> &Path {
        self.dataset.first().map_or(Path::new(""), PathBuf::as_path)
    }
}

pub async fn run(config: Option<&Path>, args: CalibrateArgs) -> anyhow::Result<()> {
    let mut cfg = load_config(config, Overrides::default())?;
    args.rerank.cross_encoder_scorer(args.scorer, &mut cfg);
    if args.fusion {
        return fusion(cfg, args).await;
    }
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("configs/crag-calibrated.toml"));
    let evaluator: ragtune::EvaluatorKind = args.evaluator.parse()?;
    if evaluator == ragtune::EvaluatorKind::Learned {
        return learned(cfg, args).await;
    }
    let name = dataset_name(args.dataset());
    let name = name.as_str();
    let log = &mut |l: &str| eprintln!("{l}");
    let cache_dir = args.cache_dir.clone().unwrap_or_else(|| ragtune::ragtune_home().join("eval-cache"));
    let (c, split) = if ragtune_eval::is_qa_dataset(args.dataset()) {
        let opts = ragtune_eval::QaEvalOptions {
            dataset: args.dataset().to_path_buf(),
            experiments: Vec::new(),
            config: cfg.clone(),
            limit: args.limit,
            skip: 0,
            cache_dir,
            reindex: false,
            refinement_check: false,
            local_semester: args.local_semester.clone(),
        };
        let c = ragtune_eval::run_qa_calibration(&opts, evaluator, args.k, args.target_precision, log).await?;
        let local = args.local_semester.as_ref().map_or_else(String::new, |s| format!(", {s} local"));
        (c, format!("questions from {}{local}", ragtune_eval::qa::QA_CALIBRATION_FROM))
    } else {
        let opts = beir_options(&cfg, &args, args.dataset(), &args.retriever);
        let c = ragtune_eval::run_calibration(&opts, &cfg, evaluator, args.k, args.target_precision, log).await?;
        (c, args.split.clone())
    };
    let text = ragtune_eval::calibration_toml(&c, &cfg, evaluator, name, &split, args.k)?;
    write_and_report(&out, &text, &c)
}

/// `--fusion`: every train query's BM25 and dense lists once per dataset, the fusion grid over them, the setting
/// chosen for all the datasets into a file.
async fn fusion(cfg: ragtune::Config, args: CalibrateArgs) -> anyhow::Result<()> {
    let conditions =
        ragtune_eval::fusion::FitConditions { split: args.split.clone(), chunking: args.chunking, limit: args.limit };
    // The saved fits are read and checked first, so a bad file fails before minutes of fusing.
    let mut saved_fits = Vec::new();
    for path in &args.from_fit_json {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let (saved, warning) = ragtune_eval::fusion::read_saved_fit(&text, &conditions)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        if let Some(w) = warning {
            eprintln!("warning: {}: {w}", path.display());
        }
        let names: Vec<&str> = saved.datasets.iter().map(|d| d.name.as_str()).collect();
        eprintln!("{}: the fits of {} datasets on `{}`: {}", path.display(), names.len(), args.split, names.join(", "));
        saved_fits.extend(saved.datasets);
    }
    for dataset in &args.dataset {
        if ragtune_eval::is_qa_dataset(dataset) {
            anyhow::bail!(
                "--fusion needs a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/); {} is a QA dataset",
                dataset.display()
            );
        }
    }
    // A dataset counted twice (given again, or also in a saved fit) is refused before fusing too.
    let fresh_names: Vec<String> =
        args.dataset.iter().flat_map(|d| ragtune_eval::fusion::fit_names(d, &args.stress)).collect();
    ragtune_eval::fusion::distinct_fit_names(
        fresh_names.iter().map(String::as_str).chain(saved_fits.iter().map(|d| d.name.as_str())),
    )?;
    let mut fits = Vec::with_capacity(args.dataset.len());
    for dataset in &args.dataset {
        let opts = beir_options(&cfg, &args, dataset, "hybrid");
        let mut grid = ragtune_eval::FusionGrid::default();
        if args.levels {
            grid.levels = ragtune_eval::FusionGrid::level_settings();
        }
        grid.include_levels_of(&cfg.hybrid);
        fits.extend(ragtune_eval::run_fusion_calibration(&opts, &grid, &args.stress, &mut |l| eprintln!("{l}")).await?);
    }
    fits.extend(saved_fits);
    let joint = ragtune_eval::joint_fit(fits, args.min_gain)?;
    if let Some(path) = &args.fit_json {
        write_file(path, &ragtune_eval::fusion::saved_fit_json(&joint, &conditions)?)?;
        eprintln!("wrote the whole fit to {}", path.display());
    }
    let out = args.out.unwrap_or_else(|| PathBuf::from("configs/fusion-calibrated.toml"));
    write_file(&out, &ragtune_eval::fusion_toml(&joint, &args.split))?;
    print!("{}", ragtune_eval::fusion_table(&joint));
    println!("wrote {}", out.display());
    Ok(())
}

/// `--evaluator learned`: every train query's retrieval, its features and label, the logistic fit, the file.
async fn learned(cfg: ragtune::Config, args: CalibrateArgs) -> anyhow::Result<()> {
    if ragtune_eval::is_qa_dataset(args.dataset()) {
        anyhow::bail!(
            "--evaluator learned needs a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/<split>.tsv); {} is a QA \
             dataset",
            args.dataset().display()
        );
    }
    for (flag, v) in
        [("--incorrect-precision", args.incorrect_precision), ("--incorrect-recall", args.incorrect_recall)]
    {
        if !(0.0..=1.0).contains(&v) {
            anyhow::bail!("{flag} must be within [0, 1], got {v}");
        }
    }
    let model = match args.model.as_str() {
        "auto" => None,
        kind => Some(
            kind.parse::<ragtune::evaluators::crag::ModelKind>()
                .map_err(|_| anyhow::anyhow!("--model is `auto`, `logistic` or `stumps`, got `{}`", args.model))?,
        ),
    };
    let name = dataset_name(args.dataset());
    let opts = beir_options(&cfg, &args, args.dataset(), &args.retriever);
    let options = ragtune::evaluators::crag::FitOptions {
        model,
        target_precision: args.target_precision,
        incorrect_floor: Some(ragtune::evaluators::crag::IncorrectFloor {
            precision: args.incorrect_precision,
            recall: args.incorrect_recall,
        }),
        ..Default::default()
    };
    let fit = ragtune_eval::run_learned_calibration(&opts, &cfg, args.k, &options, &mut |l| eprintln!("{l}")).await?;
    let out = args.out.unwrap_or_else(|| PathBuf::from("configs/crag-learned.toml"));
    write_file(&out, &ragtune_eval::learned_toml(&fit, &cfg, &name, &args.split, &args.retriever, args.k)?)?;
    print!("{}", ragtune_eval::learned_table(&fit));
    println!("wrote {}", out.display());
    Ok(())
}

/// The evaluation options of the BEIR dataset `dataset` from the arguments, retrieving with `retriever`.
fn beir_options(cfg: &ragtune::Config, args: &CalibrateArgs, dataset: &Path, retriever: &str) -> EvalOptions {
    let mut opts = EvalOptions::new(dataset);
    opts.split.clone_from(&args.split);
    retriever.clone_into(&mut opts.retriever);
    opts.embedding = cfg.embedding.clone();
    opts.hybrid = cfg.hybrid;
    opts.limit = args.limit;
    opts.chunking = args.chunking;
    if let Some(dir) = &args.cache_dir {
        opts.cache_dir.clone_from(dir);
    }
    opts
}

/// The dataset's name in the written file's header: its directory's name.
fn dataset_name(dir: &Path) -> String {
    let name = dir.canonicalize().ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    name.unwrap_or_else(|| "dataset".to_owned())
}

fn write_file(out: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(out, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))
}

fn write_and_report(out: &Path, text: &str, c: &ragtune::evaluators::crag::Calibration) -> anyhow::Result<()> {
    write_file(out, text)?;
    println!(
        "calibrated on {} queries ({} failed retrievals): upper {:.4}, lower {:.4}; INCORRECT precision {:.3}, recall {:.3}, F1 {:.3}; CORRECT precision {:.3} on {:.1} % of queries",
        c.samples,
        c.failures,
        c.upper,
        c.lower,
        c.incorrect_precision,
        c.incorrect_recall,
        c.incorrect_f1,
        c.correct_precision,
        c.correct_share * 100.0
    );
    println!("wrote {}", out.display());
    Ok(())
}
