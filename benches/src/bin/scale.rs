//! The embedded store at scale, for `cargo xtask bench scale`.
//!
//! `scale --dataset DIR [--chunks N] [--queries N] [--dir DIR] [--keep] [--reuse]` builds a synthetic corpus of `--chunks` chunks
//! (default 100,000) and measures the embedded store on it: build time (writes, then the HNSW build), size on disk,
//! time to open and resident memory after open, and query latency p50/p99 of BM25, dense exact, dense HNSW and
//! hybrid (both lists of depth 100 in one store call, fused by RRF into the top 10), plus HNSW recall@10 against
//! exact search.
//!
//! The corpus has the statistics of real data without embedding a million texts: each chunk's text is 120 words
//! drawn from the word distribution of the dataset's corpus (so BM25 sees realistic document frequencies), encoded
//! by the real BM25 encoder; each dense vector is a real embedding of a dataset document (from the cached dense
//! evaluation index, built by `ragtune eval` on first use) plus Gaussian-like noise, normalised, so the vectors
//! keep the model's geometry (clusters of near neighbours) instead of being uniform noise. Queries are six words of
//! a chunk's text and a noisy copy of a chunk's vector. Deterministic: a fixed seed. The last line is JSON.
//!
//! The store is deleted at the end unless `--keep` is given. `--reuse` skips the build and measures the store an
//! earlier `--keep` run of the same `--chunks` left in `--dir` (open,
//! memory, queries; the build time is reported as not measured): the queries are drawn from the same chunks with
//! other noise, so their numbers are comparable with, not identical to, the building run's.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use ragtune::core::{
    Chunk, Ctx, Distance, EmbeddingSpec, Record, SearchRequest, SparseEncoder, TextRole, VectorQuery, VectorStore,
    WriteBatch,
};
use ragtune::store::{EmbeddedStore, StoreOptions};
use ragtune_eval::retrieval::{EvalOptions, run_eval};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut dataset, mut chunks, mut queries, mut dir, mut reuse, mut keep) =
        (None, 100_000_usize, 200_usize, None, false, false);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--dataset" => dataset = Some(value()?),
            "--chunks" => chunks = value()?.parse().context("--chunks")?,
            "--queries" => queries = value()?.parse().context("--queries")?,
            "--dir" => dir = Some(std::path::PathBuf::from(value()?)),
            "--reuse" => reuse = true,
            "--keep" => keep = true,
            other => bail!("unknown argument {other} (use --dataset, --chunks, --queries, --dir, --reuse, --keep)"),
        }
    }
    let dataset = dataset.context("--dataset DIR is required")?;
    let dir = dir.unwrap_or_else(|| std::env::temp_dir().join(format!("ragtune-scale-{chunks}")));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(run(&dataset, chunks, queries, &dir, reuse, keep || reuse))
}

/// xorshift64*: deterministic, fast, good enough for sampling.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Roughly normal (a sum of four uniforms, centred, unit variance).
    fn normal(&mut self) -> f32 {
        let u: f32 = (0..4).map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32).sum();
        (u - 2.0) * 1.732
    }
}

