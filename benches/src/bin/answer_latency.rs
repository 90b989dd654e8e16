//! The LLM-free answer path timed with the model loaded, for `cargo xtask bench answer`.
//!
//! `answer-latency --dataset DIR [--queries N] [--config FILE]` opens the cached hybrid evaluation index of a BEIR
//! dataset (built by `ragtune eval` on first use), loads the embedding model once, and answers the split's test
//! queries one at a time through `Engine::ask` without an LLM (an extractive answer, the LLM-free judge), as a
//! server with the model loaded would. It prints p50/p99 of the fast path (retrieval judged CORRECT: no correction)
//! and of the corrected path (AMBIGUOUS or INCORRECT: a correction ran), each stage's share of the time (from the
//! answers' per-stage cost), and the one-off model load time; the last line is JSON.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ragtune::{Config, Engine};
use ragtune_eval::retrieval::{EvalOptions, run_eval};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut dataset, mut queries, mut config) = (None, 300_usize, None);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--dataset" => dataset = Some(value()?),
            "--queries" => queries = value()?.parse().context("--queries")?,
            "--config" => config = Some(value()?),
            other => bail!("unknown argument {other} (use --dataset, --queries, --config)"),
        }
    }
    let dataset = dataset.context("--dataset DIR is required")?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(run(&dataset, queries, config.as_deref()))
}

/// Times of one path.
#[derive(Default)]
struct Path {
    ms: Vec<f64>,
    stages: BTreeMap<String, f64>,
}

async fn run(dataset: &str, queries: usize, config: Option<&str>) -> Result<()> {
    let mut cfg = match config {
        Some(path) => Config::from_file(std::path::Path::new(path))?,
        None => Config::default(),
    };
    let mut opts = EvalOptions::new(dataset);
    opts.retriever = "hybrid".to_owned();
    // The index is built with the configuration's embedding model (the default one, or the quantised variant).
    opts.embedding = cfg.embedding.clone();
    eprintln!("answer-latency: preparing the hybrid index of {dataset} (cached after the first run)");
    let report = run_eval(&opts, &mut |l| eprintln!("  {l}")).await?;
    cfg.store.path = report.store_location.clone().into();
    // No LLM: the extractive answer and the LLM-free judge.
    cfg.llm.url.clear();
    let started = Instant::now();
    let engine = Engine::open(cfg).await?;
    let load_seconds = started.elapsed().as_secs_f64();
    let data = ragtune::ingest::load_beir(std::path::Path::new(dataset), "test")?;
    let texts: Vec<String> = data.queries_with_qrels().iter().take(queries).map(|q| q.text.clone()).collect();
    engine.ask(&texts[0]).await?; // warm-up: first-call allocations, caches of the store
    let (mut fast, mut corrected) = (Path::default(), Path::default());
    for q in &texts {
        let t = Instant::now();
        let answer = engine.ask(q).await?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let path = if answer.crag.correction_applied { &mut corrected } else { &mut fast };
        path.ms.push(ms);
        for (stage, cost) in &answer.cost.stages {
            *path.stages.entry(stage.clone()).or_default() += cost.ms;
        }
    }
    let summary = |name: &str, p: &mut Path| {
        p.ms.sort_by(f64::total_cmp);
        let total: f64 = p.ms.iter().sum();
        let pct = |x: f64| ragtune::evaluators::metrics::percentile(&p.ms, x);
        println!(
            "{name:<10} {:>4} answers  p50 {:>7.1} ms  p99 {:>7.1} ms  mean {:>7.1} ms",
            p.ms.len(),
            pct(50.0),
            pct(99.0),
            total / p.ms.len().max(1) as f64
        );
        let shares: BTreeMap<&String, f64> =
            p.stages.iter().map(|(s, ms)| (s, if total > 0.0 { ms / total } else { 0.0 })).collect();
        let line: Vec<String> = shares.iter().map(|(s, f)| format!("{s} {:.0}%", f * 100.0)).collect();
        println!("           stage shares of the time: {}", line.join(", "));
        serde_json::json!({ "answers": p.ms.len(), "p50_ms": pct(50.0), "p99_ms": pct(99.0),
            "mean_ms": total / p.ms.len().max(1) as f64, "stage_share": shares })
    };
    println!(
        "\nLLM-free answers (`ask --no-llm`), {} {} test queries one at a time, model loaded",
        texts.len(),
        report.dataset
    );
    let fast_json = summary("fast path", &mut fast);
    let corrected_json = summary("corrected", &mut corrected);
    println!("model and store load (once per process): {load_seconds:.2} s");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("(load average now: {})", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    println!(
        "{}",
        serde_json::json!({ "dataset": report.dataset, "queries": texts.len(), "load_seconds": load_seconds,
            "fast": fast_json, "corrected": corrected_json })
    );
    Ok(())
}
