//! Free or cheap relevance scorers for [`ModelEvaluator`](super::ModelEvaluator): the similarity retrieval already
//! computed, or an embedder's cosine.

use std::sync::Arc;

use async_trait::async_trait;
use ragtune_core::{Candidate, CostModel, Ctx, Embedder, Error, Reranker, Result, TextRole};

use crate::text::cosine;

/// A free scorer: the similarity a retriever already computed, read from `candidate.sources[source].score`
/// (for example the dense cosine of a hybrid retrieval).
///
/// A candidate without that source, or whose score there is not finite, scores `missing` (0.0 unless set), so the
/// [`Reranker`] contract of one finite score per candidate holds. Its name is `retrieval:<source>`.
///
/// Cost model: [`CostModel::FREE`]; it never calls a model.
#[derive(Debug, Clone)]
pub struct RetrievalScoreScorer {
    source: String,
    missing: f32,
    name: String,
}

impl RetrievalScoreScorer {
    /// A scorer that reads the score of the strategy named `source` (`"dense"`, `"bm25"`).
    pub fn new(source: impl Into<String>) -> Self {
        let source = source.into();
        let name = format!("retrieval:{source}");
        Self { source, missing: 0.0, name }
    }

    /// Sets the score of candidates without the source; a non-finite value is taken as 0.
    #[must_use]
    pub fn with_missing(mut self, v: f32) -> Self {
        self.missing = if v.is_finite() { v } else { 0.0 };
        self
    }
}

#[async_trait]
impl Reranker for RetrievalScoreScorer {
    fn name(&self) -> &str {
        &self.name
    }

    fn cost_model(&self) -> CostModel {
        CostModel::FREE
    }

    /// Reads each candidate's score from its sources.
    ///
    /// # Errors
    /// Only cancellation or a passed deadline in `ctx`.
    async fn score(&self, ctx: &Ctx, _query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
        ctx.check()?;
        Ok(candidates
            .iter()
            .map(|c| c.sources.get(&self.source).map(|s| s.score).filter(|s| s.is_finite()).unwrap_or(self.missing))
            .collect())
    }
}

/// The cosine similarity between the query and each passage under an embedder.
///
/// The query is embedded in one call with [`TextRole::Query`], the passages (each chunk's
/// [`indexable_text`](ragtune_core::Chunk::indexable_text), title first) in another with [`TextRole::Passage`].
/// Scores lie in `[-1, 1]`; use [`ScoreScale::Unit`](super::ScoreScale::Unit) to count negative ones as 0. Its
/// name is `dense-similarity`.
///
/// Cost model: what the embedder charges for those two calls, the query counted as one more document.
#[derive(Debug, Clone)]
pub struct DenseSimilarityScorer {
    embedder: Arc<dyn Embedder>,
}

impl DenseSimilarityScorer {
    /// A scorer over `embedder`.
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        Self { embedder }
    }
}

#[async_trait]
impl Reranker for DenseSimilarityScorer {
    fn name(&self) -> &str {
        "dense-similarity"
    }

    fn cost_model(&self) -> CostModel {
        let e = self.embedder.cost_model();
        CostModel { per_call: e.per_call + e.per_call + e.per_doc, per_doc: e.per_doc, ms_per_doc: e.ms_per_doc }
    }

    /// Embeds the query and the passages and returns their cosines; no candidates make no calls.
    ///
    /// # Errors
    /// The embedder's errors; [`Permanent`](ragtune_core::ErrorKind::Permanent) when it returns the wrong number of
    /// vectors, [`Mismatch`](ragtune_core::ErrorKind::Mismatch) when query and passage vectors differ in dimension.
    async fn score(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
        ctx.check()?;
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let query_vectors = self.embedder.embed(ctx, &[query], TextRole::Query).await?;
        let [query_vector] = query_vectors.as_slice() else {
            return Err(Error::permanent(format!(
                "dense-similarity: the embedder returned {} vectors for 1 query",
                query_vectors.len()
            )));
        };
        let texts: Vec<String> = candidates.iter().map(|c| c.chunk.indexable_text()).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let passages = self.embedder.embed(ctx, &refs, TextRole::Passage).await?;
        if passages.len() != candidates.len() {
            return Err(Error::permanent(format!(
                "dense-similarity: the embedder returned {} vectors for {} passages",
                passages.len(),
                candidates.len()
            )));
        }
        passages
            .iter()
            .map(|p| {
                if p.len() != query_vector.len() {
                    return Err(Error::mismatch(format!(
                        "dense-similarity: query vector has {} dimensions, passage vector {}",
                        query_vector.len(),
                        p.len()
                    )));
                }
                Ok(cosine(query_vector, p))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use ragtune_core::Cost;
    use ragtune_testkit::fakes::HashEmbedder;

    use super::*;
    use crate::crag::test_candidate;

    /// Scores `candidates` for `query` with `scorer` and checks the scores (within 1e-5).
    async fn check(scorer: &dyn Reranker, query: &str, candidates: &[Candidate], expect: &[f32]) -> Vec<f32> {
        let got = scorer.score(&Ctx::new(), query, candidates).await.expect("the scorer works");
        assert_eq!(got.len(), expect.len(), "{got:?}");
        for (g, e) in got.iter().zip(expect) {
            assert!((g - e).abs() < 1e-5, "got {got:?}, want {expect:?}");
        }
        got
    }

    #[tokio::test(flavor = "current_thread")]
    async fn retrieval_scores_read_the_source() {
        let candidates = [
            test_candidate("a", "a", "x", 0.03, &[("dense", 0.82), ("bm25", 7.5)]),
            test_candidate("b", "b", "y", 0.02, &[("bm25", 3.0)]),
            test_candidate("c", "c", "z", 0.01, &[("dense", f32::NAN)]),
        ];
        let dense = RetrievalScoreScorer::new("dense");
        assert_eq!(dense.name(), "retrieval:dense");
        assert_eq!(dense.cost_model(), CostModel::FREE);
        check(&dense, "q", &candidates, &[0.82, 0.0, 0.0]).await;
        check(&dense.clone().with_missing(0.25), "q", &candidates, &[0.82, 0.25, 0.25]).await;
        check(&RetrievalScoreScorer::new("bm25").with_missing(f32::NAN), "q", &candidates, &[7.5, 3.0, 0.0]).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn dense_similarity_prefers_shared_words() {
        let embedder = Arc::new(HashEmbedder::new(256));
        let scorer = DenseSimilarityScorer::new(embedder.clone());
        assert_eq!(scorer.name(), "dense-similarity");
        let candidates = [
            test_candidate("a", "a", "vitamin c prevents scurvy", 0.5, &[]),
            test_candidate("b", "b", "the stock market fell sharply today", 0.5, &[]),
        ];
        let scores = scorer.score(&Ctx::new(), "vitamin c prevents scurvy", &candidates).await.unwrap();
        assert!((scores[0] - 1.0).abs() < 1e-5, "{scores:?}");
        assert!(scores[1] < scores[0], "{scores:?}");
        assert_eq!(embedder.calls(), 2);
        // The query counts as one more document besides the passages, over two calls.
        assert_eq!(scorer.cost_model().estimate(2), Cost::new(0, 3, 2));
        check(&scorer, "q", &[], &[]).await;
        assert_eq!(embedder.calls(), 2);
    }

    #[test]
    fn cosine_handles_zero_vectors() {
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
        assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-6);
        assert!((cosine(&[1.0, 0.0], &[-1.0, 0.0]) + 1.0).abs() < 1e-6);
    }
}
