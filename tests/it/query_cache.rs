//! The query-embedding cache: a query embedded again costs no inference, passages are never cached, and the
//! vectors are the ones the model gives.

use std::sync::Arc;

use ragtune::QueryCache;
use ragtune::core::{Ctx, Embedder, TextRole};
use ragtune_testkit::fakes::HashEmbedder;

#[tokio::test]
async fn queries_are_embedded_once_passages_every_time() {
    let model = Arc::new(HashEmbedder::new(16));
    let cached = QueryCache::new(model.clone(), 100);
    let ctx = Ctx::new();
    let first = cached.embed(&ctx, &["otters hold hands", "what softens bones"], TextRole::Query).await.unwrap();
    assert_eq!(model.calls(), 1);
    // One hit and one miss: only the miss reaches the model, and the order is the caller's.
    let second = cached.embed(&ctx, &["a new query", "otters hold hands"], TextRole::Query).await.unwrap();
    assert_eq!(model.calls(), 2);
    assert_eq!(second[1], first[0]);
    assert_eq!(second[0], model.embed_one("a new query"));
    // All hits: no call at all, and the trace says so.
    let sink = ragtune::core::TraceSink::default();
    let traced = Ctx::new().with_trace(sink.clone());
    let third = cached.embed(&traced, &["what softens bones"], TextRole::Query).await.unwrap();
    assert_eq!((model.calls(), &third[0]), (2, &first[1]));
    assert!(sink.take().iter().any(|e| e.stage == "embed" && e.action == "query_cache_hit"));
    // Passages go straight through, every time.
    cached.embed(&ctx, &["otters hold hands"], TextRole::Passage).await.unwrap();
    cached.embed(&ctx, &["otters hold hands"], TextRole::Passage).await.unwrap();
    assert_eq!(model.calls(), 4);
}
