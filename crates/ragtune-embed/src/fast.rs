//! ONNX models: the dense [`FastEmbedder`] and the [`CrossEncoderReranker`].
//!
//! ONNX Runtime is loaded from a file (`ort`'s load-dynamic mode; the library comes from a PyPI wheel that
//! `ragtune-provision` fetches) into the one environment a process may have, created by
//! [`init_onnx_runtime`] and shared by every model. fastembed loads the models' tokenizers and runs the
//! cross-encoder; the embedder runs its own `ort` sessions of a provisioned model on its own encodings (each text is
//! tokenised once), with the vectors fastembed would give. Inference is CPU-bound and a session runs with `&mut`, so
//! it never runs on an async worker: the embedder's sessions are each owned by a thread of their own (`Workers`),
//! which runs the jobs queued to it (a job goes to the least busy session), and the cross-encoder sits behind a mutex
//! on Tokio's blocking pool.
//!
//! Over 1,000 lines with its unit tests (about 120 lines): the embedder and the cross-encoder share one ONNX Runtime
//! environment, its sessions and the tokenising and pooling code, which is why they are one module.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
#[cfg(feature = "online")]
use fastembed::OutputKey;
use fastembed::{
    InitOptionsUserDefined, Pooling, RerankInitOptionsUserDefined, TextEmbedding, TextRerank, TokenizerFiles,
    UserDefinedEmbeddingModel, UserDefinedRerankingModel,
};
use ort::environment::Environment;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::TensorRef;
use ragtune_core::{
    Candidate, Cost, CostModel, Ctx, Distance, Embedder, EmbeddingSpec, Error, Reranker, Result, SpanEmbeddings,
    TextRole, TraceEvent,
};

static ORT_ENV: Mutex<Option<Environment>> = Mutex::new(None);

/// Whether this process has loaded ONNX Runtime already (a process can load it once).
#[must_use]
pub fn onnx_runtime_loaded() -> bool {
    ORT_ENV.lock().unwrap_or_else(PoisonError::into_inner).is_some()
}

/// Loads ONNX Runtime from `library` into this process's one environment, unless it is loaded already.
///
/// A process can load ONNX Runtime once: after the first success, later calls naming another existing file share
/// the library loaded first. Models call this themselves; call it early to report a missing runtime up front.
///
/// # Errors
/// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the file does not exist (always checked, even when a
/// runtime is loaded already) or is not a usable ONNX Runtime (too old for API 24, wrong platform); never a panic.
pub fn init_onnx_runtime(library: &Path) -> Result<()> {
    onnx_runtime_environment(library).map(drop)
}

/// The process's one ONNX Runtime environment, created from `library` on first use (see [`init_onnx_runtime`]); a
/// second environment cannot be created.
fn onnx_runtime_environment(library: &Path) -> Result<Environment> {
    if !library.is_file() {
        return Err(Error::unavailable(format!(
            "ONNX Runtime is not at {}: run `cargo xtask models` to provision it",
            library.display()
        )));
    }
    let mut env = ORT_ENV.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(e) = env.as_ref() {
        return Ok(e.clone());
    }
    // `init_from` returns an error for a missing or foreign library; the lazy `ORT_DYLIB_PATH` path would panic.
    let built = ort::init_from(library)
        .map_err(|e| Error::unavailable(format!("cannot load ONNX Runtime from {}: {e}", library.display())))?
        .with_name("ragtune")
        .build()
        .map_err(|e| Error::unavailable(format!("cannot start ONNX Runtime from {}: {e}", library.display())))?;
    *env = Some(built.clone());
    Ok(built)
}

/// Where a model's files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelSource {
    /// A directory holding `model.onnx` and the tokenizer files (`tokenizer.json`, `config.json`,
    /// `special_tokens_map.json`, `tokenizer_config.json`), as `cargo xtask models` provisions them.
    LocalDir(PathBuf),
    /// A model fastembed knows by name (its hub repository, e.g. `Qdrant/all-MiniLM-L6-v2-onnx` or
    /// `BAAI/bge-reranker-base`, or its enum name, e.g. `AllMiniLML6V2`), downloaded from the Hugging Face hub
    /// into `cache_dir` on first use. Needs the `online` feature and network access to the hub.
    #[cfg(feature = "online")]
    Named {
        /// The model's name.
        name: String,
        /// The hub cache (`$HF_HOME` overrides it, as in fastembed).
        cache_dir: PathBuf,
    },
}

impl ModelSource {
    fn describe(&self) -> String {
        match self {
            Self::LocalDir(dir) => dir.display().to_string(),
            #[cfg(feature = "online")]
            Self::Named { name, .. } => format!("hub model `{name}`"),
        }
    }
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

fn check_sizes(max_length: usize, batch_size: usize, intra_threads: usize) -> Result<()> {
    if max_length == 0 || batch_size == 0 || intra_threads == 0 {
        return Err(Error::invalid_input("max_length, batch_size and intra_threads must be at least 1"));
    }
    Ok(())
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

/// What tokenising one batch showed: the tokens the model sees and how many inputs were cut at `max_length`.
#[derive(Debug, Clone, Copy, Default)]
struct TokenCount {
    tokens: u64,
    truncated: usize,
}

/// Counts with the model's own tokenizer (fastembed configures its truncation and padding): tokens are the
/// attention mask's ones, so padding is not charged; a truncated input is one whose encoding overflowed.
fn count_tokens<'s, E>(tokenizer: &tokenizers::Tokenizer, inputs: Vec<E>) -> Result<TokenCount>
where
    E: Into<tokenizers::EncodeInput<'s>> + Send,
{
    let encodings = tokenizer
        .encode_batch(inputs, true)
        .map_err(|e| Error::invalid_input(format!("cannot tokenise the input: {e}")))?;
    Ok(TokenCount {
        tokens: encodings.iter().map(|e| e.get_attention_mask().iter().map(|&m| u64::from(m)).sum::<u64>()).sum(),
        truncated: encodings.iter().filter(|e| !e.get_overflowing().is_empty()).count(),
    })
}

/// The order in which to embed texts of these token lengths: shortest first (stable), so each batch holds texts
/// of similar length and the model runs on little padding. Results are put back in input order.
fn length_order(lengths: &[(u64, bool)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i].0);
    order
}

/// Settings of a [`FastEmbedder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastEmbedderConfig {
    /// Where the model comes from.
    pub model: ModelSource,
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
    /// ONNX Runtime sessions of the model: concurrent calls run on different sessions, and a call with several
    /// batches spreads them over the sessions (one thread each). 0 means one per core.
    pub sessions: usize,
    /// Intra-op threads of one more session, used by a call of one batch (a query) that runs alone: no other call
    /// in flight, and none overlapping another for [`QUIET`] before it. A lone query gets every core; overlapping
    /// ones (a busy server) the one-thread sessions above, side by side. 0 (the default) means one per core; a
    /// value not above `intra_threads` means no such session (measured in docs/performance.md).
    pub lone_threads: usize,
    /// Let the intra-op threads of a session with more than one (`intra_threads` > 1, or the lone-call session)
    /// busy-wait between the model's parallel sections while it runs, as ONNX Runtime does by default, and stop
    /// as soon as the run ends (`session.force_spinning_stop`), so that they take no core from the calls that
    /// follow. A sleeping worker is woken for every parallel section, which makes a short query on several threads
    /// slower than on one (measured in docs/performance.md). `true` by default.
    pub spinning: bool,
}

