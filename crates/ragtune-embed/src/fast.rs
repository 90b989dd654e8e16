//! ONNX models through fastembed: the dense [`FastEmbedder`] and the [`CrossEncoderReranker`].
//!
//! ONNX Runtime is loaded from a file (`ort`'s load-dynamic mode; the library comes from a PyPI wheel, see
//! [`provisioning`](crate::provisioning)) into the one environment a process may have, created by
//! [`init_onnx_runtime`] and shared by every model. Inference is CPU-bound and fastembed's models need `&mut`, so
//! each model sits behind a mutex and runs on Tokio's blocking pool, never on an async worker.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use fastembed::{
    InitOptionsUserDefined, Pooling, RerankInitOptionsUserDefined, TextEmbedding, TextRerank, TokenizerFiles,
    UserDefinedEmbeddingModel, UserDefinedRerankingModel,
};
use ort::environment::Environment;
use ragtune_core::{
    Candidate, Cost, CostModel, Ctx, Distance, Embedder, EmbeddingSpec, Error, Reranker, Result, TextRole, TraceEvent,
};

static ORT_ENV: Mutex<Option<Environment>> = Mutex::new(None);

/// Whether this process has loaded ONNX Runtime already (a process can load it once).
#[must_use]
pub fn onnx_runtime_loaded() -> bool {
    ORT_ENV.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some()
}

/// Loads ONNX Runtime from `library` into this process's one environment, or returns the environment loaded
/// earlier (from whichever library came first: a process can load only one).
///
/// # Errors
/// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the file is missing or is not a usable ONNX Runtime
/// (too old for API 24, wrong platform); never a panic.
pub fn init_onnx_runtime(library: &Path) -> Result<Environment> {
    let mut env = ORT_ENV.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(e) = env.as_ref() {
        return Ok(e.clone());
    }
    if !library.is_file() {
        return Err(Error::unavailable(format!(
            "ONNX Runtime is not at {}: run `cargo xtask models` to provision it",
            library.display()
        )));
    }
    let built = ort::init_from(library)
        .map_err(|e| Error::unavailable(format!("cannot load ONNX Runtime from {}: {e}", library.display())))?
        .with_name("ragtune")
        .build()
        .map_err(|e| Error::unavailable(format!("cannot start ONNX Runtime from {}: {e}", library.display())))?;
    *env = Some(built.clone());
    Ok(built)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::unavailable(format!("cannot read {}: run `cargo xtask models` to provision the model", path.display()))
            .with_source(e)
    })
}

fn tokenizer_files(dir: &Path) -> Result<TokenizerFiles> {
    Ok(TokenizerFiles {
        tokenizer_file: read(&dir.join("tokenizer.json"))?,
        config_file: read(&dir.join("config.json"))?,
        special_tokens_map_file: read(&dir.join("special_tokens_map.json"))?,
        tokenizer_config_file: read(&dir.join("tokenizer_config.json"))?,
    })
}

fn model_err(what: &str) -> impl Fn(fastembed::Error) -> Error + '_ {
    move |e| Error::unavailable(format!("{what}: {e}"))
}

/// Runs blocking model work on Tokio's blocking pool when inside a runtime, inline otherwise.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn_blocking(f).await.map_err(|e| Error::permanent("a model task failed").with_source(e))?
        }
        Err(_) => f(),
    }
}

/// Settings of a [`FastEmbedder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastEmbedderConfig {
    /// Directory holding `model.onnx` and the tokenizer files (`tokenizer.json`, `config.json`,
    /// `special_tokens_map.json`, `tokenizer_config.json`).
    pub model_dir: PathBuf,
    /// The ONNX Runtime shared library.
    pub ort_library: PathBuf,
    /// The model's identity in the embedding spec; the provisioned file is all-MiniLM-L6-v2 with int8 weights
    /// dequantised in the graph.
    pub model_id: String,
    /// Tokens per text; longer texts are truncated (and counted in the trace).
    pub max_length: usize,
    /// Texts per inference call.
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads.
    pub intra_threads: usize,
}

impl FastEmbedderConfig {
    /// Settings for the model in `model_dir` with the defaults used here (max length 256, batch 32, 1 thread).
    pub fn new(model_dir: impl Into<PathBuf>, ort_library: impl Into<PathBuf>) -> Self {
        Self {
            model_dir: model_dir.into(),
            ort_library: ort_library.into(),
            model_id: "sentence-transformers/all-MiniLM-L6-v2@int8".into(),
            max_length: 256,
            batch_size: 32,
            intra_threads: 1,
        }
    }
}

