//! The `ragtune` command-line tool: index documents into the embedded store (or a Qdrant server), search them,
//! evaluate on BEIR datasets, and migrate an embedded store into Qdrant. Exit codes: 0 success, 1 runtime error,
//! 2 usage error.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use ragtune::core::Query;
use ragtune::eval::{EvalOptions, run_eval, summary_table};
use ragtune::{Bm25Settings, Config, Engine, StoreBackend, Strategy, Transform};

#[derive(Debug, Parser)]
#[command(name = "ragtune", version, about = "A self-correcting, budget-aware retrieval engine for RAG.")]
struct Cli {
    /// A TOML configuration file (default: $RAGTUNE_CONFIG, else built-in defaults).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Index a folder of Markdown/text files, a JSONL file, or a BEIR directory.
    Index {
        /// What to index.
        path: PathBuf,
        /// The store directory (default: the config's store.path, `.ragtune`).
        #[arg(long, value_name = "DIR")]
        store: Option<PathBuf>,
        #[command(flatten)]
        qdrant: QdrantArgs,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Search the store.
    Search {
        /// The query.
        query: String,
        /// The store directory.
        #[arg(long, value_name = "DIR")]
        store: Option<PathBuf>,
        #[command(flatten)]
        qdrant: QdrantArgs,
        /// Number of results.
        #[arg(short = 'k', long = "top-k", value_name = "N")]
        top_k: Option<usize>,
        /// Retrieval strategy: auto (hybrid when dense vectors are available, else bm25), bm25, dense, hybrid.
        #[arg(long, value_name = "NAME")]
        strategy: Option<Strategy>,
        /// Query transformation: none, hyde, multi-query, rewrite, expand, routed, multi-hop.
        #[arg(long, value_name = "NAME")]
        transform: Option<Transform>,
        /// An OpenAI-compatible LLM for transformations (default: the config's llm.url, else $RAGTUNE_LLM_URL).
        #[arg(long, value_name = "URL")]
        llm_url: Option<String>,
        /// Print results (with provenance and trace) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Answer a question with the whole pipeline: retrieve, judge and correct the retrieval (Corrective RAG),
    /// refine or extract the context, generate an answer with citations (extractive without an LLM), judge its
    /// faithfulness, retry when the smart-retry policy says so.
    Ask {
        /// The question.
        question: String,
        #[command(flatten)]
        opts: AskArgs,
        /// Print the whole result (answer, citations, CRAG metadata, faithfulness, cost) as JSON.
        #[arg(long)]
        json: bool,
        /// Print the trace of every step.
        #[arg(long)]
        trace: bool,
    },
    /// The context the pipeline would answer from (retrieval, correction, refinement or extraction), without
    /// generating an answer.
    Query {
        /// The question.
        question: String,
        #[command(flatten)]
        opts: AskArgs,
        /// Print the whole result as JSON.
        #[arg(long)]
        json: bool,
        /// Print the trace of every step.
        #[arg(long)]
        trace: bool,
    },
    /// Evaluate retrieval on a BEIR dataset and print nDCG, recall, MRR, MAP and latency.
    Eval {
        /// The BEIR dataset directory (corpus.jsonl, queries.jsonl, qrels/).
        #[arg(long, value_name = "DIR")]
        dataset: PathBuf,
        /// The qrels split.
        #[arg(long, default_value = "test")]
        split: String,
        /// The retriever to evaluate: bm25, dense, hybrid.
        #[arg(long, default_value = "bm25")]
        retriever: String,
        /// Results per query.
        #[arg(long = "top-k", default_value_t = 100)]
        top_k: usize,
        /// BM25 k1 (default 1.2).
        #[arg(long)]
        k1: Option<f32>,
        /// BM25 b (default 0.75).
        #[arg(long)]
        b: Option<f32>,
        /// RRF constant k for hybrid (default 60).
        #[arg(long = "rrf-k")]
        rrf_k: Option<f32>,
        /// Candidates per strategy before fusion (default 100).
        #[arg(long)]
        depth: Option<usize>,
        /// Weight of BM25 in hybrid fusion (default 1).
        #[arg(long = "bm25-weight")]
        bm25_weight: Option<f32>,
        /// Weight of dense retrieval in hybrid fusion (default 1).
        #[arg(long = "dense-weight")]
        dense_weight: Option<f32>,
        /// ONNX Runtime threads for the embedding model (default 1).
        #[arg(long)]
        threads: Option<usize>,
        /// Write the JSON report here.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Rebuild the index even when a cached one exists.
        #[arg(long)]
        reindex: bool,
        /// Where cached indexes live (default: $RAGTUNE_HOME/eval-cache).
        #[arg(long, value_name = "DIR")]
        cache_dir: Option<PathBuf>,
        /// Where to index: `embedded` (cached between runs) or `qdrant` (a collection per dataset and settings,
        /// rebuilt every run).
        #[arg(long, value_name = "BACKEND", default_value = "embedded")]
        store: StoreBackend,
        /// The Qdrant gRPC URL for `--store qdrant` (default: the config's, else $RAGTUNE_QDRANT_URL, else
        /// http://127.0.0.1:6334).
        #[arg(long, value_name = "URL")]
        qdrant_url: Option<String>,
        /// Query transformation: none, hyde, multi-query, rewrite, expand, routed, multi-hop.
        #[arg(long, value_name = "NAME", default_value = "none")]
        transform: Transform,
        /// The OpenAI-compatible LLM for transformations (default: the config's llm.url, else $RAGTUNE_LLM_URL).
        #[arg(long, value_name = "URL")]
        llm_url: Option<String>,
        /// The model name sent to the LLM (default: the config's llm.model).
        #[arg(long, value_name = "NAME")]
        llm_model: Option<String>,
        /// Evaluate only the first N queries of the split (for slow transformations).
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Generated queries per question for multi-query (default 4).
        #[arg(long, value_name = "N")]
        multi_query_n: Option<usize>,
        /// Retrievals at most for multi-hop (default 3).
        #[arg(long, value_name = "N")]
        max_hops: Option<usize>,
        /// A synonym table for expand (default: the built-in one).
        #[arg(long, value_name = "FILE")]
        synonyms: Option<PathBuf>,
        /// Let the LLM classify questions for routed (default: the heuristic only).
        #[arg(long)]
        router_llm: bool,
        /// Also measure the budgeted reranking controller with this reranker (`llm`) on the retrieved
        /// candidates; its scores are cached under $RAGTUNE_HOME/rerank-cache.
        #[arg(long, value_name = "RERANKER")]
        rerank: Option<String>,
        /// Rerank budgets as fractions of the pool, comma-separated.
        #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "0.1,0.2,0.3,0.5,1.0")]
        rerank_budget: Vec<f64>,
        /// Controller policies to compare, comma-separated: greedy, dynamic, uncertainty.
        #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "greedy,uncertainty")]
        policy: Vec<String>,
        /// Candidates per query handed to the controller.
        #[arg(long, value_name = "N", default_value_t = 50)]
        rerank_pool: usize,
        /// Answer-level evaluation on a QA dataset (the CMU Wikipedia QA set): the named experiments to run,
        /// comma-separated (no_retrieval, baseline, forced_search, refined, extraction, judge, smart_retry,
        /// multi_query, batched_extraction, corrective); `none` with --refinement measures refinement only.
        #[arg(long, value_name = "LIST", value_delimiter = ',')]
        experiment: Vec<String>,
        /// QA datasets: also measure knowledge refinement (answer-bearing strips kept, tokens cut).
        #[arg(long)]
        refinement: bool,
        /// BEIR datasets: Corrective-RAG decision statistics (both evaluators, thresholds from the config) and
        /// nDCG@10 with and without correction, instead of the retrieval metrics.
        #[arg(long)]
        crag: bool,
        /// The cut-off of "retrieval succeeded" for --crag (a relevant document in the top K).
        #[arg(long, value_name = "K", default_value_t = 10)]
        crag_k: usize,
    },
    /// Fit the model-based CRAG evaluator's two thresholds on a training split and write them to a config file.
    Calibrate {
        /// The BEIR dataset directory.
        #[arg(long, value_name = "DIR")]
        dataset: PathBuf,
        /// The split to fit on (never the test split you report on).
        #[arg(long, default_value = "train")]
        split: String,
        /// The retriever whose results are judged: bm25, dense, hybrid.
        #[arg(long, default_value = "hybrid")]
        retriever: String,
        /// "Retrieval succeeded" means a relevant document in the top K.
        #[arg(long, value_name = "K", default_value_t = 10)]
        k: usize,
        /// The precision CORRECT must reach on the split (sets the upper threshold).
        #[arg(long, value_name = "P", default_value_t = 0.9)]
        target_precision: f32,
        /// The evaluator whose thresholds are fitted: `model` (upper/lower of the retrieval-score scorer) or
        /// `heuristic` (seed 002's relevant/partial thresholds, its weights as configured).
        #[arg(long, value_name = "NAME", default_value = "model")]
        evaluator: String,
        /// Where to write the thresholds (a config file `ragtune --config` reads).
        #[arg(long, value_name = "FILE", default_value = "configs/crag-calibrated.toml")]
        out: PathBuf,
        /// Where cached indexes live (default: $RAGTUNE_HOME/eval-cache).
        #[arg(long, value_name = "DIR")]
        cache_dir: Option<PathBuf>,
        /// Use only the first N queries.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// Copy an embedded store (chunks, payloads, dense and sparse vectors) into a Qdrant collection or another
    /// embedded store. Idempotent: an interrupted migration can be run again.
    Migrate {
        /// The embedded store to read (default: the config's store.path).
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
        /// The target backend: `qdrant` or `embedded`.
        #[arg(long, value_name = "BACKEND")]
        to: StoreBackend,
        /// The target directory for `--to embedded`.
        #[arg(long, value_name = "DIR", required_if_eq("to", "embedded"))]
        to_dir: Option<PathBuf>,
        #[command(flatten)]
        qdrant: QdrantArgs,
        /// Delete the target collection first (Qdrant only).
        #[arg(long)]
        replace: bool,
        /// Records per write.
        #[arg(long, default_value_t = 256)]
        batch: usize,
    },
}

/// Options of `ask` and `query` that override the configuration file.
#[derive(Debug, clap::Args)]
struct AskArgs {
    /// The store directory.
    #[arg(long, value_name = "DIR")]
    store: Option<PathBuf>,
    #[command(flatten)]
    qdrant: QdrantArgs,
    /// An OpenAI-compatible LLM (default: the config's llm.url, else $RAGTUNE_LLM_URL, else the local server of
    /// `cargo xtask llm start` when one runs; none: extractive answers).
    #[arg(long, value_name = "URL")]
    llm_url: Option<String>,
    /// Answer without any LLM even when one is configured (extractive answer, LLM-free judge).
    #[arg(long)]
    no_llm: bool,
    /// Candidates retrieved on the first attempt.
    #[arg(short = 'k', long = "top-k", value_name = "N")]
    top_k: Option<usize>,
}

impl AskArgs {
    fn config(self, cli_config: Option<&PathBuf>) -> anyhow::Result<Config> {
        let mut cfg = config(cli_config, self.store)?;
        self.qdrant.apply(&mut cfg);
        if let Some(url) = self.llm_url {
            cfg.llm.url = url;
        }
        if self.no_llm {
            cfg.llm.url = String::new();
        } else if cfg.llm.url.trim().is_empty()
            && let Some(url) = ragtune::local_llm_url()
        {
            // No URL anywhere: the local server of `cargo xtask llm start`, when one runs.
            eprintln!("using the local LLM at {url} ($RAGTUNE_HOME/llm/server.json); --no-llm answers without it");
            cfg.llm.url = url;
        }
        if let Some(k) = self.top_k {
            cfg.pipeline.top_k = k;
        }
        Ok(cfg)
    }
}

fn print_answer(r: &ragtune::AskResponse, show_trace: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if let Some(answer) = &r.answer {
        writeln!(out, "{answer}")?;
        writeln!(out)?;
    }
    if !r.citations.is_empty() {
        writeln!(out, "Sources:")?;
        for c in &r.citations {
            let title = c.title.as_deref().map(|t| format!(" ({t})")).unwrap_or_default();
            writeln!(out, "  [{}] {}{title}", c.n, c.chunk_id)?;
        }
    }
    if r.answer.is_none() {
        writeln!(
            out,
            "Context ({}, {} of {} tokens):",
            r.context_report.method, r.context_report.tokens_after, r.context_report.tokens_before
        )?;
        for p in &r.context {
            writeln!(out, "[{}] {}", p.n, p.chunk_id)?;
            writeln!(out, "    {}", snippet(&p.text, 300))?;
        }
    }
    let c = &r.crag;
    let decision = c.decision.map_or_else(|| "none".to_owned(), |d| format!("{d:?}").to_uppercase());
    writeln!(
        out,
        "CRAG: {} ({}, score {:.2}, evaluator {}); correction: {}{}; candidates {} -> {}{}",
        c.category,
        decision,
        c.score,
        c.evaluator,
        c.correction_strategy,
        if c.web_search_used { " (web used)" } else { "" },
        c.original_count,
        c.final_count,
        if c.cache_hit { "; cache hit" } else { "" }
    )?;
    if let Some(f) = &r.faithfulness {
        writeln!(
            out,
            "Faithfulness: {:?} by {} ({:.0}% of {} statements supported, {:.0}% unsupported)",
            f.overall,
            f.label(),
            f.supported_share * 100.0,
            f.statements.len(),
            f.unsupported_share * 100.0
        )?;
    }
    writeln!(
        out,
        "Answer: {:?}; attempts: {}; context: {} ({} -> {} tokens); {} LLM calls, {} tokens, {:.0} ms",
        r.answer_kind,
        r.attempts.len().max(1),
        r.context_report.method,
        r.context_report.tokens_before,
        r.context_report.tokens_after,
        r.cost.llm_calls,
        r.cost.tokens,
        r.cost.total_ms
    )?;
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    if show_trace {
        writeln!(out, "Trace:")?;
        for e in &r.trace {
            writeln!(out, "  {}", serde_json::to_string(e)?)?;
        }
    }
    Ok(())
}

/// `ragtune ask` (`generate`) and `ragtune query`: run the pipeline and print the result.
async fn answer(
    cli_config: &Option<PathBuf>,
    question: String,
    opts: AskArgs,
    json: bool,
    trace: bool,
    generate: bool,
) -> anyhow::Result<()> {
    let engine = Engine::open(opts.config(cli_config.as_ref())?).await?;
    let mut r = if generate { engine.ask(&question).await? } else { engine.query(&question).await? };
    if json {
        if !trace {
            r.trace.clear();
        }
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_answer(&r, trace)?;
    }
    Ok(())
}

/// Where a Qdrant store is, overriding the configuration file.
#[derive(Debug, clap::Args)]
struct QdrantArgs {
    /// Use a Qdrant server at this gRPC URL (e.g. http://127.0.0.1:6334) instead of the embedded store.
    #[arg(long, value_name = "URL")]
    qdrant_url: Option<String>,
    /// The Qdrant collection (default: the config's store.qdrant.collection, `ragtune`).
    #[arg(long, value_name = "NAME")]
    collection: Option<String>,
}

impl QdrantArgs {
    /// Applies the options to a configuration; a URL switches the backend to Qdrant.
    fn apply(self, cfg: &mut Config) {
        if let Some(url) = self.qdrant_url {
            cfg.store.backend = StoreBackend::Qdrant;
            cfg.store.qdrant.url = url;
        }
        if let Some(c) = self.collection {
            cfg.store.qdrant.collection = c;
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match e.downcast_ref::<ragtune::core::Error>() {
                Some(re) => eprintln!("error: {}", re.chain()),
                None => eprintln!("error: {e:#}"),
            }
            ExitCode::from(1)
        }
    }
}

fn config(cli_config: Option<&PathBuf>, store: Option<PathBuf>) -> anyhow::Result<Config> {
    let mut cfg = Config::load(cli_config.map(PathBuf::as_path))?;
    if let Some(s) = store {
        cfg.store.path = s;
    }
    Ok(cfg)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Index { path, store, qdrant, json } => {
            let mut cfg = config(cli.config.as_ref(), store)?;
            qdrant.apply(&mut cfg);
            let mut engine = Engine::open(cfg).await?;
            let bar =
                if std::io::stderr().is_terminal() && !json { ProgressBar::new(0) } else { ProgressBar::hidden() };
            bar.set_style(
                ProgressStyle::with_template("{spinner} indexing [{bar:30}] {pos}/{len} documents ({elapsed})")
                    .map_err(|e| anyhow::anyhow!("progress template: {e}"))?
                    .progress_chars("=> "),
            );
            let report = engine
                .index_path(&path, &mut |done, total| {
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                })
                .await?;
            bar.finish_and_clear();
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!(
                    "indexed {} documents into {} ({} passages, {} sections) in {:.2} s; the store holds {} chunks of {} documents",
                    report.documents,
                    engine.store_location(),
                    report.passages,
                    report.sections,
                    report.seconds,
                    report.store.chunks,
                    report.store.documents
                );
                if !report.issues.is_empty() {
                    eprintln!("{} problems (the rest was indexed):", report.issues.len());
                    for issue in report.issues.iter().take(20) {
                        eprintln!("  {issue}");
                    }
                    if report.issues.len() > 20 {
                        eprintln!("  … and {} more (use --json for all)", report.issues.len() - 20);
                    }
                }
            }
        }
        Command::Ask { question, opts, json, trace } => answer(&cli.config, question, opts, json, trace, true).await?,
        Command::Query { question, opts, json, trace } => {
            answer(&cli.config, question, opts, json, trace, false).await?;
        }
        Command::Search { query, store, qdrant, top_k, strategy, transform, llm_url, json } => {
            let mut cfg = config(cli.config.as_ref(), store)?;
            qdrant.apply(&mut cfg);
            if let Some(t) = transform {
                cfg.transform.kind = t;
            }
            if let Some(url) = llm_url {
                cfg.llm.url = url;
            }
            let k = top_k.unwrap_or(cfg.search.top_k);
            let strategy = strategy.unwrap_or(cfg.search.strategy);
            let engine = Engine::open(cfg).await?;
            let response = engine.search_with(Query::new(query).with_top_k(k), strategy).await?;
            if !json {
                for event in response.trace.iter().filter(|e| e.stage == "route") {
                    if let Some(why) = event.detail.get("fallback").and_then(|v| v.as_str()) {
                        eprintln!("note: searching with {} only — {why}", event.action);
                    }
                }
            }
            let mut out = std::io::stdout().lock();
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&response)?)?;
            } else if response.hits.is_empty() {
                writeln!(out, "no results")?;
            } else {
                for (i, c) in response.hits.iter().enumerate() {
                    let path = if c.chunk.header_path.is_empty() {
                        String::new()
                    } else {
                        format!("  [{}]", c.chunk.header_path.join(" > "))
                    };
                    writeln!(out, "{:>2}. {}  {:.4}{}", i + 1, c.chunk.id, c.score, path)?;
                    writeln!(out, "    {}", snippet(&c.chunk.text, 160))?;
                }
            }
        }
        Command::Eval {
            dataset,
            split,
            retriever,
            top_k,
            k1,
            b,
            rrf_k,
            depth,
            bm25_weight,
            dense_weight,
            threads,
            out,
            reindex,
            cache_dir,
            store,
            qdrant_url,
            transform,
            llm_url,
            llm_model,
            limit,
            multi_query_n,
            max_hops,
            synonyms,
            router_llm,
            rerank,
            rerank_budget,
            policy,
            rerank_pool,
            experiment,
            refinement,
            crag,
            crag_k,
        } => {
            let mut cfg = config(cli.config.as_ref(), None)?;
            if ragtune::qa_eval::is_qa_dataset(&dataset) || !experiment.is_empty() {
                if let Some(url) = llm_url.clone() {
                    cfg.llm.url = url;
                }
                if cfg.llm.url.trim().is_empty()
                    && let Some(url) = ragtune::local_llm_url()
                {
                    eprintln!("using the local LLM at {url} ($RAGTUNE_HOME/llm/server.json)");
                    cfg.llm.url = url;
                }
                if let Some(model) = llm_model.clone() {
                    cfg.llm.model = model;
                }
                let opts = ragtune::qa_eval::QaEvalOptions {
                    dataset,
                    // `--experiment none` with `--refinement` measures refinement alone.
                    experiments: if experiment.is_empty() {
                        vec!["baseline".into()]
                    } else {
                        experiment.into_iter().filter(|e| e != "none").collect()
                    },
                    config: cfg,
                    limit,
                    cache_dir: cache_dir.unwrap_or_else(|| ragtune::ragtune_home().join("eval-cache")),
                    reindex,
                    refinement_check: refinement,
                };
                let report = ragtune::qa_eval::run_qa_eval(&opts, &mut |line| eprintln!("{line}")).await?;
                print!("{}", ragtune::qa_eval::qa_table(&report));
                if let Some(path) = out {
                    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
                        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
                    eprintln!("wrote {}", path.display());
                }
                return Ok(());
            }
            let mut opts = EvalOptions::new(dataset);
            opts.split = split;
            opts.retriever = retriever;
            opts.top_k = top_k;
            let d = Bm25Settings::default();
            opts.bm25 = Bm25Settings { k1: k1.unwrap_or(d.k1), b: b.unwrap_or(d.b), avg_doc_len: None };
            opts.embedding = cfg.embedding.clone();
            if let Some(t) = threads {
                opts.embedding.threads = t;
            }
            let h = &mut opts.hybrid;
            *h = cfg.hybrid;
            h.k = rrf_k.unwrap_or(h.k);
            h.depth = depth.unwrap_or(h.depth);
            h.bm25_weight = bm25_weight.unwrap_or(h.bm25_weight);
            h.dense_weight = dense_weight.unwrap_or(h.dense_weight);
            opts.reindex = reindex;
            if let Some(d) = cache_dir {
                opts.cache_dir = d;
            }
            opts.store = store;
            opts.limit = limit;
            opts.transform = cfg.transform.clone();
            opts.transform.kind = transform;
            let t = &mut opts.transform;
            t.multi_query_n = multi_query_n.unwrap_or(t.multi_query_n);
            t.max_hops = max_hops.unwrap_or(t.max_hops);
            t.synonyms = synonyms.or_else(|| t.synonyms.take());
            t.router_llm |= router_llm;
            opts.llm = cfg.llm.clone();
            if let Some(url) = llm_url {
                opts.llm.url = url;
            }
            opts.rerank = rerank.map(|reranker| ragtune::rerank_eval::RerankEvalOptions {
                reranker,
                pool: rerank_pool,
                budgets: rerank_budget,
                policies: policy,
                ..ragtune::rerank_eval::RerankEvalOptions::default()
            });
            // No URL anywhere: the local server of `cargo xtask llm start`, when one runs.
            if (opts.transform.kind.needs_llm() || opts.rerank.is_some())
                && opts.llm.url.trim().is_empty()
                && let Some(url) = ragtune::local_llm_url()
            {
                eprintln!("using the local LLM at {url} ($RAGTUNE_HOME/llm/server.json)");
                opts.llm.url = url;
            }
            if let Some(model) = llm_model {
                opts.llm.model = model;
            }
            opts.qdrant = cfg.store.qdrant.clone();
            if let Some(url) = qdrant_url {
                opts.qdrant.url = url;
            }
            if crag {
                cfg.llm.url = opts.llm.url.clone();
                cfg.llm.model = opts.llm.model.clone();
                let report =
                    ragtune::crag_eval::run_crag_eval(&opts, &cfg, crag_k, &mut |line| eprintln!("{line}")).await?;
                print!("{}", ragtune::crag_eval::crag_table(&report));
                if let Some(path) = out {
                    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
                        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
                    eprintln!("wrote {}", path.display());
                }
                return Ok(());
            }
            let report = run_eval(&opts, &mut |line| eprintln!("{line}")).await?;
            print!("{}", summary_table(&report));
            if let Some(r) = &report.rerank {
                print!("{}", ragtune::rerank_eval::rerank_table(r));
            }
            if let Some(path) = out {
                std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
                    .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
        Command::Calibrate { dataset, split, retriever, k, target_precision, evaluator, out, cache_dir, limit } => {
            let cfg = config(cli.config.as_ref(), None)?;
            let evaluator: ragtune::EvaluatorKind = evaluator.parse()?;
            let mut opts = EvalOptions::new(&dataset);
            opts.split = split.clone();
            opts.retriever = retriever;
            opts.embedding = cfg.embedding.clone();
            opts.hybrid = cfg.hybrid;
            opts.limit = limit;
            if let Some(d) = cache_dir {
                opts.cache_dir = d;
            }
            let c = ragtune::crag_eval::run_calibration(&opts, &cfg, evaluator, k, target_precision, &mut |l| {
                eprintln!("{l}");
            })
            .await?;
            let name =
                dataset.canonicalize().ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
            let text = ragtune::crag_eval::calibration_toml(
                &c,
                &cfg,
                evaluator,
                name.as_deref().unwrap_or("dataset"),
                &split,
                k,
            )?;
            if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
            }
            std::fs::write(&out, &text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
            println!(
                "calibrated on {} queries ({} failed retrievals): upper {:.4}, lower {:.4}; INCORRECT precision {:.3}, recall {:.3}, F1 {:.3}; CORRECT precision {:.3} on {:.1} % of queries",
                c.samples,
                c.failures,
                c.upper,
                c.lower,
                c.incorrect_precision,
                c.incorrect_recall,
                c.incorrect_f1,
                c.correct_precision,
                c.correct_share * 100.0
            );
            println!("wrote {}", out.display());
        }
        Command::Migrate { from, to, to_dir, qdrant, replace, batch } => {
            let mut cfg = config(cli.config.as_ref(), from)?;
            let source_dir = cfg.store.path.clone();
            if !source_dir.join("ragtune.redb").is_file() {
                anyhow::bail!("there is no embedded store at {} to migrate (use --from DIR)", source_dir.display());
            }
            let source = ragtune::store::EmbeddedStore::open(&source_dir)?;
            let mut target_cfg = cfg.store.clone();
            target_cfg.backend = to;
            match to {
                StoreBackend::Embedded => {
                    target_cfg.path = to_dir.ok_or_else(|| anyhow::anyhow!("--to embedded needs --to-dir DIR"))?;
                }
                StoreBackend::Qdrant => {
                    qdrant.apply(&mut cfg);
                    target_cfg.qdrant = cfg.store.qdrant.clone();
                    if replace {
                        ragtune::stores::drop_collection(&target_cfg).await?;
                    }
                }
            }
            let target = ragtune::stores::open_store(&target_cfg).await?;
            let bar = if std::io::stderr().is_terminal() { ProgressBar::new(0) } else { ProgressBar::hidden() };
            bar.set_style(
                ProgressStyle::with_template("{spinner} migrating [{bar:30}] {pos}/{len} records ({elapsed})")
                    .map_err(|e| anyhow::anyhow!("progress template: {e}"))?
                    .progress_chars("=> "),
            );
            let report = ragtune::stores::migrate(&source, &*target.store, batch, &mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            })
            .await?;
            bar.finish_and_clear();
            println!(
                "migrated {} records from {} to {} in {:.2} s; the target holds {} chunks",
                report.records,
                source_dir.display(),
                target_cfg.location(),
                report.seconds,
                report.target_chunks
            );
        }
    }
    Ok(())
}

/// The first `max` characters of a text on one line.
fn snippet(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}
