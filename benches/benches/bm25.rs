//! BM25 benchmarks: encoding throughput, indexing a corpus into the embedded store, and query latency.
//!
//! Uses BEIR SciFact from `../shared/data/beir/scifact` when present (the numbers reported in issue notes), else
//! a synthetic corpus of the same size (said on stderr).

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use ragtune::core::{Document, Query, TextRole};
use ragtune::embed::{Bm25Config, Bm25Encoder};
use ragtune::{Chunking, Config, Engine};

fn corpus() -> (String, Vec<Document>, Vec<String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/beir/scifact");
    if let Ok(data) = ragtune::ingest::load_beir(&dir, "test") {
        let queries = data.queries_with_qrels().iter().map(|q| q.text.clone()).collect();
        return ("scifact".into(), data.corpus, queries);
    }
    eprintln!("SciFact not found at {}: benchmarking a synthetic corpus of 5,183 documents", dir.display());
    let words: Vec<String> = (0..3000).map(|i| format!("w{}", (i * 7919) % 3001)).collect();
    let docs = (0..5183)
        .map(|i| {
            let text: Vec<&str> = (0..180).map(|j| words[(i * 31 + j * j * 17) % words.len()].as_str()).collect();
            Document::new(format!("d{i}"), text.join(" "))
        })
        .collect();
    let queries = (0..300).map(|i| format!("{} {} {}", words[i], words[i * 3 % 3000], words[i * 11 % 3000])).collect();
    ("synthetic".into(), docs, queries)
}

/// BM25 only: the dense model is benchmarked by `cargo xtask bench embed`.
fn bm25_config(dir: &Path) -> Config {
    let mut cfg = Config::default();
    cfg.store.path = dir.join("s");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    cfg
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

fn benches(c: &mut Criterion) {
    let (name, docs, queries) = corpus();
    let rt = runtime();

    let encoder = Bm25Encoder::new(Bm25Config::default()).expect("valid config");
    let texts: Vec<String> = docs.iter().take(1000).map(|d| d.text.clone()).collect();
    let mut g = c.benchmark_group(format!("bm25_encode/{name}"));
    g.throughput(Throughput::Elements(texts.len() as u64));
    g.bench_function("1000_passages", |b| {
        b.iter(|| {
            for t in &texts {
                black_box(encoder.encode_one(t, TextRole::Passage));
            }
        });
    });
    g.finish();

    let mut g = c.benchmark_group(format!("bm25_index/{name}"));
    g.sample_size(10).measurement_time(Duration::from_secs(40)).throughput(Throughput::Elements(docs.len() as u64));
    g.bench_function("embedded_store", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("tempdir"),
            |dir| {
                rt.block_on(async {
                    let cfg = bm25_config(dir.path());
                    let mut engine = Engine::open(cfg).await.expect("open");
                    engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.expect("index");
                });
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();

    let dir = tempfile::tempdir().expect("tempdir");
    let engine = rt.block_on(async {
        let cfg = bm25_config(dir.path());
        let mut engine = Engine::open(cfg).await.expect("open");
        engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.expect("index");
        engine
    });
    let mut g = c.benchmark_group(format!("bm25_query/{name}"));
    g.throughput(Throughput::Elements(1));
    for k in [10usize, 100] {
        let mut i = 0usize;
        g.bench_function(format!("top{k}"), |b| {
            b.iter(|| {
                let q = Query::new(queries[i % queries.len()].clone()).with_top_k(k);
                i += 1;
                black_box(rt.block_on(engine.search(q)).expect("search"))
            });
        });
    }
    g.finish();
}

criterion_group!(bm25, benches);
criterion_main!(bm25);
