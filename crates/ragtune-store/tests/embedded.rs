//! Tests of the embedded store beyond the shared contract: persistence, locking, corruption.

use ragtune_core::{
    Chunk, Ctx, Distance, EmbeddingSpec, ErrorKind, Record, ScoredHit, SearchRequest, SparseSpec, SparseVector,
    VectorQuery, VectorStore,
};
use ragtune_store::EmbeddedStore;

fn sparse_spec() -> SparseSpec {
    SparseSpec { encoder_id: "terms".into(), idf: true }
}

fn dense_spec() -> EmbeddingSpec {
    EmbeddingSpec { model_id: "m".into(), dim: 2, normalized: true, distance: Distance::Cosine }
}

fn record(id: &str, doc: &str, terms: &[u32], dense: [f32; 2]) -> Record {
    Record {
        chunk: Chunk::new(id, doc, format!("text of {id}")),
        dense: Some(dense.to_vec()),
        sparse: Some(SparseVector::from_pairs(terms.iter().map(|&t| (t, 1.0)).collect())),
        spans: Vec::new(),
    }
}

fn sparse_query(terms: &[u32], k: usize) -> SearchRequest {
    SearchRequest {
        vector: VectorQuery::Sparse(SparseVector::from_pairs(terms.iter().map(|&t| (t, 1.0)).collect())),
        top_k: k,
        filter: None,
    }
}

#[tokio::test]
async fn data_survives_reopen_and_ranks_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = Ctx::new();
    let before = {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.ensure_spaces(&ctx, Some(&dense_spec()), Some(&sparse_spec())).await.unwrap();
        store
            .upsert(&ctx, vec![record("a#0", "a", &[1, 2], [1.0, 0.0]), record("b#0", "b", &[2, 3], [0.0, 1.0])])
            .await
            .unwrap();
        store.search(&ctx, &[sparse_query(&[2, 3], 10)]).await.unwrap()
    };
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let after = store.search(&ctx, &[sparse_query(&[2, 3], 10)]).await.unwrap();
    assert_eq!(before, after);
    let stats = store.stats(&ctx).await.unwrap();
    assert_eq!((stats.chunks, stats.documents, stats.dense_vectors, stats.sparse_vectors), (2, 2, 2, 2));
    assert_eq!(stats.dense_spec, Some(dense_spec()));
    let dense = store
        .search(&ctx, &[SearchRequest { vector: VectorQuery::Dense(vec![0.0, 3.0]), top_k: 1, filter: None }])
        .await
        .unwrap();
    assert_eq!(dense[0][0].chunk.id, "b#0");
    assert!((dense[0][0].score - 1.0).abs() < 1e-6, "cosine of normalised vectors");
}

#[tokio::test]
async fn search_without_text_reads_no_text_before_and_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = Ctx::new();
    let mut rich = record("a#0", "a", &[1, 2], [1.0, 0.0]);
    rich.chunk.title = Some("A title".into());
    rich.chunk.header_path = vec!["Guide".into(), "Install".into()];
    rich.chunk.metadata.insert("year".into(), 2020.into());
    let records = vec![rich, record("b#0", "b", &[2, 3], [0.0, 1.0])];
    let check = |store: &EmbeddedStore| {
        let ctx = ctx.clone();
        let store = store.clone();
        async move {
            let requests = [
                sparse_query(&[2, 3], 10),
                SearchRequest { vector: VectorQuery::Dense(vec![1.0, 0.2]), top_k: 10, filter: None },
            ];
            let full = store.search(&ctx, &requests).await.unwrap();
            let lean = store.search_without_text(&ctx, &requests).await.unwrap();
            assert_eq!(lean.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2]);
            for (l, f) in lean.iter().flatten().zip(full.iter().flatten()) {
                assert!(l.chunk.text.is_empty(), "{} came with its text", l.chunk.id);
                assert!(!f.chunk.text.is_empty());
                let mut stripped = f.clone();
                stripped.chunk.text.clear();
                assert_eq!(*l, stripped, "every field but the text, and the score, as search gives them");
            }
        }
    };
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.ensure_spaces(&ctx, Some(&dense_spec()), Some(&sparse_spec())).await.unwrap();
        store.upsert(&ctx, records).await.unwrap();
        check(&store).await;
    }
    check(&EmbeddedStore::open(dir.path()).unwrap()).await;
}

