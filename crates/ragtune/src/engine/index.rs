//! Indexing: loading files, chunking, encoding and writing batches to the store, the approximate dense index.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ragtune_core::{
    Chunk, ChunkKind, Ctx, Document, Embedder, Error, Record, Result, SpanVector, SparseEncoder, TextRole,
    TokenCounter, TraceSink, VectorStore, WriteBatch,
};
use ragtune_embed::{Bm25Config, Bm25Encoder};
use ragtune_ingest::{LoadIssue, Loaded};

use super::{BATCH_CHUNKS, Chunking, Engine, IndexReport};

impl Engine {
    /// Loads documents from `path`: a BEIR directory (with `corpus.jsonl`), a `.jsonl` file, a folder of Markdown
    /// and text files, or one such file. In a folder, files and folders that an `exclude` glob matches are skipped
    /// ([`ragtune_ingest::load_folder_excluding`]).
    ///
    /// # Errors
    /// A missing path or a source with no documents; [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for
    /// an `exclude` pattern that is not a glob, or any `exclude` pattern with a JSONL file or a BEIR directory (whose
    /// documents are lines, not files); per-line and per-file problems are returned as issues.
    pub fn load(path: &Path, exclude: &[String]) -> Result<Loaded<Document>> {
        let corpus = path.join("corpus.jsonl");
        let jsonl = if path.is_dir() && corpus.is_file() {
            Some(corpus)
        } else {
            path.extension().is_some_and(|e| e == "jsonl").then(|| path.to_path_buf())
        };
        match jsonl {
            Some(_) if !exclude.is_empty() => Err(Error::invalid_input(format!(
                "{}: exclude patterns apply to the files of a folder, not to the lines of a JSONL corpus",
                path.display()
            ))),
            Some(file) => ragtune_ingest::load_jsonl_documents(&file),
            None => ragtune_ingest::load_folder_excluding(path, exclude),
        }
    }