/// A dense [`Embedder`] on fastembed/ONNX Runtime: mean pooling, L2-normalised, cosine space.
///
/// Cost: one call per batch, `docs` = texts, `tokens` = input tokens after truncation. Roles are accepted for
/// asymmetric models; all-MiniLM-L6-v2 embeds queries and passages alike.
pub struct FastEmbedder {
    model: Arc<Mutex<TextEmbedding>>,
    tokenizer: Arc<tokenizers::Tokenizer>,
    spec: EmbeddingSpec,
    config: FastEmbedderConfig,
}

impl std::fmt::Debug for FastEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastEmbedder").field("spec", &self.spec).field("config", &self.config).finish_non_exhaustive()
    }
}

impl FastEmbedder {
    /// Loads the model (seconds on a small CPU; call it off the async executor if that matters).
    ///
    /// # Errors
    /// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) for missing files or a model ONNX Runtime cannot load;
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for zero sizes.
    pub fn new(config: FastEmbedderConfig) -> Result<Self> {
        if config.max_length == 0 || config.batch_size == 0 || config.intra_threads == 0 {
            return Err(Error::invalid_input("max_length, batch_size and intra_threads must be at least 1"));
        }
        let env = init_onnx_runtime(&config.ort_library)?;
        let dir = &config.model_dir;
        let hidden: serde_json::Value = serde_json::from_slice(&read(&dir.join("config.json"))?)
            .map_err(|e| Error::corrupt(format!("{} is not JSON", dir.join("config.json").display())).with_source(e))?;
        let dim = hidden["hidden_size"]
            .as_u64()
            .ok_or_else(|| Error::corrupt(format!("{} has no hidden_size", dir.join("config.json").display())))?;
        let model = UserDefinedEmbeddingModel::new(read(&dir.join("model.onnx"))?, tokenizer_files(dir)?)
            .with_pooling(Pooling::Mean);
        let options = InitOptionsUserDefined::new()
            .with_max_length(config.max_length)
            .with_intra_threads(config.intra_threads)
            .with_environment(env);
        let model = TextEmbedding::try_new_from_user_defined(model, options)
            .map_err(model_err(&format!("cannot load the embedding model in {}", dir.display())))?;
        let tokenizer = Arc::new(model.tokenizer.clone());
        let spec = EmbeddingSpec {
            model_id: config.model_id.clone(),
            dim: usize::try_from(dim).map_err(|_| Error::corrupt("hidden_size does not fit in usize"))?,
            normalized: true,
            distance: Distance::Cosine,
        };
        Ok(Self { model: Arc::new(Mutex::new(model)), tokenizer, spec, config })
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &FastEmbedderConfig {
        &self.config
    }
}

/// Input tokens after truncation and how many texts were truncated.
fn count_tokens(tokenizer: &tokenizers::Tokenizer, texts: &[String]) -> Result<(u64, usize)> {
    let encodings = tokenizer
        .encode_batch(texts.to_vec(), true)
        .map_err(|e| Error::invalid_input(format!("cannot tokenise the input: {e}")))?;
    let tokens = encodings.iter().map(|e| e.len() as u64).sum();
    let truncated = encodings.iter().filter(|e| !e.get_overflowing().is_empty()).count();
    Ok((tokens, truncated))
}

fn l2_normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

#[async_trait]
impl Embedder for FastEmbedder {
    fn spec(&self) -> &EmbeddingSpec {
        &self.spec
    }

    fn cost_model(&self) -> CostModel {
        // Measured on a busy 2-core machine: ~60 passages/s per thread (docs/models.md).
        CostModel { per_call: Cost::new(0, 0, 1), per_doc: Cost::new(0, 1, 0), ms_per_doc: 16.0 }
    }

    async fn embed(&self, ctx: &Ctx, texts: &[&str], role: TextRole) -> Result<Vec<Vec<f32>>> {
        ctx.check()?;
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let owned: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
        let (model, tokenizer, batch) = (self.model.clone(), self.tokenizer.clone(), self.config.batch_size);
        let cancel = ctx.clone();
        let (vectors, tokens, truncated) = blocking(move || {
            let (tokens, truncated) = count_tokens(&tokenizer, &owned)?;
            let mut out = Vec::with_capacity(owned.len());
            // Work in slices of a few batches so a cancelled or late request stops between them.
            for part in owned.chunks(batch * 4) {
                cancel.check()?;
                let mut guard = model.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let mut vs = guard.embed(part, Some(batch)).map_err(model_err("embedding failed"))?;
                drop(guard);
                vs.iter_mut().for_each(|v| l2_normalise(v));
                out.extend(vs);
            }
            Ok((out, tokens, truncated))
        })
        .await?;
        if let Some(bad) = vectors.iter().find(|v| v.len() != self.spec.dim || v.iter().any(|x| !x.is_finite())) {
            return Err(Error::corrupt(format!(
                "the model returned a vector of {} values (expected {} finite values)",
                bad.len(),
                self.spec.dim
            )));
        }
        let cost = Cost::new(tokens, texts.len() as u64, 1);
        if truncated > 0 {
            ctx.trace(
                TraceEvent::new("embed", "truncated")
                    .detail("texts", truncated)
                    .detail("max_length", self.config.max_length),
            );
        }
        ctx.trace(
            TraceEvent::new("embed", self.spec.model_id.clone())
                .detail("texts", texts.len())
                .detail("role", format!("{role:?}").to_lowercase())
                .cost(cost)
                .elapsed(started.elapsed()),
        );
        Ok(vectors)
    }
}

/// Settings of a [`CrossEncoderReranker`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrossEncoderConfig {
    /// Directory holding `model.onnx` (output `logits [batch, 1]`) and the tokenizer files.
    pub model_dir: PathBuf,
    /// The ONNX Runtime shared library.
    pub ort_library: PathBuf,
    /// The model's name in provenance (`cross-encoder:<model_id>`).
    pub model_id: String,
    /// Tokens per query–passage pair.
    pub max_length: usize,
    /// Pairs per inference call.
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads.
    pub intra_threads: usize,
}