impl FastEmbedderConfig {
    /// Settings for all-MiniLM-L6-v2 in `model_dir` (max length 256, batch 32, 1 thread, one session per core).
    pub fn new(model_dir: impl Into<PathBuf>, ort_library: impl Into<PathBuf>) -> Self {
        Self {
            model: ModelSource::LocalDir(model_dir.into()),
            ort_library: ort_library.into(),
            model_id: "sentence-transformers/all-MiniLM-L6-v2@int8".into(),
            max_length: 256,
            batch_size: 32,
            intra_threads: 1,
            sessions: 0,
            lone_threads: 0,
            spinning: true,
        }
    }

    /// The lone-call session's threads: `lone_threads`, or one per core when it is 0.
    #[must_use]
    pub fn lone_thread_count(&self) -> usize {
        match self.lone_threads {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            n => n,
        }
    }

    /// The sessions to load: `sessions`, or one per core when it is 0.
    #[must_use]
    pub fn session_count(&self) -> usize {
        match self.sessions {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            n => n,
        }
    }
}

/// A dense [`Embedder`] on fastembed/ONNX Runtime: mean pooling, L2-normalised, cosine space.
///
/// Cost: one call per batch of `batch_size` texts, `docs` = texts, `tokens` = input tokens after truncation
/// (padding excluded). Inputs longer than `max_length` tokens are truncated and counted in an
/// `embed`/`truncated` trace event. Roles are accepted for asymmetric models (query/passage prefixes); the
/// default all-MiniLM-L6-v2 embeds queries and passages alike.
pub struct FastEmbedder {
    /// The session pool: one loaded model per session, each on a thread of its own.
    workers: Arc<Workers>,
    /// The session with every core for a lone one-batch call (`lone_threads`), if any, on a thread of its own.
    wide: Option<Arc<Workers>>,
    /// Calls in flight and when calls last overlapped, to tell a lone call from concurrent ones.
    flights: Arc<Flights>,
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
    /// Loads the model and embeds one probe text to learn its dimension (seconds on a small CPU; call it off
    /// the async executor if that matters).
    ///
    /// # Errors
    /// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) for a missing ONNX Runtime, missing files or a model
    /// ONNX Runtime cannot load; [`Corrupt`](ragtune_core::ErrorKind::Corrupt) when the model's output disagrees
    /// with its `config.json`; [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for zero sizes or an
    /// unknown named model.
    pub fn new(config: FastEmbedderConfig) -> Result<Self> {
        check_sizes(config.max_length, config.batch_size, config.intra_threads)?;
        let env = onnx_runtime_environment(&config.ort_library)?;
        // fastembed loads the model once, with one thread: its tokenizer (truncation at `max_length`, the model's
        // padding and special tokens) is the one ragtune encodes with, and its vector of a probe text gives the
        // dimension and checks the sessions below, which run on ragtune's own encodings.
        let (mut reference, hidden_size, source) = match &config.model {
            ModelSource::LocalDir(dir) => {
                let hidden_size = read_hidden_size(dir)?;
                let graph = read(&dir.join("model.onnx"))?;
                let model =
                    UserDefinedEmbeddingModel::new(graph.clone(), tokenizer_files(dir)?).with_pooling(Pooling::Mean);
                let options = InitOptionsUserDefined::new()
                    .with_max_length(config.max_length)
                    .with_intra_threads(1)
                    .with_environment(env.clone());
                let reference = TextEmbedding::try_new_from_user_defined(model, options)
                    .map_err(model_err(&format!("cannot load the embedding model in {}", dir.display())))?;
                (reference, hidden_size, Source::Graph(graph))
            }
            #[cfg(feature = "online")]
            ModelSource::Named { name, cache_dir } => {
                let info = TextEmbedding::list_supported_models()
                    .into_iter()
                    .find(|m| {
                        m.model_code.eq_ignore_ascii_case(name) || format!("{:?}", m.model).eq_ignore_ascii_case(name)
                    })
                    .ok_or_else(|| Error::invalid_input(format!("fastembed has no embedding model named `{name}`")))?;
                let reference = TextEmbedding::try_new(hub_options(&info.model, cache_dir, &config, 1, &env))
                    .map_err(model_err(&format!("cannot load the embedding model `{name}` from the hub")))?;
                (reference, Some(info.dim), Source::Hub(info.model, cache_dir.clone()))
            }
        };
        let probe = reference
            .embed(["dimension probe"], None)
            .map_err(model_err(&format!("the embedding model in {} cannot run", config.model.describe())))?
            .pop()
            .unwrap_or_default();
        let dim = probe.len();
        if dim == 0 || hidden_size.is_some_and(|h| h != dim) {
            return Err(Error::corrupt(format!(
                "the embedding model in {} outputs {dim} values per text, its configuration says {hidden_size:?}",
                config.model.describe()
            )));
        }
        let pad_id = reference.tokenizer.get_padding().map_or(0, |p| p.pad_id);
        let mut tokenizer = reference.tokenizer.clone();
        // Texts are encoded unpadded, once; a batch is padded to its own longest text when it runs.
        tokenizer.with_padding(None);
        drop(reference);
        let load = |threads: usize| -> Result<Model> {
            match &source {
                Source::Graph(graph) => Ok(Model::Direct(Direct::load(&env, graph, threads, config.spinning, pad_id)?)),
                #[cfg(feature = "online")]
                Source::Hub(model, cache_dir) => {
                    TextEmbedding::try_new(hub_options(model, cache_dir, &config, threads, &env))
                        .map(|m| Model::Fastembed(Box::new(m), TextEmbedding::get_default_pooling_method(model)))
                        .map_err(model_err("cannot load the embedding model from the hub"))
                }
            }
        };
        let mut first = load(config.intra_threads)?;
        let probed = {
            let encodings = encode(&tokenizer, &["dimension probe".to_owned()])?;
            first.embed(&["dimension probe"], &[&encodings[0]])?.pop().unwrap_or_default()
        };
        let agreement = probed.iter().zip(&probe).map(|(a, b)| a * b).sum::<f32>();
        if probed.len() != dim || !agreement.is_finite() || agreement <= 0.9999 {
            return Err(Error::corrupt(format!(
                "the embedding model in {} gives another vector on ragtune's encodings than through fastembed \
                 (cosine {agreement})",
                config.model.describe()
            )));
        }
        let tokenizer = Arc::new(tokenizer);
        let spec =
            EmbeddingSpec { model_id: config.model_id.clone(), dim, normalized: true, distance: Distance::Cosine };
        let mut models = vec![first];
        for _ in 1..config.session_count() {
            models.push(load(config.intra_threads)?);
        }
        let lone = config.lone_thread_count();
        let wide = if lone > config.intra_threads { Some(Arc::new(Workers::start(vec![load(lone)?])?)) } else { None };
        let workers = Arc::new(Workers::start(models)?);
        Ok(Self { workers, wide, flights: Arc::new(Flights::new()), tokenizer, spec, config })
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &FastEmbedderConfig {
        &self.config
    }

    /// The model's tokenizer as a token counter whose window is the length this embedder truncates at (the
    /// smaller of `max_length` and the model's own limit), for cutting text to fit before it is embedded.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when the tokenizer's truncation cannot be turned
    /// off (never for the provisioned model).
    pub fn token_counter(&self) -> Result<crate::ModelTokenCounter> {
        let window = self.tokenizer.get_truncation().map_or(self.config.max_length, |t| t.max_length);
        crate::ModelTokenCounter::new((*self.tokenizer).clone(), window, self.spec.model_id.clone())
    }
}

/// The session option that says how the intra-op threads of a session with more than one wait: spinning during a
/// run and stopped when it ends when `spin`, else asleep.
///
/// ONNX Runtime's worker threads spin after each parallel section, waiting for more work, and by default go on
/// spinning for a while after the run. A session of one thread has no workers (the calling thread computes), but
/// the lone-call session's workers would go on spinning after its query and take the cores that the one-thread
/// sessions of the queries that follow need: `session.force_spinning_stop` stops them when the run returns.
/// Spinning during the run is what makes a lone query fast on several threads: a sleeping worker is woken for every
/// parallel section.
fn spinning(threads: usize, spin: bool) -> Option<(&'static str, &'static str)> {
    match (threads > 1, spin) {
        (false, _) => None,
        (true, true) => Some(("session.force_spinning_stop", "1")),
        (true, false) => Some(("session.intra_op.allow_spinning", "0")),
    }
}

/// fastembed's options for a hub model with `threads` intra-op threads.
#[cfg(feature = "online")]
fn hub_options(
    model: &fastembed::EmbeddingModel,
    cache_dir: &Path,
    config: &FastEmbedderConfig,
    threads: usize,
    env: &Environment,
) -> fastembed::TextInitOptions {
    fastembed::TextInitOptions::new(model.clone())
        .with_max_length(config.max_length)
        .with_intra_threads(threads)
        .with_cache_dir(cache_dir.to_path_buf())
        .with_show_download_progress(false)
        .with_environment(env.clone())
}

/// Where the sessions come from.
enum Source {
    /// A provisioned `model.onnx`: ragtune's own sessions of it.
    Graph(Vec<u8>),
    /// A hub model: fastembed's sessions (its pooling may not be the mean).
    #[cfg(feature = "online")]
    Hub(fastembed::EmbeddingModel, PathBuf),
}

/// One session of the embedding model.
enum Model {
    /// A provisioned model run on ragtune's encodings.
    Direct(Direct),
    /// A hub model run by fastembed, which tokenises the texts again, and its pooling.
    #[cfg(feature = "online")]
    Fastembed(Box<TextEmbedding>, Option<Pooling>),
}

impl Model {
    /// The normalised vector of each text of one batch (`texts` and their `encodings`, in the same order).
    fn embed(&mut self, texts: &[&str], encodings: &[&tokenizers::Encoding]) -> Result<Vec<Vec<f32>>> {
        match self {
            Self::Direct(model) => {
                let _ = texts;
                model.run(encodings, |tokens| Ok((0..tokens.rows).map(|b| tokens.mean(b)).collect()))
            }
            #[cfg(feature = "online")]
            Self::Fastembed(model, _) => model.embed(texts, Some(texts.len())).map_err(model_err("embedding failed")),
        }
    }

