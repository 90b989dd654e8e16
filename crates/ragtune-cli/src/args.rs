//! The argument groups several commands share, the one place command-line overrides reach the [`Config`], and the
//! output helpers every command uses (reports written with `--out`, progress bars).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use ragtune::{Config, StoreBackend, Transform};
use serde::Serialize;

/// Where a Qdrant store is, overriding the configuration file.
#[derive(Debug, Default, clap::Args)]
pub struct QdrantArgs {
    /// Use a Qdrant server at this gRPC URL (e.g. http://127.0.0.1:6334) instead of the embedded store.
    #[arg(long, value_name = "URL")]
    pub qdrant_url: Option<String>,
    /// The Qdrant collection (default: the config's store.qdrant.collection, `ragtune`).
    #[arg(long, value_name = "NAME")]
    pub collection: Option<String>,
}

/// The store a command reads or writes: a directory, or a Qdrant server.
#[derive(Debug, Default, clap::Args)]
pub struct StoreArgs {
    /// The store directory (default: the config's store.path, `.ragtune`).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    #[command(flatten)]
    pub qdrant: QdrantArgs,
}

/// The language model of the evaluations.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct LlmArgs {
    /// The OpenAI-compatible LLM (default: the config's llm.url, else $RAGTUNE_LLM_URL, else the local server of
    /// `cargo xtask llm start` when one runs and the evaluation needs an LLM).
    #[arg(long, value_name = "URL")]
    pub llm_url: Option<String>,
    /// The model name sent to the LLM (default: the config's llm.model).
    #[arg(long, value_name = "NAME")]
    pub llm_model: Option<String>,
    /// Run without any LLM even when one is configured or a local server runs: extractive answers, refinement
    /// strips instead of extraction, the LLM-free judge.
    #[arg(long, conflicts_with_all = ["llm_url", "llm_model"])]
    pub no_llm: bool,
}

/// Retrieval and transformation settings the evaluations tune from the command line.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct RetrievalTuning {
    /// How hybrid fuses BM25 and dense: rrf, convex, dbsf (default: the config's, convex).
    #[arg(long, value_name = "METHOD")]
    pub fusion: Option<ragtune::FusionMethod>,
    /// Strength of hybrid's query-time weights, 0..=8, 0 for fixed weights (default: the config's).
    #[arg(long, value_name = "X")]
    pub adaptive: Option<f32>,
    /// RRF constant k for hybrid with --fusion rrf (default: the config's, 60).
    #[arg(long = "rrf-k")]
    pub rrf_k: Option<f32>,
    /// Candidates per strategy before fusion (default: the config's, 100).
    #[arg(long)]
    pub depth: Option<usize>,
    /// Weight of BM25 in hybrid fusion (default: the config's).
    #[arg(long = "bm25-weight")]
    pub bm25_weight: Option<f32>,
    /// Weight of dense retrieval in hybrid fusion (default: the config's).
    #[arg(long = "dense-weight")]
    pub dense_weight: Option<f32>,
    /// Hybrid level weights: BM25's best score per query term at which its weight halves (default: the config's).
    #[arg(long = "bm25-level", value_name = "X")]
    pub bm25_level: Option<f32>,
    /// Hybrid level weights: dense's best cosine at which its weight halves (default: the config's).
    #[arg(long = "dense-level", value_name = "X")]
    pub dense_level: Option<f32>,
    /// How steeply hybrid's level weights rise; 0 turns them off (default: the config's).
    #[arg(long = "level-slope", value_name = "X")]
    pub level_slope: Option<f32>,
    /// ONNX Runtime threads for the embedding model (default 1).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Generated queries per question for multi-query (default 4).
    #[arg(long, value_name = "N")]
    pub multi_query_n: Option<usize>,
    /// Retrievals at most for multi-hop (default 3).
    #[arg(long, value_name = "N")]
    pub max_hops: Option<usize>,
    /// A synonym table for expand (default: the built-in one).
    #[arg(long, value_name = "FILE")]
    pub synonyms: Option<PathBuf>,
    /// Let the LLM classify questions for routed (default: the heuristic only).
    #[arg(long)]
    pub router_llm: bool,
}

/// Where a command writes its machine-readable report.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct OutArgs {
    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// When the local LLM server of `cargo xtask llm start` stands in for an LLM URL that is set nowhere.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LocalLlm {
    /// Never: the command runs without an LLM.
    #[default]
    Never,
    /// When one runs; the note printed says how to answer without it.
    WithNoLlmHint,
    /// When one runs.
    Quietly,
}

/// Every command-line setting that overrides the configuration file, in the order they apply.
#[derive(Debug, Default)]
pub struct Overrides {
    /// `store.path`.
    pub store: Option<PathBuf>,
    /// `store.qdrant` (a URL also sets `store.backend = "qdrant"`).
    pub qdrant: QdrantArgs,
    /// `transform.kind`.
    pub transform: Option<Transform>,
    /// `embedding.threads`, `hybrid` and the transformations' settings.
    pub tuning: RetrievalTuning,
    /// `llm.url`.
    pub llm_url: Option<String>,
    /// `llm.model`.
    pub llm_model: Option<String>,
    /// Clears the LLM URL, whatever the file and the environment say.
    pub no_llm: bool,
    /// Whether the local LLM server stands in for a URL set nowhere.
    pub local_llm: LocalLlm,
    /// `web.enabled` (`--web` / `--no-web`).
    pub web: Option<bool>,
    /// `server.bind` (`serve --bind`).
    pub server_bind: Option<String>,
}

