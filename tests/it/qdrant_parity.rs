//! The same corpus on the embedded store and on a Qdrant server: `migrate` embedded → Qdrant → embedded keeps every
//! ranking, and `ask` over the Qdrant collection gives the answer and citations it gives over the embedded store.
//!
//! `#[ignore]`d: it needs a Qdrant server (`QDRANT_URL`, `QDRANT_API_KEY`); `cargo xtask ci` runs it in its
//! `qdrant-tests` step with the server it starts. Dense and hybrid rankings are compared when the embedding model
//! is provisioned (always in CI), BM25 always.

use ragtune::core::{Ctx, Document, Query};
use ragtune::{Chunking, Config, Engine, StoreBackend, Strategy};

use crate::models_provisioned;
use crate::pipeline::DOCS;

const QUESTIONS: [&str; 4] = [
    "What causes scurvy?",
    "Which vitamin prevents rickets?",
    "What did ships carry on long voyages?",
    "Why did stock markets rise?",
];

fn qdrant_url() -> String {
    match std::env::var("QDRANT_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!("QDRANT_URL is not set: `cargo xtask qdrant start` starts a server and prints what to export"),
    }
}

fn embedded(dir: &std::path::Path, dense: bool) -> Config {
    let mut cfg = Config::default();
    cfg.store.path = dir.to_owned();
    cfg.embedding.mode = if dense { ragtune::EmbeddingMode::default() } else { ragtune::EmbeddingMode::Off };
    // Extractive answers: the comparison is of the stores, not of an LLM's sampling.
    cfg.llm.url = String::new();
    // Qdrant keeps no strip vectors (docs/stores.md), so refinement embeds every strip there; the embedded store
    // does the same here, so that both answer from the same inputs (with stored strip vectors an answer may pick
    // another strip: they are the strips as read inside their passage).
    cfg.embedding.strip_vectors = false;
    cfg
}

fn on_qdrant(mut cfg: Config, collection: &str) -> Config {
    cfg.store.backend = StoreBackend::Qdrant;
    cfg.store.qdrant.url = qdrant_url();
    cfg.store.qdrant.api_key = std::env::var("QDRANT_API_KEY").ok().filter(|k| !k.is_empty()).map(Into::into);
    cfg.store.qdrant.collection = collection.to_owned();
    cfg
}

/// Every question's top 10 under every strategy, as `id score` lines (scores to 4 decimals).
async fn rankings(engine: &Engine, strategies: &[Strategy]) -> Vec<String> {
    let mut out = Vec::new();
    for &strategy in strategies {
        for q in QUESTIONS {
            let hits = engine.search_with(Query::new(q).with_top_k(10), strategy).await.expect("search").hits;
            assert!(!hits.is_empty(), "{strategy:?} finds something for {q}");
            let lines: Vec<String> = hits.iter().map(|h| format!("{} {:.4}", h.chunk.id, h.score)).collect();
            out.push(format!("{strategy:?} {q}\n{}", lines.join("\n")));
        }
    }
    out
}

/// The answer and the cited chunks of every question.
async fn answers(engine: &Engine) -> Vec<(Option<String>, Vec<String>)> {
    let mut out = Vec::new();
    for q in QUESTIONS {
        let r = engine.ask(q).await.expect("ask");
        out.push((r.answer, r.citations.iter().map(|c| c.chunk_id.clone()).collect()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Qdrant server: cargo xtask qdrant start, then set QDRANT_URL and QDRANT_API_KEY"]
async fn qdrant_parity_migrate_round_trips_and_ask_answers_the_same() {
    let dense = models_provisioned();
    let strategies: &[Strategy] =
        if dense { &[Strategy::Bm25, Strategy::Dense, Strategy::Hybrid] } else { &[Strategy::Bm25] };
    let dir = tempfile::tempdir().unwrap();
    let collection = format!("ragtune-parity-{}", std::process::id());

    let original = embedded(&dir.path().join("original"), dense);
    let (before, asked_before) = {
        let mut engine = Engine::open(original.clone()).await.expect("open the embedded store");
        let docs: Vec<Document> = DOCS.iter().map(|(id, text)| Document::new(*id, *text)).collect();
        engine.index_documents(&docs, Chunking::Auto(original.chunking), &mut |_, _| {}).await.expect("index");
        (rankings(&engine, strategies).await, answers(&engine).await)
    };

    // Embedded → Qdrant.
    let remote = on_qdrant(original.clone(), &collection);
    ragtune::stores::clear_store(&remote.store).await.expect("drop a leftover collection");
    let target = ragtune::stores::open_store(&remote.store).await.expect("connect");
    let report = ragtune::stores::migrate(&original.store, &*target.store, 3, &mut |_, _| {}).await.expect("to Qdrant");
    assert!(report.records > 0 && report.target_chunks >= report.records, "{report:?}");
    let engine = Engine::open(remote.clone()).await.expect("open the Qdrant collection");
    let on_server = rankings(&engine, strategies).await;
    let asked_on_server = answers(&engine).await;
    drop(engine);

    // Qdrant → embedded.
    let copy = embedded(&dir.path().join("copy"), dense);
    let back = ragtune::stores::open_store(&copy.store).await.expect("open the copy");
    let returned = ragtune::stores::migrate(&remote.store, &*back.store, 3, &mut |_, _| {}).await.expect("back");
    drop(back);
    ragtune::stores::clear_store(&remote.store).await.expect("drop the collection");
    assert_eq!(returned.records, report.records, "every record comes back");
    let engine = Engine::open(copy).await.expect("open the copy");
    let after = rankings(&engine, strategies).await;
    let stats = engine.store().stats(&Ctx::new()).await.expect("stats");
    assert_eq!(stats.chunks, report.records);

    assert_eq!(before, on_server, "Qdrant ranks and scores like the embedded store");
    assert_eq!(before, after, "the round trip keeps every ranking and score");
    assert_eq!(asked_before, asked_on_server, "`ask` answers and cites the same over Qdrant");
    assert!(asked_before.iter().all(|(answer, cited)| answer.is_some() && !cited.is_empty()), "{asked_before:?}");
}