fn noisy(base: &[f32], rng: &mut Rng, sigma: f32) -> Vec<f32> {
    let mut v: Vec<f32> = base.iter().map(|x| x + sigma * rng.normal()).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| it.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

/// Noise per dimension: a noisy copy keeps a cosine of about 0.93 with its base vector.
const SIGMA: f32 = 0.02;

async fn run(
    dataset: &str,
    chunks: usize,
    queries: usize,
    dir: &std::path::Path,
    reuse: bool,
    keep: bool,
) -> Result<()> {
    // Real vectors and the real word distribution.
    let mut opts = EvalOptions::new(dataset);
    opts.retriever = "dense".to_owned();
    // The abstracts' own vectors (one per document), as every earlier run sampled: the same bases whatever the
    // evaluation's default chunking, so a `--reuse` run queries the store it built.
    opts.chunking = ragtune_eval::EvalChunking::Whole;
    eprintln!("scale: reading the real vectors of {dataset} (the dense evaluation index, cached)");
    let report = run_eval(&opts, &mut |_| {}).await?;
    let source = EmbeddedStore::open(&report.store_location)?;
    let ctx = Ctx::new();
    let mut bases: Vec<Vec<f32>> = Vec::new();
    let mut last = None;
    loop {
        let page = source.scan(last.clone(), 4096).await?;
        let Some(l) = page.last() else { break };
        last = Some(l.chunk.id.clone());
        bases.extend(page.into_iter().filter_map(|r| r.dense));
    }
    drop(source);
    let data = ragtune::ingest::load_beir(std::path::Path::new(dataset), "test")?;
    let words: Vec<String> = data
        .corpus
        .iter()
        .flat_map(|d| d.text.split_whitespace().map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase()))
        .filter(|w| !w.is_empty())
        .collect();
    if bases.is_empty() || words.is_empty() {
        bail!("no vectors or words in {dataset}");
    }
    let dim = bases[0].len();
    eprintln!("scale: {} real vectors ({dim}-d), {} words of text to sample from", bases.len(), words.len());

    if !reuse {
        let _ = std::fs::remove_dir_all(dir);
    } else if !dir.is_dir() {
        bail!("--reuse: there is no store at {} to reuse (run once without --reuse)", dir.display());
    }
    let encoder = ragtune::embed::Bm25Encoder::new(ragtune::embed::Bm25Config::default())?;
    let spec = EmbeddingSpec { model_id: "synthetic".into(), dim, normalized: true, distance: Distance::Cosine };
    let mut rng = Rng(0x5CA1_E000_0000_0001);
    let text_of = |i: usize| -> String {
        let mut r = Rng(0x7E47 ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        (0..120).map(|_| words[r.below(words.len())].as_str()).collect::<Vec<_>>().join(" ")
    };
    let started = Instant::now();
    if !reuse {
        let store = EmbeddedStore::open(dir)?;
        store.ensure_spaces(&ctx, Some(&spec), Some(encoder.spec())).await?;
        let batch = 4096;
        for start in (0..chunks).step_by(batch) {
            let ids: Vec<usize> = (start..(start + batch).min(chunks)).collect();
            let texts: Vec<String> = ids.iter().map(|&i| text_of(i)).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let sparse = encoder.encode(&ctx, &refs, TextRole::Passage).await?;
            let upsert = ids
                .iter()
                .zip(texts)
                .zip(sparse)
                .map(|((&i, text), sparse)| Record {
                    chunk: Chunk::new(format!("c{i:08}"), format!("d{i:08}"), text),
                    dense: Some(noisy(&bases[i % bases.len()], &mut rng, SIGMA)),
                    sparse: Some(sparse),
                    spans: Vec::new(),
                })
                .collect();
            store.write(&ctx, WriteBatch { delete_docs: Vec::new(), upsert }).await?;
            if (start / batch) % 25 == 0 {
                eprintln!(
                    "scale: {} of {chunks} chunks written ({:.0} s)",
                    start + batch,
                    started.elapsed().as_secs_f64()
                );
            }
        }
        let write_seconds = started.elapsed().as_secs_f64();
        eprintln!("scale: written in {write_seconds:.1} s; building the HNSW graph");
        let optimized = store.optimize().await?;
        eprintln!(
            "scale: HNSW built in {:.1} s (approximate: {})",
            optimized.build_ms as f64 / 1000.0,
            optimized.approximate
        );
    }
    // A reused store was built by an earlier run: its build time is not measured here.
    let build_seconds = if reuse { f64::NAN } else { started.elapsed().as_secs_f64() };
    let size = dir_bytes(dir);

    let rss_before = rss_mib();
    let t = Instant::now();
    let store = EmbeddedStore::open_with(dir, StoreOptions::default())?;
    let open_seconds = t.elapsed().as_secs_f64();
    let rss_after = rss_mib();

    // Queries.
    let mut q_texts = Vec::new();
    let mut q_vectors = Vec::new();
    for _ in 0..queries {
        let i = rng.below(chunks);
        let text = text_of(i);
        let w: Vec<&str> = text.split(' ').collect();
        let at = rng.below(w.len() - 6);
        q_texts.push(w[at..at + 6].join(" "));
        q_vectors.push(noisy(&bases[i % bases.len()], &mut rng, SIGMA));
    }
    let refs: Vec<&str> = q_texts.iter().map(String::as_str).collect();
    let q_sparse = encoder.encode(&ctx, &refs, TextRole::Query).await?;
    let dense = |v: &Vec<f32>, k| SearchRequest { vector: VectorQuery::Dense(v.clone()), top_k: k, filter: None };
    let sparse = |v: &ragtune::core::SparseVector, k| SearchRequest {
        vector: VectorQuery::Sparse(v.clone()),
        top_k: k,
        filter: None,
    };
    let time = |calls: Vec<Vec<SearchRequest>>| benches::time_calls(&store, &ctx, calls);
    let (bm25_ms, _) = time(q_sparse.iter().map(|s| vec![sparse(s, 10)]).collect()).await?;
    let (hnsw_ms, hnsw) = time(q_vectors.iter().map(|v| vec![dense(v, 10)]).collect()).await?;
    // More results than `ef_search` asks are answered exactly: the exact top 10 is the head of the top 200.
    let (exact_ms, exact) = time(q_vectors.iter().map(|v| vec![dense(v, 200)]).collect()).await?;
    let (hybrid_ms, _) =
        time(q_sparse.iter().zip(&q_vectors).map(|(s, v)| vec![sparse(s, 100), dense(v, 100)]).collect()).await?;
    let recall = hnsw
        .iter()
        .zip(&exact)
        .map(|(a, e)| {
            let truth: std::collections::HashSet<&str> = e.iter().take(10).map(|h| h.chunk.id.as_str()).collect();
            a.iter().filter(|h| truth.contains(h.chunk.id.as_str())).count() as f64 / truth.len().max(1) as f64
        })
        .sum::<f64>()
        / hnsw.len().max(1) as f64;
    let pct = |v: &[f64], p| ragtune::evaluators::metrics::percentile(v, p);
    println!("\nembedded store, {chunks} synthetic chunks ({dim}-d vectors from {} real ones + noise)", bases.len());
    println!("  build (write + HNSW)   {build_seconds:.1} s");
    println!(
        "  size on disk           {:.1} MiB ({:.0} bytes per chunk)",
        size as f64 / 1048576.0,
        size as f64 / chunks as f64
    );
    println!(
        "  open                   {open_seconds:.2} s, resident memory +{:.0} MiB ({:.0} bytes per chunk)",
        rss_after - rss_before,
        (rss_after - rss_before) * 1048576.0 / chunks as f64
    );
    for (name, ms) in [("BM25", &bm25_ms), ("dense exact", &exact_ms), ("dense HNSW", &hnsw_ms), ("hybrid", &hybrid_ms)]
    {
        println!("  {name:<12} p50 {:>8.2} ms  p99 {:>8.2} ms", pct(ms, 50.0), pct(ms, 99.0));
    }
    println!("  HNSW recall@10 against exact: {recall:.4}");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("(load average now: {})", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    let p = |ms: &Vec<f64>| serde_json::json!({ "p50": pct(ms, 50.0), "p99": pct(ms, 99.0) });
    println!(
        "{}",
        serde_json::json!({ "chunks": chunks, "build_seconds": build_seconds, "bytes_on_disk": size,
            "open_seconds": open_seconds, "rss_open_mib": rss_after - rss_before, "bm25_ms": p(&bm25_ms),
            "dense_exact_ms": p(&exact_ms), "dense_hnsw_ms": p(&hnsw_ms), "hybrid_ms": p(&hybrid_ms),
            "hnsw_recall_at_10": recall })
    );
    drop(store);
    if !keep {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(())
}