impl Overrides {
    /// The overrides of a store group.
    pub fn store(args: StoreArgs) -> Self {
        Self { store: args.store, qdrant: args.qdrant, ..Self::default() }
    }

    /// The overrides of an LLM group, with the local server as the fallback when `needs_llm`.
    pub fn llm(args: LlmArgs, needs_llm: bool) -> Self {
        let local_llm = if needs_llm { LocalLlm::Quietly } else { LocalLlm::Never };
        Self { llm_url: args.llm_url, llm_model: args.llm_model, no_llm: args.no_llm, local_llm, ..Self::default() }
    }
}

/// Applies command-line overrides to a configuration: a Qdrant URL switches the backend to Qdrant; `no_llm`
/// clears the LLM URL; without a URL anywhere, the local server of `cargo xtask llm start` when `local_llm` allows.
pub fn apply_overrides(cfg: &mut Config, o: Overrides) {
    if let Some(s) = o.store {
        cfg.store.path = s;
    }
    if let Some(url) = o.qdrant.qdrant_url {
        cfg.store.backend = StoreBackend::Qdrant;
        cfg.store.qdrant.url = url;
    }
    if let Some(c) = o.qdrant.collection {
        cfg.store.qdrant.collection = c;
    }
    if let Some(t) = o.transform {
        cfg.transform.kind = t;
    }
    let (tuning, h, t) = (o.tuning, &mut cfg.hybrid, &mut cfg.transform);
    cfg.embedding.threads = tuning.threads.unwrap_or(cfg.embedding.threads);
    h.fusion = tuning.fusion.unwrap_or(h.fusion);
    h.adaptive = tuning.adaptive.unwrap_or(h.adaptive);
    h.k = tuning.rrf_k.unwrap_or(h.k);
    h.depth = tuning.depth.unwrap_or(h.depth);
    h.bm25_weight = tuning.bm25_weight.unwrap_or(h.bm25_weight);
    h.dense_weight = tuning.dense_weight.unwrap_or(h.dense_weight);
    h.bm25_level = tuning.bm25_level.unwrap_or(h.bm25_level);
    h.dense_level = tuning.dense_level.unwrap_or(h.dense_level);
    h.level_slope = tuning.level_slope.unwrap_or(h.level_slope);
    t.multi_query_n = tuning.multi_query_n.unwrap_or(t.multi_query_n);
    t.max_hops = tuning.max_hops.unwrap_or(t.max_hops);
    t.synonyms = tuning.synonyms.or_else(|| t.synonyms.take());
    t.router_llm |= tuning.router_llm;
    if let Some(url) = o.llm_url {
        cfg.llm.url = url;
    }
    if o.no_llm {
        cfg.llm.url = String::new();
    } else if o.local_llm != LocalLlm::Never
        && cfg.llm.url.trim().is_empty()
        && let Some(url) = ragtune::local_llm_url()
    {
        let hint = if o.local_llm == LocalLlm::WithNoLlmHint { "; --no-llm answers without it" } else { "" };
        eprintln!("using the local LLM at {url} ($RAGTUNE_HOME/llm/server.json){hint}");
        cfg.llm.url = url;
    }
    if let Some(model) = o.llm_model {
        cfg.llm.model = model;
    }
    if let Some(on) = o.web {
        cfg.web.enabled = on;
    }
    if let Some(bind) = o.server_bind {
        cfg.server.bind = bind;
    }
}

/// Stops with a usage error about `subcommand` (exit code 2 and its usage line, like clap's own errors), for
/// checks that need the configuration file and so cannot run before the command starts.
pub fn usage_error(subcommand: &str, message: &str) -> ! {
    use clap::CommandFactory;
    let mut cli = crate::Cli::command();
    cli.build();
    let mut command = cli.find_subcommand_mut(subcommand).cloned().unwrap_or(cli);
    command.error(clap::error::ErrorKind::ArgumentConflict, message).exit()
}

/// The configuration file (`--config`, else $RAGTUNE_CONFIG, else defaults) with the overrides applied, checked
/// again as a whole (a flag is held to the bounds of the setting it overrides).
pub fn load_config(file: Option<&Path>, overrides: Overrides) -> anyhow::Result<Config> {
    let mut cfg = Config::load(file)?;
    apply_overrides(&mut cfg, overrides);
    cfg.validate().map_err(|e| e.context("the command-line flags"))?;
    Ok(cfg)
}

impl OutArgs {
    /// Writes `report` as pretty JSON to `--out`, when given, and says so on stderr.
    pub fn write(&self, report: &impl Serialize) -> anyhow::Result<()> {
        if let Some(path) = &self.out {
            std::fs::write(path, serde_json::to_string_pretty(report)? + "\n")
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        Ok(())
    }
}

/// A progress bar on stderr for `what` (`indexing … documents`), hidden when stderr is not a terminal or `quiet`.
pub fn progress_bar(doing: &str, unit: &str, quiet: bool) -> anyhow::Result<ProgressBar> {
    let bar = if std::io::stderr().is_terminal() && !quiet { ProgressBar::new(0) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template(&format!("{{spinner}} {doing} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{elapsed}})"))
            .map_err(|e| anyhow::anyhow!("progress template: {e}"))?
            .progress_chars("=> "),
    );
    Ok(bar)
}

/// The first `max` characters of a text on one line.
pub fn snippet(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}
