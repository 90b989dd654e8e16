//! Qdrant under faults: SIGKILLed nodes of a three-node loopback cluster while SciFact is indexed and queried, and a
//! single node SIGKILLed while it indexes. Every acknowledged batch must survive; queries must keep answering.
//!
//! These tests start their own servers from the Qdrant binary (`$RAGTUNE_QDRANT_BIN`, else `../shared/qdrant/qdrant`)
//! and need SciFact from `../shared/data`. They are `#[ignore]`d, so a plain run lists them as skipped; `cargo xtask
//! ci` runs them (`--run-ignored only`) in its `qdrant-tests` step. Run by hand:
//! `cargo nextest run -p tests --run-ignored only -E 'test(/^qdrant_faults::/)' --no-capture`.
//!
//! The records are SciFact's 5,183 abstracts with their BM25 vectors (the real encoder): the encoders are not what
//! is under test, the store is, so dense vectors (minutes of ONNX inference) are left out.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ragtune::core::{
    Chunk, Ctx, ErrorKind, Record, SearchRequest, SparseEncoder, SparseVector, TextRole, TraceSink, VectorQuery,
    VectorStore, WriteBatch,
};
use ragtune::store::{QdrantConfig, QdrantStore};
use ragtune_testkit::qdrant::{Nodes, find_binary, http_get};

use crate::shared_data;

const BATCH: usize = 64;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Qdrant binary, or a failure saying where it was looked for (these tests are ignored unless asked for).
fn qdrant_binary() -> PathBuf {
    find_binary(&repo_root()).unwrap_or_else(|e| panic!("this test starts its own Qdrant nodes: {e}"))
}

/// SciFact's abstracts as records with BM25 vectors, and the test queries' BM25 vectors.
async fn scifact_records() -> (Vec<Record>, Vec<SparseVector>, ragtune::core::SparseSpec) {
    let data = shared_data().expect("these tests index SciFact: ../shared/data is missing");
    let beir = ragtune::ingest::load_beir(data.join("beir/scifact"), "test").expect("SciFact loads");
    let encoder = ragtune::embed::Bm25Encoder::new(ragtune::embed::Bm25Config::default()).expect("BM25 encoder");
    let ctx = Ctx::new();
    let texts: Vec<String> =
        beir.corpus.iter().map(|d| format!("{}\n{}", d.title.clone().unwrap_or_default(), d.text)).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = encoder.encode(&ctx, &refs, TextRole::Passage).await.expect("encode passages");
    let records = beir
        .corpus
        .iter()
        .zip(texts.iter().zip(vectors))
        .map(|(d, (text, v))| Record {
            chunk: Chunk::new(format!("{}#0", d.id), d.id.clone(), text.clone()),
            dense: None,
            sparse: Some(v),
            spans: Vec::new(),
        })
        .collect();
    let queries: Vec<&str> = beir.queries_with_qrels().iter().map(|q| q.text.as_str()).collect();
    let query_vectors = encoder.encode(&ctx, &queries, TextRole::Query).await.expect("encode queries");
    (records, query_vectors, encoder.spec().clone())
}

fn cluster_config(url: String, api_key: &str, collection: &str) -> QdrantConfig {
    QdrantConfig {
        url,
        api_key: Some(api_key.to_owned().into()),
        collection: collection.to_owned(),
        timeout: Duration::from_secs(10),
        max_retries: 5,
        shard_number: Some(3),
        replication_factor: Some(2),
        // One confirmation per write: with two replicas of every shard, the cluster keeps accepting writes while one
        // node is down, and an acknowledged write is on at least one live replica (docs/stores.md, "A Qdrant cluster").
        write_consistency_factor: Some(1),
        ..QdrantConfig::default()
    }
}

/// Queries run in a loop by a background task until stopped: answered, failed, and the trace events of the
/// store's retries (a degraded read is reported there, never silent).
#[derive(Debug, Default)]
struct QueryLoad {
    answered: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    degraded: AtomicU64,
    stop: AtomicBool,
}

