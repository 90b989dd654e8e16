//! The LLM-free answer path timed with the model loaded, for `cargo xtask bench answer`.
//!
//! `answer-latency --dataset DIR [--queries N] [--config FILE]` opens the cached hybrid evaluation index of a BEIR
//! dataset (built by `ragtune eval` on first use), loads the embedding model once, and answers the split's test
//! queries one at a time through `Engine::ask` without an LLM (an extractive answer, the LLM-free judge), as a
//! server with the model loaded would. It prints p50/p99 of the fast path (retrieval judged CORRECT: no correction)
//! and of the corrected path (AMBIGUOUS or INCORRECT: a correction ran), each stage's share of the time (from the
//! answers' per-stage cost), and the one-off model load time; the last line is JSON.
//!
//! `--rerank-model DIR [--rerank-share 0.3]` measures the same answers with and without the cross-encoder rerank
//! stage, side by side: it answers every query once without reranking to count the candidates that reach the rerank
//! stage (`crag.final_count`), sets `[rerank] enabled = true, reranker = "cross-encoder", model = DIR, max_docs =`
//! the share (rounded up) of their median, and then times every query on both configurations, in blocks of 50
//! queries, each block on an engine opened for it (fresh caches: no question is known to the engine that answers
//! it), which side goes first alternating from block to block so that a change of load falls on both. It prints
//! both p50/p99 (all answers, then each path), the rerank stage's own time and the pairs it scored; it stops with an
//! error when the cross-encoder does not load or a reranked answer skipped the stage (a latency without reranking
//! is no measurement of it).

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ragtune::pipeline::NoteKind;
use ragtune::{Config, Engine, RerankerKind};
use ragtune_eval::retrieval::{EvalOptions, run_eval};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut dataset, mut queries, mut config) = (None, 300_usize, None);
    let (mut rerank_model, mut share) = (None, 0.3_f64);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--dataset" => dataset = Some(value()?),
            "--queries" => queries = value()?.parse().context("--queries")?,
            "--config" => config = Some(value()?),
            "--rerank-model" => rerank_model = Some(value()?),
            "--rerank-share" => {
                share = value()?.parse().ok().filter(|s| *s > 0.0 && *s <= 1.0).context("--rerank-share in (0, 1]")?;
            }
            other => {
                bail!("unknown argument {other} (use --dataset, --queries, --config, --rerank-model, --rerank-share)")
            }
        }
    }
    let dataset = dataset.context("--dataset DIR is required")?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    match rerank_model {
        Some(model) => rt.block_on(with_rerank(&dataset, queries, config.as_deref(), &model, share)),
        None => rt.block_on(run(&dataset, queries, config.as_deref())),
    }
}

/// Times of one path.
#[derive(Default)]
struct Path {
    ms: Vec<f64>,
    stages: BTreeMap<String, f64>,
}

/// The configuration of the measured engine on the cached hybrid evaluation index of `dataset`, without an LLM, and
/// the dataset's name.
async fn prepare(dataset: &str, config: Option<&str>) -> Result<(Config, String)> {
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
    Ok((cfg, report.dataset))
}

/// The split's first `queries` test queries.
fn test_queries(dataset: &str, queries: usize) -> Result<Vec<String>> {
    let data = ragtune::ingest::load_beir(std::path::Path::new(dataset), "test")?;
    Ok(data.queries_with_qrels().iter().take(queries).map(|q| q.text.clone()).collect())
}

