//! The command layer the surfaces share: what one request to ask, query, search, index or delete means, with its
//! per-request options, independent of how it arrived (a command line, an HTTP body).
//!
//! The `ragtune` CLI and the `ragtune serve` HTTP API both go through these functions, so a question asked either
//! way runs the same pipeline with the same options.
//!
//! ```
//! use ragtune::commands::AskOptions;
//! let opts: AskOptions = serde_json::from_str(r#"{"useCrag": false, "top_k": 5}"#).unwrap();
//! assert_eq!((opts.use_crag, opts.top_k), (Some(false), Some(5)));
//! ```

use ragtune_core::{Ctx, Document, Error, Query, Result, StoreStats, WriteBatch};
use serde::{Deserialize, Serialize};

use crate::config::Strategy;
use crate::engine::{Engine, IndexReport, SearchResponse};
use crate::pipeline::{AskResponse, TokenSink};

pub use crate::config::MAX_TOP_K;
use crate::config::check_top_k;

/// Per-request options of `ask` and `query`; unset fields keep the configuration's values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AskOptions {
    /// Run Corrective RAG (evaluate the retrieval, correct it); the seed's `useCrag`.
    #[serde(alias = "useCrag")]
    pub use_crag: Option<bool>,
    /// Let the correction search the web (the `[web]` providers); the seed's `useWebSearch`. A request can turn
    /// web search off, and on only where the configuration has it on: the operator's `[web] enabled = false`
    /// wins.
    #[serde(alias = "useWebSearch")]
    pub use_web: Option<bool>,
    /// Candidates retrieved on the first attempt.
    #[serde(alias = "topK")]
    pub top_k: Option<usize>,
    /// This request's deadline in milliseconds: stages that would start after it are skipped.
    #[serde(alias = "deadlineMs")]
    pub deadline_ms: Option<u64>,
    /// Keep the trace of every step in the response (it is dropped otherwise).
    pub trace: bool,
    /// Where the answer goes as it is generated ([`TokenSink`]: the LLM's answer piece by piece, restarts, an
    /// extractive answer whole); not part of a request body, a surface sets it (`ragtune ask`, the server's
    /// Server-Sent Events).
    #[serde(skip)]
    #[schemars(skip)]
    pub tokens: Option<TokenSink>,
}

impl AskOptions {
    /// The engine this request runs on: `engine` with the options applied to a copy of its configuration (the
    /// store, models, LLM and caches are shared).
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for `top_k` of 0 or above [`MAX_TOP_K`], a zero
    /// deadline, or `use_web: true` where the configuration has no web provider or has web search off.
    pub fn apply(&self, engine: &Engine) -> Result<Engine> {
        let mut cfg = engine.config().clone();
        if let Some(k) = self.top_k {
            check_top_k("top_k", k)?;
            cfg.pipeline.top_k = k;
        }
        if let Some(crag) = self.use_crag {
            cfg.crag.enabled = crag;
        }
        if let Some(ms) = self.deadline_ms {
            if ms == 0 {
                return Err(Error::invalid_input("deadline_ms must be at least 1"));
            }
            cfg.pipeline.timeout_ms = if cfg.pipeline.timeout_ms == 0 { ms } else { ms.min(cfg.pipeline.timeout_ms) };
        }
        match self.use_web {
            Some(true) if cfg.web.settings.providers.is_empty() => {
                return Err(Error::invalid_input(
                    "use_web needs a web search provider: configure one in the [web] section (docs/web.md)",
                ));
            }
            // The operator turned web search off: a request cannot turn it on (nor build a provider stack of its
            // own past the process's rate limits and circuit breakers).
            Some(true) if !cfg.web.enabled => {
                return Err(Error::invalid_input(
                    "use_web: web search is turned off on this server ([web] enabled = false); the operator decides \
                     whether questions may leave the machine",
                ));
            }
            Some(web) => cfg.web.enabled = web,
            None => {}
        }
        if cfg == *engine.config() {
            return Ok(engine.clone());
        }
        engine.for_request(cfg)
    }
}

/// Asks `question` (`generate`: answer it; else return the context only) with per-request options.
///
/// # Errors
/// An empty question, invalid options, store failures (the pipeline degrades on everything else).
pub async fn ask(engine: &Engine, question: &str, options: &AskOptions, generate: bool) -> Result<AskResponse> {
    let question = question.trim();
    if question.is_empty() {
        return Err(Error::invalid_input("the question is empty"));
    }
    let engine = options.apply(engine)?;
    let mut response = match (&options.tokens, generate) {
        (Some(sink), true) => engine.ask_streaming(question, sink.clone()).await?,
        (None, true) => engine.ask(question).await?,
        (_, false) => engine.query(question).await?,
    };
    if !options.trace {
        response.trace.clear();
    }
    Ok(response)
}

