//! Micro-benchmarks of retrieval building blocks: RRF fusion and exact dense search in the embedded store.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ragtune::core::{
    Candidate, Chunk, Ctx, Distance, EmbeddingSpec, Record, ScoredHit, SearchRequest, VectorQuery, VectorStore,
};
use ragtune::retrieve::rrf_fuse;
use ragtune::store::{AnnConfig, EmbeddedStore, StoreOptions};

/// A deterministic pseudo-random generator (xorshift), so every run benchmarks the same data.
struct Rng(u64);

impl Rng {
    /// A vector near one of 200 fixed centres, like embeddings of a corpus with topics (uniform random vectors
    /// are the worst case for graph indexes and unlike real data).
    fn clustered(&mut self, centres: &[Vec<f32>]) -> Vec<f32> {
        let c = &centres[(self.next_f32() + 0.5).mul_add(centres.len() as f32, 0.0) as usize % centres.len()];
        c.iter().map(|x| x + 0.35 * self.next_f32()).collect()
    }

    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
}

fn list(strategy: &str, n: usize, offset: usize) -> Vec<Candidate> {
    (0..n)
        .map(|i| {
            let id = format!("doc-{}", (i * 7 + offset) % (n * 2));
            let hit = ScoredHit { chunk: Chunk::new(id.clone(), id, "text"), score: 1.0 / (i + 1) as f32 };
            Candidate::from_hit(hit, strategy, i as u32 + 1)
        })
        .collect()
}

fn fusion(c: &mut Criterion) {
    let lists = vec![(1.0, list("bm25", 100, 0)), (1.0, list("dense", 100, 3))];
    c.bench_function("rrf_fuse/2x100_to_10", |b| b.iter(|| black_box(rrf_fuse(black_box(&lists), 60.0, 10))));
    let many: Vec<_> = (0..5).map(|i| (1.0, list(&format!("s{i}"), 100, i))).collect();
    c.bench_function("rrf_fuse/5x100_to_10", |b| b.iter(|| black_box(rrf_fuse(black_box(&many), 60.0, 10))));
}

fn dense_search(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let dim = 384;
    let spec = EmbeddingSpec { model_id: "bench".into(), dim, normalized: true, distance: Distance::Cosine };
    // RAGTUNE_BENCH_DENSE_SIZES=10000 limits the sizes (the 100k setup embeds and indexes for minutes).
    let sizes: Vec<usize> = std::env::var("RAGTUNE_BENCH_DENSE_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    for n in sizes {
        let dir = tempfile::tempdir().expect("tempdir");
        let ef_construction = std::env::var("RAGTUNE_BENCH_EF_CONSTRUCTION")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(AnnConfig::default().ef_construction);
        let options = StoreOptions {
            ann: AnnConfig { min_vectors: 1_000, ef_construction, ..AnnConfig::default() },
            ..StoreOptions::default()
        };
        let store = EmbeddedStore::open_with(dir.path(), options).expect("store");
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let centres: Vec<Vec<f32>> = (0..200).map(|_| (0..dim).map(|_| rng.next_f32()).collect()).collect();
        rt.block_on(async {
            let ctx = Ctx::new();
            store.ensure_spaces(&ctx, Some(&spec), None).await.expect("spaces");
            for start in (0..n).step_by(5_000) {
                let records = (start..(start + 5_000).min(n))
                    .map(|i| Record {
                        chunk: Chunk::new(format!("c{i}"), format!("d{i}"), "x"),
                        dense: Some(rng.clustered(&centres)),
                        sparse: None,
                        spans: Vec::new(),
                    })
                    .collect();
                store.upsert(&ctx, records).await.expect("upsert");
            }
        });
        let mut run = |name: String, rng: &mut Rng| {
            let mut g = c.benchmark_group(name);
            g.bench_function("top10", |b| {
                b.iter_batched(
                    || rng.clustered(&centres),
                    |q| {
                        let req = [SearchRequest { vector: VectorQuery::Dense(q), top_k: 10, filter: None }];
                        black_box(rt.block_on(store.search(&Ctx::new(), &req)).expect("search"))
                    },
                    BatchSize::SmallInput,
                );
            });
            g.finish();
        };
        run(format!("dense_exact/{n}x{dim}"), &mut rng);
        // Recall of the approximate index against exact search, on the same 100 queries.
        let probes: Vec<Vec<f32>> = (0..100).map(|_| rng.clustered(&centres)).collect();
        let top10 = |q: &Vec<f32>| -> Vec<String> {
            let req = [SearchRequest { vector: VectorQuery::Dense(q.clone()), top_k: 10, filter: None }];
            let hits = rt.block_on(store.search(&Ctx::new(), &req)).expect("search");
            hits[0].iter().map(|h| h.chunk.id.clone()).collect()
        };
        let exact: Vec<Vec<String>> = probes.iter().map(top10).collect();
        let report = rt.block_on(store.optimize()).expect("optimize");
        let approx: Vec<Vec<String>> = probes.iter().map(top10).collect();
        let found: usize = exact.iter().zip(&approx).map(|(e, a)| a.iter().filter(|id| e.contains(id)).count()).sum();
        eprintln!(
            "hnsw over {n} vectors of {dim} dimensions: build {} ms (one thread, ef_construction {ef_construction}), recall@10 {:.3}",
            report.build_ms,
            found as f64 / (exact.len() * 10) as f64
        );
        run(format!("dense_hnsw/{n}x{dim}"), &mut rng);
    }
}

criterion_group!(retrieval, fusion, dense_search);
criterion_main!(retrieval);