async fn run(dataset: &str, queries: usize, config: Option<&str>) -> Result<()> {
    let (cfg, name) = prepare(dataset, config).await?;
    let started = Instant::now();
    let engine = Engine::open(cfg).await?;
    let load_seconds = started.elapsed().as_secs_f64();
    let texts = test_queries(dataset, queries)?;
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
    println!("\nLLM-free answers (`ask --no-llm`), {} {} test queries one at a time, model loaded", texts.len(), name);
    let fast_json = summary("fast path", &mut fast);
    let corrected_json = summary("corrected", &mut corrected);
    println!("model and store load (once per process): {load_seconds:.2} s");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("(load average now: {})", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    println!(
        "{}",
        serde_json::json!({ "dataset": name, "queries": texts.len(), "load_seconds": load_seconds,
            "fast": fast_json, "corrected": corrected_json })
    );
    Ok(())
}

/// The answers of one engine in the side-by-side run of `--rerank-model`.
#[derive(Default)]
struct Side {
    all: Vec<f64>,
    fast: Vec<f64>,
    corrected: Vec<f64>,
    /// The rerank stage's own time and the pairs it scored, per answer that ran it.
    rerank_ms: Vec<f64>,
    pairs: Vec<f64>,
}

impl Side {
    fn record(&mut self, answer: &ragtune::AskResponse, ms: f64) {
        self.all.push(ms);
        if answer.crag.correction_applied { &mut self.corrected } else { &mut self.fast }.push(ms);
        if let Some(stage) = answer.cost.stages.get("rerank") {
            self.rerank_ms.push(stage.ms);
            self.pairs.push(stage.docs as f64);
        }
    }

    fn json(&self) -> serde_json::Value {
        let pct = |v: &[f64], p: f64| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            ragtune::evaluators::metrics::percentile(&v, p)
        };
        let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
        serde_json::json!({
            "answers": self.all.len(), "p50_ms": pct(&self.all, 50.0), "p99_ms": pct(&self.all, 99.0),
            "mean_ms": mean(&self.all),
            "fast": { "answers": self.fast.len(), "p50_ms": pct(&self.fast, 50.0) },
            "corrected": { "answers": self.corrected.len(), "p50_ms": pct(&self.corrected, 50.0) },
            "reranked_answers": self.rerank_ms.len(), "rerank_stage_p50_ms": pct(&self.rerank_ms, 50.0),
            "rerank_pairs_mean": mean(&self.pairs),
        })
    }
}

/// Queries per block of the side-by-side run.
const BLOCK: usize = 50;

/// The warm-up question of each engine of the side-by-side run, measured by neither side.
const WARM_UP: &str = "Does vitamin D supplementation reduce the risk of bone fractures in older adults?";

