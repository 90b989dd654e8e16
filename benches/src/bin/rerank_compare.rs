//! The ragtune side of `cargo xtask bench compare --reranker DIR` (the Python side is
//! `crates/ragtune-embed/scripts/peer_rerank.py`).
//!
//! Two subcommands, so that both sides score the same bytes:
//!
//! - `rerank-compare pairs --dataset DIR --out FILE [--pairs N] [--depth N]` indexes a BEIR dataset's corpus with
//!   BM25 only (the evaluation's passage chunking: `EvalOptions::index_chunking`, 100-word passages; no embedding
//!   model), then takes the split's test queries in order, each with the texts of its top `--depth` (30) BM25
//!   passages as the pipeline's reranker sees them (`Chunk::indexable_text`: title, then the passage), until there
//!   are `--pairs` (query, passage) pairs (the last query's list cut short). It writes one JSON line per query:
//!   `{"query_id", "query", "passages": [...]}`.
//! - `rerank-compare run --model DIR --pairs FILE [--threads T] [--max-length N] [--batch-size N] [--dump FILE]`
//!   loads the cross-encoder the way the engine does (`ragtune::load_cross_encoder` with `[rerank] reranker =
//!   "cross-encoder"`: `CrossEncoderReranker`, on the provisioned ONNX Runtime), scores one query's passages warm,
//!   then times `Reranker::score` once per query of the file (one call per query, as the rerank stage makes it; the
//!   reranker cuts it into inference batches of `--batch-size`), and prints one JSON line: `pairs_per_second`,
//!   `query_ms` (p50/p99/mean of one query's call), `model_load_seconds`. `--dump` writes every score, in file
//!   order, as little-endian f32, for the score check.
//!
//! `--threads 0` (the default) keeps ragtune's default intra-op threads for the cross-encoder (`[rerank] threads`,
//! after `$RAGTUNE_CONFIG` and `RAGTUNE__…` overrides: one per core unless set); `--threads T` sets `T`.

use std::io::Write as _;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ragtune::core::{Candidate, Chunk, Ctx, Query, ScoredHit};
use ragtune::{Config, Engine, RerankerKind, Strategy};
use ragtune_eval::retrieval::EvalOptions;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let sub = args.next().context("use `rerank-compare pairs …` or `rerank-compare run …`")?;
    let mut opts = std::collections::BTreeMap::<String, String>::new();
    while let Some(a) = args.next() {
        let v = args.next().with_context(|| format!("{a} needs a value"))?;
        opts.insert(a, v);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    match sub.as_str() {
        "pairs" => {
            check(&opts, &["--dataset", "--out", "--pairs", "--depth"])?;
            let dataset = opts.get("--dataset").context("--dataset DIR is required")?;
            let out = opts.get("--out").context("--out FILE is required")?;
            let pairs = number(&opts, "--pairs", 3000)?;
            let depth = number(&opts, "--depth", 30)?;
            rt.block_on(make_pairs(dataset, out, pairs, depth))
        }
        "run" => {
            check(&opts, &["--model", "--pairs", "--threads", "--max-length", "--batch-size", "--dump"])?;
            let model = opts.get("--model").context("--model DIR is required")?;
            let pairs = opts.get("--pairs").context("--pairs FILE is required")?;
            let settings = Settings {
                threads: number(&opts, "--threads", 0)?,
                max_length: number(&opts, "--max-length", 256)?,
                batch_size: number(&opts, "--batch-size", 16)?,
            };
            rt.block_on(run(model, pairs, settings, opts.get("--dump").map(String::as_str)))
        }
        other => bail!("unknown subcommand {other} (use pairs or run)"),
    }
}

fn check(opts: &std::collections::BTreeMap<String, String>, known: &[&str]) -> Result<()> {
    match opts.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => bail!("unknown argument {k} (use {})", known.join(", ")),
        None => Ok(()),
    }
}

fn number(opts: &std::collections::BTreeMap<String, String>, key: &str, default: usize) -> Result<usize> {
    opts.get(key).map_or(Ok(default), |v| v.parse().with_context(|| format!("{key} needs a number, not {v}")))
}

/// One query and the passages to score against it.
struct Group {
    query: String,
    passages: Vec<Candidate>,
}

