//! The Engine: wires loaders, chunker, BM25 encoder, embedded store and retriever from a [`Config`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use ragtune_core::{
    Candidate, Chunk, ChunkKind, Ctx, Document, Error, Query, Record, Result, Retriever, SparseEncoder, StoreStats,
    TextRole, TraceEvent, TraceSink, VectorStore, WriteBatch,
};
use ragtune_embed::{Bm25Config, Bm25Encoder};
use ragtune_ingest::{ChunkerConfig, LoadIssue, Loaded};
use ragtune_retrieve::SparseRetriever;
use ragtune_store::EmbeddedStore;
use serde::{Deserialize, Serialize};

use crate::Config;

/// How documents become chunks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Chunking {
    /// One passage per document (BEIR-style corpora of abstracts or passages).
    WholeDocuments,
    /// Header-aware sections with child passages for every document.
    Sections(ChunkerConfig),
    /// Sections and passages for Markdown (so header paths are kept); for other documents, one passage when they
    /// fit in one chunk, sections and passages otherwise.
    Auto(ChunkerConfig),
}

/// What an indexing run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IndexReport {
    /// Documents indexed.
    pub documents: usize,
    /// Searchable passages written.
    pub passages: usize,
    /// Parent sections written (stored for context, not searched).
    pub sections: usize,
    /// Problems that skipped a line or a file; everything else was indexed.
    pub issues: Vec<String>,
    /// Wall time in seconds.
    pub seconds: f64,
    /// The store after indexing.
    pub store: StoreStats,
}

/// A search answer with its trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResponse {
    /// Ranked candidates.
    pub hits: Vec<Candidate>,
    /// What the engine did.
    pub trace: Vec<TraceEvent>,
}

/// Documents are written in batches of about this many chunks: large enough to amortise a commit, small enough
/// to keep progress moving and memory flat.
const BATCH_CHUNKS: usize = 512;

/// The ragtune engine on the embedded store.
///
/// This release runs the BM25 slice of the pipeline (index, retrieve); routing, dense and hybrid retrieval,
/// Corrective RAG, budgeted reranking and generation plug into it in later releases.
#[derive(Debug)]
pub struct Engine {
    config: Config,
    store: Arc<EmbeddedStore>,
    encoder: Option<Arc<Bm25Encoder>>,
}

