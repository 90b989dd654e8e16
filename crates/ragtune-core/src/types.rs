//! Data types that flow through the pipeline: documents, chunks, queries, vectors, candidates and hits.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Error, Filter, Result};

/// Free-form metadata attached to documents and chunks; filters match on its keys.
pub type Metadata = BTreeMap<String, serde_json::Value>;

/// A source document as loaded by an ingestion loader, before chunking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Document {
    /// Stable identifier, unique within a corpus (BEIR `_id`, a relative file path, a JSONL `id`).
    pub id: String,
    /// Optional title; indexed together with the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The full text.
    pub text: String,
    /// Where the document came from (a path or URL), for citations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Everything else the loader knew about the document.
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
}

impl Document {
    /// A document with an id and a text and nothing else.
    pub fn new(id: impl Into<String>, text: impl Into<String>) -> Self {
        Self { id: id.into(), title: None, text: text.into(), source: None, metadata: Metadata::new() }
    }
}

/// Whether a chunk is a parent section (returned as context) or a passage (searched).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChunkKind {
    /// A searchable unit: a child chunk of a section, or a whole short document.
    #[default]
    Passage,
    /// A parent section: stored for "snippet then parent" retrieval, usually not searched itself.
    Section,
}

/// A piece of a document: the unit that is indexed, retrieved, reranked and cited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Chunk {
    /// Unique id within a store (conventionally `"{doc_id}#{n}"`, or the document id for whole documents).
    pub id: String,
    /// The document this chunk belongs to; upserts and deletes by document use it.
    pub doc_id: String,
    /// The parent section's chunk id, for child chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// Passage or section.
    #[serde(default)]
    pub kind: ChunkKind,
    /// The Markdown headers above this chunk, outermost first (`["Guide", "Install"]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub header_path: Vec<String>,
    /// The document title, repeated here so a chunk is self-contained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Where the document came from (a path or URL), repeated here for citations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The chunk's text.
    pub text: String,
    /// Position of the chunk within its document (0-based), for recomposing in document order.
    #[serde(default)]
    pub position: u32,
    /// Metadata inherited from the document plus anything the chunker added.
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
}

impl Chunk {
    /// A passage chunk with the given ids and text.
    pub fn new(id: impl Into<String>, doc_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            doc_id: doc_id.into(),
            parent_id: None,
            kind: ChunkKind::Passage,
            header_path: Vec::new(),
            title: None,
            source: None,
            text: text.into(),
            position: 0,
            metadata: Metadata::new(),
        }
    }

    /// The text an encoder should see: title and header path (when present) before the body.
    ///
    /// Indexing the title with the body is what BEIR baselines do (Pyserini indexes `title + text`).
    #[must_use]
    pub fn indexable_text(&self) -> String {
        let mut out = String::with_capacity(self.text.len() + 64);
        if let Some(title) = self.title.as_deref().filter(|t| !t.is_empty()) {
            out.push_str(title);
            out.push('\n');
        }
        for h in self.header_path.iter().filter(|h| Some(h.as_str()) != self.title.as_deref()) {
            out.push_str(h);
            out.push('\n');
        }
        out.push_str(&self.text);
        out
    }
}

/// A question or search string with its options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Query {
    /// Optional id (the BEIR query id in evaluations), carried into traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The text as the user wrote it.
    pub text: String,
    /// How many results are wanted.
    pub top_k: usize,
    /// Only chunks that match this filter may be returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Filter>,
    /// The conversation before this question (earlier turns, oldest first), for transformations that resolve
    /// references ("who wrote it?") such as query rewriting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<String>,
}

impl Query {
    /// The longest query text accepted, in bytes. Longer texts are refused with a clear error rather
    /// than silently truncated, because a truncated question retrieves for a different question.
    pub const MAX_BYTES: usize = 16 * 1024;
    /// The default number of results.
    pub const DEFAULT_TOP_K: usize = 10;

    /// A query for `text` with the default `top_k` and no filter.
    pub fn new(text: impl Into<String>) -> Self {
        Self { id: None, text: text.into(), top_k: Self::DEFAULT_TOP_K, filter: None, context: Vec::new() }
    }

    /// Sets `top_k`.
    #[must_use]
    pub fn with_top_k(mut self, top_k: usize) -> Self {
        self.top_k = top_k;
        self
    }

    /// Sets the filter.
    #[must_use]
    pub fn with_filter(mut self, filter: Filter) -> Self {
        self.filter = Some(filter);
        self
    }

    /// The same query (options, filter, context) with another text: what query transformations retrieve with.
    #[must_use]
    pub fn with_text(&self, text: impl Into<String>) -> Self {
        Self { text: text.into(), ..self.clone() }
    }

