//! `ragtune train reranker`: fine-tune a cross-encoder on train judgements with hard negatives from ragtune's own
//! hybrid retrieval (ragtune_eval::train), with a progress bar and its ETA.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use ragtune_eval::{TrainEvent, TrainOptions};

use crate::args::{Overrides, load_config};

/// `ragtune train …`.
#[derive(Debug, clap::Args)]
pub struct TrainArgs {
    #[command(subcommand)]
    what: TrainKind,
}

#[derive(Debug, clap::Subcommand)]
enum TrainKind {
    /// Fine-tune a cross-encoder reranker from all-MiniLM-L6-v2 on BEIR directories' train judgements (e.g. SciFact,
    /// the CMU set of `ragtune eval build-cmu-set`), with hard negatives from hybrid retrieval; writes model.onnx
    /// (int8), fp32/model.onnx, the tokenizer files, groups.jsonl and provenance.json to --out.
    Reranker(RerankerArgs),
}

#[derive(Debug, clap::Args)]
struct RerankerArgs {
    /// A BEIR directory (its qrels/train.tsv only); repeat for several.
    #[arg(long, value_name = "DIR", required = true)]
    dataset: Vec<PathBuf>,
    /// The model directory to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Seeds the negatives, the head's initialisation, dropout and the order of the groups.
    #[arg(long, default_value_t = 13)]
    seed: u64,
    /// Optimizer steps (0: one pass over the groups).
    #[arg(long, default_value_t = ragtune_eval::train::DEFAULT_STEPS)]
    steps: usize,
    /// Queries per step, each with its positive and negatives.
    #[arg(long, default_value_t = 4)]
    queries_per_step: usize,
    /// Hard negatives per query.
    #[arg(long, default_value_t = 4)]
    negatives: usize,
    /// Passages retrieved per query to draw the negatives from.
    #[arg(long, default_value_t = 30)]
    pool: usize,
    /// At most this many training groups per dataset (0: all), a seeded choice.
    #[arg(long, default_value_t = 0)]
    max_groups: usize,
    /// Leave the first N judged train queries of each dataset out of training (those `ragtune eval retrieval
    /// --split train --limit N` evaluates), to fit `[rerank] retrieval_weight` on queries the model has not seen.
    #[arg(long, value_name = "N", default_value_t = ragtune_eval::train::DEFAULT_HOLD_OUT)]
    hold_out: usize,
    /// Tokens per (query, passage) pair.
    #[arg(long, default_value_t = ragtune_eval::train::DEFAULT_MAX_LENGTH)]
    max_length: usize,
    /// Peak learning rate (linear warm-up over the first tenth, then linear decay).
    #[arg(long, default_value_t = 3e-5)]
    learning_rate: f64,
    /// Torch threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Where cached indexes live (default: $RAGTUNE_HOME/eval-cache).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Write groups.jsonl and stop (no training).
    #[arg(long)]
    mine_only: bool,
}

pub async fn run(config: Option<&Path>, args: TrainArgs) -> anyhow::Result<()> {
    let TrainKind::Reranker(a) = args.what;
    let cfg = load_config(config, Overrides::default())?;
    let mut opts = TrainOptions::new(a.dataset, a.out);
    opts.seed = a.seed;
    opts.steps = a.steps;
    opts.queries_per_step = a.queries_per_step;
    opts.negatives = a.negatives;
    opts.pool = a.pool;
    opts.max_groups = a.max_groups;
    opts.hold_out = a.hold_out;
    opts.max_length = a.max_length;
    opts.learning_rate = a.learning_rate;
    opts.threads = a.threads;
    opts.mine_only = a.mine_only;
    opts.embedding = cfg.embedding.clone();
    opts.hybrid = cfg.hybrid;
    if let Some(dir) = a.cache_dir {
        opts.cache_dir = dir;
    }
    let started = Instant::now();
    let mut bar: Option<ProgressBar> = None;
    let terminal = std::io::stderr().is_terminal();
    let mut last_line = 0u64;
    // Training waits on the trainer's process (and reads its progress) for tens of minutes: off the async workers.
    let mut on_event = |event| match event {
        TrainEvent::Log(m) => match &bar {
            Some(b) => b.println(m),
            None => eprintln!("{m}"),
        },
        TrainEvent::Started { steps, groups } => {
            eprintln!("training on {groups} groups for {steps} steps");
            let b = if terminal { ProgressBar::new(steps) } else { ProgressBar::hidden() };
            b.set_length(steps);
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} training [{bar:30}] {pos}/{len} steps, loss {msg} ({elapsed}, ETA {eta})",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            bar = Some(b);
        }
        TrainEvent::Step { step, loss } => {
            if let Some(b) = &bar {
                b.set_position(step);
                b.set_message(format!("{loss:.4}"));
                let steps = b.length().unwrap_or(step).max(1);
                // Without a terminal, a line every twentieth of the run, with the same ETA.
                if !terminal && (step * 20 / steps > last_line || step == steps) {
                    last_line = step * 20 / steps;
                    let eta = b.eta().as_secs();
                    eprintln!("step {step}/{steps}, loss {loss:.4}, ETA {}m{:02}s", eta / 60, eta % 60);
                }
            }
        }
        TrainEvent::Export => {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
            eprintln!("exporting ONNX and quantising to int8");
        }
    };
    let report = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(ragtune_eval::train_reranker(&opts, &mut on_event))
    })?;
    if let Some(b) = bar.take() {
        b.finish_and_clear();
    }
    let seconds = started.elapsed().as_secs_f64();
    for m in &report.mined {
        eprintln!(
            "{}: {} groups ({} positives not retrieved, {} short of negatives)",
            m.dataset, m.groups, m.positives_not_retrieved, m.short_groups
        );
    }
    match &report.provenance {
        Some(p) => {
            let curve = p["loss_curve"].as_array().cloned().unwrap_or_default();
            let first = curve.first().and_then(|c| c["loss"].as_f64()).unwrap_or(f64::NAN);
            let last = curve.last().and_then(|c| c["loss"].as_f64()).unwrap_or(f64::NAN);
            println!(
                "wrote {} in {:.0} s: loss {first:.4} → {last:.4}; model.onnx sha256 {}",
                report.out.display(),
                seconds,
                p["files"]["model.onnx"].as_str().unwrap_or("?")
            );
        }
        None => println!("wrote {} in {seconds:.0} s", report.out.join("groups.jsonl").display()),
    }
    Ok(())
}
