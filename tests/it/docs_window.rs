//! The project's own `docs/` folder, indexed as `ragtune index docs/` indexes it, fits the embedding model's window:
//! every stored passage, counted with the model's tokenizer, is at most `embedding.max_length` tokens, so no dense
//! vector sees only the beginning of its passage.

use std::path::PathBuf;

use ragtune::core::{Chunk, ChunkKind, Ctx, Document, TokenCounter};
use ragtune::{Chunking, Config, EmbeddingMode, Engine};

use crate::{engine_in, models_provisioned};

/// The repository's `docs/` folder.
fn docs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

/// Every passage the engine stored for `docs`, document by document, in order (passage ids are `{doc}#{n}`).
async fn stored_passages(engine: &Engine, docs: &[Document]) -> Vec<Chunk> {
    let ctx = Ctx::new();
    let mut out = Vec::new();
    for doc in docs {
        let mut n = 0;
        loop {
            let ids: Vec<String> = (n..n + 64).map(|i| format!("{}#{i}", doc.id)).collect();
            let got = engine.store().get(&ctx, &ids).await.unwrap();
            let found: Vec<Chunk> = got.into_iter().map_while(|c| c).collect();
            let done = found.len() < ids.len();
            n += found.len();
            out.extend(found);
            if done {
                break;
            }
        }
    }
    assert!(out.iter().all(|c| c.kind == ChunkKind::Passage));
    out
}

/// Indexes `docs/` with `engine` and checks every stored passage against `tokens`' window; the passages.
async fn index_docs_within(mut engine: Engine, tokens: &dyn TokenCounter) -> Vec<Chunk> {
    let report = engine.index_path(&docs_dir(), &[], &mut |_, _| {}).await.unwrap();
    assert!(report.issues.is_empty(), "{:?}", report.issues);
    let loaded = Engine::load(&docs_dir(), &[]).unwrap();
    let passages = stored_passages(&engine, &loaded.items).await;
    assert_eq!(passages.len(), report.passages, "every passage was read back");
    let texts: Vec<String> = passages.iter().map(Chunk::indexable_text).collect();
    let counts = tokens.count(&texts.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
    let over: Vec<String> = passages
        .iter()
        .zip(&counts)
        .filter(|&(_, &n)| n > tokens.window())
        .map(|(p, n)| format!("{} ({n} tokens)", p.id))
        .collect();
    assert!(
        over.is_empty(),
        "{} of {} passages of docs/ are longer than the {}-token window of {}: {over:?}",
        over.len(),
        passages.len(),
        tokens.window(),
        tokens.name()
    );
    // No word of a document is lost: each document's words appear, in order, in its passages.
    for doc in &loaded.items {
        let mut words = passages.iter().filter(|p| p.doc_id == doc.id).flat_map(|p| p.text.split_whitespace());
        let missing = doc.text.split_whitespace().find(|w| !words.any(|p| p == *w));
        assert_eq!(missing, None, "{}: a word is missing from its passages", doc.id);
    }
    let largest = counts.iter().max().copied().unwrap_or(0);
    eprintln!(
        "docs/: {} documents, {} passages, largest {largest} of {} tokens ({})",
        loaded.items.len(),
        passages.len(),
        tokens.window(),
        tokens.name()
    );
    passages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_passage_of_the_projects_docs_fits_the_models_window() {
    if !models_provisioned() {
        return;
    }
    // The model's own tokenizer, as `Engine::open` takes it from the loaded model; the embedding itself stays off
    // (the next test ties the counter to the embedder's truncation).
    let tokens = ragtune::load_token_counter(&Config::default().embedding).unwrap();
    assert_eq!(tokens.window(), 256);
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_in(dir.path()).await.with_token_counter(Some(tokens.clone()));
    let passages = index_docs_within(engine, tokens.as_ref()).await;
    // Cut code blocks stay fenced: every passage has an even number of fence lines.
    for p in &passages {
        let fences = p.text.lines().filter(|l| l.trim_start().starts_with("```")).count();
        assert!(fences % 2 == 0, "{} has unbalanced fences: {:?}", p.id, p.text);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_markdown_is_cut_by_the_estimate() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_in(dir.path()).await;
    assert!(engine.token_counter().is_none());
    let estimate = ragtune::ingest::EstimatedTokens::new(Config::default().embedding.max_length);
    let passages = index_docs_within(engine, &estimate).await;
    // How the estimate compares with the model's tokenizer on the same passages, when it is there (a measurement
    // printed for docs/ingest.md, not a promise: the estimate has a margin, not a bound).
    if let Ok(tokens) = ragtune::load_token_counter(&Config::default().embedding) {
        let texts: Vec<String> = passages.iter().map(Chunk::indexable_text).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let (real, guess) = (tokens.count(&refs).unwrap(), estimate.count(&refs).unwrap());
        let over = real.iter().filter(|&&n| n > tokens.window()).count();
        let ratio = guess.iter().sum::<usize>() as f64 / real.iter().sum::<usize>() as f64;
        eprintln!(
            "the estimate's passages with the model's tokenizer: {over} over the window, estimate/real {ratio:.2}"
        );
    }
}

/// The counter's "fits" is the embedder's "not truncated": a text of exactly the window is embedded whole, one token
/// more is reported truncated (the count the `ragtune index` warning prints).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_counter_and_the_embedders_truncation_agree_at_the_window() {
    if !models_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.store.path = dir.path().join("store");
    cfg.embedding.mode = EmbeddingMode::On;
    cfg.embedding.sessions = 1;
    let mut engine = Engine::open(cfg.clone()).await.unwrap();
    let tokens = engine.token_counter().cloned().expect("the loaded model's tokenizer");
    let alone = ragtune::load_token_counter(&cfg.embedding).unwrap();
    // "word" is one token; the two special tokens make 254 words exactly the window.
    let fits = "word ".repeat(254);
    let over = "word ".repeat(255);
    assert_eq!(tokens.count(&[&fits, &over]).unwrap(), [256, 257]);
    assert_eq!(alone.count(&[&fits, &over]).unwrap(), [256, 257], "the tokenizer loaded alone counts the same");
    assert_eq!((tokens.window(), alone.window()), (256, 256));
    let docs = [Document::new("fits", fits), Document::new("over", over)];
    let report = engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    assert_eq!(report.truncated, 1, "only the text one token over the window is truncated");
}