    /// Checks that the query can be answered at all.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an empty or blank text, a text over
    /// [`Query::MAX_BYTES`], or `top_k == 0`.
    pub fn validate(&self) -> Result<()> {
        if self.text.trim().is_empty() {
            return Err(Error::invalid_input("the query is empty"));
        }
        if self.text.len() > Self::MAX_BYTES {
            return Err(Error::invalid_input(format!(
                "the query is {} bytes long; the limit is {} bytes (shorten it or split it into several questions)",
                self.text.len(),
                Self::MAX_BYTES
            )));
        }
        if self.top_k == 0 {
            return Err(Error::invalid_input("top_k must be at least 1"));
        }
        Ok(())
    }
}

/// Whether a text is embedded as a query or as a passage (asymmetric models prefix them differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextRole {
    /// A search query.
    Query,
    /// A stored passage.
    Passage,
}

/// How dense vectors are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Distance {
    /// Cosine similarity (dot product of L2-normalised vectors).
    Cosine,
    /// Raw dot product.
    Dot,
}

/// The identity of a dense embedding space. Every stored dense vector records it; mixing spaces is an error.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EmbeddingSpec {
    /// Model identifier (`sentence-transformers/all-MiniLM-L6-v2`), including any variant (`int8`).
    pub model_id: String,
    /// Vector dimension.
    pub dim: usize,
    /// Whether vectors are L2-normalised.
    pub normalized: bool,
    /// How vectors are compared.
    pub distance: Distance,
}

/// The identity of a sparse space: which encoder (tokeniser, stemmer, weighting) produced the vectors.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SparseSpec {
    /// Encoder identifier including every parameter that changes the vectors (`bm25/en-snowball/k1=0.9,b=0.4,avgdl=200`).
    pub encoder_id: String,
    /// Whether the store must multiply by inverse document frequency at query time (BM25: yes).
    pub idf: bool,
}

/// A sparse vector: sorted, unique term indices with their weights.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SparseVector {
    /// Term indices, strictly increasing.
    pub indices: Vec<u32>,
    /// One weight per index.
    pub values: Vec<f32>,
}

impl SparseVector {
    /// Builds a sparse vector from (index, weight) pairs in any order; weights of repeated indices add up.
    #[must_use]
    pub fn from_pairs(mut pairs: Vec<(u32, f32)>) -> Self {
        pairs.sort_unstable_by_key(|&(i, _)| i);
        let mut indices: Vec<u32> = Vec::with_capacity(pairs.len());
        let mut values: Vec<f32> = Vec::with_capacity(pairs.len());
        for (i, v) in pairs {
            if indices.last() == Some(&i) {
                *values.last_mut().expect("invariant: values and indices have equal length") += v;
            } else {
                indices.push(i);
                values.push(v);
            }
        }
        Self { indices, values }
    }

    /// Number of non-zero entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether the vector has no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// Checks the invariants (equal lengths, strictly increasing indices, finite weights).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the broken invariant.
    pub fn validate(&self) -> Result<()> {
        if self.indices.len() != self.values.len() {
            return Err(Error::invalid_input("sparse vector has different numbers of indices and values"));
        }
        if self.indices.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::invalid_input("sparse vector indices are not strictly increasing"));
        }
        if self.values.iter().any(|v| !v.is_finite()) {
            return Err(Error::invalid_input("sparse vector has a non-finite weight"));
        }
        Ok(())
    }
}

/// One record written to a [`VectorStore`](crate::VectorStore): a chunk and its vectors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The chunk, stored as payload.
    pub chunk: Chunk,
    /// Dense vector in the store's embedding space, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense: Option<Vec<f32>>,
    /// Sparse vector in the store's sparse space, if any. Records without vectors (parent sections)
    /// are stored and fetchable by id but never returned by a search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse: Option<SparseVector>,
    /// Vectors of spans of the chunk's text (its knowledge strips), pooled from the same forward pass as `dense`
    /// and in its space ([`Embedder::embed_spans`](crate::Embedder::embed_spans)); empty when none were computed.
    /// Stores that keep them return them from [`VectorStore::span_vectors`](crate::VectorStore::span_vectors).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<SpanVector>,
}

impl Record {
    /// A record of `chunk` with these vectors and no span vectors.
    #[must_use]
    pub fn new(chunk: Chunk, dense: Option<Vec<f32>>, sparse: Option<SparseVector>) -> Self {
        Self { chunk, dense, sparse, spans: Vec::new() }
    }
}

/// The vector of one span of a chunk's text: bytes `start..end` of [`Chunk::text`], in the chunk's dense space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanVector {
    /// First byte of the span in the chunk's text.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
    /// The span's vector (L2-normalised, the dimension of the dense space).
    pub vector: Vec<f32>,
}

impl SpanVector {
    /// The span's text in `text`, or `None` when the range does not fit it (a span of another version of the text).
    #[must_use]
    pub fn text_in<'t>(&self, text: &'t str) -> Option<&'t str> {
        let (start, end) = (usize::try_from(self.start).ok()?, usize::try_from(self.end).ok()?);
        if start >= end {
            return None;
        }
        text.get(start..end)
    }
}