    /// Each text's vector, as [`Model::embed`] gives it, and its spans' vectors (see [`Tokens::span_means`]), from
    /// one forward pass.
    fn embed_with_spans(
        &mut self,
        texts: &[&str],
        encodings: &[&tokenizers::Encoding],
        spans: &[&[(usize, usize)]],
    ) -> Result<Vec<Pooled>> {
        match self {
            Self::Direct(model) => {
                let _ = texts;
                model.run(encodings, |tokens| {
                    Ok((0..tokens.rows)
                        .map(|b| (tokens.mean(b), tokens.span_means(b, encodings[b], spans[b])))
                        .collect())
                })
            }
            #[cfg(feature = "online")]
            Self::Fastembed(model, pooling) => {
                let precedence: &[OutputKey] = &[OutputKey::OnlyOne, OutputKey::ByName("last_hidden_state")];
                let output = model.transform(texts, Some(texts.len())).map_err(model_err("embedding failed"))?;
                let mut out = Vec::with_capacity(texts.len());
                for batch in output.into_raw() {
                    let pooled =
                        batch.select_and_pool_output(&precedence, pooling.clone()).map_err(model_err("pooling"))?;
                    let tokens = batch.select_output(&precedence).map_err(model_err("reading token vectors"))?;
                    let flat = tokens.as_standard_layout();
                    let flat =
                        flat.as_slice().ok_or_else(|| Error::corrupt("the model's token output is not contiguous"))?;
                    let mask: Vec<i64> = batch.attention_mask_array.iter().copied().collect();
                    let tokens = Tokens::new(flat, tokens.shape(), &mask)?;
                    for (b, row) in pooled.rows().into_iter().enumerate() {
                        let i = out.len();
                        let (Some(encoding), Some(text_spans)) = (encodings.get(i), spans.get(i)) else {
                            return Err(Error::corrupt("the model returned more rows than texts"));
                        };
                        if b >= tokens.rows {
                            return Err(Error::corrupt("the pooled output has more rows than the token output"));
                        }
                        out.push((
                            fastembed_normalize(row.iter().copied()),
                            tokens.span_means(b, encoding, text_spans),
                        ));
                    }
                }
                Ok(out)
            }
        }
    }
}

/// A session of a provisioned model, run on ragtune's own encodings: each text is tokenised once, by the caller
/// (to count tokens and to batch texts of similar length), and that encoding is what the model reads, padded to its
/// batch's longest. fastembed's `embed` would tokenise every text a second time; the vectors are the bits it gives
/// (the same mean pooling over the same output, the same normalisation; checked at load and in the tests).
struct Direct {
    session: Session,
    /// Whether the graph takes `token_type_ids`.
    type_ids: bool,
    /// The output holding the token vectors: the only one, or `last_hidden_state`.
    output: usize,
    /// The padding token's id.
    pad_id: i64,
}

impl Direct {
    /// A session of `graph` with `threads` intra-op threads, graph optimisations on (as fastembed sets them).
    fn load(env: &Environment, graph: &[u8], threads: usize, spin: bool, pad_id: u32) -> Result<Self> {
        let fail = |e: &dyn std::fmt::Display| Error::unavailable(format!("cannot load the embedding model: {e}"));
        let mut builder = Session::builder(env)
            .map_err(|e| fail(&e))?
            .with_optimization_level(GraphOptimizationLevel::Level3)
            .map_err(|e| fail(&e))?
            .with_intra_threads(threads)
            .map_err(|e| fail(&e))?;
        if let Some((key, value)) = spinning(threads, spin) {
            builder = builder.with_config_entry(key, value).map_err(|e| fail(&e))?;
        }
        let session = builder.commit_from_memory(graph).map_err(|e| fail(&e))?;
        let type_ids = session.inputs().iter().any(|i| i.name() == "token_type_ids");
        let outputs: Vec<&str> = session.outputs().iter().map(|o| o.name()).collect();
        let output = match outputs.len() {
            1 => 0,
            _ => outputs.iter().position(|&o| o == "last_hidden_state").ok_or_else(|| {
                Error::unavailable(format!(
                    "the embedding model's outputs are {outputs:?}: ragtune pools its only output or `last_hidden_state`"
                ))
            })?,
        };
        Ok(Self { session, type_ids, output, pad_id: i64::from(pad_id) })
    }

