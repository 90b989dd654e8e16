//! `QdrantStore` against a real Qdrant server: the shared contract suite, server-side fusion, schema checks.
//!
//! The server tests run when `QDRANT_URL` names a Qdrant 1.19–1.21 gRPC endpoint (`QDRANT_API_KEY` too, when the
//! server needs one); without it they print why they were skipped and return. Each test works in its own
//! collections, named after the process id, and deletes them at the end. The connection-failure test needs no
//! server and always runs.
#![cfg(feature = "qdrant")]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ragtune_core::{
    Chunk, Ctx, Distance, EmbeddingSpec, ErrorKind, Filter, Record, ScoredHit, SearchRequest, SparseSpec, SparseVector,
    VectorQuery, VectorStore, WriteBatch,
};
use ragtune_store::{QdrantConfig, QdrantStore};
use ragtune_testkit::contract;

const SKIPPED: &str = "SKIPPED: QDRANT_URL is not set; start a Qdrant 1.19–1.21 server and set \
                       QDRANT_URL=http://127.0.0.1:6334 to run the QdrantStore tests";

/// The server's URL, or `None` after saying why the test is skipped.
fn server_url() -> Option<String> {
    match std::env::var("QDRANT_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            eprintln!("{SKIPPED}");
            None
        }
    }
}

