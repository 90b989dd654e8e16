//! Dense retrieval: embed the query, search the store's dense vectors.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::{
    Candidate, Ctx, Embedder, Query, Result, Retriever, SearchRequest, TextRole, TraceEvent, VectorQuery, VectorStore,
};

use crate::validate_all;

/// Retrieves by dense vectors: one embedding call and one store call per batch of queries.
///
/// The store must hold vectors of the embedder's space ([`Embedder::spec`]); the store refuses queries of another
/// dimension, and the engine fixes the store's space from the embedder before indexing.
#[derive(Debug, Clone)]
pub struct DenseRetriever {
    name: String,
    embedder: Arc<dyn Embedder>,
    store: Arc<dyn VectorStore>,
}

impl DenseRetriever {
    /// A retriever named `name` (used in provenance and traces, e.g. `"dense"`).
    pub fn new(name: impl Into<String>, embedder: Arc<dyn Embedder>, store: Arc<dyn VectorStore>) -> Self {
        Self { name: name.into(), embedder, store }
    }
}

#[async_trait]
impl Retriever for DenseRetriever {
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

impl DenseRetriever {
    /// Retrieves, with the chunks' texts or (`text` false) without them.
    async fn run(&self, ctx: &Ctx, queries: &[Query], text: bool) -> Result<Vec<Vec<Candidate>>> {
        let started = Instant::now();
        validate_all(queries)?;
        let texts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
        let vectors = self.embedder.embed(ctx, &texts, TextRole::Query).await?;
        let requests: Vec<SearchRequest> = queries
            .iter()
            .zip(vectors)
            .map(|(q, v)| SearchRequest { vector: VectorQuery::Dense(v), top_k: q.top_k, filter: q.filter.clone() })
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
                .detail("model", self.embedder.spec().model_id.clone())
                .detail("hits", out.iter().map(Vec::len).sum::<usize>())
                .elapsed(started.elapsed()),
        );
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::{Chunk, Record};
    use ragtune_testkit::MemoryStore;
    use ragtune_testkit::fakes::HashEmbedder;

    #[tokio::test]
    async fn ranks_by_similarity_with_provenance() {
        let ctx = Ctx::new();
        let embedder = Arc::new(HashEmbedder::new(64));
        let store = Arc::new(MemoryStore::default());
        store.ensure_spaces(&ctx, Some(embedder.spec()), None).await.unwrap();
        let docs = [("a", "red apples and green pears"), ("b", "the stock market fell"), ("c", "apples")];
        let mut records = Vec::new();
        for (id, text) in docs {
            let dense = embedder.embed(&ctx, &[text], TextRole::Passage).await.unwrap().pop();
            records.push(Record { chunk: Chunk::new(id, id, text), dense, sparse: None, spans: Vec::new() });
        }
        store.upsert(&ctx, records).await.unwrap();
        let r = DenseRetriever::new("dense", embedder, store);
        let out = r.retrieve(&ctx, &[Query::new("apples").with_top_k(2)]).await.unwrap();
        assert_eq!(out[0].iter().map(|c| c.chunk.id.as_str()).collect::<Vec<_>>(), vec!["c", "a"]);
        assert_eq!(out[0][0].sources["dense"].rank, 1);
        assert!(r.retrieve(&ctx, &[Query::new("")]).await.is_err());
    }
}