    /// Runs one batch, each encoding padded to the longest, and gives the token output to `read`.
    fn run<R>(&mut self, encodings: &[&tokenizers::Encoding], read: impl FnOnce(Tokens<'_>) -> Result<R>) -> Result<R> {
        let (rows, seq) = (encodings.len(), encodings.iter().map(|e| e.len()).max().unwrap_or(0));
        let (mut ids, mut mask, mut types) =
            (vec![self.pad_id; rows * seq], vec![0i64; rows * seq], vec![0i64; rows * seq]);
        for (b, e) in encodings.iter().enumerate() {
            let at = b * seq;
            for (t, ((&id, &m), &ty)) in
                e.get_ids().iter().zip(e.get_attention_mask()).zip(e.get_type_ids()).enumerate()
            {
                (ids[at + t], mask[at + t], types[at + t]) = (i64::from(id), i64::from(m), i64::from(ty));
            }
        }
        let fail = |e: ort::Error| Error::unavailable(format!("embedding failed: {e}"));
        let shape = [rows, seq];
        let mut inputs = ort::inputs![
            "input_ids" => TensorRef::from_array_view((shape, ids.as_slice())).map_err(fail)?,
            "attention_mask" => TensorRef::from_array_view((shape, mask.as_slice())).map_err(fail)?,
        ];
        if self.type_ids {
            inputs.push((
                "token_type_ids".into(),
                TensorRef::from_array_view((shape, types.as_slice())).map_err(fail)?.into(),
            ));
        }
        let outputs = self.session.run(inputs).map_err(fail)?;
        let (dims, flat) = outputs[self.output].try_extract_tensor::<f32>().map_err(fail)?;
        let tokens =
            Tokens::new(flat, &dims.iter().map(|&d| usize::try_from(d).unwrap_or(0)).collect::<Vec<_>>(), &mask)?;
        if tokens.rows != rows || tokens.seq != seq {
            return Err(Error::corrupt(format!(
                "the model returned token vectors of shape {dims:?} for a batch of {rows} texts of {seq} tokens"
            )));
        }
        read(tokens)
    }
}

/// A batch's token vectors as the model outputs them (`rows` × `seq` × `dim`, row-major) and the attention mask
/// it ran with (`rows` × `seq`).
struct Tokens<'a> {
    flat: &'a [f32],
    mask: &'a [i64],
    rows: usize,
    seq: usize,
    dim: usize,
}

impl<'a> Tokens<'a> {
    fn new(flat: &'a [f32], shape: &[usize], mask: &'a [i64]) -> Result<Self> {
        let [rows, seq, dim] = shape[..] else {
            return Err(Error::corrupt(format!(
                "the model's token output has shape {shape:?}, not [batch, tokens, dim]"
            )));
        };
        if flat.len() != rows * seq * dim || mask.len() != rows * seq {
            return Err(Error::corrupt(format!(
                "the model's token output has {} values and {} mask values for shape {shape:?}",
                flat.len(),
                mask.len()
            )));
        }
        Ok(Self { flat, mask, rows, seq, dim })
    }

    /// Row `b`'s vector: the mean of its token vectors under the attention mask, normalised, exactly as fastembed
    /// computes it (each token vector times its mask value, summed in token order; divided by the mask's sum, or
    /// by 1 when that is 0), so a vector has the bits `TextEmbedding::embed` gives.
    fn mean(&self, b: usize) -> Vec<f32> {
        let mut sum = vec![0.0f32; self.dim];
        let mut count = 0.0f32;
        for t in 0..self.seq {
            #[allow(clippy::cast_precision_loss)]
            let m = self.mask[b * self.seq + t] as f32;
            let at = (b * self.seq + t) * self.dim;
            for (acc, x) in sum.iter_mut().zip(&self.flat[at..at + self.dim]) {
                *acc += m * x;
            }
            count += m;
        }
        let count = if count == 0.0 { 1.0 } else { count };
        fastembed_normalize(sum.into_iter().map(|x| x / count))
    }

    /// The vectors of row `b`'s spans (byte ranges of its text): the normalised mean of the token vectors whose
    /// byte offsets overlap the span (special and padding tokens excluded), `None` when the span has no such token
    /// or truncation cut any of it.
    fn span_means(&self, b: usize, encoding: &tokenizers::Encoding, spans: &[(usize, usize)]) -> Vec<Option<Vec<f32>>> {
        let offsets = encoding.get_offsets();
        let special = encoding.get_special_tokens_mask();
        let mask = encoding.get_attention_mask();
        // Where the model's view of a truncated text ends: a span reaching past it was seen in part only, and gets
        // no vector rather than one of its first words (the caller may run the rest of the text).
        let seen_end = if encoding.get_overflowing().is_empty() {
            usize::MAX
        } else {
            offsets.iter().zip(special).filter(|(_, s)| **s == 0).map(|(o, _)| o.1).max().unwrap_or(0)
        };
        spans
            .iter()
            .map(|&(start, end)| {
                if end > seen_end {
                    return None;
                }
                let mut sum = vec![0.0f32; self.dim];
                let mut count = 0usize;
                for (t, &(a, z)) in offsets.iter().enumerate().take(self.seq) {
                    if special.get(t) != Some(&0) || mask.get(t) != Some(&1) || a >= end || z <= start {
                        continue;
                    }
                    let at = (b * self.seq + t) * self.dim;
                    for (acc, x) in sum.iter_mut().zip(&self.flat[at..at + self.dim]) {
                        *acc += x;
                    }
                    count += 1;
                }
                #[allow(clippy::cast_precision_loss)]
                (count > 0).then(|| fastembed_normalize(sum.into_iter().map(|x| x / count as f32)))
            })
            .collect()
    }
}

/// `hidden_size` from the model directory's `config.json`, when it has one.
fn read_hidden_size(dir: &Path) -> Result<Option<usize>> {
    let path = dir.join("config.json");
    let config: serde_json::Value = serde_json::from_slice(&read(&path)?)
        .map_err(|e| Error::corrupt(format!("{} is not JSON", path.display())).with_source(e))?;
    Ok(config["hidden_size"].as_u64().and_then(|h| usize::try_from(h).ok()))
}

/// L2-normalises `v` and returns its norm before normalisation.
fn l2_normalize(v: &mut [f32]) -> f32 {
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt() as f32;
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    norm
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
        let run = |model: &mut Model, ids: &[usize], texts: &[String], encodings: &[tokenizers::Encoding]| {
            let part: Vec<&str> = ids.iter().map(|&i| texts[i].as_str()).collect();
            let enc: Vec<&tokenizers::Encoding> = ids.iter().map(|&i| &encodings[i]).collect();
            model.embed(&part, &enc)
        };
        let (mut vectors, count, batches) = self.call(ctx, texts, run).await?;
        self.check_vectors(&mut vectors, texts.len())?;
        self.trace(ctx, texts.len(), role, count, batches, started);
        Ok(vectors)
    }

    fn role_independent(&self) -> bool {
        // The model is run on the text alone whatever the role: no query or passage prefixes.
        true
    }

