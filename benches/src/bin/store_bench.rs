//! `cargo xtask bench store`: upsert throughput and query latency of the stores on a real corpus.
//!
//! Usage: `store-bench --dataset DIR [--retriever dense|bm25] [--batch N] [--qdrant-url URL]
//! [--qdrant-cluster-url URL]` (`$QDRANT_API_KEY` and `$QDRANT_CLUSTER_API_KEY` when the servers need keys).
//!
//! The records (chunks with their BM25 and, when the embedding model is provisioned, dense vectors) come from the
//! evaluation index of the dataset (`ragtune eval`, cached), so the benchmark measures the store alone, not the
//! encoders. Each store gets the same records in batches of `--batch`, then the split's queries one at a time:
//! BM25 queries encoded by the store's own encoder, and dense queries that are stored passage vectors (the same
//! distribution as real query vectors, without timing the model); hybrid queries are both in one store call (depth
//! 100 each, as the hybrid retriever asks) fused with RRF into the top 10. The embedded store always runs; Qdrant
//! runs when `--qdrant-url` or `$QDRANT_URL` is given, and a Qdrant cluster when `--qdrant-cluster-url` is given
//! (3 shards, replication factor 2; a fresh collection each, deleted afterwards). The last line is JSON.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ragtune::core::{Ctx, Record, SearchRequest, SparseEncoder, TextRole, VectorQuery, VectorStore, WriteBatch};
use ragtune::store::EmbeddedStore;
use ragtune::{StoreBackend, StoreConfig};
use ragtune_eval::retrieval::{EvalOptions, run_eval};

fn main() -> Result<()> {
    let mut dataset = None;
    let (mut retriever, mut batch, mut qdrant_url) = ("dense".to_owned(), 256_usize, std::env::var("QDRANT_URL").ok());
    let mut cluster_url = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--dataset" => dataset = Some(value()?),
            "--retriever" => retriever = value()?,
            "--batch" => batch = value()?.parse().context("--batch")?,
            "--qdrant-url" => qdrant_url = Some(value()?),
            "--qdrant-cluster-url" => cluster_url = Some(value()?),
            other => bail!("unknown argument {other}"),
        }
    }
    let dataset = dataset.context("--dataset DIR is required")?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let key = |name: &str| std::env::var(name).ok().filter(|k| !k.is_empty());
    let mut servers = Vec::new();
    if let Some(url) = qdrant_url.filter(|u| !u.is_empty()) {
        servers.push(Server { name: "qdrant", url, api_key: key("QDRANT_API_KEY"), cluster: false });
    }
    if let Some(url) = cluster_url.filter(|u| !u.is_empty()) {
        servers.push(Server { name: "qdrant-3", url, api_key: key("QDRANT_CLUSTER_API_KEY"), cluster: true });
    }
    rt.block_on(run(&dataset, &retriever, batch, &servers))
}

/// A Qdrant server to measure.
struct Server {
    name: &'static str,
    url: String,
    api_key: Option<String>,
    /// A 3-node cluster: the collection gets 3 shards with 2 replicas each.
    cluster: bool,
}

