//! Where the engine gets its models: the files provisioned by `cargo xtask models` under `$RAGTUNE_HOME`, or the
//! paths the configuration names.

use std::sync::Arc;

use async_trait::async_trait;
use ragtune_core::{Ctx, Embedder, Error, Llm, LlmRequest, LlmResponse, Reranker, Result, TokenCounter};
use ragtune_embed::{
    CrossEncoderConfig, CrossEncoderReranker, FastEmbedder, FastEmbedderConfig, ModelSource, ModelTokenCounter,
};
pub use ragtune_embed::{QueryCache, RequestVectors};
use ragtune_provision::ModelLayout;

use crate::config::{EmbeddingSettings, LlmSettings, RerankSettings};

/// The identity of the quantised variant in an index (the default model is `…@int8`: int8 weights, fp32 compute).
pub const QUANTIZED_MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2@int8-dynamic";

/// Loads the dense embedder the settings describe (by default the provisioned all-MiniLM-L6-v2).
///
/// # Errors
/// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the model or ONNX Runtime is not provisioned (the
/// message says to run `cargo xtask models`); model loading failures.
pub fn load_embedder(settings: &EmbeddingSettings) -> Result<Arc<dyn Embedder>> {
    load_embedder_and_tokens(settings).map(|(embedder, _)| embedder)
}

/// The directory of the embedding model the settings describe.
fn embedding_model_dir(settings: &EmbeddingSettings) -> std::path::PathBuf {
    let layout = ModelLayout::new(crate::ragtune_home());
    let provisioned = if settings.quantized { layout.minilm_quantized_dir() } else { layout.minilm_dir() };
    settings.model_dir.clone().unwrap_or(provisioned)
}

/// The tokenizer of the embedding model the settings describe, alone (no ONNX Runtime), as a token counter whose
/// window is `max_length` (or the model's own limit when smaller): what the engine chunks Markdown with when it
/// loads the model. For tests and tools that cut text as indexing would.
///
/// # Errors
/// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the model's tokenizer files are not there.
pub fn load_token_counter(settings: &EmbeddingSettings) -> Result<Arc<dyn TokenCounter>> {
    let dir = embedding_model_dir(settings);
    // The embedder's model id, as `load_embedder_and_tokens` names it.
    let name = if settings.quantized {
        QUANTIZED_MODEL_ID.to_owned()
    } else {
        FastEmbedderConfig::new(dir.clone(), std::path::PathBuf::new()).model_id
    };
    Ok(Arc::new(ModelTokenCounter::from_dir(&dir, settings.max_length, name)?))
}

/// [`load_embedder`], and the loaded model's tokenizer as a token counter (the same tokenizer object the embedder
/// encodes with).
pub(crate) fn load_embedder_and_tokens(
    settings: &EmbeddingSettings,
) -> Result<(Arc<dyn Embedder>, Arc<dyn TokenCounter>)> {
    let layout = ModelLayout::new(crate::ragtune_home());
    let model_dir = embedding_model_dir(settings);
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
    cfg.spinning = settings.spinning;
    cfg.max_length = settings.max_length;
    let model = FastEmbedder::new(cfg)?;
    let tokens: Arc<dyn TokenCounter> = Arc::new(model.token_counter()?);
    let embedder: Arc<dyn Embedder> = Arc::new(model);
    let embedder = match settings.query_cache {
        0 => embedder,
        capacity => Arc::new(QueryCache::new(embedder, capacity)),
    };
    Ok((embedder, tokens))
}

/// Loads the cross-encoder `[rerank] model` names, with `[rerank]`'s `max_length` and `batch_size`, on the ONNX
/// Runtime of `[embedding]` (`ort_library`, else the provisioned one), with [`cross_encoder_threads`] intra-op
/// threads.
///
/// Its name in traces is `cross-encoder:<the directory's name>` (or `cross-encoder:<hub name>`).
///
/// # Errors
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when no model is named; otherwise as
/// [`CrossEncoderReranker::new`]: [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when ONNX Runtime or a
/// model file is missing, or the model does not load.
pub fn load_cross_encoder(rerank: &RerankSettings, embedding: &EmbeddingSettings) -> Result<Arc<dyn Reranker>> {
    let model = cross_encoder_model(rerank)?;
    let ort_library =
        embedding.ort_library.clone().unwrap_or_else(|| ModelLayout::new(crate::ragtune_home()).onnxruntime_library());
    let mut cfg = CrossEncoderConfig::new(model, ort_library, cross_encoder_name(model));
    cfg.model = cross_encoder_source(model);
    cfg.max_length = rerank.max_length;
    cfg.batch_size = rerank.batch_size;
    cfg.intra_threads = cross_encoder_threads(rerank);
    Ok(Arc::new(CrossEncoderReranker::new(cfg)?))
}