    async fn embed_spans(&self, ctx: &Ctx, texts: &[&str], spans: &[Vec<(usize, usize)>]) -> Result<SpanEmbeddings> {
        ctx.check()?;
        if spans.len() != texts.len() {
            return Err(Error::invalid_input(format!("{} span lists for {} texts", spans.len(), texts.len())));
        }
        if texts.is_empty() {
            return Ok(SpanEmbeddings::default());
        }
        let started = Instant::now();
        let spans = spans.to_vec();
        let run = move |model: &mut Model, ids: &[usize], texts: &[String], encodings: &[tokenizers::Encoding]| {
            let part: Vec<&str> = ids.iter().map(|&i| texts[i].as_str()).collect();
            let enc: Vec<&tokenizers::Encoding> = ids.iter().map(|&i| &encodings[i]).collect();
            let sp: Vec<&[(usize, usize)]> = ids.iter().map(|&i| spans[i].as_slice()).collect();
            model.embed_with_spans(&part, &enc, &sp)
        };
        let (pooled, count, batches) = self.call(ctx, texts, run).await?;
        let (mut vectors, mut span_vectors): (Vec<Vec<f32>>, Vec<Vec<Option<Vec<f32>>>>) = pooled.into_iter().unzip();
        self.check_vectors(&mut vectors, texts.len())?;
        for v in span_vectors.iter_mut().flatten().flatten() {
            // A span vector is normalised like a text's; one that cannot be is dropped, never stored.
            let norm = l2_normalize(v);
            if v.len() != self.spec.dim || !norm.is_finite() || norm == 0.0 {
                v.clear();
            }
        }
        let span_vectors =
            span_vectors.into_iter().map(|s| s.into_iter().map(|v| v.filter(|v| !v.is_empty())).collect()).collect();
        self.trace(ctx, texts.len(), TextRole::Passage, count, batches, started);
        Ok(SpanEmbeddings { texts: vectors, spans: span_vectors })
    }
}

impl FastEmbedder {
    /// One model call over `texts`, off the async executor: tokenises them once (to count tokens and truncations,
    /// and to batch texts of similar length together: the model pads every text of a batch to the batch's longest,
    /// so sorting by length saves the compute spent on padding), then runs `run` on each batch (the indexes of its
    /// texts) on the session pool, and returns its outputs in input order with the tokens and the batch count.
    async fn call<T, F>(&self, ctx: &Ctx, texts: &[&str], run: F) -> Result<(Vec<T>, TokenCount, u64)>
    where
        T: Send + 'static,
        F: Fn(&mut Model, &[usize], &[String], &[tokenizers::Encoding]) -> Result<Vec<T>> + Send + Sync + 'static,
    {
        let owned: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
        let (workers, tokenizer, batch) = (self.workers.clone(), self.tokenizer.clone(), self.config.batch_size);
        let cancel = ctx.clone();
        let flight = InFlight::enter(&self.flights);
        // A lone call of one batch runs on the session with every core when there is one and it is free.
        let wide = self.wide.clone().filter(|w| flight.alone && w.idle());
        if owned.len() == 1 {
            // One text (a query): tokenised and run by the chosen session's own thread, with no hop through the
            // blocking pool. Each session stays on its thread, so concurrent queries keep their caches.
            let (tx, rx) = tokio::sync::oneshot::channel();
            wide.unwrap_or(workers).submit(Box::new(move |model: &mut Model| {
                let mut one = || -> Result<(Vec<T>, TokenCount, u64)> {
                    cancel.check()?;
                    let encodings = encode(&tokenizer, &owned)?;
                    let (count, _) = plan(&encodings, batch, 1);
                    let out = checked(run(model, &[0], &owned, &encodings)?, 1)?;
                    Ok((out, count, 1))
                };
                let _ = tx.send(one());
            }))?;
            return rx.await.map_err(|_| Error::permanent("an embedding worker stopped during the call"))?;
        }
        let run = Arc::new(run);
        blocking(move || {
            let encodings = Arc::new(encode(&tokenizer, &owned)?);
            let (count, parts) = plan(&encodings, batch, workers.len());
            let owned = Arc::new(owned);
            let batches = parts.len() as u64;
            let pool = wide.filter(|_| parts.len() == 1).unwrap_or(workers);
            let out = pool.run_parts(owned.len(), parts, &cancel, run, owned, encodings)?;
            Ok((out, count, batches))
        })
        .await
    }
}

impl FastEmbedder {
    /// Checks that the model returned one finite, non-zero vector of the space's dimension per text, normalising
    /// each (fastembed normalises already; normalising again costs nothing and makes the invariant ours).
    fn check_vectors(&self, vectors: &mut [Vec<f32>], texts: usize) -> Result<()> {
        if vectors.len() != texts {
            return Err(Error::corrupt(format!("the model returned {} vectors for {texts} texts", vectors.len())));
        }
        for v in vectors.iter_mut() {
            let norm = l2_normalize(v);
            if v.len() != self.spec.dim || !norm.is_finite() || norm == 0.0 {
                return Err(Error::corrupt(format!(
                    "the model returned a vector of {} values with norm {norm} (expected {} finite values)",
                    v.len(),
                    self.spec.dim
                )));
            }
        }
        Ok(())
    }

    /// The call's `embed` trace event, and an `embed`/`truncated` event when inputs were cut.
    fn trace(&self, ctx: &Ctx, texts: usize, role: TextRole, count: TokenCount, batches: u64, started: Instant) {
        ctx.trace(
            TraceEvent::new("embed", self.spec.model_id.clone())
                .detail("texts", texts)
                .detail("role", format!("{role:?}").to_lowercase())
                .cost(Cost::new(count.tokens, texts as u64, batches))
                .elapsed(started.elapsed()),
        );
        if count.truncated > 0 {
            ctx.trace(
                TraceEvent::new("embed", "truncated")
                    .detail("texts", count.truncated)
                    .detail("max_length", self.config.max_length),
            );
        }
    }
}

/// Tokenises `texts` with the model's tokenizer (fastembed configures its truncation and padding), as the model
/// will see them.
fn encode(tokenizer: &tokenizers::Tokenizer, texts: &[String]) -> Result<Vec<tokenizers::Encoding>> {
    tokenizer
        .encode_batch(texts.iter().map(String::as_str).collect::<Vec<_>>(), true)
        .map_err(|e| Error::invalid_input(format!("cannot tokenise the input: {e}")))
}

/// The tokens the model sees and the truncations of these encodings, and the batches to run them in: texts of
/// similar length together (see [`length_order`]), spread over the `sessions` (see [`split`]).
fn plan(encodings: &[tokenizers::Encoding], batch: usize, sessions: usize) -> (TokenCount, Vec<Vec<usize>>) {
    let lengths: Vec<(u64, bool)> = encodings
        .iter()
        .map(|e| (e.get_attention_mask().iter().map(|&m| u64::from(m)).sum::<u64>(), !e.get_overflowing().is_empty()))
        .collect();
    let count =
        TokenCount { tokens: lengths.iter().map(|l| l.0).sum(), truncated: lengths.iter().filter(|l| l.1).count() };
    let order = length_order(&lengths);
    let sorted: Vec<u64> = order.iter().map(|&i| lengths[i].0).collect();
    let parts = split(&sorted, batch, sessions).into_iter().map(|r| order[r].to_vec()).collect();
    (count, parts)
}

