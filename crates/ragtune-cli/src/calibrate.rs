//! `ragtune calibrate`: fit a CRAG evaluator's two thresholds on a training split and write them to a config file.

use std::path::{Path, PathBuf};

use ragtune_eval::EvalOptions;

use crate::args::{Overrides, load_config};

/// Fit the model-based CRAG evaluator's two thresholds on a training split and write them to a config file.
#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// The BEIR dataset directory.
    #[arg(long, value_name = "DIR")]
    dataset: PathBuf,
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
    /// The evaluator whose thresholds are fitted: `model` (upper/lower of the retrieval-score scorer) or
    /// `heuristic` (the heuristic evaluator's relevant/partial thresholds, its weights as configured).
    #[arg(long, value_name = "NAME", default_value = "model")]
    evaluator: String,
    /// Where to write the thresholds (a config file `ragtune --config` reads).
    #[arg(long, value_name = "FILE", default_value = "configs/crag-calibrated.toml")]
    out: PathBuf,
    /// Where cached indexes live (default: $RAGTUNE_HOME/eval-cache).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Use only the first N queries.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
}

pub async fn run(config: Option<&Path>, args: CalibrateArgs) -> anyhow::Result<()> {
    let CalibrateArgs { dataset, split, retriever, k, target_precision, evaluator, out, cache_dir, limit } = args;
    let cfg = load_config(config, Overrides::default())?;
    let evaluator: ragtune::EvaluatorKind = evaluator.parse()?;
    let mut opts = EvalOptions::new(&dataset);
    opts.split = split.clone();
    opts.retriever = retriever;
    opts.embedding = cfg.embedding.clone();
    opts.hybrid = cfg.hybrid;
    opts.limit = limit;
    if let Some(d) = cache_dir {
        opts.cache_dir = d;
    }
    let c =
        ragtune_eval::run_calibration(&opts, &cfg, evaluator, k, target_precision, &mut |l| eprintln!("{l}")).await?;
    let name = dataset.canonicalize().ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let text = ragtune_eval::calibration_toml(&c, &cfg, evaluator, name.as_deref().unwrap_or("dataset"), &split, k)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(&out, &text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
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
