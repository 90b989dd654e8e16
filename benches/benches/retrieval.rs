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
    for n in [10_000usize, 100_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = StoreOptions { ann: AnnConfig { min_vectors: 1_000, ..AnnConfig::default() } };
        let store = EmbeddedStore::open_with(dir.path(), options).expect("store");
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        rt.block_on(async {
            let ctx = Ctx::new();
            store.ensure_spaces(&ctx, Some(&spec), None).await.expect("spaces");
            for start in (0..n).step_by(5_000) {
                let records = (start..(start + 5_000).min(n))
                    .map(|i| Record {
                        chunk: Chunk::new(format!("c{i}"), format!("d{i}"), "x"),
                        dense: Some((0..dim).map(|_| rng.next_f32()).collect()),
                        sparse: None,
                    })
                    .collect();
                store.upsert(&ctx, records).await.expect("upsert");
            }
        });
        let mut run = |name: String, rng: &mut Rng| {
            let mut g = c.benchmark_group(name);
            g.bench_function("top10", |b| {
                b.iter_batched(
                    || (0..dim).map(|_| rng.next_f32()).collect::<Vec<f32>>(),
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
        let report = rt.block_on(store.optimize()).expect("optimize");
        eprintln!("hnsw build over {n} vectors of {dim} dimensions: {} ms (one thread)", report.build_ms);
        run(format!("dense_hnsw/{n}x{dim}"), &mut rng);
    }
}

criterion_group!(retrieval, fusion, dense_search);
criterion_main!(retrieval);