impl CrossEncoderConfig {
    /// Settings for the model in `model_dir` (max length 512, batch 16, 1 thread).
    pub fn new(model_dir: impl Into<PathBuf>, ort_library: impl Into<PathBuf>, model_id: impl Into<String>) -> Self {
        Self {
            model_dir: model_dir.into(),
            ort_library: ort_library.into(),
            model_id: model_id.into(),
            max_length: 512,
            batch_size: 16,
            intra_threads: 1,
        }
    }
}

/// A cross-encoder [`Reranker`] on fastembed's `TextRerank`: one forward pass per query–passage pair; scores are
/// the model's raw logits (higher is more relevant), in input order.
pub struct CrossEncoderReranker {
    model: Arc<Mutex<TextRerank>>,
    name: String,
    config: CrossEncoderConfig,
}

impl std::fmt::Debug for CrossEncoderReranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossEncoderReranker")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl CrossEncoderReranker {
    /// Loads the model.
    ///
    /// # Errors
    /// As [`FastEmbedder::new`].
    pub fn new(config: CrossEncoderConfig) -> Result<Self> {
        if config.max_length == 0 || config.batch_size == 0 || config.intra_threads == 0 {
            return Err(Error::invalid_input("max_length, batch_size and intra_threads must be at least 1"));
        }
        let env = init_onnx_runtime(&config.ort_library)?;
        let dir = &config.model_dir;
        let model = UserDefinedRerankingModel::new(read(&dir.join("model.onnx"))?, tokenizer_files(dir)?);
        let options = RerankInitOptionsUserDefined::new()
            .with_max_length(config.max_length)
            .with_intra_threads(config.intra_threads)
            .with_environment(env);
        let model = TextRerank::try_new_from_user_defined(model, options)
            .map_err(model_err(&format!("cannot load the cross-encoder in {}", dir.display())))?;
        let name = format!("cross-encoder:{}", config.model_id);
        Ok(Self { model: Arc::new(Mutex::new(model)), name, config })
    }
}

#[async_trait]
impl Reranker for CrossEncoderReranker {
    fn name(&self) -> &str {
        &self.name
    }

    fn cost_model(&self) -> CostModel {
        // A MiniLM-size cross-encoder costs tens of milliseconds per pair on one CPU thread.
        CostModel { per_call: Cost::new(0, 0, 1), per_doc: Cost::new(0, 1, 0), ms_per_doc: 30.0 }
    }

    async fn score(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
        ctx.check()?;
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let query = query.to_owned();
        let docs: Vec<String> = candidates.iter().map(|c| c.chunk.indexable_text()).collect();
        let (model, batch, n) = (self.model.clone(), self.config.batch_size, docs.len());
        let scores = blocking(move || {
            let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
            let mut guard = model.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let results =
                guard.rerank(query.as_str(), refs, false, Some(batch)).map_err(model_err("reranking failed"))?;
            drop(guard);
            // fastembed returns results sorted by score; put them back in input order.
            let mut scores = vec![f32::NAN; n];
            for r in results {
                if let Some(slot) = scores.get_mut(r.index) {
                    *slot = r.score;
                }
            }
            Ok(scores)
        })
        .await?;
        if scores.iter().any(|s| !s.is_finite()) {
            return Err(Error::corrupt("the cross-encoder returned a non-finite or missing score"));
        }
        ctx.trace(
            TraceEvent::new("rerank", self.name.clone())
                .detail("pairs", n)
                .cost(Cost::new(0, n as u64, 1))
                .elapsed(started.elapsed()),
        );
        Ok(scores)
    }
}
