//! Sparse (lexical) retrieval: encode the query, search the store's sparse index.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::{
    Candidate, Ctx, Query, Result, Retriever, SearchRequest, SparseEncoder, TextRole, TraceEvent, VectorQuery,
    VectorStore,
};

/// Retrieves by sparse vectors: BM25 with [`Bm25Encoder`](https://docs.rs/ragtune-embed) and a store that applies
/// IDF, or any other [`SparseEncoder`].
///
/// One encoder call and one store call per batch of queries. Each candidate's provenance holds this retriever's
/// name with the store score and the 1-based rank.
#[derive(Debug, Clone)]
pub struct SparseRetriever {
    name: String,
    encoder: Arc<dyn SparseEncoder>,
    store: Arc<dyn VectorStore>,
}

impl SparseRetriever {
    /// A retriever named `name` (used in provenance and traces, e.g. `"bm25"`).
    pub fn new(name: impl Into<String>, encoder: Arc<dyn SparseEncoder>, store: Arc<dyn VectorStore>) -> Self {
        Self { name: name.into(), encoder, store }
    }
}

#[async_trait]
impl Retriever for SparseRetriever {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        self.run(ctx, queries, true).await
    }

    async fn retrieve_without_text(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        self.run(ctx, queries, false).await
    }

    async fn fill_text(&self, ctx: &Ctx, lists: &mut [Vec<Candidate>]) -> Result<()> {
        crate::fill_text_from(self.store.as_ref(), ctx, &self.name, lists).await
    }
}

impl SparseRetriever {
    /// Retrieves, with the chunks' texts or (`text` false) without them.
    ///
    /// It yields to its executor once before its work, which is synchronous and CPU-bound (encoding and an
    /// in-memory index search): beside a dense retrieval (hybrid polls its inputs in order), the dense retriever's
    /// model call is then started first and the keyword search runs while the query is embedded, instead of before.
    async fn run(&self, ctx: &Ctx, queries: &[Query], text: bool) -> Result<Vec<Vec<Candidate>>> {
        crate::yield_once().await;
        let started = Instant::now();
        crate::validate_all(queries)?;
        let texts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
        let vectors = self.encoder.encode(ctx, &texts, TextRole::Query).await?;
        let requests: Vec<SearchRequest> = queries
            .iter()
            .zip(vectors)
            .map(|(q, v)| SearchRequest { vector: VectorQuery::Sparse(v), top_k: q.top_k, filter: q.filter.clone() })
            .collect();
        let results = if text {
            self.store.search(ctx, &requests).await?
        } else {
            self.store.search_without_text(ctx, &requests).await?
        };
        let out = crate::to_candidates(results, &self.name);
        ctx.trace(
            TraceEvent::new("retrieve", self.name.clone())
                .detail("queries", queries.len())
                .detail("hits", out.iter().map(Vec::len).sum::<usize>())
                .elapsed(started.elapsed()),
        );
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::{Chunk, ErrorKind, Filter, Record, TraceSink};
    use ragtune_testkit::MemoryStore;
    use ragtune_testkit::fakes::HashSparseEncoder;

    async fn retriever(docs: &[(&str, &str)]) -> SparseRetriever {
        let ctx = Ctx::new();
        let encoder = Arc::new(HashSparseEncoder::default());
        let store = Arc::new(MemoryStore::default());
        store.ensure_spaces(&ctx, None, Some(encoder.spec())).await.unwrap();
        let mut records = Vec::new();
        for (id, text) in docs {
            let sparse = encoder.encode(&ctx, &[text], TextRole::Passage).await.unwrap().pop();
            let mut chunk = Chunk::new(*id, *id, *text);
            chunk.metadata.insert("first".into(), text.split(' ').next().unwrap_or("").into());
            records.push(Record { chunk, dense: None, sparse, spans: Vec::new() });
        }
        store.upsert(&ctx, records).await.unwrap();
        SparseRetriever::new("bm25", encoder, store)
    }

    fn render(c: &[Candidate]) -> String {
        c.iter().map(|c| format!("{}:{}", c.sources["bm25"].rank, c.chunk.id)).collect::<Vec<_>>().join(" ")
    }

    #[tokio::test]
    async fn ranks_and_records_provenance() {
        let r = retriever(&[("a", "red apple"), ("b", "green apple pie"), ("c", "blue sky")]).await;
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let out = r.retrieve(&ctx, &[Query::new("apple").with_top_k(5), Query::new("sky")]).await.unwrap();
        assert_eq!(render(&out[0]), "1:a 2:b");
        assert_eq!(render(&out[1]), "1:c");
        assert_eq!(sink.take().len(), 1);
    }

    #[tokio::test]
    async fn a_future_polled_beside_it_starts_before_the_keyword_search() {
        let r = retriever(&[("a", "red apple")]).await;
        let order = std::sync::Mutex::new(Vec::new());
        let (sink, ctx) = (TraceSink::new(), Ctx::new());
        let ctx = ctx.with_trace(sink.clone());
        let search = async {
            let out = r.retrieve(&ctx, &[Query::new("apple")]).await;
            order.lock().unwrap().push("searched");
            out
        };
        // Polled after the search, as hybrid polls a dense input listed after the keyword one: it must still get
        // its first poll (where a dense retriever starts its model call) before the search runs.
        let other = async {
            order.lock().unwrap().push("started");
        };
        let (out, ()) = futures_util::future::join(search, other).await;
        assert_eq!(render(&out.unwrap()[0]), "1:a");
        assert_eq!(*order.lock().unwrap(), ["started", "searched"]);
    }

    #[tokio::test]
    async fn filters_and_top_k_apply() {
        let r = retriever(&[("a", "red apple"), ("b", "green apple"), ("c", "green apple tree")]).await;
        let q = Query::new("apple").with_top_k(1).with_filter(Filter::eq("first", "green"));
        let out = r.retrieve(&Ctx::new(), &[q]).await.unwrap();
        assert_eq!(render(&out[0]), "1:b");
    }

    #[tokio::test]
    async fn bad_queries_are_clear_errors() {
        let r = retriever(&[("a", "x")]).await;
        let err = r.retrieve(&Ctx::new(), &[Query::new("   ")]).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        let err = r.retrieve(&Ctx::new(), &[Query::new("ok"), Query::new("y".repeat(100_000))]).await.unwrap_err();
        assert!(err.to_string().starts_with("query 2:"), "{err}");
    }
}
