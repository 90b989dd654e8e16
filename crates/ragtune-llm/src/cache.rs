//! `CachedLlm`: answers kept on disk, keyed by the model and the whole rendered request.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use ragtune_core::{Ctx, Error, Llm, LlmRequest, LlmResponse, Result, TraceEvent};

/// A decorator that stores every answer of the inner [`Llm`] in a directory and answers repeated requests from
/// it, so evaluation runs are fast and reproducible (a sampled HyDE passage is generated once).
///
/// The key is a 128-bit hash of the model name and the complete request (messages, temperature, seed, schema):
/// a prompt whose wording or version changes never reuses old answers. A cached response carries the cost of the
/// call that produced it (reports stay identical across runs); the trace marks it `cached`. Entries are written
/// atomically (temporary file, then rename); an unreadable entry is treated as a miss and rewritten. Errors are
/// never cached.
#[derive(Debug, Clone)]
pub struct CachedLlm {
    inner: Arc<dyn Llm>,
    dir: PathBuf,
}

impl CachedLlm {
    /// Caches the answers of `inner` under `dir` (created when missing).
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn new(inner: Arc<dyn Llm>, dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::permanent(format!("cannot create the LLM cache directory {}", dir.display())).with_source(e)
        })?;
        Ok(Self { inner, dir })
    }

    /// The cache directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, request: &LlmRequest) -> PathBuf {
        let key = format!("{}\n{}", self.inner.name(), serde_json::to_string(request).unwrap_or_default());
        self.dir.join(format!("{:032x}.json", xxhash_rust::xxh3::xxh3_128(key.as_bytes())))
    }

    fn read(path: &Path) -> Option<LlmResponse> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    fn write(path: &Path, response: &LlmResponse) {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        // A cache that cannot be written only costs speed: the answer is returned either way.
        if let Ok(bytes) = serde_json::to_vec(response)
            && std::fs::write(&tmp, bytes).is_ok()
            && std::fs::rename(&tmp, path).is_err()
        {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

#[async_trait]
impl Llm for CachedLlm {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn generate(&self, ctx: &Ctx, requests: &[LlmRequest]) -> Result<Vec<LlmResponse>> {
        let mut out = Vec::with_capacity(requests.len());
        for request in requests {
            let path = self.path(request);
            if let Some(hit) = Self::read(&path) {
                ctx.trace(TraceEvent::new("llm", "cached").detail("model", hit.model.clone()).cost(hit.cost));
                out.push(hit);
                continue;
            }
            let mut fresh = self.inner.generate(ctx, std::slice::from_ref(request)).await?;
            let response = fresh.pop().ok_or_else(|| Error::permanent("the LLM returned no response"))?;
            Self::write(&path, &response);
            out.push(response);
        }
        Ok(out)
    }
}