async fn run(dataset: &str, retriever: &str, batch: usize, servers: &[Server]) -> Result<()> {
    let mut opts = EvalOptions::new(dataset);
    opts.retriever = retriever.to_owned();
    opts.top_k = 10;
    eprintln!("store-bench: preparing the {retriever} index of {dataset} (cached after the first run)");
    let report = run_eval(&opts, &mut |l| eprintln!("  {l}")).await?;
    let source = EmbeddedStore::open(&report.store_location)?;
    let ctx = Ctx::new();
    let stats = source.stats(&ctx).await?;
    let mut records: Vec<Record> = Vec::new();
    loop {
        let page = source.scan(records.last().map(|r| r.chunk.id.clone()), 4096).await?;
        if page.is_empty() {
            break;
        }
        records.extend(page);
    }
    drop(source);

    // Queries: the split's texts through the store's BM25 encoder, and stored passage vectors.
    let data = ragtune::ingest::load_beir(std::path::Path::new(dataset), "test")?;
    let queries: Vec<String> = data.queries_with_qrels().iter().map(|q| q.text.clone()).collect();
    let spec = stats.sparse_spec.clone().context("the index has no sparse space")?;
    let encoder = ragtune::embed::Bm25Encoder::new(ragtune::embed::Bm25Config::from_spec_id(&spec.encoder_id)?)?;
    let texts: Vec<&str> = queries.iter().map(String::as_str).collect();
    let sparse_queries = encoder.encode(&ctx, &texts, TextRole::Query).await?;
    let step = (records.len() / queries.len().max(1)).max(1);
    let dense_queries: Vec<Vec<f32>> =
        records.iter().step_by(step).filter_map(|r| r.dense.clone()).take(queries.len()).collect();

    let mut results = Vec::new();
    let dir = tempfile_dir()?;
    let embedded: Arc<dyn VectorStore> = Arc::new(EmbeddedStore::open(&dir)?);
    results.push(measure("embedded", &*embedded, &stats, &records, batch, &sparse_queries, &dense_queries).await?);
    drop(embedded);
    let _ = std::fs::remove_dir_all(&dir);
    for server in servers {
        let mut cfg = StoreConfig { backend: StoreBackend::Qdrant, ..StoreConfig::default() };
        cfg.qdrant.url.clone_from(&server.url);
        cfg.qdrant.api_key = server.api_key.clone().map(Into::into);
        cfg.qdrant.collection = format!("ragtune-bench-{}-{}", server.name, std::process::id());
        if server.cluster {
            (cfg.qdrant.shard_number, cfg.qdrant.replication_factor) = (Some(3), Some(2));
            cfg.qdrant.write_consistency_factor = Some(1);
        }
        let store = ragtune::stores::open_store(&cfg).await?;
        let measured =
            measure(server.name, &*store.store, &stats, &records, batch, &sparse_queries, &dense_queries).await;
        ragtune::stores::clear_store(&cfg).await?;
        results.push(measured?);
    }
    if servers.is_empty() {
        eprintln!("store-bench: Qdrant skipped (set QDRANT_URL or pass --qdrant-url to include it)");
    }

    println!(
        "\nstore benchmark: {} records ({} with dense vectors) of {}, batches of {batch}, {} BM25 and {} dense queries, top 10",
        records.len(),
        stats.dense_vectors,
        report.dataset,
        sparse_queries.len(),
        dense_queries.len()
    );
    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11}",
        "store", "upsert/s", "bm25 p50", "bm25 p99", "dense p50", "dense p99", "hybrid p50", "hybrid p99"
    );
    for r in &results {
        let ms = |key: &str, p: &str| r[key][p].as_f64().unwrap_or(0.0);
        println!(
            "{:<10} {:>10.0} {:>8.2}ms {:>8.2}ms {:>8.2}ms {:>8.2}ms {:>9.2}ms {:>9.2}ms",
            r["store"].as_str().unwrap_or(""),
            r["upsert_per_second"].as_f64().unwrap_or(0.0),
            ms("bm25_ms", "p50"),
            ms("bm25_ms", "p99"),
            ms("dense_ms", "p50"),
            ms("dense_ms", "p99"),
            ms("hybrid_ms", "p50"),
            ms("hybrid_ms", "p99"),
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("(load average now: {})", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    println!(
        "{}",
        serde_json::json!({ "dataset": report.dataset, "records": records.len(), "batch": batch, "stores": results })
    );
    Ok(())
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("ragtune-store-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(dir)
}

async fn measure(
    name: &str,
    store: &dyn VectorStore,
    stats: &ragtune::core::StoreStats,
    records: &[Record],
    batch: usize,
    sparse_queries: &[ragtune::core::SparseVector],
    dense_queries: &[Vec<f32>],
) -> Result<serde_json::Value> {
    let ctx = Ctx::new();
    store.ensure_spaces(&ctx, stats.dense_spec.as_ref(), stats.sparse_spec.as_ref()).await?;
    let t = Instant::now();
    for chunk in records.chunks(batch.max(1)) {
        store.write(&ctx, WriteBatch { delete_docs: Vec::new(), upsert: chunk.to_vec() }).await?;
    }
    let upsert_s = t.elapsed().as_secs_f64();
    eprintln!("store-bench: {name}: {} records written in {upsert_s:.2} s", records.len());
    // Each query is one store call (a hybrid query: both lists in one call, then RRF), timed end to end.
    let time = |calls: Vec<Vec<SearchRequest>>| {
        let (store, ctx) = (store, &ctx);
        async move { benches::time_calls(store, ctx, calls).await.map(|(ms, _)| ms) }
    };
    let req = |v: VectorQuery, top_k: usize| SearchRequest { vector: v, top_k, filter: None };
    let bm25 = time(sparse_queries.iter().map(|q| vec![req(VectorQuery::Sparse(q.clone()), 10)]).collect()).await?;
    let (dense, hybrid) = if stats.dense_vectors > 0 {
        let dense = time(dense_queries.iter().map(|q| vec![req(VectorQuery::Dense(q.clone()), 10)]).collect()).await?;
        let pairs = sparse_queries
            .iter()
            .zip(dense_queries)
            .map(|(s, d)| vec![req(VectorQuery::Sparse(s.clone()), 100), req(VectorQuery::Dense(d.clone()), 100)])
            .collect();
        (dense, time(pairs).await?)
    } else {
        (Vec::new(), Vec::new())
    };
    let pct = |v: &[f64], p: f64| ragtune::evaluators::metrics::percentile(v, p);
    #[allow(clippy::cast_precision_loss)]
    let per_second = records.len() as f64 / upsert_s.max(1e-9);
    Ok(serde_json::json!({
        "store": name,
        "upsert_seconds": upsert_s,
        "upsert_per_second": per_second,
        "bm25_ms": { "p50": pct(&bm25, 50.0), "p99": pct(&bm25, 99.0) },
        "dense_ms": { "p50": pct(&dense, 50.0), "p99": pct(&dense, 99.0) },
        "hybrid_ms": { "p50": pct(&hybrid, 50.0), "p99": pct(&hybrid, 99.0) },
    }))
}