/// Cuts texts sorted by ascending token length into batches of consecutive texts of at most `batch` texts. A large
/// call (indexing) is cut into runs of `batch`, which the sessions take in turn. A call of fewer runs than twice the
/// `sessions` is cut into a multiple of the sessions (at most one batch per text) at the points that make the
/// largest batch's work smallest, so that a call of a few texts (the strips of a question's passages) keeps every
/// session busy for about the same time instead of leaving all the work, or its longest part, to one. A batch's work
/// is its texts times its longest text's tokens: the model pads every text of a batch to the longest.
fn split(lengths: &[u64], batch: usize, sessions: usize) -> Vec<std::ops::Range<usize>> {
    let n = lengths.len();
    let (batch, sessions) = (batch.max(1), sessions.max(1));
    let runs = n.div_ceil(batch);
    if runs >= 2 * sessions {
        return (0..n).step_by(batch).map(|s| s..(s + batch).min(n)).collect();
    }
    let parts = runs.max(sessions.min(n)).next_multiple_of(sessions).min(n);
    if parts == 0 {
        return Vec::new();
    }
    // best[k][j]: the smallest largest-batch work of cutting the first j texts into k batches; cut[k][j]: where the
    // last of those batches starts. Calls this small have at most `batch * sessions` texts, so O(parts · n²) is cheap.
    let work = |a: usize, b: usize| (b - a) as u64 * lengths[b - 1].max(1);
    let mut best = vec![vec![u64::MAX; n + 1]; parts + 1];
    let mut cut = vec![vec![0usize; n + 1]; parts + 1];
    best[0][0] = 0;
    for k in 1..=parts {
        for j in k..=n {
            for i in (k - 1)..j {
                if best[k - 1][i] == u64::MAX || j - i > batch {
                    continue;
                }
                let w = best[k - 1][i].max(work(i, j));
                if w < best[k][j] {
                    best[k][j] = w;
                    cut[k][j] = i;
                }
            }
        }
    }
    let mut out = Vec::with_capacity(parts);
    let mut j = n;
    for k in (1..=parts).rev() {
        let i = cut[k][j];
        out.push(i..j);
        j = i;
    }
    out.reverse();
    out
}

/// One job for a session's thread: it gets the thread's model.
type Job = Box<dyn FnOnce(&mut Model) + Send>;

/// The session pool: one thread per session, each owning its model for good and running the jobs queued to it, so a
/// session always runs on the same thread (a query's work stays in the caches of the core that thread runs on,
/// instead of following the blocking pool's threads around). A job goes to the session with the fewest jobs queued
/// or running, the first such one on ties: queries made one at a time all run on the first session, and concurrent
/// ones (or an indexing call's batches) spread over the others. Dropping the pool closes the queues; each thread
/// finishes its jobs and ends, dropping its model.
struct Workers {
    queues: Vec<std::sync::mpsc::Sender<Job>>,
    /// Jobs queued or running per session.
    pending: Arc<Vec<std::sync::atomic::AtomicUsize>>,
}

impl Workers {
    /// Starts one thread per model.
    fn start(models: Vec<Model>) -> Result<Self> {
        let pending: Arc<Vec<std::sync::atomic::AtomicUsize>> =
            Arc::new(models.iter().map(|_| std::sync::atomic::AtomicUsize::new(0)).collect());
        let mut queues = Vec::with_capacity(models.len());
        for (i, mut model) in models.into_iter().enumerate() {
            let (tx, rx) = std::sync::mpsc::channel::<Job>();
            let pending = pending.clone();
            std::thread::Builder::new()
                .name(format!("ragtune-embed-{i}"))
                .spawn(move || {
                    for job in rx {
                        // A job that panics loses its own reply (its caller gets an error), never the session.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut model)));
                        pending[i].fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                    }
                })
                .map_err(|e| Error::unavailable("cannot start an embedding thread").with_source(e))?;
            queues.push(tx);
        }
        Ok(Self { queues, pending })
    }

    /// How many sessions (threads) there are.
    fn len(&self) -> usize {
        self.queues.len()
    }

    /// No job queued or running on any session.
    fn idle(&self) -> bool {
        self.pending.iter().all(|p| p.load(std::sync::atomic::Ordering::Acquire) == 0)
    }

    /// Queues `job` for the session with the fewest jobs (the first on ties), claimed atomically so that two calls
    /// arriving together take different idle sessions.
    fn submit(&self, job: Job) -> Result<()> {
        use std::sync::atomic::Ordering;
        let chosen = loop {
            let (i, seen) = self
                .pending
                .iter()
                .map(|p| p.load(Ordering::Acquire))
                .enumerate()
                .min_by_key(|&(i, n)| (n, i))
                .ok_or_else(|| Error::permanent("the embedding pool has no session"))?;
            if self.pending[i].compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                break i;
            }
        };
        self.queues[chosen].send(job).map_err(|_| {
            self.pending[chosen].fetch_sub(1, Ordering::AcqRel);
            Error::permanent("the embedding threads have stopped")
        })
    }

    /// Runs `run` on every batch of `parts` (indexes into `n` inputs), each batch a job for the first free session,
    /// waits for them all (call it off the async executor) and returns the outputs in input order. A cancelled or
    /// late call stops before each batch.
    fn run_parts<T: Send + 'static>(
        &self,
        n: usize,
        parts: Vec<Vec<usize>>,
        cancel: &Ctx,
        run: Arc<BatchFn<T>>,
        texts: Arc<Vec<String>>,
        encodings: Arc<Vec<tokenizers::Encoding>>,
    ) -> Result<Vec<T>> {
        let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<Vec<T>>)>();
        for (k, ids) in parts.iter().enumerate() {
            let (tx, cancel, run, texts, encodings) =
                (tx.clone(), cancel.clone(), run.clone(), texts.clone(), encodings.clone());
            let ids = ids.clone();
            self.submit(Box::new(move |model: &mut Model| {
                let out = cancel
                    .check()
                    .and_then(|()| run(model, &ids, &texts, &encodings))
                    .and_then(|out| checked(out, ids.len()));
                let _ = tx.send((k, out));
            }))?;
        }
        drop(tx);
        let mut outs: Vec<Option<Vec<T>>> = std::iter::repeat_with(|| None).take(parts.len()).collect();
        let mut first_error = None;
        for (k, out) in rx {
            match out {
                Ok(out) => outs[k] = Some(out),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let outs: Option<Vec<Vec<T>>> = outs.into_iter().collect();
        let outs = outs.ok_or_else(|| Error::permanent("an embedding job ended without a result"))?;
        Ok(in_input_order(n, &parts, outs))
    }
}

/// Checks that a batch of `expected` inputs gave one output each.
fn checked<T>(out: Vec<T>, expected: usize) -> Result<Vec<T>> {
    if out.len() == expected {
        Ok(out)
    } else {
        Err(Error::corrupt(format!("the model returned {} outputs for {expected} texts", out.len())))
    }
}

/// The outputs of each batch of `parts` (indexes into `n` inputs) put back in input order.
fn in_input_order<T>(n: usize, parts: &[Vec<usize>], outs: Vec<Vec<T>>) -> Vec<T> {
    let mut ordered: Vec<Option<T>> = std::iter::repeat_with(|| None).take(n).collect();
    for (ids, out) in parts.iter().zip(outs) {
        for (&i, v) in ids.iter().zip(out) {
            ordered[i] = Some(v);
        }
    }
    ordered.into_iter().flatten().collect()
}

/// What runs one batch of inputs (their indexes) on a session, given every input's text and encoding, and returns
/// one output per input.
type BatchFn<T> = dyn Fn(&mut Model, &[usize], &[String], &[tokenizers::Encoding]) -> Result<Vec<T>> + Send + Sync;

/// A text's vector and its spans' vectors (`None` for a span the model did not see).
type Pooled = (Vec<f32>, Vec<Option<Vec<f32>>>);