/// A search request: the query, how many results, and the strategy (the configuration's when unset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SearchOptions {
    /// Results to return.
    #[serde(alias = "topK")]
    pub top_k: Option<usize>,
    /// `auto`, `bm25`, `dense` or `hybrid`.
    pub strategy: Option<Strategy>,
    /// Keep the trace in the response.
    pub trace: bool,
}

/// Searches the index.
///
/// # Errors
/// An empty query, a `top_k` out of range, a strategy the index cannot serve, store failures.
pub async fn search(engine: &Engine, query: &str, options: &SearchOptions) -> Result<SearchResponse> {
    let query = query.trim();
    if query.is_empty() {
        return Err(Error::invalid_input("the query is empty"));
    }
    let mut q = Query::new(query);
    if let Some(k) = options.top_k {
        check_top_k("top_k", k)?;
        q = q.with_top_k(k);
    }
    let mut response = match options.strategy {
        Some(strategy) => engine.search_with(q, strategy).await?,
        None => engine.search(q).await?,
    };
    if !options.trace {
        response.trace.clear();
    }
    Ok(response)
}

/// Indexes a batch of documents whole (replacing documents with the same ids) with the configured chunking: one
/// atomic write, so after an error or a crash either every document of the batch is indexed or none is
/// ([`Engine::index_batch`]).
///
/// # Errors
/// An empty batch, a document without an id or text, duplicate ids in the batch, store and model failures.
pub async fn index(engine: &mut Engine, documents: &[Document]) -> Result<IndexReport> {
    check_batch(documents)?;
    engine.index_batch(documents).await
}

/// [`index`] beside readers, for any batch after a store's first ([`Engine::index_batch_shared`]).
///
/// # Errors
/// As [`index`]; `Unavailable` when the store has no batch yet.
pub async fn index_shared(engine: &Engine, documents: &[Document]) -> Result<IndexReport> {
    check_batch(documents)?;
    engine.index_batch_shared(documents).await
}

fn check_batch(documents: &[Document]) -> Result<()> {
    if documents.is_empty() {
        return Err(Error::invalid_input("the batch has no documents"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, d) in documents.iter().enumerate() {
        if d.id.trim().is_empty() {
            return Err(Error::invalid_input(format!("document {i} has no id")));
        }
        if d.text.trim().is_empty() {
            return Err(Error::invalid_input(format!("document `{}` has no text", d.id)));
        }
        if !seen.insert(d.id.as_str()) {
            return Err(Error::invalid_input(format!("document `{}` appears twice in the batch", d.id)));
        }
    }
    Ok(())
}

/// Deletes a document (all its chunks); whether it existed.
///
/// # Errors
/// An empty id, store failures.
pub async fn delete(engine: &Engine, doc_id: &str) -> Result<bool> {
    if doc_id.trim().is_empty() {
        return Err(Error::invalid_input("the document id is empty"));
    }
    let ctx = Ctx::new();
    let report =
        engine.store().write(&ctx, WriteBatch { delete_docs: vec![doc_id.to_owned()], upsert: Vec::new() }).await?;
    Ok(report.deleted > 0)
}

/// The index's counts and spaces.
///
/// # Errors
/// Store failures.
pub async fn stats(engine: &Engine) -> Result<StoreStats> {
    engine.store().stats(&Ctx::new()).await
}

/// Opens every collection of `main`'s configuration (`[collections.NAME]`), each the main configuration with its
/// store replaced, sharing `main`'s embedding model and LLM (loaded once per process), in name order.
///
/// Each collection builds its own caches and, when `[web]` is on, uses `main`'s web search provider (so the
/// process keeps one set of rate limits and circuit breakers).
///
/// # Errors
/// As [`Engine::open`] for any collection's store, naming the collection.
pub async fn open_collections(main: &Engine) -> Result<Vec<(String, Engine)>> {
    let mut out = Vec::new();
    for name in main.config().collections.keys() {
        let cfg = main.config().collection(name)?;
        let mut engine = Engine::open_with_embedder(cfg, main.embedder().cloned())
            .await
            .map_err(|e| e.context(format!("collection `{name}`")))?
            .with_llm(main.llm().cloned());
        if main.web().is_some() {
            engine = engine.with_web(main.web().cloned());
        }
        out.push((name.clone(), engine));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_take_the_seed_names_and_refuse_unknown_fields() {
        let o: AskOptions =
            serde_json::from_str(r#"{"useCrag": true, "useWebSearch": false, "deadlineMs": 50}"#).unwrap();
        assert_eq!((o.use_crag, o.use_web, o.deadline_ms), (Some(true), Some(false), Some(50)));
        let e = serde_json::from_str::<AskOptions>(r#"{"use_crg": true}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let s: SearchOptions = serde_json::from_str(r#"{"strategy": "bm25", "top_k": 3}"#).unwrap();
        assert_eq!((s.strategy, s.top_k), (Some(Strategy::Bm25), Some(3)));
    }
}