/// A chunk returned by a store search with its score in that search's space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoredHit {
    /// The chunk.
    pub chunk: Chunk,
    /// Similarity (dense) or BM25 score (sparse); higher is better.
    pub score: f32,
}

/// What one strategy said about a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SourceScore {
    /// The strategy's own score.
    pub score: f32,
    /// 1-based rank in the strategy's list.
    pub rank: u32,
}

/// A retrieved chunk with its score and where that score came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Candidate {
    /// The chunk.
    pub chunk: Chunk,
    /// The score the producing retriever ranked by (fused score for a hybrid retriever).
    pub score: f32,
    /// Provenance: every strategy that produced this chunk, by name (`"bm25"`, `"dense"`), with its score and rank.
    pub sources: BTreeMap<String, SourceScore>,
}

impl Candidate {
    /// A candidate produced by one strategy at a 1-based rank.
    pub fn from_hit(hit: ScoredHit, strategy: &str, rank: u32) -> Self {
        let mut sources = BTreeMap::new();
        sources.insert(strategy.to_owned(), SourceScore { score: hit.score, rank });
        Self { chunk: hit.chunk, score: hit.score, sources }
    }
}

/// Sorts by descending score, ties broken by ascending chunk id: the one ranking order of ragtune.
pub fn sort_ranked<T>(items: &mut [T], key: impl Fn(&T) -> (f32, &str)) {
    items.sort_by(|a, b| {
        let (sa, ia) = key(a);
        let (sb, ib) = key(b);
        sb.total_cmp(&sa).then_with(|| ia.cmp(ib))
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_secret_is_never_shown() {
        let key = Secret::new("sk-very-secret");
        assert_eq!(format!("{key:?}"), "<redacted>");
        assert_eq!(format!("{:?}", Some(key.clone())), "Some(<redacted>)");
        assert_eq!(key.expose(), "sk-very-secret");
        let parsed: Secret = serde_json::from_str("\"sk-from-config\"").unwrap();
        assert_eq!(parsed, Secret::from("sk-from-config"));
    }

    use super::*;

    #[test]
    fn query_validation() {
        assert!(Query::new("  ").validate().is_err());
        assert!(Query::new("x".repeat(100 * 1024)).validate().unwrap_err().message().contains("limit"));
        assert!(Query::new("ok").with_top_k(0).validate().is_err());
        assert!(Query::new("ok").validate().is_ok());
    }

    #[test]
    fn sparse_from_pairs_merges_and_sorts() {
        let v = SparseVector::from_pairs(vec![(5, 1.0), (2, 0.5), (5, 2.0)]);
        assert_eq!(v.indices, vec![2, 5]);
        assert_eq!(v.values, vec![0.5, 3.0]);
        v.validate().unwrap();
        assert!(SparseVector { indices: vec![3, 1], values: vec![1.0, 1.0] }.validate().is_err());
    }

    #[test]
    fn ranking_order_breaks_ties_by_id() {
        let mut v = vec![(1.0_f32, "b"), (2.0, "z"), (1.0, "a")];
        sort_ranked(&mut v, |x| (x.0, x.1));
        assert_eq!(v, vec![(2.0, "z"), (1.0, "a"), (1.0, "b")]);
    }

    #[test]
    fn indexable_text_puts_title_first() {
        let mut c = Chunk::new("d#0", "d", "body");
        c.title = Some("Title".into());
        c.header_path = vec!["Title".into(), "Section".into()];
        assert_eq!(c.indexable_text(), "Title\nSection\nbody");
    }
}

/// A credential such as an API key. Its `Debug` output is `<redacted>`, it has no `Display`, and it cannot be
/// serialised, so a configuration or an error that holds one never shows it; [`expose`](Self::expose) is the one
/// way to read it, at the point where it is sent.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential.
    #[must_use]
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The credential itself, to put into a request header.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

/// How much work a question needs, as the complexity router judges it. It chooses the retrieval plan
/// (`ragtune_retrieve::RoutedRetriever`) and the web search route (`ragtune_web::MultiSearch`): one scale for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Complexity {
    /// One fact from one passage (the protocol: no web search).
    Simple,
    /// A few passages or some explanation.
    Moderate,
    /// Comparisons, several parts, or facts that lead to other facts.
    Complex,
}

impl Complexity {
    /// Every complexity, simplest first.
    pub const ALL: [Self; 3] = [Self::Simple, Self::Moderate, Self::Complex];

    /// The lower-case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Simple => "simple",
            Self::Moderate => "moderate",
            Self::Complex => "complex",
        }
    }
}

impl std::fmt::Display for Complexity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Complexity {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let wanted = s.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|c| c.as_str() == wanted).ok_or_else(|| {
            Error::invalid_input(format!("unknown complexity `{}` (simple, moderate, complex)", s.trim()))
        })
    }
}