fn spawn_queries(
    store: QdrantStore,
    queries: Vec<SparseVector>,
    load: Arc<QueryLoad>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut errors = Vec::new();
        let mut i = 0;
        while !load.stop.load(Ordering::Acquire) {
            let sink = TraceSink::new();
            let ctx = Ctx::new().with_trace(sink.clone()).with_timeout(Duration::from_secs(30));
            let request = SearchRequest {
                vector: VectorQuery::Sparse(queries[i % queries.len()].clone()),
                top_k: 10,
                filter: None,
            };
            match store.search(&ctx, &[request]).await {
                Ok(hits) if !hits[0].is_empty() => {
                    load.answered.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {
                    load.failed.fetch_add(1, Ordering::Relaxed);
                    errors.push("a query answered nothing".to_owned());
                }
                Err(e) => {
                    load.failed.fetch_add(1, Ordering::Relaxed);
                    errors.push(e.chain());
                }
            }
            for event in sink.take().iter().filter(|e| e.stage == "store") {
                match event.action.as_str() {
                    "retried" => load.retried.fetch_add(1, Ordering::Relaxed),
                    "degraded" => load.degraded.fetch_add(1, Ordering::Relaxed),
                    _ => 0,
                };
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        errors
    })
}

/// Per shard, the points each replica holds and whether every replica is active with no transfer running.
fn replicas(nodes: &Nodes, collection: &str) -> (BTreeMap<u64, Vec<u64>>, bool) {
    let mut shards: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut settled = true;
    for i in 0..nodes.len() {
        let path = format!("/collections/{collection}/cluster");
        let Ok((200, body)) = http_get(&nodes.ports(i).http_url(), &path, Some(nodes.api_key())) else {
            return (shards, false);
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let result = &v["result"];
        for shard in result["local_shards"].as_array().into_iter().flatten() {
            settled &= shard["state"] == "Active";
            let id = shard["shard_id"].as_u64().unwrap_or(u64::MAX);
            shards.entry(id).or_default().push(shard["points_count"].as_u64().unwrap_or(0));
        }
        settled &= result["remote_shards"].as_array().into_iter().flatten().all(|s| s["state"] == "Active");
        settled &= result["shard_transfers"].as_array().is_none_or(Vec::is_empty);
    }
    (shards, settled)
}

/// Waits until every shard has two active replicas holding the same points, `expected` in all; the time it took.
async fn converge(nodes: &Nodes, collection: &str, expected: u64) -> Duration {
    let started = Instant::now();
    let mut last = (BTreeMap::new(), false);
    while started.elapsed() < Duration::from_secs(180) {
        last = tokio::task::block_in_place(|| replicas(nodes, collection));
        let (shards, settled) = &last;
        let complete = shards.len() == 3
            && shards.values().all(|counts| counts.len() == 2 && counts[0] == counts[1])
            && shards.values().map(|c| c[0]).sum::<u64>() == expected;
        if *settled && complete {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the cluster did not converge on {expected} points within 180 s; last replicas: {last:?}");
}

/// Every acknowledged record is there, whole.
async fn assert_all_present(store: &QdrantStore, records: &[&Record]) -> u64 {
    let ctx = Ctx::new();
    let ids: Vec<String> = records.iter().map(|r| r.chunk.id.clone()).collect();
    let mut lost = 0;
    for (part, want) in ids.chunks(1000).zip(records.chunks(1000)) {
        let got = store.get(&ctx, part).await.expect("read back the acknowledged records");
        for (g, w) in got.iter().zip(want) {
            if g.as_ref().is_none_or(|c| c.text != w.chunk.text) {
                lost += 1;
            }
        }
    }
    lost
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts its own Qdrant cluster from ../shared/qdrant/qdrant and indexes SciFact: run by cargo xtask ci"]
async fn qdrant_faults_a_cluster_keeps_every_acknowledged_batch_through_node_kills() {
    let bin = qdrant_binary();
    let (records, queries, spec) = scifact_records().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut nodes = tokio::task::block_in_place(|| Nodes::start(&bin, dir.path(), 3)).expect("a 3-node cluster");
    let collection = "scifact-faults";
    let cfg = cluster_config(nodes.ports(0).grpc_url(), nodes.api_key(), collection);
    let store = QdrantStore::connect(cfg).await.expect("connect to node 0");
    let ctx = Ctx::new();
    store.ensure_spaces(&ctx, None, Some(&spec)).await.expect("create the collection");

    let load = Arc::new(QueryLoad::default());
    let batches: Vec<&[Record]> = records.chunks(BATCH).collect();
    let mut query_task = None;
    let (kill_at, restart_at) = (batches.len() / 3, 2 * batches.len() / 3);
    let mut acknowledged: Vec<&Record> = Vec::new();
    let mut failed = Vec::new();
    let mut restarted = None;
    for (k, batch) in batches.iter().enumerate() {
        if k == kill_at {
            nodes.kill(2).expect("kill node 2");
        }
        if k == restart_at {
            tokio::task::block_in_place(|| nodes.restart(2)).expect("node 2 restarts");
            restarted = Some(Instant::now());
        }
        let write = WriteBatch { delete_docs: Vec::new(), upsert: batch.to_vec() };
        match store.write(&Ctx::new().with_timeout(Duration::from_secs(60)), write).await {
            Ok(_) => acknowledged.extend(batch.iter()),
            Err(e) => failed.push(format!("batch {k}: {}", e.chain())),
        }
        // Queries start once there is something to find, and run from then on.
        if query_task.is_none() && !acknowledged.is_empty() {
            query_task = Some(spawn_queries(store.clone(), queries.clone(), load.clone()));
        }
    }
    let answered_while_indexing = load.answered.load(Ordering::Relaxed);
    let written = store.stats(&ctx).await.expect("stats").chunks;
    eprintln!("cluster faults: writes done, {} failed batches, exact count {written}: {failed:?}", failed.len());
    let first = converge(&nodes, collection, written).await;
    let first_total = restarted.map(|r| r.elapsed()).unwrap_or_default();

    // A second kill while only queries run: node 1 this time, then back.
    let before = load.answered.load(Ordering::Relaxed);
    nodes.kill(1).expect("kill node 1");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let answered_with_a_node_down = load.answered.load(Ordering::Relaxed) - before;
    let restart = Instant::now();
    tokio::task::block_in_place(|| nodes.restart(1)).expect("node 1 restarts");
    let second = converge(&nodes, collection, written).await;
    let second_total = restart.elapsed();
    load.stop.store(true, Ordering::Release);
    let query_errors = query_task.expect("queries ran").await.expect("the query task");

    let lost = assert_all_present(&store, &acknowledged).await;
    let count = store.stats(&ctx).await.expect("stats").chunks;
    println!(
        "cluster faults (3 nodes, 3 shards, replication 2, write consistency 1; SciFact {} records in {} batches of \
         {BATCH}): kills 2 (node 2 mid-indexing and mid-querying at batch {kill_at}, restarted at batch {restart_at}; \
         node 1 mid-querying); batches acknowledged {} of {}, failed {}, acknowledged records lost {lost}; collection \
         count {count}; queries answered {} ({answered_while_indexing} while indexing, {answered_with_a_node_down} \
         in the 5 s with node 1 down), failed {}; traced: {} store retries, {} reads from one replica; converged {:.1} s after the last write \
         ({:.1} s after node 2's restart), {:.1} s after node 1's restart returned ({:.1} s after it was started)",
        records.len(),
        batches.len(),
        batches.len() - failed.len(),
        batches.len(),
        failed.len(),
        load.answered.load(Ordering::Relaxed),
        load.failed.load(Ordering::Relaxed),
        load.retried.load(Ordering::Relaxed),
        load.degraded.load(Ordering::Relaxed),
        first.as_secs_f64(),
        first_total.as_secs_f64(),
        second.as_secs_f64(),
        second_total.as_secs_f64(),
    );
    assert_eq!(lost, 0, "acknowledged records are missing");
    assert!(
        failed.is_empty(),
        "with one node of three down and write consistency 1, every batch is accepted: {failed:?}"
    );
    assert_eq!(count, records.len() as u64, "every record is in the collection once");
    assert!(query_errors.is_empty(), "queries failed while a node was down: {query_errors:?}");
    assert!(answered_with_a_node_down > 0, "no query was answered while node 1 was down");
    assert!(load.degraded.load(Ordering::Relaxed) > 0, "reads from one replica are reported in the trace");
    store.drop_collection().await.expect("drop the collection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts its own Qdrant node from ../shared/qdrant/qdrant and indexes SciFact: run by cargo xtask ci"]
async fn qdrant_faults_a_single_node_killed_while_indexing_keeps_every_acknowledged_batch() {
    let bin = qdrant_binary();
    let (records, _, spec) = scifact_records().await;
    let records = &records[..BATCH * 30];
    let dir = tempfile::tempdir().expect("tempdir");
    let mut nodes = tokio::task::block_in_place(|| Nodes::start(&bin, dir.path(), 1)).expect("one node");
    let url = nodes.ports(0).grpc_url();
    let cfg = QdrantConfig {
        max_retries: 2,
        timeout: Duration::from_secs(5),
        ..cluster_config(url.clone(), nodes.api_key(), "scifact-kill")
    };
    let cfg = QdrantConfig { shard_number: None, replication_factor: None, write_consistency_factor: None, ..cfg };
    let store = QdrantStore::connect(cfg).await.expect("connect");
    let ctx = Ctx::new();
    store.ensure_spaces(&ctx, None, Some(&spec)).await.expect("create the collection");

    let batches: Vec<&[Record]> = records.chunks(BATCH).collect();
    let (kill_at, restart_at) = (10, 13);
    let mut acknowledged: Vec<&Record> = Vec::new();
    let mut failures = Vec::new();
    for (k, batch) in batches.iter().enumerate() {
        if k == kill_at {
            nodes.kill(0).expect("kill the node");
        }
        if k == restart_at {
            tokio::task::block_in_place(|| nodes.restart(0)).expect("the node restarts on its storage");
        }
        let write = WriteBatch { delete_docs: Vec::new(), upsert: batch.to_vec() };
        match store.write(&Ctx::new().with_timeout(Duration::from_secs(60)), write).await {
            Ok(_) => acknowledged.extend(batch.iter()),
            Err(e) => failures.push((k, e.kind(), e.chain())),
        }
    }
    let lost = assert_all_present(&store, &acknowledged).await;
    let count = store.stats(&ctx).await.expect("stats").chunks;
    println!(
        "single-node kill: {} batches of {BATCH}, node killed before batch {kill_at} and restarted before batch \
         {restart_at}; acknowledged {}, refused {} ({:?}), acknowledged records lost {lost}, count {count}",
        batches.len(),
        batches.len() - failures.len(),
        failures.len(),
        failures.iter().map(|(k, kind, _)| (*k, *kind)).collect::<Vec<_>>()
    );
    assert_eq!(lost, 0, "acknowledged records are missing after the restart");
    assert_eq!(
        failures.iter().map(|(k, _, _)| *k).collect::<Vec<_>>(),
        (kill_at..restart_at).collect::<Vec<_>>(),
        "exactly the batches written while the node was down are refused: {failures:?}"
    );
    for (_, kind, message) in &failures {
        assert!(matches!(kind, ErrorKind::Unavailable | ErrorKind::Transient), "{kind:?}: {message}");
        assert!(message.contains(&url), "the error names the server: {message}");
    }
    assert_eq!(count, acknowledged.len() as u64);
    drop(nodes);
}