/// fastembed's normalisation (divide by the f32 norm plus 1e-12), so a vector pooled here has the bits of one
/// that `TextEmbedding::embed` returns.
fn fastembed_normalize(values: impl Iterator<Item = f32>) -> Vec<f32> {
    let v: Vec<f32> = values.collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|&x| x / (norm + 1e-12)).collect()
}

/// How long after two calls last overlapped a call still counts as concurrent (not alone), even with nothing else
/// in flight as it enters. Calls that follow each other closely from several callers (a busy server) leave gaps of
/// microseconds between them; without this a call entering such a gap would take the lone-call session and its
/// threads would compete with the next overlapping call's.
pub const QUIET: std::time::Duration = std::time::Duration::from_millis(100);

/// The calls in flight, and when calls last overlapped.
#[derive(Debug)]
struct Flights {
    count: std::sync::atomic::AtomicUsize,
    since: Instant,
    /// Microseconds from `since` to the last entry of a call while another was in flight; `u64::MAX` for never.
    last_overlap: std::sync::atomic::AtomicU64,
}

impl Flights {
    fn new() -> Self {
        Self {
            count: std::sync::atomic::AtomicUsize::new(0),
            since: Instant::now(),
            last_overlap: std::sync::atomic::AtomicU64::new(u64::MAX),
        }
    }
}

/// A call counted in flight for as long as it lives; `alone` when no other call was in flight as it entered and
/// none overlapped another for [`QUIET`] before.
struct InFlight {
    flights: Arc<Flights>,
    alone: bool,
}

impl InFlight {
    fn enter(flights: &Arc<Flights>) -> Self {
        Self::enter_at(flights, u64::try_from(flights.since.elapsed().as_micros()).unwrap_or(u64::MAX - 1))
    }

    /// [`enter`](Self::enter) at `now` microseconds from `flights.since`.
    fn enter_at(flights: &Arc<Flights>, now: u64) -> Self {
        use std::sync::atomic::Ordering;
        let before = flights.count.fetch_add(1, Ordering::SeqCst);
        let alone = if before > 0 {
            flights.last_overlap.store(now, Ordering::SeqCst);
            false
        } else {
            let last = flights.last_overlap.load(Ordering::SeqCst);
            last == u64::MAX || now.saturating_sub(last) >= QUIET.as_micros() as u64
        };
        Self { flights: flights.clone(), alone }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.flights.count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Settings of a [`CrossEncoderReranker`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrossEncoderConfig {
    /// Where the model comes from: `model.onnx` must output `logits [batch, 1]`.
    pub model: ModelSource,
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
            model: ModelSource::LocalDir(model_dir.into()),
            ort_library: ort_library.into(),
            model_id: model_id.into(),
            max_length: 512,
            batch_size: 16,
            intra_threads: 1,
        }
    }
}

/// A cross-encoder [`Reranker`] on fastembed's `TextRerank`: one forward pass per query–passage pair.
///
/// Scores are the model's raw logits (no sigmoid; higher is more relevant), one per candidate in input order.
///
/// **Cost model** (what the rerank controller reserves before a batch): one call per [`Reranker::score`]
/// invocation, one document and at most `max_length` tokens per pair. The reported cost (a `rerank` trace event)
/// never exceeds it: `calls` = 1, `docs` = pairs, `tokens` = pair tokens after truncation. The model's internal
/// inference batches of `batch_size` pairs are an implementation detail, recorded as `inference_batches` in the
/// event's details. Pairs longer than `max_length` are truncated and counted in a `rerank`/`truncated` event.
pub struct CrossEncoderReranker {
    model: Arc<Mutex<TextRerank>>,
    tokenizer: Arc<tokenizers::Tokenizer>,
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
        check_sizes(config.max_length, config.batch_size, config.intra_threads)?;
        let env = onnx_runtime_environment(&config.ort_library)?;
        let model = match &config.model {
            ModelSource::LocalDir(dir) => {
                let model = UserDefinedRerankingModel::new(read(&dir.join("model.onnx"))?, tokenizer_files(dir)?);
                let options = RerankInitOptionsUserDefined::new()
                    .with_max_length(config.max_length)
                    .with_intra_threads(config.intra_threads)
                    .with_environment(env);
                TextRerank::try_new_from_user_defined(model, options)
                    .map_err(model_err(&format!("cannot load the cross-encoder in {}", dir.display())))?
            }
            #[cfg(feature = "online")]
            ModelSource::Named { name, cache_dir } => {
                let model: fastembed::RerankerModel = name.parse().map_err(Error::invalid_input)?;
                let options = fastembed::RerankInitOptions::new(model)
                    .with_max_length(config.max_length)
                    .with_intra_threads(config.intra_threads)
                    .with_cache_dir(cache_dir.clone())
                    .with_show_download_progress(false)
                    .with_environment(env);
                TextRerank::try_new(options)
                    .map_err(model_err(&format!("cannot load the cross-encoder `{name}` from the hub")))?
            }
        };
        let tokenizer = Arc::new(model.tokenizer.clone());
        let name = format!("cross-encoder:{}", config.model_id);
        Ok(Self { model: Arc::new(Mutex::new(model)), tokenizer, name, config })
    }
}

#[async_trait]
impl Reranker for CrossEncoderReranker {
    fn name(&self) -> &str {
        &self.name
    }

    fn cost_model(&self) -> CostModel {
        // `ms_per_doc`: measured with `cargo xtask bench compare --reranker` on a MiniLM-L6 cross-encoder (int8,
        // one intra-op thread, SciFact pairs of 178 tokens on average): 16.9 pairs/s on a busy 2-core machine, so
        // about 60 ms per pair (docs/experiments/2026-11-29-reranker.md). The controller reads it only to fit a
        // batch before a deadline. Tokens are bounded by truncation, so `max_length` per pair is an upper bound the
        // reported count never passes.
        let tokens = u64::try_from(self.config.max_length).unwrap_or(u64::MAX);
        CostModel { per_call: Cost::new(0, 0, 1), per_doc: Cost::new(tokens, 1, 0), ms_per_doc: 60.0 }
    }

    async fn score(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
        ctx.check()?;
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let query = query.to_owned();
        let docs: Vec<String> = candidates.iter().map(|c| c.chunk.indexable_text()).collect();
        let (model, tokenizer, batch, n) =
            (self.model.clone(), self.tokenizer.clone(), self.config.batch_size, docs.len());
        let cancel = ctx.clone();
        let (scores, count, batches) = blocking(move || {
            let (mut scores, mut count, mut batches) = (vec![f32::NAN; n], TokenCount::default(), 0u64);
            for (b, part) in docs.chunks(batch).enumerate() {
                cancel.check()?;
                let c = count_tokens(&tokenizer, part.iter().map(|d| (query.as_str(), d.as_str())).collect())?;
                count.tokens += c.tokens;
                count.truncated += c.truncated;
                let refs: Vec<&str> = part.iter().map(String::as_str).collect();
                let results = model
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .rerank(query.as_str(), refs, false, Some(part.len()))
                    .map_err(model_err("reranking failed"))?;
                // fastembed returns results sorted by score; put them back in input order.
                for r in results {
                    if let Some(slot) = scores.get_mut(b * batch + r.index) {
                        *slot = r.score;
                    }
                }
                batches += 1;
            }
            Ok((scores, count, batches))
        })
        .await?;
        if scores.iter().any(|s| !s.is_finite()) {
            return Err(Error::corrupt("the cross-encoder returned a non-finite or missing score"));
        }
        ctx.trace(
            TraceEvent::new("rerank", self.name.clone())
                .detail("pairs", n)
                .detail("inference_batches", batches)
                .cost(Cost::new(count.tokens, n as u64, 1))
                .elapsed(started.elapsed()),
        );
        if count.truncated > 0 {
            ctx.trace(
                TraceEvent::new("rerank", "truncated")
                    .detail("pairs", count.truncated)
                    .detail("max_length", self.config.max_length),
            );
        }
        Ok(scores)
    }
}