    /// Loads and indexes `path` (see [`load`](Self::load)) with [`Chunking::Window`]: Markdown is cut into passages
    /// that fit the embedding model's window, other documents as [`Chunking::Auto`] does.
    ///
    /// # Errors
    /// As [`load`](Self::load) and [`index_documents`](Self::index_documents).
    pub async fn index_path(
        &mut self,
        path: &Path,
        exclude: &[String],
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<IndexReport> {
        let started = Instant::now();
        let loaded = Self::load(path, exclude)?;
        let chunking = Chunking::Window(self.config.chunking);
        let mut report = self.index_documents(&loaded.items, chunking, progress).await?;
        report.issues = loaded.issues.iter().map(LoadIssue::to_string).chain(report.issues).collect();
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Chunks, encodes (BM25 and, with an embedder, dense) and stores documents. Re-indexing a document replaces all
    /// of its chunks atomically. Afterwards the store's approximate dense index is brought up to date.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for an empty document list or bad chunking settings;
    /// embedding and store errors. Documents written before a failing batch stay indexed.
    pub async fn index_documents(
        &mut self,
        docs: &[Document],
        chunking: Chunking,
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<IndexReport> {
        let started = Instant::now();
        if docs.is_empty() {
            return Err(Error::invalid_input("there are no documents to index"));
        }
        let ctx = Ctx::new();
        let mut report = IndexReport::default();
        let mut per_doc: Vec<(String, Vec<Chunk>)> = Vec::with_capacity(docs.len());
        for (doc, chunks) in docs.iter().zip(self.chunk_all(docs, chunking).await?) {
            match chunks {
                Ok(chunks) => per_doc.push((doc.id.clone(), chunks)),
                Err(e) => report.issues.push(format!("document `{}`: {e}", doc.id)),
            }
        }
        let encoder = self.encoder_for(&per_doc).await?;
        if let Some(e) = &self.embedder {
            self.store.store.ensure_spaces(&ctx, Some(e.spec()), None).await?;
        }
        let total = per_doc.len();
        let mut done = 0;
        progress(0, total);
        let mut pending: Vec<(String, Vec<Chunk>)> = Vec::new();
        let mut pending_chunks = 0;
        for (doc_id, chunks) in per_doc {
            pending_chunks += chunks.len();
            pending.push((doc_id, chunks));
            if pending_chunks >= BATCH_CHUNKS {
                done += pending.len();
                self.write_batch(&ctx, &encoder, std::mem::take(&mut pending), &mut report).await?;
                pending_chunks = 0;
                progress(done, total);
            }
        }
        if !pending.is_empty() {
            done += pending.len();
            self.write_batch(&ctx, &encoder, pending, &mut report).await?;
        }
        progress(done, total);
        if self.embedder.is_some()
            && let Some(embedded) = &self.store.embedded
        {
            embedded.optimize().await?;
        }
        report.store = self.store.store.stats(&ctx).await?;
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Indexes one batch of documents whole, with the configured chunking: the batch is one atomic store write, so
    /// after an error or a crash either every document of it is indexed (replacing documents with the same ids) or
    /// none is. A document that cannot be chunked refuses the whole batch. Creates the store's sparse space on
    /// the first batch (which is why it takes `&mut self`; later batches can use
    /// [`index_batch_shared`](Self::index_batch_shared) beside readers). The approximate dense index is not
    /// rebuilt: see [`refresh_dense_index`](Self::refresh_dense_index).
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for an empty batch or a document that cannot be
    /// chunked; embedding and store errors (nothing of the batch is written then).
    pub async fn index_batch(&mut self, docs: &[Document]) -> Result<IndexReport> {
        let per_doc = self.chunk_whole(docs)?;
        let encoder = self.encoder_for(&per_doc).await?;
        self.write_whole(&encoder, per_doc).await
    }

    /// [`index_batch`](Self::index_batch) for a store that already has its sparse space (any batch after the
    /// first), through a shared reference: the embedding runs while readers go on.
    ///
    /// # Errors
    /// As [`index_batch`](Self::index_batch), and [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when
    /// nothing was indexed yet (the first batch must go through `index_batch`).
    pub async fn index_batch_shared(&self, docs: &[Document]) -> Result<IndexReport> {
        let per_doc = self.chunk_whole(docs)?;
        let encoder = self.encoder.clone().ok_or_else(|| {
            Error::unavailable("the store has no sparse space yet: index the first batch with `index_batch`")
        })?;
        self.write_whole(&encoder, per_doc).await
    }

    /// Brings the embedded store's approximate dense index up to date when at least `min_dirty_fraction` of its
    /// dense vectors changed since it was built (a full rebuild: readers go on with the old index meanwhile,
    /// writers wait). Whether it rebuilt.
    ///
    /// # Errors
    /// IO failures (the previous index stays in use).
    pub async fn refresh_dense_index(&self, min_dirty_fraction: f64) -> Result<bool> {
        let Some(embedded) = &self.store.embedded else { return Ok(false) };
        if self.embedder.is_none() {
            return Ok(false);
        }
        let (vectors, dirty) = embedded.dense_index_state();
        let stale = match dirty {
            // No index yet: build one once the store is large enough (optimize decides).
            None => true,
            Some(d) => d > 0 && d as f64 >= min_dirty_fraction * vectors as f64,
        };
        if !stale {
            return Ok(false);
        }
        Ok(embedded.optimize().await?.rebuilt)
    }

    /// Each document's chunks (or why it cannot be chunked), in order. [`Chunking::Window`] counts tokens, which
    /// is CPU work over the whole text, so it runs on the blocking pool; the other chunkings are cheap and run here.
    async fn chunk_all(&self, docs: &[Document], chunking: Chunking) -> Result<Vec<Result<Vec<Chunk>>>> {
        if !matches!(chunking, Chunking::Window(_)) {
            return Ok(docs.iter().map(|doc| chunk(doc, chunking, None)).collect());
        }
        let tokens: Arc<dyn TokenCounter> = match &self.tokens {
            Some(t) => t.clone(),
            None => Arc::new(ragtune_ingest::EstimatedTokens::new(self.config.embedding.max_length)),
        };
        let docs = docs.to_vec();
        tokio::task::spawn_blocking(move || {
            docs.iter().map(|doc| chunk(doc, chunking, Some(tokens.as_ref()))).collect()
        })
        .await
        .map_err(|e| Error::permanent("the chunking task failed").with_source(e))
    }

    fn chunk_whole(&self, docs: &[Document]) -> Result<Vec<(String, Vec<Chunk>)>> {
        if docs.is_empty() {
            return Err(Error::invalid_input("there are no documents to index"));
        }
        let chunking = Chunking::Auto(self.config.chunking);
        docs.iter()
            .map(|doc| {
                chunk(doc, chunking, None)
                    .map(|chunks| (doc.id.clone(), chunks))
                    .map_err(|e| e.context(format!("document `{}`; nothing of the batch was written", doc.id)))
            })
            .collect()
    }

    async fn write_whole(&self, encoder: &Bm25Encoder, per_doc: Vec<(String, Vec<Chunk>)>) -> Result<IndexReport> {
        let started = Instant::now();
        let ctx = Ctx::new();
        if let Some(e) = &self.embedder {
            self.store.store.ensure_spaces(&ctx, Some(e.spec()), None).await?;
        }
        let mut report = IndexReport::default();
        self.write_batch(&ctx, encoder, per_doc, &mut report).await?;
        report.store = self.store.store.stats(&ctx).await?;
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Encodes the passages of some documents and writes the documents in one atomic batch.
    async fn write_batch(
        &self,
        ctx: &Ctx,
        encoder: &Bm25Encoder,
        docs: Vec<(String, Vec<Chunk>)>,
        report: &mut IndexReport,
    ) -> Result<()> {
        let texts: Vec<String> = docs
            .iter()
            .flat_map(|(_, cs)| cs.iter().filter(|c| c.kind == ChunkKind::Passage))
            .map(Chunk::indexable_text)
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut sparse = encoder.encode(ctx, &refs, TextRole::Passage).await?.into_iter();
        // The passages' own embedding call is traced into a sink of its own, to count what the model truncated.
        let sink = TraceSink::new();
        let counting = ctx.clone().with_trace(sink.clone());
        let (mut dense, mut strips) = match &self.embedder {
            Some(e) if self.config.embedding.strip_vectors => {
                // Each passage's strips (the refinement's own decomposition of the chunk's text) get a vector
                // pooled from the passage's forward pass, so answering embeds no strip of a stored passage.
                let (strips, spans) = strip_plan(&docs, &texts, self.config.refine.max_strip_words);
                let out = e.embed_spans(&counting, &refs, &spans).await?;
                let mut pooled = out.spans;
                if self.config.embedding.strip_vectors_past_window {
                    tail_windows(ctx, e.as_ref(), &refs, &spans, &mut pooled).await?;
                }
                let strips: Vec<Vec<SpanVector>> = strips
                    .iter()
                    .zip(pooled)
                    .map(|(strips, vectors)| {
                        strips
                            .iter()
                            .zip(vectors)
                            .filter_map(|(&(s, e), v)| {
                                Some(SpanVector {
                                    start: u32::try_from(s).ok()?,
                                    end: u32::try_from(e).ok()?,
                                    vector: v?,
                                })
                            })
                            .collect()
                    })
                    .collect();
                (Some(out.texts.into_iter()), Some(strips.into_iter()))
            }
            Some(e) => (Some(e.embed(&counting, &refs, TextRole::Passage).await?.into_iter()), None),
            None => (None, None),
        };
        // The embedder reports the passages it had to cut in an `embed`/`truncated` trace event.
        report.truncated += sink
            .take()
            .iter()
            .filter(|e| e.stage == "embed" && e.action == "truncated")
            .filter_map(|e| e.detail.get("texts").and_then(serde_json::Value::as_u64))
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .sum::<usize>();
        let mut batch = WriteBatch::default();
        for (doc_id, chunks) in docs {
            report.documents += 1;
            batch.delete_docs.push(doc_id);
            for chunk in chunks {
                let passage = chunk.kind == ChunkKind::Passage;
                if passage {
                    report.passages += 1;
                } else {
                    report.sections += 1;
                }
                let (s, d, spans) = if passage {
                    (sparse.next(), dense.as_mut().and_then(Iterator::next), strips.as_mut().and_then(Iterator::next))
                } else {
                    (None, None, None)
                };
                batch.upsert.push(Record { chunk, dense: d, sparse: s, spans: spans.unwrap_or_default() });
            }
        }
        self.store.store.write(ctx, batch).await?;
        Ok(())
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
        self.store.store.ensure_spaces(&Ctx::new(), None, Some(encoder.spec())).await?;
        self.encoder = Some(encoder.clone());
        self.built = Arc::default();
        Ok(encoder)
    }
}

/// Cuts one document according to the chunking mode.
/// One document's chunks; `tokens` counts for [`Chunking::Window`] (an estimate over `embedding.max_length` when the
/// caller has no tokenizer).
fn chunk(doc: &Document, chunking: Chunking, tokens: Option<&dyn TokenCounter>) -> Result<Vec<Chunk>> {
    let markdown = doc.metadata.get("format").and_then(|f| f.as_str()) == Some(ragtune_ingest::FORMAT_MARKDOWN);
    match chunking {
        Chunking::WholeDocuments => Ok(vec![ragtune_ingest::whole_document_chunk(doc)]),
        Chunking::Sections(cfg) => ragtune_ingest::chunk_document(doc, &cfg),
        Chunking::Window(cfg) if markdown => match tokens {
            Some(tokens) => ragtune_ingest::chunk_markdown(doc, &cfg, tokens),
            // `chunk_all` always gives one (the model's, else the estimate).
            None => Err(Error::invalid_input("window chunking was given no token counter")),
        },
        Chunking::Auto(cfg) | Chunking::Window(cfg) => {
            if !markdown && doc.text.split_whitespace().count() <= cfg.chunk_size {
                Ok(vec![ragtune_ingest::whole_document_chunk(doc)])
            } else {
                ragtune_ingest::chunk_document(doc, &cfg)
            }
        }
    }
}

/// Byte ranges of one text.
type Spans = Vec<(usize, usize)>;

/// The strips of every passage of `docs` as byte ranges of the chunk's text, and the same ranges in the passage's
/// indexed text (`texts`, in the same order), which the chunk's text ends (after its title and headers).
fn strip_plan(docs: &[(String, Vec<Chunk>)], texts: &[String], max_words: usize) -> (Vec<Spans>, Vec<Spans>) {
    let passages = docs.iter().flat_map(|(_, cs)| cs.iter().filter(|c| c.kind == ChunkKind::Passage));
    passages
        .zip(texts)
        .map(|(c, indexed)| {
            let strips = ragtune_evaluators::refine::strip_spans(&c.text, max_words);
            let offset = indexed.len() - c.text.len();
            let spans = strips.iter().map(|&(s, e)| (s + offset, e + offset)).collect();
            (strips, spans)
        })
        .unzip()
}

/// Pools the strips that the first pass could not (they reach past the model's window): runs the model on the rest of
/// each such text, from its first strip without a vector, and repeats while windows still give new vectors (a strip
/// longer than the window never gets one, and stops the loop).
async fn tail_windows(
    ctx: &Ctx,
    embedder: &dyn Embedder,
    texts: &[&str],
    spans: &[Spans],
    pooled: &mut [Vec<Option<Vec<f32>>>],
) -> Result<()> {
    // Texts whose first missing strip a window did not fill (it is longer than the window): not run again.
    let mut stuck = vec![false; pooled.len()];
    loop {
        let mut owners: Vec<(usize, usize)> = Vec::new();
        let mut tails: Vec<&str> = Vec::new();
        let mut tail_spans: Vec<Spans> = Vec::new();
        for (i, vectors) in pooled.iter().enumerate() {
            if stuck[i] {
                continue;
            }
            let Some(first) = vectors.iter().position(Option::is_none) else { continue };
            let start = spans[i][first].0;
            let Some(tail) = texts[i].get(start..) else { continue };
            owners.push((i, first));
            tails.push(tail);
            tail_spans.push(spans[i][first..].iter().map(|&(s, e)| (s - start, e - start)).collect());
        }
        if tails.is_empty() {
            return Ok(());
        }
        let more = embedder.embed_spans(ctx, &tails, &tail_spans).await?;
        for ((i, first), vectors) in owners.into_iter().zip(more.spans) {
            for (k, v) in vectors.into_iter().enumerate() {
                if let (Some(v), Some(slot)) = (v, pooled[i].get_mut(first + k))
                    && slot.is_none()
                {
                    *slot = Some(v);
                }
            }
            stuck[i] = pooled[i].get(first).is_none_or(Option::is_none);
        }
    }
}