#[tokio::test]
async fn a_vector_without_a_chunk_is_refused_wherever_it_sits_and_chunks_without_vectors_open() {
    // Open reads the chunk and vector tables side by side in id order: a stray vector before the first chunk,
    // between two chunks or after the last one must each be found and named.
    let ctx = Ctx::new();
    for (table, stray) in [("dense", "0-first"), ("sparse", "b#0"), ("dense", "b#0"), ("sparse", "z-last")] {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            store.ensure_spaces(&ctx, Some(&dense_spec()), Some(&sparse_spec())).await.unwrap();
            let mut bare = record("d#0", "d", &[1], [1.0, 0.0]);
            (bare.dense, bare.sparse) = (None, None);
            store
                .upsert(&ctx, vec![record("a#0", "a", &[1, 2], [1.0, 0.0]), record("c#0", "c", &[2], [0.0, 1.0]), bare])
                .await
                .unwrap();
        }
        {
            let db = redb::Database::open(dir.path().join("ragtune.redb")).unwrap();
            let tx = db.begin_write().unwrap();
            {
                let def: redb::TableDefinition<'_, &str, &[u8]> = redb::TableDefinition::new(table);
                let mut t = tx.open_table(def).unwrap();
                let bytes: Vec<u8> = if table == "dense" { vec![0; 8] } else { vec![1, 0, 0, 0, 0, 0, 128, 63] };
                t.insert(stray, bytes.as_slice()).unwrap();
            }
            tx.commit().unwrap();
        }
        let err = EmbeddedStore::open(dir.path()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{table} {stray}: {err}");
        assert!(err.to_string().contains(&format!("a {table} vector for `{stray}` but no chunk")), "{err}");
    }
    // Without strays the same store opens, the chunk without vectors included.
    let dir = tempfile::tempdir().unwrap();
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.ensure_spaces(&ctx, Some(&dense_spec()), Some(&sparse_spec())).await.unwrap();
        let mut bare = record("b#0", "b", &[1], [1.0, 0.0]);
        (bare.dense, bare.sparse) = (None, None);
        store
            .upsert(&ctx, vec![record("a#0", "a", &[1], [1.0, 0.0]), bare, record("c#0", "c", &[1], [0.0, 1.0])])
            .await
            .unwrap();
    }
    let stats = EmbeddedStore::open(dir.path()).unwrap().stats(&ctx).await.unwrap();
    assert_eq!((stats.chunks, stats.dense_vectors, stats.sparse_vectors), (3, 2, 2));
}

#[tokio::test]
async fn a_second_handle_gets_a_locked_error() {
    let dir = tempfile::tempdir().unwrap();
    let _first = EmbeddedStore::open(dir.path()).unwrap();
    let err = EmbeddedStore::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked);
    assert!(err.to_string().contains("locked"), "{err}");
}

#[tokio::test]
async fn spaces_are_fixed_once_and_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = Ctx::new();
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.ensure_spaces(&ctx, Some(&dense_spec()), Some(&sparse_spec())).await.unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let other = EmbeddingSpec { model_id: "other".into(), ..dense_spec() };
    let err = store.ensure_spaces(&ctx, Some(&other), None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Mismatch);
    assert!(err.to_string().contains("`m`") && err.to_string().contains("`other`"), "{err}");
    let err = store
        .search(&ctx, &[SearchRequest { vector: VectorQuery::Dense(vec![1.0; 3]), top_k: 1, filter: None }])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Mismatch);
}

#[tokio::test]
async fn vectors_need_a_space_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let err = store.upsert(&Ctx::new(), vec![record("a#0", "a", &[1], [1.0, 0.0])]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(store.stats(&Ctx::new()).await.unwrap().chunks, 0);
}

#[tokio::test]
async fn a_foreign_file_is_refused_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ragtune.redb"), b"this is not a database, it is a text file").unwrap();
    let err = EmbeddedStore::open(dir.path()).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Corrupt | ErrorKind::Permanent), "{:?}: {err}", err.kind());
    assert_eq!(std::fs::read(dir.path().join("ragtune.redb")).unwrap(), b"this is not a database, it is a text file");
}

#[test]
fn works_without_a_tokio_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let ctx = Ctx::new();
    let fut = async {
        store.ensure_spaces(&ctx, None, Some(&sparse_spec())).await.unwrap();
        let r = Record {
            chunk: Chunk::new("x", "x", "x"),
            dense: None,
            sparse: Some(SparseVector::from_pairs(vec![(1, 1.0)])),
            spans: Vec::new(),
        };
        store.upsert(&ctx, vec![r]).await.unwrap();
        store.search(&ctx, &[sparse_query(&[1], 1)]).await.unwrap()
    };
    let hits = block_on(fut);
    assert_eq!(hits[0].len(), 1);
}

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

