//! Where the engine gets its models: the files provisioned by `cargo xtask models` under `$RAGTUNE_HOME`, or the
//! paths the configuration names.

use std::sync::Arc;

use async_trait::async_trait;
use ragtune_core::{Ctx, Embedder, Error, Llm, LlmRequest, LlmResponse, Result};
use ragtune_embed::{FastEmbedder, FastEmbedderConfig};
use ragtune_provision::ModelLayout;

use crate::config::{EmbeddingSettings, LlmSettings};

/// The identity of the quantised variant in an index (the default model is `…@int8`: int8 weights, fp32 compute).
pub const QUANTIZED_MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2@int8-dynamic";

/// Loads the dense embedder the settings describe (by default the provisioned all-MiniLM-L6-v2).
///
/// # Errors
/// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the model or ONNX Runtime is not provisioned (the
/// message says to run `cargo xtask models`); model loading failures.
pub fn load_embedder(settings: &EmbeddingSettings) -> Result<Arc<dyn Embedder>> {
    let layout = ModelLayout::new(crate::ragtune_home());
    let provisioned = if settings.quantized { layout.minilm_quantized_dir() } else { layout.minilm_dir() };
    let model_dir = settings.model_dir.clone().unwrap_or(provisioned);
    if settings.quantized && !model_dir.join("model.onnx").is_file() {
        return Err(Error::unavailable(format!(
            "embedding.quantized is on (the default) but {} has no model.onnx: run `cargo xtask models` to build it, \
             or set embedding.quantized = false to use the model as shipped",
            model_dir.display()
        )));
    }
    let mut cfg = FastEmbedderConfig::new(
        model_dir,
        settings.ort_library.clone().unwrap_or_else(|| layout.onnxruntime_library()),
    );
    if settings.quantized {
        cfg.model_id = QUANTIZED_MODEL_ID.to_owned();
    }
    cfg.batch_size = settings.batch_size;
    cfg.intra_threads = settings.threads;
    cfg.sessions = settings.sessions;
    cfg.lone_threads = settings.lone_threads;
    cfg.max_length = settings.max_length;
    let embedder: Arc<dyn Embedder> = Arc::new(FastEmbedder::new(cfg)?);
    Ok(match settings.query_cache {
        0 => embedder,
        capacity => Arc::new(QueryCache::new(embedder, capacity)),
    })
}

/// Query embeddings cached by text (bounded; the least recently used go first): a query embedded again — by the
/// hybrid retriever and the judge, or for a repeated question — costs no inference. Passages go straight through.
#[derive(Debug)]
pub struct QueryCache {
    inner: Arc<dyn Embedder>,
    cache: moka::sync::Cache<String, Arc<Vec<f32>>>,
}

impl QueryCache {
    /// `inner` with a cache of at most `capacity` query vectors.
    #[must_use]
    pub fn new(inner: Arc<dyn Embedder>, capacity: u64) -> Self {
        Self { inner, cache: moka::sync::Cache::new(capacity) }
    }
}

#[async_trait]
impl Embedder for QueryCache {
    fn spec(&self) -> &ragtune_core::EmbeddingSpec {
        self.inner.spec()
    }

    fn cost_model(&self) -> ragtune_core::CostModel {
        self.inner.cost_model()
    }

    async fn embed(&self, ctx: &Ctx, texts: &[&str], role: ragtune_core::TextRole) -> Result<Vec<Vec<f32>>> {
        if role != ragtune_core::TextRole::Query {
            return self.inner.embed(ctx, texts, role).await;
        }
        let mut out: Vec<Option<Vec<f32>>> =
            texts.iter().map(|t| self.cache.get(*t).map(|v| v.as_ref().clone())).collect();
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| out[i].is_none()).collect();
        let hits = texts.len() - missing.len();
        if hits > 0 {
            ctx.trace(ragtune_core::TraceEvent::new("embed", "query_cache_hit").detail("texts", hits));
        }
        if !missing.is_empty() {
            let batch: Vec<&str> = missing.iter().map(|&i| texts[i]).collect();
            let vectors = self.inner.embed(ctx, &batch, role).await?;
            if vectors.len() != batch.len() {
                return Err(Error::corrupt(format!(
                    "the embedder returned {} vectors for {} texts",
                    vectors.len(),
                    batch.len()
                )));
            }
            for (&i, v) in missing.iter().zip(vectors) {
                self.cache.insert(texts[i].to_owned(), Arc::new(v.clone()));
                out[i] = Some(v);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }
}

/// The LLM the settings describe, wrapped in the disk cache when `llm.cache` is on; `None` when no URL is set.
///
/// # Errors
/// An invalid URL; a cache directory that cannot be created.
pub fn load_llm(settings: &LlmSettings) -> Result<Option<Arc<dyn Llm>>> {
    if settings.url.trim().is_empty() {
        return Ok(None);
    }
    let secs =
        if settings.timeout_secs.is_finite() && settings.timeout_secs > 0.0 { settings.timeout_secs } else { 60.0 };
    let client = ragtune_llm::OpenAiClient::new(ragtune_llm::LlmConfig {
        base_url: settings.url.clone(),
        model: settings.model.clone(),
        api_key: settings.api_key.clone(),
        endpoint: settings.endpoint,
        timeout: std::time::Duration::from_secs_f64(secs),
        max_retries: settings.max_retries,
        ..ragtune_llm::LlmConfig::default()
    })?;
    if settings.cache {
        let dir = crate::ragtune_home().join("llm-cache");
        return Ok(Some(Arc::new(ragtune_llm::CachedLlm::new(Arc::new(client), dir)?)));
    }
    Ok(Some(Arc::new(client)))
}

/// The URL of the local LLM server started by `cargo xtask llm start`, read from
/// `$RAGTUNE_HOME/llm/server.json`, when that file exists and names one.
#[must_use]
pub fn local_llm_url() -> Option<String> {
    let path = crate::ragtune_home().join("llm").join("server.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    v["url"].as_str().filter(|u| !u.is_empty()).map(str::to_owned)
}

/// Stands in for the LLM when none is configured: every call is an `Unavailable` error saying how to configure
/// one, so LLM-driven transformations degrade to the plain query and their traces say why.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLlm;

#[async_trait]
impl Llm for NoLlm {
    fn name(&self) -> &str {
        "none"
    }

    async fn generate(&self, _ctx: &Ctx, _requests: &[LlmRequest]) -> Result<Vec<LlmResponse>> {
        Err(Error::unavailable(
            "no LLM is configured: set llm.url or $RAGTUNE_LLM_URL (`cargo xtask llm start` runs a local one)",
        ))
    }
}