/// The cross-encoder's intra-op threads: `[rerank] threads`, or one per core for 0.
#[must_use]
pub fn cross_encoder_threads(rerank: &RerankSettings) -> usize {
    match rerank.threads {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        n => n,
    }
}

/// What identifies the weights of the cross-encoder `[rerank] model` names, for caches and reports: `sha256:` and
/// the hash of a local directory's `model.onnx` (another file under the same name is another model), or `hub:` and
/// the name of a hub model (fastembed pins its files).
///
/// # Errors
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when no model is named; a `model.onnx` that cannot be
/// read.
pub fn cross_encoder_fingerprint(rerank: &RerankSettings) -> Result<String> {
    let model = cross_encoder_model(rerank)?;
    match cross_encoder_source(model) {
        ModelSource::LocalDir(dir) => {
            let path = dir.join("model.onnx");
            let sha = ragtune_provision::models::sha256_file(&path)
                .map_err(|e| Error::unavailable(format!("cannot read {}: {}", path.display(), e.message())))?;
            Ok(format!("sha256:{sha}"))
        }
        _ => Ok(format!("hub:{model}")),
    }
}

/// The model `[rerank]` names, trimmed.
fn cross_encoder_model(rerank: &RerankSettings) -> Result<&str> {
    rerank.model.as_deref().map(str::trim).filter(|m| !m.is_empty()).ok_or_else(|| {
        Error::invalid_input(
            "[rerank] reranker = \"cross-encoder\" needs `model`: the directory of an ONNX cross-encoder",
        )
    })
}

/// The cross-encoder's short name: the last component of its directory (or the hub name).
fn cross_encoder_name(model: &str) -> String {
    match cross_encoder_source(model) {
        ModelSource::LocalDir(dir) => dir
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| model.to_owned()),
        _ => model.to_owned(),
    }
}

/// A model setting as a [`ModelSource`]: a directory, or, with the `online` feature, a name fastembed knows when it
/// is no existing path and not written as one (absolute, or starting with `.` or `~`).
fn cross_encoder_source(model: &str) -> ModelSource {
    #[cfg(feature = "online")]
    {
        let path = std::path::Path::new(model);
        if !path.exists() && !path.is_absolute() && !model.starts_with(['.', '~']) {
            return ModelSource::Named { name: model.to_owned(), cache_dir: crate::ragtune_home().join("hub") };
        }
    }
    ModelSource::LocalDir(model.into())
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
    // The local server's model, asked for under the default name, is named as the server names it, so that the
    // disk cache (keyed by the model name) never serves one local model's answers for another's.
    let default_model = ragtune_llm::LlmConfig::default().model;
    let model = match local_llm_model(&settings.url) {
        Some(local) if settings.model == default_model => local,
        _ => settings.model.clone(),
    };
    let client = ragtune_llm::OpenAiClient::new(ragtune_llm::LlmConfig {
        base_url: settings.url.clone(),
        model,
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
    local_server()?["url"].as_str().filter(|u| !u.is_empty()).map(str::to_owned)
}

/// What `$RAGTUNE_HOME/llm/server.json` records about the running local server.
fn local_server() -> Option<serde_json::Value> {
    let path = crate::ragtune_home().join("llm").join("server.json");
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The model the local server runs (`qwen-1.5b`, the name its API reports) when `url` is its address.
fn local_llm_model(url: &str) -> Option<String> {
    let server = local_server()?;
    model_at(&server, url)
}

/// `server`'s model when its recorded URL is `url` (a trailing `/` aside).
fn model_at(server: &serde_json::Value, url: &str) -> Option<String> {
    let same = server["url"].as_str().is_some_and(|u| u.trim_end_matches('/') == url.trim().trim_end_matches('/'));
    server["model"].as_str().filter(|m| same && !m.is_empty()).map(str::to_owned)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_servers_model_is_named_only_at_its_address() {
        let server = serde_json::json!({"url": "http://127.0.0.1:4000", "model": "qwen-0.5b", "pid": 1});
        assert_eq!(model_at(&server, "http://127.0.0.1:4000/").as_deref(), Some("qwen-0.5b"));
        assert_eq!(model_at(&server, "http://127.0.0.1:4001"), None);
        assert_eq!(model_at(&serde_json::json!({"url": "http://127.0.0.1:4000"}), "http://127.0.0.1:4000"), None);
    }
}