#[tokio::test]
async fn scan_pages_through_every_record_with_its_vectors_in_id_order() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = Ctx::new();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    store.ensure_spaces(&ctx, Some(&dense_spec()), Some(&sparse_spec())).await.unwrap();
    let mut written: Vec<Record> =
        (0..7).map(|i| record(&format!("d{}#{i}", i % 3), &format!("d{}", i % 3), &[i, 100], [1.0, 0.5])).collect();
    // A parent section without vectors is exported too.
    written.push(Record { chunk: Chunk::new("d0#s", "d0", "section"), dense: None, sparse: None, spans: Vec::new() });
    store.upsert(&ctx, written.clone()).await.unwrap();

    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = store.scan(after.clone(), 3).await.unwrap();
        if page.is_empty() {
            break;
        }
        after = page.last().map(|r| r.chunk.id.clone());
        pages.push(page);
    }
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), vec![3, 3, 2]);
    let read: Vec<Record> = pages.into_iter().flatten().collect();
    let mut want = written;
    want.sort_by(|a, b| a.chunk.id.cmp(&b.chunk.id));
    // Dense vectors come back normalised (the store keeps cosine vectors unit-length).
    for w in &mut want {
        if let Some(v) = &mut w.dense {
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= n);
        }
    }
    assert_eq!(
        read.iter().map(|r| r.chunk.id.as_str()).collect::<Vec<_>>(),
        want.iter().map(|r| r.chunk.id.as_str()).collect::<Vec<_>>()
    );
    for (r, w) in read.iter().zip(&want) {
        assert_eq!(r.chunk, w.chunk);
        assert_eq!(r.sparse, w.sparse);
        match (&r.dense, &w.dense) {
            (Some(a), Some(b)) => assert!(a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6), "{a:?} vs {b:?}"),
            (a, b) => assert_eq!(a, b),
        }
    }
}

#[tokio::test]
async fn span_vectors_are_kept_with_their_chunk_replaced_with_it_and_checked() {
    use ragtune_core::SpanVector;
    let dir = tempfile::tempdir().unwrap();
    let ctx = Ctx::new();
    let unit = |x: f32, y: f32| {
        let n = (x * x + y * y).sqrt();
        vec![x / n, y / n]
    };
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.ensure_spaces(&ctx, Some(&dense_spec()), Some(&sparse_spec())).await.unwrap();
        let mut r = record("a#0", "a", &[1], [1.0, 0.0]);
        r.chunk.text = "First strip. Second strip.".into();
        r.spans = vec![
            SpanVector { start: 0, end: 12, vector: unit(1.0, 0.2) },
            SpanVector { start: 13, end: 26, vector: unit(-0.3, 1.0) },
        ];
        store.upsert(&ctx, vec![r, record("b#0", "b", &[1], [0.0, 1.0])]).await.unwrap();
    }
    // They survive a reopen, come back in order (int8 precision) and are empty for a chunk without any or unknown.
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let ids = ["a#0", "b#0", "nope"].map(String::from);
    let got = store.span_vectors(&ctx, &ids).await.unwrap();
    assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [2, 0, 0]);
    assert_eq!((got[0][1].start, got[0][1].end), (13, 26));
    let cos: f32 = got[0][1].vector.iter().zip(unit(-0.3, 1.0)).map(|(a, b)| a * b).sum();
    assert!(cos > 0.999, "{cos}");
    // The scan that migrations use carries them too.
    let scanned = store.scan(None, 10).await.unwrap();
    assert_eq!(scanned[0].spans.len(), 2);
    // Replacing the chunk without spans, or deleting its document, removes them with it.
    store.upsert(&ctx, vec![record("a#0", "a", &[1], [1.0, 0.0])]).await.unwrap();
    assert!(store.span_vectors(&ctx, &ids[..1]).await.unwrap()[0].is_empty());
    // A span outside the chunk's text or of another dimension is refused, and nothing of the batch is written.
    let mut bad = record("c#0", "c", &[1], [1.0, 0.0]);
    bad.spans = vec![SpanVector { start: 0, end: 99, vector: unit(1.0, 0.0) }];
    let err = store.upsert(&ctx, vec![bad.clone()]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    bad.spans = vec![SpanVector { start: 0, end: 4, vector: vec![1.0, 0.0, 0.0] }];
    assert_eq!(store.upsert(&ctx, vec![bad]).await.unwrap_err().kind(), ErrorKind::Mismatch);
    assert_eq!(store.stats(&ctx).await.unwrap().chunks, 2);
}

/// A store with both spaces at `dir`, shared with a writer task.
async fn shared_store(dir: &std::path::Path) -> std::sync::Arc<EmbeddedStore> {
    let store = std::sync::Arc::new(EmbeddedStore::open(dir).unwrap());
    store.ensure_spaces(&Ctx::new(), Some(&dense_spec()), Some(&sparse_spec())).await.unwrap();
    store
}

