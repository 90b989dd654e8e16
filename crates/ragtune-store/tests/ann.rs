//! The approximate dense index: recall against exact search, writes after a build, persistence, determinism.

use ragtune_core::{
    Chunk, Ctx, Distance, EmbeddingSpec, Filter, Record, ScoredHit, SearchRequest, VectorQuery, VectorStore,
};
use ragtune_store::{AnnConfig, EmbeddedStore, StoreOptions};

const DIM: usize = 32;

struct Rng(u64);

impl Rng {
    fn vector(&mut self) -> Vec<f32> {
        (0..DIM)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }
}

fn spec() -> EmbeddingSpec {
    EmbeddingSpec { model_id: "ann-test".into(), dim: DIM, normalized: true, distance: Distance::Cosine }
}

fn options() -> StoreOptions {
    StoreOptions { ann: AnnConfig { min_vectors: 100, ..AnnConfig::default() }, ..StoreOptions::default() }
}

fn record(i: usize, v: Vec<f32>) -> Record {
    let mut chunk = Chunk::new(format!("c{i:05}"), format!("d{i:05}"), format!("chunk {i}"));
    chunk.metadata.insert("group".into(), (i % 50).into());
    Record::new(chunk, Some(v), None)
}

async fn filled(dir: &std::path::Path, n: usize) -> (EmbeddedStore, Vec<Vec<f32>>) {
    let store = EmbeddedStore::open_with(dir, options()).unwrap();
    let ctx = Ctx::new();
    store.ensure_spaces(&ctx, Some(&spec()), None).await.unwrap();
    let mut rng = Rng(42);
    let vectors: Vec<Vec<f32>> = (0..n).map(|_| rng.vector()).collect();
    store.upsert(&ctx, vectors.iter().cloned().enumerate().map(|(i, v)| record(i, v)).collect()).await.unwrap();
    (store, vectors)
}

async fn search(store: &EmbeddedStore, q: &[f32], k: usize, filter: Option<Filter>) -> Vec<ScoredHit> {
    let req = [SearchRequest { vector: VectorQuery::Dense(q.to_vec()), top_k: k, filter }];
    store.search(&Ctx::new(), &req).await.unwrap().remove(0)
}

fn ids(hits: &[ScoredHit]) -> Vec<String> {
    hits.iter().map(|h| h.chunk.id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approximate_search_recalls_what_exact_search_finds() {
    let dir = tempfile::tempdir().unwrap();
    let exact_dir = tempfile::tempdir().unwrap();
    let (store, _) = filled(dir.path(), 3000).await;
    let exact = EmbeddedStore::open(exact_dir.path()).unwrap();
    exact.ensure_spaces(&Ctx::new(), Some(&spec()), None).await.unwrap();
    let mut rng = Rng(42);
    exact.upsert(&Ctx::new(), (0..3000).map(|i| record(i, rng.vector())).collect()).await.unwrap();

    let report = store.optimize().await.unwrap();
    assert!(report.approximate && report.rebuilt, "{report:?}");
    let stats = store.stats(&Ctx::new()).await.unwrap();
    assert!(stats.settings["dense_index"].as_str().unwrap().starts_with("hnsw (3000"), "{stats:?}");

    let mut q_rng = Rng(7);
    let (mut found, mut wanted) = (0usize, 0usize);
    for _ in 0..30 {
        let q = q_rng.vector();
        let want = ids(&search(&exact, &q, 10, None).await);
        let got = ids(&search(&store, &q, 10, None).await);
        found += got.iter().filter(|id| want.contains(id)).count();
        wanted += want.len();
    }
    let recall = found as f64 / wanted as f64;
    eprintln!("approximate recall@10 over 30 queries: {recall:.3}");
    assert!(recall >= 0.9, "recall@10 = {recall}");
    // Already fresh: a second optimize does nothing.
    assert!(!store.optimize().await.unwrap().rebuilt);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_after_a_build_are_searched_and_deletes_disappear() {
    let dir = tempfile::tempdir().unwrap();
    let (store, vectors) = filled(dir.path(), 500).await;
    store.optimize().await.unwrap();
    let ctx = Ctx::new();

    // A new vector equal to the query must rank first even though the snapshot does not contain it.
    let mut rng = Rng(99);
    let q = rng.vector();
    store.upsert(&ctx, vec![record(9000, q.clone())]).await.unwrap();
    assert_eq!(search(&store, &q, 5, None).await[0].chunk.id, "c09000");

    // A deleted document is never returned; a replaced vector is scored with its new value.
    let target = vectors[17].clone();
    assert_eq!(search(&store, &target, 1, None).await[0].chunk.id, "c00017");
    store.delete_documents(&ctx, &["d00017".to_owned()]).await.unwrap();
    assert!(!ids(&search(&store, &target, 50, None).await).contains(&"c00017".to_owned()));
    store.upsert(&ctx, vec![record(18, target.clone())]).await.unwrap();
    let top = &search(&store, &target, 1, None).await[0];
    assert_eq!(top.chunk.id, "c00018");
    assert!((top.score - 1.0).abs() < 1e-5);

    // The dirty set survives a reopen and the results stay the same.
    let before = ids(&search(&store, &q, 10, None).await);
    drop(store);
    let store = EmbeddedStore::open_with(dir.path(), options()).unwrap();
    let stats = store.stats(&ctx).await.unwrap();
    assert!(stats.settings["dense_index"].as_str().unwrap().contains("3 changed since"), "{stats:?}");
    assert_eq!(ids(&search(&store, &q, 10, None).await), before);
    assert!(store.optimize().await.unwrap().rebuilt);
    assert_eq!(search(&store, &q, 1, None).await[0].chunk.id, "c09000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_are_deterministic_and_filters_stay_exact() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (sa, vectors) = filled(a.path(), 800).await;
    let (sb, _) = filled(b.path(), 800).await;
    sa.optimize().await.unwrap();
    sb.optimize().await.unwrap();
    let mut rng = Rng(5);
    for _ in 0..10 {
        let q = rng.vector();
        assert_eq!(search(&sa, &q, 10, None).await, search(&sb, &q, 10, None).await);
        // A selective filter: the answer equals a brute-force scan of the matching vectors.
        let filter = Filter::eq("group", 7);
        let got = ids(&search(&sa, &q, 5, Some(filter)).await);
        let mut brute: Vec<(f32, String)> = vectors
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 50 == 7)
            .map(|(i, v)| {
                let norm = |x: &[f32]| x.iter().map(|a| a * a).sum::<f32>().sqrt();
                let cos = v.iter().zip(&q).map(|(a, b)| a * b).sum::<f32>() / (norm(v) * norm(&q));
                (cos, format!("c{i:05}"))
            })
            .collect();
        brute.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
        let want: Vec<String> = brute.into_iter().take(5).map(|x| x.1).collect();
        assert_eq!(got, want);
    }
}

#[tokio::test]
async fn small_stores_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = filled(dir.path(), 50).await;
    let report = store.optimize().await.unwrap();
    assert!(!report.approximate && !report.rebuilt);
    assert_eq!(store.stats(&Ctx::new()).await.unwrap().settings["dense_index"], "exact");
}
