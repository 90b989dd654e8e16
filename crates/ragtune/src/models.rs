//! Where the engine gets its models: the files provisioned by `cargo xtask models` under `$RAGTUNE_HOME`, or the
//! paths the configuration names.

use std::sync::Arc;

use async_trait::async_trait;
use ragtune_core::{Ctx, Embedder, Error, Llm, LlmRequest, LlmResponse, Result};
use ragtune_embed::{FastEmbedder, FastEmbedderConfig};
use ragtune_provision::ModelLayout;

use crate::config::{EmbeddingSettings, LlmSettings};

/// Loads the dense embedder the settings describe (by default the provisioned all-MiniLM-L6-v2).
///
/// # Errors
/// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the model or ONNX Runtime is not provisioned (the
/// message says to run `cargo xtask models`); model loading failures.
pub fn load_embedder(settings: &EmbeddingSettings) -> Result<Arc<dyn Embedder>> {
    let layout = ModelLayout::new(crate::ragtune_home());
    let mut cfg = FastEmbedderConfig::new(
        settings.model_dir.clone().unwrap_or_else(|| layout.minilm_dir()),
        settings.ort_library.clone().unwrap_or_else(|| layout.onnxruntime_library()),
    );
    cfg.batch_size = settings.batch_size;
    cfg.intra_threads = settings.threads;
    cfg.sessions = settings.sessions;
    cfg.max_length = settings.max_length;
    Ok(Arc::new(FastEmbedder::new(cfg)?))
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