/// A collection name no other test (or run in another process) uses.
fn unique_collection(purpose: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    format!("ragtune-{purpose}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

fn config(url: &str, collection: &str) -> QdrantConfig {
    QdrantConfig {
        url: url.to_owned(),
        api_key: std::env::var("QDRANT_API_KEY").ok().map(Into::into),
        collection: collection.to_owned(),
        ..QdrantConfig::default()
    }
}

/// A store on a fresh collection (deleted first, should an earlier run have left it behind).
async fn fresh_store(url: &str, purpose: &str) -> QdrantStore {
    let store = QdrantStore::connect(config(url, &unique_collection(purpose))).await.expect("connect to QDRANT_URL");
    store.drop_collection().await.expect("drop a leftover collection");
    store
}

/// Deletes its store's collection when dropped, also when a test fails.
///
/// Dropping blocks the current worker thread until the collection is gone (`block_in_place`), so it needs a
/// multi-thread runtime, which every test here uses.
struct DropCollection(QdrantStore);

impl Drop for DropCollection {
    fn drop(&mut self) {
        let store = self.0.clone();
        let outcome =
            tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(store.drop_collection()));
        if let Err(e) = outcome {
            eprintln!("could not delete the test collection `{}`: {}", store.collection(), e.chain());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qdrant_store_passes_the_vector_store_contract() {
    let Some(url) = server_url() else { return };
    contract::vector_store_contract_with_guard(|| {
        let url = url.clone();
        async move {
            let store = fresh_store(&url, "contract").await;
            let guard = DropCollection(store.clone());
            (store, guard)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable() {
    // Port 9 (discard) has no gRPC server on a test machine: the connection is refused, or times out quickly.
    let config = QdrantConfig {
        url: "http://127.0.0.1:9".into(),
        api_key: Some("not-a-real-key".into()),
        timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(2),
        max_retries: 0,
        ..QdrantConfig::default()
    };
    let e = QdrantStore::connect(config).await.expect_err("nothing listens on port 9");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{}", e.chain());
    assert!(e.message().contains("http://127.0.0.1:9"), "the message names the URL: {}", e.message());
    assert!(!e.chain().contains("not-a-real-key"), "the API key leaked: {}", e.chain());

    for bad in ["127.0.0.1:6334", "grpc://127.0.0.1:6334"] {
        let config = QdrantConfig { url: bad.into(), ..QdrantConfig::default() };
        let e = QdrantStore::connect(config).await.expect_err("not an http(s) URL");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad}: {}", e.message());
    }
    let e = QdrantStore::connect(QdrantConfig { upsert_batch_size: 0, ..QdrantConfig::default() })
        .await
        .expect_err("a zero batch size");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

fn dense_spec(dim: usize) -> EmbeddingSpec {
    EmbeddingSpec { model_id: "test-dense".into(), dim, normalized: true, distance: Distance::Cosine }
}

fn sparse_spec() -> SparseSpec {
    SparseSpec { encoder_id: "test-sparse".into(), idf: true }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_space_is_a_mismatch() {
    let Some(url) = server_url() else { return };
    let ctx = Ctx::new();
    let store = fresh_store(&url, "mismatch").await;
    let _guard = DropCollection(store.clone());
    store.ensure_spaces(&ctx, Some(&dense_spec(4)), Some(&sparse_spec())).await.unwrap();
    // A second handle on the same collection, as another process would open it.
    let other = QdrantStore::connect(config(&url, store.collection())).await.unwrap();
    let e = other.ensure_spaces(&ctx, Some(&dense_spec(8)), Some(&sparse_spec())).await.expect_err("another dimension");
    assert_eq!(e.kind(), ErrorKind::Mismatch, "{}", e.message());
    assert!(e.message().contains("4 dimensions") && e.message().contains("8 dimensions"), "{}", e.message());
    let dot = EmbeddingSpec { distance: Distance::Dot, ..dense_spec(4) };
    let e = other.ensure_spaces(&ctx, Some(&dot), None).await.expect_err("another distance");
    assert_eq!(e.kind(), ErrorKind::Mismatch, "{}", e.message());
    let no_idf = SparseSpec { idf: false, ..sparse_spec() };
    let e = other.ensure_spaces(&ctx, None, Some(&no_idf)).await.expect_err("another sparse space");
    assert_eq!(e.kind(), ErrorKind::Mismatch, "{}", e.message());
    // The same spaces are accepted, and nothing changed.
    other.ensure_spaces(&ctx, Some(&dense_spec(4)), Some(&sparse_spec())).await.unwrap();
    let stats = other.stats(&ctx).await.unwrap();
    assert_eq!((stats.dense_spec, stats.sparse_spec), (Some(dense_spec(4)), Some(sparse_spec())));
    assert_eq!(stats.settings.get("backend"), Some(&"qdrant".into()));
    assert_eq!(stats.settings.get("collection"), Some(&store.collection().into()));
    assert!(!serde_json::to_string(&stats.settings).unwrap().contains("api_key"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_not_made_by_ragtune_is_refused() {
    let Some(url) = server_url() else { return };
    use qdrant_client::qdrant::{CreateCollectionBuilder, Distance as QDistance, VectorParamsBuilder};
    let name = unique_collection("foreign");
    let client = qdrant_client::Qdrant::from_url(&url)
        .api_key(std::env::var("QDRANT_API_KEY").ok())
        .skip_compatibility_check()
        .build()
        .unwrap();
    client
        .create_collection(
            CreateCollectionBuilder::new(&name).vectors_config(VectorParamsBuilder::new(4, QDistance::Cosine)),
        )
        .await
        .unwrap();
    let store = QdrantStore::connect(config(&url, &name)).await.unwrap();
    let _guard = DropCollection(store.clone());
    let e = store.ensure_spaces(&Ctx::new(), Some(&dense_spec(4)), None).await.expect_err("a foreign collection");
    assert_eq!(e.kind(), ErrorKind::Mismatch, "{}", e.message());
    assert!(e.message().contains("not created by ragtune"), "{}", e.message());
    let e =
        store.search(&Ctx::new(), &[dense(vec![1.0, 0.0, 0.0, 0.0], 3, None)]).await.expect_err("not readable either");
    assert_eq!(e.kind(), ErrorKind::Mismatch, "{}", e.message());
}

/// A deterministic pseudo-random source (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 40) as f32 / (1_u64 << 24) as f32
    }
}

fn dense(vector: Vec<f32>, top_k: usize, filter: Option<Filter>) -> SearchRequest {
    SearchRequest { vector: VectorQuery::Dense(vector), top_k, filter }
}

/// 40 passages of 8 documents with random dense vectors and random term weights, so that no two scores of a
/// list tie (ties inside a list are ordered differently by Qdrant and by ragtune).
fn hybrid_corpus() -> Vec<Record> {
    let mut rng = Rng(7);
    (0..40)
        .map(|i| {
            let mut chunk = Chunk::new(format!("h#{i:02}"), format!("h{}", i % 8), format!("hybrid passage {i}"));
            chunk.metadata.insert("half".into(), (i % 2).into());
            let vector: Vec<f32> = (0..8).map(|_| rng.next() - 0.5).collect();
            let terms: Vec<(u32, f32)> = (0..6).filter(|t| (i + t) % 3 != 0).map(|t| (t, 0.5 + rng.next())).collect();
            Record { chunk, dense: Some(vector), sparse: Some(SparseVector::from_pairs(terms)) }
        })
        .collect()
}

/// Client-side reciprocal rank fusion, as ragtune's hybrid retriever computes it: each list contributes
/// `weight / (k + rank)` at its 1-based rank; ties by chunk id.
fn reference_rrf(lists: &[(f64, &[ScoredHit])], k: f64, top_k: usize) -> Vec<(String, f64)> {
    let mut scores: BTreeMap<String, f64> = BTreeMap::new();
    for (weight, list) in lists {
        for (pos, hit) in list.iter().enumerate() {
            *scores.entry(hit.chunk.id.clone()).or_default() += weight / (k + pos as f64 + 1.0);
        }
    }
    let mut fused: Vec<(String, f64)> = scores.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    fused.truncate(top_k);
    fused
}

fn render(rows: impl IntoIterator<Item = (String, f64)>) -> String {
    rows.into_iter().enumerate().map(|(i, (id, s))| format!("{}. {id}  {s:.6}\n", i + 1)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_fusion_ranks_like_client_side_rrf() {
    let Some(url) = server_url() else { return };
    let ctx = Ctx::new();
    let store = fresh_store(&url, "hybrid").await;
    let _guard = DropCollection(store.clone());
    store.ensure_spaces(&ctx, Some(&dense_spec(8)), Some(&sparse_spec())).await.unwrap();
    store.upsert(&ctx, hybrid_corpus()).await.unwrap();

    let mut rng = Rng(99);
    let query_dense: Vec<f32> = (0..8).map(|_| rng.next() - 0.5).collect();
    let query_sparse = SparseVector::from_pairs(vec![(0, 1.0), (2, 0.7), (4, 0.3)]);
    let (prefetch, rrf_k, top_k) = (12, 60, 10);
    for filter in [None, Some(Filter::eq("half", 1)), Some(Filter::Not(Box::new(Filter::eq("doc_id", "h3"))))] {
        let lists = store
            .search(
                &ctx,
                &[
                    dense(query_dense.clone(), prefetch, filter.clone()),
                    SearchRequest {
                        vector: VectorQuery::Sparse(query_sparse.clone()),
                        top_k: prefetch,
                        filter: filter.clone(),
                    },
                ],
            )
            .await
            .unwrap();
        for list in &lists {
            assert!(list.windows(2).all(|w| w[0].score != w[1].score), "the fixture must have no ties in a list");
        }
        let expected = reference_rrf(&[(1.0, &lists[0]), (1.0, &lists[1])], f64::from(rrf_k), top_k);
        let hits = store
            .hybrid_search(
                &ctx,
                query_dense.clone(),
                query_sparse.clone(),
                top_k,
                prefetch,
                rrf_k,
                None,
                filter.as_ref(),
            )
            .await
            .unwrap();
        let actual: Vec<(String, f64)> = hits.iter().map(|h| (h.chunk.id.clone(), f64::from(h.score))).collect();
        assert_eq!(
            actual.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
            expected.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
            "filter {filter:?}\n  expected:\n{}  actual:\n{}",
            render(expected.clone()),
            render(actual.clone())
        );
        for ((_, a), (_, e)) in actual.iter().zip(&expected) {
            assert!(
                (a - e).abs() < 1e-6,
                "fused scores: expected\n{}actual\n{}",
                render(expected.clone()),
                render(actual.clone())
            );
        }
        let stored: HashMap<&str, &Chunk> = lists.iter().flatten().map(|h| (h.chunk.id.as_str(), &h.chunk)).collect();
        for h in &hits {
            assert_eq!(Some(&&h.chunk), stored.get(h.chunk.id.as_str()), "hybrid hits carry the whole chunk");
        }
    }

    // A zero weight silences a list, whatever the weighted formula: the fused ranking is the dense ranking.
    let dense_only = store
        .hybrid_search(&ctx, query_dense.clone(), query_sparse.clone(), 5, prefetch, rrf_k, Some((1.0, 0.0)), None)
        .await
        .unwrap();
    let dense_list = store.search(&ctx, &[dense(query_dense.clone(), 5, None)]).await.unwrap().remove(0);
    let ids = |hits: &[ScoredHit]| hits.iter().map(|h| h.chunk.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&dense_only), ids(&dense_list));

    // A filter nothing matches answers empty, without asking the server.
    let none = store
        .hybrid_search(&ctx, query_dense, query_sparse, 5, prefetch, rrf_k, None, Some(&Filter::Or(Vec::new())))
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_space_can_be_added_later_and_other_handles_see_it() {
    let Some(url) = server_url() else { return };
    let ctx = Ctx::new();
    let store = fresh_store(&url, "grow").await;
    let _guard = DropCollection(store.clone());
    // A second handle opened before the collection exists, as a query server started before indexing.
    let reader = QdrantStore::connect(config(&url, store.collection())).await.unwrap();
    assert_eq!(reader.stats(&ctx).await.unwrap().chunks, 0);

    store.ensure_spaces(&ctx, None, Some(&sparse_spec())).await.unwrap();
    let sparse = |terms: &[(u32, f32)]| Some(SparseVector::from_pairs(terms.to_vec()));
    let first = vec![
        Record { chunk: Chunk::new("g#0", "g", "zero"), dense: None, sparse: sparse(&[(1, 1.0)]) },
        Record { chunk: Chunk::new("g#1", "g", "one"), dense: None, sparse: sparse(&[(1, 2.0), (2, 1.0)]) },
    ];
    store.upsert(&ctx, first).await.unwrap();
    let q =
        SearchRequest { vector: VectorQuery::Sparse(SparseVector::from_pairs(vec![(1, 1.0)])), top_k: 5, filter: None };
    let hits = reader.search(&ctx, std::slice::from_ref(&q)).await.unwrap();
    assert_eq!(hits[0].iter().map(|h| h.chunk.id.as_str()).collect::<Vec<_>>(), ["g#1", "g#0"]);

    // The dense space arrives later: the collection gains a `dense` vector (Qdrant 1.18 or newer).
    store.ensure_spaces(&ctx, Some(&dense_spec(2)), Some(&sparse_spec())).await.unwrap();
    let batch = WriteBatch {
        delete_docs: vec!["g".into()],
        upsert: vec![Record {
            chunk: Chunk::new("g#0", "g", "zero"),
            dense: Some(vec![1.0, 0.0]),
            sparse: sparse(&[(1, 1.0)]),
        }],
    };
    let report = store.write(&ctx, batch).await.unwrap();
    assert_eq!((report.upserted, report.deleted), (1, 2));
    let hits = reader.search(&ctx, &[dense(vec![1.0, 0.1], 5, None), q]).await.unwrap();
    assert_eq!(hits[0].iter().map(|h| h.chunk.id.as_str()).collect::<Vec<_>>(), ["g#0"]);
    assert_eq!(hits[1].iter().map(|h| h.chunk.id.as_str()).collect::<Vec<_>>(), ["g#0"]);
    let stats = reader.stats(&ctx).await.unwrap();
    assert_eq!((stats.chunks, stats.documents, stats.dense_vectors, stats.sparse_vectors), (1, 1, 1, 1));
    assert_eq!(stats.dense_spec, Some(dense_spec(2)));
    assert_eq!(reader.get(&ctx, &["g#1".to_owned()]).await.unwrap(), vec![None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_and_deadlines_are_honoured() {
    let Some(url) = server_url() else { return };
    let store = fresh_store(&url, "ctx").await;
    let _guard = DropCollection(store.clone());
    let cancelled = Ctx::new();
    cancelled.cancel.cancel();
    let e = store.stats(&cancelled).await.expect_err("cancelled");
    assert_eq!(e.kind(), ErrorKind::Cancelled);
    let late = Ctx::new().with_timeout(Duration::ZERO);
    let e = store.ensure_spaces(&late, Some(&dense_spec(2)), None).await.expect_err("past its deadline");
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
    assert_eq!(store.stats(&Ctx::new()).await.unwrap().dense_spec, None, "nothing was created");
}
