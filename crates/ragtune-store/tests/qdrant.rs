//! `QdrantStore` against a real Qdrant server: the shared contract suite, server-side fusion, schema checks.
//!
//! The server tests are `#[ignore]`d, so that a plain `cargo test` lists them as ignored (with the reason) instead
//! of counting a test that did nothing as passed. They run with a server: `cargo xtask qdrant start` prints the
//! `QDRANT_URL` and `QDRANT_API_KEY` to export, then
//! `cargo nextest run -p ragtune-store --features qdrant --run-ignored only --test qdrant`; `cargo xtask ci` does
//! this with a server it starts. Run without `QDRANT_URL`, an ignored test fails saying so. Each test works in its
//! own collections, named after the process id, and deletes them at the end. The connection-failure test needs no
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

/// The server's URL; a server test run without one fails saying how to provide it.
fn server_url() -> String {
    match std::env::var("QDRANT_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "QDRANT_URL is not set: this test needs a Qdrant 1.19–1.21 server. `cargo xtask qdrant start` starts one \
             and prints the QDRANT_URL and QDRANT_API_KEY to export"
        ),
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
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn qdrant_store_passes_the_vector_store_contract() {
    let url = server_url();
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
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn sparse_idf_follows_deletions_at_once() {
    // Qdrant's own IDF modifier keeps counting deleted points until its optimizer rewrites their segment (and
    // counts per shard); the adapter computes the IDF from exact counts instead, so a deletion shows at once.
    let url = server_url();
    let ctx = Ctx::new();
    let store = fresh_store(&url, "idf").await;
    let _guard = DropCollection(store.clone());
    store.ensure_spaces(&ctx, None, Some(&sparse_spec())).await.unwrap();
    let sparse = |terms: &[(u32, f32)]| Some(SparseVector::from_pairs(terms.to_vec()));
    let records = vec![
        Record {
            chunk: Chunk::new("i#a", "ia", "a"),
            dense: None,
            sparse: sparse(&[(1, 2.0), (2, 1.0)]),
            spans: Vec::new(),
        },
        Record { chunk: Chunk::new("i#b", "ib", "b"), dense: None, sparse: sparse(&[(1, 1.0)]), spans: Vec::new() },
        Record { chunk: Chunk::new("i#c", "ic", "c"), dense: None, sparse: sparse(&[(3, 1.5)]), spans: Vec::new() },
    ];
    store.upsert(&ctx, records).await.unwrap();
    let q =
        SearchRequest { vector: VectorQuery::Sparse(SparseVector::from_pairs(vec![(1, 1.0)])), top_k: 5, filter: None };
    let idf = |total: f64, with_term: f64| (1.0 + (total - with_term + 0.5) / (with_term + 0.5)).ln();
    let before = store.search(&ctx, std::slice::from_ref(&q)).await.unwrap().remove(0);
    assert!((f64::from(before[0].score) - 2.0 * idf(3.0, 2.0)).abs() < 1e-4, "N = 3: {}", before[0].score);
    store.delete_documents(&ctx, &["ic".to_owned()]).await.unwrap();
    let after = store.search(&ctx, std::slice::from_ref(&q)).await.unwrap().remove(0);
    assert_eq!(after.iter().map(|h| h.chunk.id.as_str()).collect::<Vec<_>>(), ["i#a", "i#b"]);
    assert!((f64::from(after[0].score) - 2.0 * idf(2.0, 2.0)).abs() < 1e-4, "N = 2: {}", after[0].score);
    // The term list that counting needs stays out of the chunks.
    assert!(after[0].chunk.metadata.is_empty(), "{:?}", after[0].chunk.metadata);
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
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn another_space_is_a_mismatch() {
    let url = server_url();
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
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn a_collection_not_made_by_ragtune_is_refused() {
    let url = server_url();
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
            Record { chunk, dense: Some(vector), sparse: Some(SparseVector::from_pairs(terms)), spans: Vec::new() }
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
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn server_side_fusion_ranks_like_client_side_rrf() {
    let url = server_url();
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

    // Weighted fusion is Qdrant's formula, `1 / (rank / weight + k)` per list, not ragtune's `weight / (k + rank)`:
    // the documented difference, pinned here.
    let lists = store
        .search(
            &ctx,
            &[
                dense(query_dense.clone(), prefetch, None),
                SearchRequest { vector: VectorQuery::Sparse(query_sparse.clone()), top_k: prefetch, filter: None },
            ],
        )
        .await
        .unwrap();
    let (wd, ws) = (2.0_f64, 0.5_f64);
    let mut qdrant_formula: BTreeMap<String, f64> = BTreeMap::new();
    for (weight, list) in [(wd, &lists[0]), (ws, &lists[1])] {
        for (pos, hit) in list.iter().enumerate() {
            *qdrant_formula.entry(hit.chunk.id.clone()).or_default() +=
                1.0 / ((pos as f64 + 1.0) / weight + f64::from(rrf_k));
        }
    }
    let mut expected: Vec<(String, f64)> = qdrant_formula.into_iter().collect();
    expected.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    expected.truncate(top_k);
    let weighted = store
        .hybrid_search(
            &ctx,
            query_dense.clone(),
            query_sparse.clone(),
            top_k,
            prefetch,
            rrf_k,
            Some((wd as f32, ws as f32)),
            None,
        )
        .await
        .unwrap();
    let actual: Vec<(String, f64)> = weighted.iter().map(|h| (h.chunk.id.clone(), f64::from(h.score))).collect();
    for ((ai, a), (ei, e)) in actual.iter().zip(&expected) {
        assert!(
            ai == ei && (a - e).abs() < 1e-6,
            "weighted fusion: expected Qdrant's formula\n{}actual\n{}",
            render(expected.clone()),
            render(actual.clone())
        );
    }
    let ragtune_formula = reference_rrf(&[(wd, &lists[0]), (ws, &lists[1])], f64::from(rrf_k), top_k);
    assert!(
        actual.iter().zip(&ragtune_formula).any(|((_, a), (_, r))| (a - r).abs() > 1e-6),
        "weighted scores equal ragtune's formula: update the docs"
    );

    // A filter nothing matches answers empty, without asking the server.
    let none = store
        .hybrid_search(&ctx, query_dense, query_sparse, 5, prefetch, rrf_k, None, Some(&Filter::Or(Vec::new())))
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn a_space_can_be_added_later_and_other_handles_see_it() {
    let url = server_url();
    let ctx = Ctx::new();
    let store = fresh_store(&url, "grow").await;
    let _guard = DropCollection(store.clone());
    // A second handle opened before the collection exists, as a query server started before indexing.
    let reader = QdrantStore::connect(config(&url, store.collection())).await.unwrap();
    assert_eq!(reader.stats(&ctx).await.unwrap().chunks, 0);

    store.ensure_spaces(&ctx, None, Some(&sparse_spec())).await.unwrap();
    let sparse = |terms: &[(u32, f32)]| Some(SparseVector::from_pairs(terms.to_vec()));
    let first = vec![
        Record { chunk: Chunk::new("g#0", "g", "zero"), dense: None, sparse: sparse(&[(1, 1.0)]), spans: Vec::new() },
        Record {
            chunk: Chunk::new("g#1", "g", "one"),
            dense: None,
            sparse: sparse(&[(1, 2.0), (2, 1.0)]),
            spans: Vec::new(),
        },
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
            spans: Vec::new(),
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
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn cancellation_and_deadlines_are_honoured() {
    let url = server_url();
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

/// The API key the server was started with: `cargo xtask qdrant start` always sets one.
fn server_api_key() -> String {
    std::env::var("QDRANT_API_KEY").ok().filter(|k| !k.is_empty()).unwrap_or_else(|| {
        panic!(
            "QDRANT_API_KEY is not set: this test needs a server that requires an API key (`cargo xtask qdrant start` \
             sets one; with Docker add -e QDRANT__SERVICE__API_KEY=KEY)"
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn a_refused_api_key_is_a_clear_error_and_writes_nothing() {
    let url = server_url();
    let key = server_api_key();
    let collection = unique_collection("key");
    let ctx = Ctx::new();
    for wrong in [Some("not-the-key".to_owned()), None] {
        let config =
            QdrantConfig { api_key: wrong.clone().map(Into::into), max_retries: 0, ..config(&url, &collection) };
        // The health check may be open to anyone; the first request on the collection is not.
        let e = match QdrantStore::connect(config).await {
            Err(e) => e,
            Ok(store) => store.ensure_spaces(&ctx, Some(&dense_spec(4)), None).await.expect_err("a refused key"),
        };
        assert_eq!(e.kind(), ErrorKind::Permanent, "{}", e.chain());
        assert!(!e.is_retryable());
        assert!(e.message().contains(&url) && e.message().contains("API key"), "{wrong:?}: {}", e.message());
        assert!(!e.chain().contains("not-the-key") && !e.chain().contains(&key), "a key leaked: {}", e.chain());
    }
    let store = QdrantStore::connect(config(&url, &collection)).await.unwrap();
    let _guard = DropCollection(store.clone());
    let stats = store.stats(&ctx).await.unwrap();
    assert_eq!((stats.chunks, stats.dense_spec), (0, None), "nothing was created with a refused key");
}

/// A TCP proxy in front of the server that can be taken down, as a server (or its network) going away mid-run.
struct Proxy {
    url: String,
    accept: tokio::task::JoinHandle<()>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let target = upstream.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let tracked = connections.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tracked.lock().unwrap().push(task.abort_handle());
            }
        });
        Proxy { url, accept, connections }
    }

    /// Stops listening and cuts every open connection.
    fn down(&self) {
        self.accept.abort();
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn a_server_gone_mid_run_is_a_clear_error_and_nothing_is_written_half() {
    let url = server_url();
    let ctx = Ctx::new();
    let direct = fresh_store(&url, "down").await;
    let _guard = DropCollection(direct.clone());
    let proxy = Proxy::start(&url).await;
    let through = QdrantConfig {
        max_retries: 1,
        timeout: Duration::from_secs(3),
        connect_timeout: Duration::from_secs(2),
        ..config(&proxy.url, direct.collection())
    };
    let store = QdrantStore::connect(through).await.unwrap();
    store.ensure_spaces(&ctx, Some(&dense_spec(2)), None).await.unwrap();
    let record = |id: &str, x: f32| Record {
        chunk: Chunk::new(id, "u", id),
        dense: Some(vec![x, 1.0]),
        sparse: None,
        spans: Vec::new(),
    };
    store.upsert(&ctx, vec![record("u#0", 1.0), record("u#1", 0.5)]).await.unwrap();

    proxy.down();
    let batch = WriteBatch { delete_docs: vec!["u".into()], upsert: vec![record("u#0", 0.1), record("u#9", 0.2)] };
    let e = store.write(&ctx, batch).await.expect_err("the server is gone");
    assert!(matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Transient), "{:?}: {}", e.kind(), e.chain());
    assert!(e.message().contains(&proxy.url), "the message names the URL: {}", e.message());
    assert!(e.message().contains(direct.collection()), "the message names the collection: {}", e.message());
    let e = store.search(&ctx, &[dense(vec![1.0, 0.0], 3, None)]).await.expect_err("still gone");
    assert!(e.message().contains(&proxy.url), "{}", e.message());

    // The server itself holds the two chunks written before, unchanged: the failed batch wrote nothing.
    let stats = direct.stats(&ctx).await.unwrap();
    assert_eq!((stats.chunks, stats.documents), (2, 1));
    let got = direct.get(&ctx, &["u#0".to_owned(), "u#9".to_owned()]).await.unwrap();
    assert_eq!(got[0].as_ref().map(|c| c.text.as_str()), Some("u#0"));
    assert_eq!(got[1], None);
    let hits = direct.search(&ctx, &[dense(vec![1.0, 0.0], 1, None)]).await.unwrap();
    assert_eq!(hits[0][0].chunk.id, "u#0", "u#0 keeps its old vector");
}

/// The readiness probe of `ragtune serve` (`/readyz`) asks `ready`: one health check, answered whatever the
/// collection holds, and an error once the server is gone (here: a store whose server never existed cannot even
/// connect, so the check is of a live one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn ready_is_one_cheap_health_check() {
    let store = fresh_store(&server_url(), "ready").await;
    store.ready(&Ctx::new()).await.expect("a live server is ready");
    store.ensure_spaces(&Ctx::new(), Some(&dense_spec(2)), Some(&sparse_spec())).await.unwrap();
    store.ready(&Ctx::new()).await.expect("still ready with a collection");
}