#[cfg(test)]
mod tests {
    use super::{
        FastEmbedder, FastEmbedderConfig, Flights, InFlight, QUIET, length_order, onnx_runtime_environment, split,
    };

    #[test]
    fn a_call_is_alone_only_with_nothing_in_flight_and_no_overlap_for_a_while() {
        let flights = std::sync::Arc::new(Flights::new());
        let quiet = u64::try_from(QUIET.as_micros()).unwrap();
        // The first call, with nothing before it, is alone; the next, sequential, too.
        assert!(InFlight::enter_at(&flights, 0).alone);
        assert!(InFlight::enter_at(&flights, 10).alone);
        // Two calls at once: the first entered alone, the second overlaps it.
        let a = InFlight::enter_at(&flights, 1_000);
        let b = InFlight::enter_at(&flights, 1_001);
        assert!(a.alone && !b.alone);
        drop((a, b));
        // A call right after an overlap is not alone, even with nothing in flight (a busy server's gap) ...
        assert!(!InFlight::enter_at(&flights, 1_002).alone);
        assert!(!InFlight::enter_at(&flights, 1_001 + quiet - 1).alone);
        // ... and is once calls have not overlapped for QUIET.
        assert!(InFlight::enter_at(&flights, 1_001 + quiet).alone);
        // Every call in flight is counted out when it ends.
        assert_eq!(flights.count.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[track_caller]
    fn check_split(lengths: &[u64], batch: usize, sessions: usize, expect: &[std::ops::Range<usize>]) {
        assert_eq!(split(lengths, batch, sessions), expect);
    }

    #[test]
    // A one-batch expectation is written as the one range it is (`&[0..3]`), not as a list of indexes.
    #[allow(clippy::single_range_in_vec_init)]
    fn batches_are_runs_of_the_batch_size_and_small_calls_use_every_session() {
        // Large calls (at least two runs per session): runs of `batch`.
        check_split(&[1, 2, 3, 4, 5, 6, 7, 8, 9], 2, 2, &[0..2, 2..4, 4..6, 6..8, 8..9]);
        check_split(&[1; 4], 2, 2, &[0..2, 2..4]);
        // Fewer runs: a multiple of the sessions, balanced, none above `batch`.
        check_split(&[1, 2, 3, 4, 5], 2, 2, &[0..2, 2..3, 3..4, 4..5]);
        // One text, or one session: one batch.
        check_split(&[7], 32, 2, &[0..1]);
        check_split(&[1, 2, 3], 32, 1, &[0..3]);
        check_split(&[], 32, 2, &[]);
        // A small call is cut into one batch per session, balancing count × longest: the long text alone.
        check_split(&[10, 10, 10, 40], 32, 2, &[0..3, 3..4]);
        check_split(&[10, 10, 10, 10], 32, 2, &[0..2, 2..4]);
        check_split(&[5, 6], 32, 4, &[0..1, 1..2]);
        // Every text lands in exactly one batch, in order, none larger than `batch`; the work is balanced.
        let lengths: Vec<u64> = (1..=40).collect();
        let parts = split(&lengths, 32, 2);
        assert_eq!(parts.len(), 2);
        assert_eq!((parts[0].start, parts[1].end, parts[0].end), (0, 40, parts[1].start));
        assert!(parts.iter().all(|r| r.len() <= 32));
        let work: Vec<u64> = parts.iter().map(|r| r.len() as u64 * lengths[r.end - 1]).collect();
        assert!(work[0].abs_diff(work[1]) <= 40, "{work:?}");
    }

    #[test]
    fn texts_are_embedded_shortest_first_and_ties_keep_their_order() {
        assert_eq!(length_order(&[(5, false), (2, false), (9, true), (2, false)]), vec![1, 3, 0, 2]);
        assert!(length_order(&[]).is_empty());
    }

    /// The embedder runs the model on its own encodings (each text tokenised once, a batch padded to its longest): the
    /// vectors are the bits fastembed's `TextEmbedding::embed` gives for the same texts, alone and in batches with
    /// padding, after the embedder's own normalisation (in f64, which the embedder applies to every vector it returns).
    #[tokio::test]
    async fn vectors_are_the_bits_fastembed_gives() {
        use ragtune_core::{Ctx, Embedder, TextRole};
        let layout = ragtune_provision::ModelLayout::new(ragtune_provision::ragtune_home());
        if !layout.are_wheel_files_provisioned() {
            let msg = format!("models are not provisioned under {}: run `cargo xtask models`", layout.home().display());
            assert!(
                !std::env::var("RAGTUNE_REQUIRE_MODELS").is_ok_and(|v| v == "1"),
                "RAGTUNE_REQUIRE_MODELS=1 but {msg}"
            );
            // Straight to stderr: libtest captures `eprintln!` of passing tests, and a skip must be seen.
            let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("SKIPPED: {msg}\n").as_bytes());
            return;
        }
        let e = FastEmbedder::new(FastEmbedderConfig::new(layout.minilm_dir(), layout.onnxruntime_library())).unwrap();
        let dir = layout.minilm_dir();
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
        let files = fastembed::TokenizerFiles {
            tokenizer_file: read("tokenizer.json"),
            config_file: read("config.json"),
            special_tokens_map_file: read("special_tokens_map.json"),
            tokenizer_config_file: read("tokenizer_config.json"),
        };
        let model =
            fastembed::UserDefinedEmbeddingModel::new(read("model.onnx"), files).with_pooling(fastembed::Pooling::Mean);
        let env = onnx_runtime_environment(&layout.onnxruntime_library()).unwrap();
        let options =
            fastembed::InitOptionsUserDefined::new().with_max_length(256).with_intra_threads(1).with_environment(env);
        let mut reference = fastembed::TextEmbedding::try_new_from_user_defined(model, options).unwrap();
        let mut reference = move |texts: &[&str]| -> Vec<Vec<f32>> {
            let mut vectors = reference.embed(texts, Some(texts.len())).unwrap();
            for v in &mut vectors {
                let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt() as f32;
                v.iter_mut().for_each(|x| *x /= norm);
            }
            vectors
        };
        let long = "A sentence that goes on for a while. ".repeat(60);
        let texts =
            ["Scurvy comes from a lack of vitamin C.", "short", "", long.as_str(), "ünïcödé — text, with punctuation!"];
        // Every text alone (a query's path), then all five in one batch (padded to the 256-token one).
        for text in texts {
            let ours = e.embed(&Ctx::new(), &[text], TextRole::Query).await.unwrap();
            assert_eq!(ours, reference(&[text]), "{text:?} alone");
        }
        let mut config = FastEmbedderConfig::new(layout.minilm_dir(), layout.onnxruntime_library());
        (config.sessions, config.lone_threads) = (1, 1);
        let single = FastEmbedder::new(config).unwrap();
        let ours = single.embed(&Ctx::new(), &texts, TextRole::Passage).await.unwrap();
        assert_eq!(ours, reference(&texts), "one batch");
    }
}