/// A task upserting `record(i)` one at a time for every `i` in `ids`, while the test reads.
fn spawn_writer(
    store: &std::sync::Arc<EmbeddedStore>,
    ids: std::ops::Range<usize>,
    record: impl Fn(usize) -> Record + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let store = store.clone();
    tokio::spawn(async move {
        for i in ids {
            store.upsert(&Ctx::new(), vec![record(i)]).await.unwrap();
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_reads_the_same_inline_and_through_the_pool_while_writes_go_on() {
    // Up to 32 ids are read on the caller's thread when the index lock is free, more on the blocking pool: both
    // must give every stored chunk, `None` for a missing id, in the order asked, while a writer adds documents.
    let dir = tempfile::tempdir().unwrap();
    let ctx = Ctx::new();
    let store = shared_store(dir.path()).await;
    let first: Vec<Record> = (0..40).map(|i| record(&format!("d{i}#0"), &format!("d{i}"), &[1], [1.0, 0.0])).collect();
    store.upsert(&ctx, first).await.unwrap();
    let writer = spawn_writer(&store, 40..80, |i| record(&format!("d{i}#0"), &format!("d{i}"), &[2], [0.0, 1.0]));
    for round in 0..20 {
        for n in [3_usize, 32, 33, 40] {
            let mut ids: Vec<String> = (0..n).rev().map(|i| format!("d{i}#0")).collect();
            ids.push("missing#0".into());
            let got = store.get(&ctx, &ids).await.unwrap();
            assert_eq!(got.len(), ids.len(), "round {round}, {n} ids");
            for (id, chunk) in ids.iter().zip(&got) {
                match chunk {
                    Some(c) => assert_eq!((&c.id, c.text.as_str()), (id, format!("text of {id}").as_str())),
                    None => assert_eq!(id, "missing#0", "round {round}, {n} ids: {id} not found"),
                }
            }
        }
    }
    writer.await.unwrap();
    let all: Vec<String> = (0..80).map(|i| format!("d{i}#0")).collect();
    assert!(store.get(&ctx, &all).await.unwrap().iter().all(Option::is_some));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_ranks_the_same_inline_and_through_the_pool_while_writes_go_on() {
    // A search of a small index (exact dense, or keyword) runs on the caller's thread when the index lock is free
    // (with texts, for at most 32 hits); a deeper one with texts on the blocking pool. Whichever path runs, the hits
    // are the same, with or without texts, while a writer adds documents.
    let dir = tempfile::tempdir().unwrap();
    let ctx = Ctx::new();
    let store = shared_store(dir.path()).await;
    let at = |i: usize| {
        let (sin, cos) = (i as f32 * 0.02).sin_cos();
        record(&format!("d{i}#0"), &format!("d{i}"), &[1], [sin, cos])
    };
    store.upsert(&ctx, (0..60).map(at).collect()).await.unwrap();
    let writer = spawn_writer(&store, 60..100, at);
    let dense = |k: usize| SearchRequest { vector: VectorQuery::Dense(vec![0.0, 1.0]), top_k: k, filter: None };
    for round in 0..20 {
        // Top 10 with texts (inline), top 40 with texts (the pool), top 40 without texts (inline).
        let ten = store.search(&ctx, &[dense(10)]).await.unwrap().remove(0);
        let forty = store.search(&ctx, &[dense(40)]).await.unwrap().remove(0);
        let bare = store.search_without_text(&ctx, &[dense(40)]).await.unwrap().remove(0);
        // Vectors closest to (0, 1) are the first ones written, there before the writer started: the lists agree.
        let ids = |hits: &[ScoredHit]| hits.iter().take(10).map(|h| (h.chunk.id.clone(), h.score)).collect::<Vec<_>>();
        assert_eq!(ids(&ten), ids(&forty), "round {round}");
        assert_eq!(ids(&ten), ids(&bare), "round {round}");
        assert_eq!(ten[0].chunk.id, "d0#0");
        assert!(ten.iter().all(|h| h.chunk.text == format!("text of {}", h.chunk.id)), "round {round}");
        assert!(bare.iter().all(|h| h.chunk.text.is_empty()), "round {round}");
        assert!(forty.len() == 40 && bare.len() == 40);
        // Keyword search: every chunk has the term once, so the scores tie and ids order them, inline or not (the
        // score itself moves with the writer, through the term's idf).
        let words = store.search(&ctx, &[sparse_query(&[1], 10)]).await.unwrap().remove(0);
        let deep = store.search(&ctx, &[sparse_query(&[1], 40)]).await.unwrap().remove(0);
        let names = |hits: &[ScoredHit]| hits.iter().take(10).map(|h| h.chunk.id.clone()).collect::<Vec<_>>();
        assert_eq!(names(&words), names(&deep), "round {round}");
        assert!(words.iter().all(|h| h.chunk.text == format!("text of {}", h.chunk.id)), "round {round}");
    }
    writer.await.unwrap();
    let hits = store.search(&ctx, &[dense(100), sparse_query(&[1], 100)]).await.unwrap();
    assert_eq!((hits[0].len(), hits[1].len()), (100, 100));
}