async fn make_pairs(dataset: &str, out: &str, pairs: usize, depth: usize) -> Result<()> {
    let data = ragtune::ingest::load_beir(std::path::Path::new(dataset), "test")?;
    let dir = std::env::temp_dir().join(format!("ragtune-rerank-pairs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // BM25 only: the candidates a reranker would see first, without loading the embedding model.
    let mut config = Config::default();
    config.store.path.clone_from(&dir);
    config.embedding.mode = ragtune::EmbeddingMode::Off;
    let mut engine = Engine::open(config).await?;
    let started = Instant::now();
    let report =
        engine.index_documents(&data.corpus, EvalOptions::new(dataset).index_chunking(), &mut |_, _| {}).await?;
    eprintln!(
        "rerank-compare: {} documents as {} BM25 passages in {:.1} s",
        report.documents,
        report.passages,
        started.elapsed().as_secs_f64()
    );
    let mut file = std::io::BufWriter::new(std::fs::File::create(out).with_context(|| format!("cannot write {out}"))?);
    let (mut written, mut words) = (0_usize, 0_usize);
    for q in data.queries_with_qrels() {
        if written >= pairs {
            break;
        }
        let hits = engine.search_with(Query::new(q.text.clone()).with_top_k(depth), Strategy::Bm25).await?.hits;
        let passages: Vec<String> = hits.iter().take(pairs - written).map(|c| c.chunk.indexable_text()).collect();
        written += passages.len();
        words += passages.iter().map(|p| p.split_whitespace().count()).sum::<usize>();
        writeln!(file, "{}", serde_json::json!({ "query_id": q.id, "query": q.text, "passages": passages }))?;
    }
    file.flush()?;
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
    if written < pairs {
        bail!("only {written} pairs: the dataset's test queries and their top {depth} passages give no more");
    }
    println!(
        "{}",
        serde_json::json!({ "pairs": written, "depth": depth, "mean_passage_words": words as f64 / written as f64 })
    );
    Ok(())
}

fn read_pairs(path: &str) -> Result<Vec<Group>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    let mut groups = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).with_context(|| format!("{path}:{}", i + 1))?;
        let query = v["query"].as_str().with_context(|| format!("{path}:{}: no query", i + 1))?.to_owned();
        let texts = v["passages"].as_array().with_context(|| format!("{path}:{}: no passages", i + 1))?;
        // A chunk without title or header path: its `indexable_text` is the stored text, byte for byte.
        let passages = texts
            .iter()
            .zip(1_u32..)
            .map(|(t, rank)| {
                let chunk = Chunk::new(format!("{i}-{rank}"), format!("{i}"), t.as_str().unwrap_or_default());
                Candidate::from_hit(ScoredHit { chunk, score: 0.0 }, "bm25", rank)
            })
            .collect();
        groups.push(Group { query, passages });
    }
    Ok(groups)
}

/// The cross-encoder's settings of one run.
struct Settings {
    threads: usize,
    max_length: usize,
    batch_size: usize,
}

async fn run(model: &str, pairs: &str, s: Settings, dump: Option<&str>) -> Result<()> {
    let groups = read_pairs(pairs)?;
    let n: usize = groups.iter().map(|g| g.passages.len()).sum();
    if n == 0 {
        bail!("{pairs} holds no pairs");
    }
    // The settings the engine would use (`$RAGTUNE_CONFIG`, `RAGTUNE__SECTION__KEY` overrides), with the
    // cross-encoder of `[rerank]`.
    let mut config = Config::load(None)?;
    config.rerank.reranker = RerankerKind::CrossEncoder;
    config.rerank.model = Some(model.to_owned());
    (config.rerank.max_length, config.rerank.batch_size) = (s.max_length, s.batch_size);
    if s.threads > 0 {
        config.rerank.threads = s.threads;
    }
    let threads = ragtune::cross_encoder_threads(&config.rerank);
    let started = Instant::now();
    let reranker = ragtune::load_cross_encoder(&config.rerank, &config.embedding)?;
    let load_seconds = started.elapsed().as_secs_f64();
    // Warm-up, as the peer does: one query's first batch before timing.
    let first = &groups[0];
    reranker.score(&Ctx::new(), &first.query, &first.passages[..s.batch_size.min(first.passages.len())]).await?;

    let mut scores = Vec::with_capacity(n);
    let mut query_ms = Vec::with_capacity(groups.len());
    let started = Instant::now();
    for g in &groups {
        let t = Instant::now();
        scores.extend(reranker.score(&Ctx::new(), &g.query, &g.passages).await?);
        query_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(path) = dump {
        let bytes: Vec<u8> = scores.iter().flat_map(|s| s.to_le_bytes()).collect();
        std::fs::write(path, bytes).with_context(|| format!("cannot write {path}"))?;
    }
    query_ms.sort_by(f64::total_cmp);
    let at = |p: f64| ragtune::evaluators::metrics::percentile(&query_ms, p);
    println!(
        "{}",
        serde_json::json!({
            "impl": "ragtune",
            "reranker": reranker.name(),
            "threads": threads,
            "max_length": s.max_length,
            "batch_size": s.batch_size,
            "queries": groups.len(),
            "pairs": n,
            "model_load_seconds": load_seconds,
            "seconds": seconds,
            "pairs_per_second": n as f64 / seconds,
            "query_ms": { "p50": at(50.0), "p99": at(99.0), "mean": query_ms.iter().sum::<f64>() / query_ms.len() as f64 },
        })
    );
    Ok(())
}