impl Engine {
    /// Opens (or creates) the store named by the configuration. An existing store dictates the BM25 parameters it
    /// was built with; the configuration's apply to a new store.
    ///
    /// # Errors
    /// Store errors (locked, corrupt), or a store built by another sparse encoder.
    pub async fn open(config: Config) -> Result<Self> {
        let store = Arc::new(EmbeddedStore::open(&config.store.path)?);
        let stats = store.stats(&Ctx::new()).await?;
        let encoder = match &stats.sparse_spec {
            Some(spec) => Some(Arc::new(Bm25Encoder::new(Bm25Config::from_spec_id(&spec.encoder_id)?)?)),
            None => None,
        };
        Ok(Self { config, store, encoder })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<EmbeddedStore> {
        &self.store
    }

    /// The BM25 encoder, once the store has a sparse space.
    #[must_use]
    pub fn encoder(&self) -> Option<&Arc<Bm25Encoder>> {
        self.encoder.as_ref()
    }

    /// Loads documents from `path`: a BEIR directory (with `corpus.jsonl`), a `.jsonl` file, a folder of Markdown
    /// and text files, or one such file.
    ///
    /// # Errors
    /// A missing path or a source with no documents; per-line and per-file problems are returned as issues.
    pub fn load(path: &Path) -> Result<Loaded<Document>> {
        let corpus = path.join("corpus.jsonl");
        if path.is_dir() && corpus.is_file() {
            return ragtune_ingest::load_jsonl_documents(&corpus);
        }
        if path.extension().is_some_and(|e| e == "jsonl") {
            return ragtune_ingest::load_jsonl_documents(path);
        }
        ragtune_ingest::load_folder(path)
    }

    /// Loads and indexes `path` (see [`load`](Self::load)) with automatic chunking.
    ///
    /// # Errors
    /// As [`load`](Self::load) and [`index_documents`](Self::index_documents).
    pub async fn index_path(&mut self, path: &Path, progress: &mut dyn FnMut(usize, usize)) -> Result<IndexReport> {
        let started = Instant::now();
        let loaded = Self::load(path)?;
        let chunking = Chunking::Auto(self.config.chunking.chunker());
        let mut report = self.index_documents(&loaded.items, chunking, progress).await?;
        report.issues = loaded.issues.iter().map(LoadIssue::to_string).chain(report.issues).collect();
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Chunks, encodes and stores documents. Re-indexing a document replaces all of its chunks atomically.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for an empty document list or bad chunking settings;
    /// store errors. Documents written before a failing batch stay indexed.
    pub async fn index_documents(
        &mut self,
        docs: &[Document],
        chunking: Chunking,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<IndexReport> {
        let started = Instant::now();
        if docs.is_empty() {
            return Err(Error::invalid_input("there are no documents to index"));
        }
        let ctx = Ctx::new();
        let mut report = IndexReport::default();
        let mut per_doc: Vec<(String, Vec<Chunk>)> = Vec::with_capacity(docs.len());
        for doc in docs {
            match chunk(doc, chunking) {
                Ok(chunks) => per_doc.push((doc.id.clone(), chunks)),
                Err(e) => report.issues.push(format!("document `{}`: {e}", doc.id)),
            }
        }
        let encoder = self.encoder_for(&per_doc).await?;
        let total = per_doc.len();
        let mut done = 0;
        progress(0, total);
        let mut batch = WriteBatch::default();
        for (doc_id, chunks) in per_doc {
            let passages: Vec<&Chunk> = chunks.iter().filter(|c| c.kind == ChunkKind::Passage).collect();
            let texts: Vec<String> = passages.iter().map(|c| c.indexable_text()).collect();
            let text_refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let mut vectors = encoder.encode(&ctx, &text_refs, TextRole::Passage).await?.into_iter();
            report.passages += passages.len();
            report.sections += chunks.len() - passages.len();
            batch.delete_docs.push(doc_id);
            for chunk in chunks {
                let sparse = if chunk.kind == ChunkKind::Passage { vectors.next() } else { None };
                batch.upsert.push(Record { chunk, dense: None, sparse });
            }
            done += 1;
            report.documents += 1;
            if batch.upsert.len() >= BATCH_CHUNKS {
                self.store.write(&ctx, std::mem::take(&mut batch)).await?;
                progress(done, total);
            }
        }
        if !batch.delete_docs.is_empty() {
            self.store.write(&ctx, batch).await?;
        }
        progress(done, total);
        report.store = self.store.stats(&ctx).await?;
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// The encoder for this store, creating the store's sparse space on first use with the average passage length
    /// of the documents about to be indexed (unless the configuration fixes it).
    async fn encoder_for(&mut self, per_doc: &[(String, Vec<Chunk>)]) -> Result<Arc<Bm25Encoder>> {
        if let Some(e) = &self.encoder {
            return Ok(e.clone());
        }
        let s = self.config.bm25;
        let mut cfg = Bm25Config { k1: s.k1, b: s.b, ..Bm25Config::default() };
        cfg.avg_doc_len = match s.avg_doc_len {
            Some(v) => v,
            None => {
                let probe = Bm25Encoder::new(cfg)?;
                let texts: Vec<String> = per_doc
                    .iter()
                    .flat_map(|(_, cs)| cs.iter().filter(|c| c.kind == ChunkKind::Passage))
                    .map(Chunk::indexable_text)
                    .collect();
                // One decimal is plenty and keeps the space id readable.
                probe
                    .average_length(texts.iter().map(String::as_str))
                    .map_or(cfg.avg_doc_len, |a| (a * 10.0).round() / 10.0)
            }
        };
        let encoder = Arc::new(Bm25Encoder::new(cfg)?);
        self.store.ensure_spaces(&Ctx::new(), None, Some(encoder.spec())).await?;
        self.encoder = Some(encoder.clone());
        Ok(encoder)
    }

    /// The BM25 retriever over this engine's store.
    ///
    /// # Errors
    /// [`NotFound`](ragtune_core::ErrorKind::NotFound) when nothing was indexed yet.
    pub fn retriever(&self) -> Result<SparseRetriever> {
        let encoder = self.encoder.clone().ok_or_else(|| {
            Error::not_found(format!(
                "the store at {} has no index yet: run `ragtune index <path> --store {}` first",
                self.store.dir().display(),
                self.store.dir().display()
            ))
        })?;
        let store: Arc<dyn VectorStore> = self.store.clone();
        Ok(SparseRetriever::new("bm25", encoder, store))
    }

    /// Answers one query with ranked candidates and the trace of what was done.
    ///
    /// # Errors
    /// Invalid queries (empty, too long), an empty store, store failures.
    pub async fn search(&self, query: Query) -> Result<SearchResponse> {
        query.validate()?;
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let retriever = self.retriever()?;
        let mut lists = retriever.retrieve(&ctx, std::slice::from_ref(&query)).await?;
        let hits = lists.pop().unwrap_or_default();
        Ok(SearchResponse { hits, trace: sink.take() })
    }

    /// The store directory.
    #[must_use]
    pub fn store_path(&self) -> PathBuf {
        self.store.dir().to_path_buf()
    }
}

/// Cuts one document according to the chunking mode.
fn chunk(doc: &Document, chunking: Chunking) -> Result<Vec<Chunk>> {
    match chunking {
        Chunking::WholeDocuments => Ok(vec![ragtune_ingest::whole_document_chunk(doc)]),
        Chunking::Sections(cfg) => ragtune_ingest::chunk_document(doc, &cfg),
        Chunking::Auto(cfg) => {
            let markdown = doc.metadata.get("format").and_then(|f| f.as_str()) == Some(ragtune_ingest::FORMAT_MARKDOWN);
            if !markdown && doc.text.split_whitespace().count() <= cfg.chunk_size {
                Ok(vec![ragtune_ingest::whole_document_chunk(doc)])
            } else {
                ragtune_ingest::chunk_document(doc, &cfg)
            }
        }
    }
}