/// `--rerank-model DIR`: the same answers without and with the cross-encoder rerank stage at `share` of the
/// candidates, side by side (see the module's documentation).
async fn with_rerank(dataset: &str, queries: usize, config: Option<&str>, model: &str, share: f64) -> Result<()> {
    let (cfg, name) = prepare(dataset, config).await?;
    let texts = test_queries(dataset, queries)?;
    let mut plain_cfg = cfg.clone();
    plain_cfg.rerank.enabled = false;
    // The candidates that reach the rerank stage, counted without it, on an engine of its own: its caches (the
    // pipeline's, and the query embeddings' in its embedder) go with it, so that no measured answer finds its
    // question answered or embedded by this pass.
    let counter = Engine::open(plain_cfg.clone()).await?;
    let mut counts = Vec::with_capacity(texts.len());
    for q in &texts {
        counts.push(counter.ask(q).await?.crag.final_count as f64);
    }
    drop(counter);
    let candidates = benches::median(&counts);
    // Rounded up: a 30 % budget of 10 candidates reranks 3, of 11 reranks 4.
    let max_docs = (share * candidates).ceil().max(1.0) as u64;
    let mut reranked_cfg = cfg;
    reranked_cfg.rerank.enabled = true;
    reranked_cfg.rerank.reranker = RerankerKind::CrossEncoder;
    reranked_cfg.rerank.model = Some(model.to_owned());
    reranked_cfg.rerank.max_docs = max_docs;
    let (max_length, batch_size, threads) =
        (reranked_cfg.rerank.max_length, reranked_cfg.rerank.batch_size, reranked_cfg.embedding.threads);
    // Blocks of queries, each side on an engine opened for the block (the store admits one engine at a time, and a
    // fresh engine has fresh caches: each question is new to both sides, as in the plain `bench answer`), which
    // side goes first alternating from block to block, so that a change of load falls on both.
    let (mut without, mut with) = (Side::default(), Side::default());
    let mut load_seconds = Vec::new();
    for (b, block) in texts.chunks(BLOCK).enumerate() {
        let order = if b % 2 == 0 { [false, true] } else { [true, false] };
        for rerank in order {
            let started = Instant::now();
            let engine = Engine::open(if rerank { reranked_cfg.clone() } else { plain_cfg.clone() }).await?;
            if rerank {
                load_seconds.push(started.elapsed().as_secs_f64());
                if let Some(note) = engine.notes().iter().find(|n| n.contains("cross-encoder")) {
                    bail!("the reranked engine runs without its cross-encoder: {note}");
                }
            }
            // Warm-up (first-call allocations, the cross-encoder's first run) on a question measured by neither.
            engine.ask(WARM_UP).await?;
            for q in block {
                let t = Instant::now();
                let answer = engine.ask(q).await?;
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                if !rerank {
                    without.record(&answer, ms);
                } else if let Some(note) = answer.notes.iter().find(|n| n.kind() == NoteKind::RerankSkipped) {
                    bail!("a reranked answer skipped the rerank stage: {note:?}");
                } else {
                    with.record(&answer, ms);
                }
            }
        }
    }
    let load_seconds = benches::median(&load_seconds);
    let (w, r) = (without.json(), with.json());
    println!(
        "\nLLM-free answers (`ask --no-llm`), {} {name} test queries one at a time, model loaded, on both engines \
         (blocks of {BLOCK} queries, which side goes first alternating)",
        texts.len()
    );
    println!(
        "rerank budget: max_docs = {max_docs} ({:.0} % of a median {candidates} candidates at the rerank stage, rounded \
         up); cross-encoder {model}, max_length {max_length}, batch {batch_size}, {threads} thread(s)",
        share * 100.0
    );
    println!(
        "  {:<20} {:>7} {:>9} {:>9} {:>9} {:>16} {:>16}",
        "", "answers", "p50", "p99", "mean", "fast path p50", "corrected p50"
    );
    for (label, v) in [("without reranking", &w), ("with cross-encoder", &r)] {
        let f = |key: &str| v[key].as_f64().unwrap_or(f64::NAN);
        let path = |p: &str| {
            format!("{:.1} ms ({})", v[p]["p50_ms"].as_f64().unwrap_or(f64::NAN), v[p]["answers"].as_u64().unwrap_or(0))
        };
        println!(
            "  {label:<20} {:>7} {:>6.1} ms {:>6.1} ms {:>6.1} ms {:>16} {:>16}",
            v["answers"].as_u64().unwrap_or(0),
            f("p50_ms"),
            f("p99_ms"),
            f("mean_ms"),
            path("fast"),
            path("corrected")
        );
    }
    let (p0, p1) = (w["p50_ms"].as_f64().unwrap_or(f64::NAN), r["p50_ms"].as_f64().unwrap_or(f64::NAN));
    println!("  p50 with / without: {:.2}x ({:+.1} ms)", p1 / p0, p1 - p0);
    println!(
        "  rerank stage: ran in {} of {} answers, p50 {:.1} ms, {:.1} pairs scored per answer on average",
        r["reranked_answers"].as_u64().unwrap_or(0),
        texts.len(),
        r["rerank_stage_p50_ms"].as_f64().unwrap_or(f64::NAN),
        r["rerank_pairs_mean"].as_f64().unwrap_or(f64::NAN)
    );
    println!("  reranked engine load (embedding model, store and cross-encoder; median): {load_seconds:.2} s");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("(load average now: {})", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    println!(
        "{}",
        serde_json::json!({ "dataset": name, "queries": texts.len(), "rerank_max_docs": max_docs,
            "rerank_share": share, "median_candidates": candidates, "without_rerank": w, "with_rerank": r })
    );
    Ok(())
}
