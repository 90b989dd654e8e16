//! `ragtune eval retrieval | qa | crag | rerank`: the evaluations of `ragtune-eval`, one subcommand each.

use std::path::{Path, PathBuf};

use ragtune::rerank::RerankPolicy;
use ragtune::{Bm25Settings, Config, RerankSettings, RerankerKind, ScorerKind, StoreBackend, Transform};
use ragtune_eval::rerank::{EvalReranker, FullRerank};
use ragtune_eval::{DocScore, EvalChunking, EvalOptions, QaEvalOptions, RerankEvalOptions};

use crate::args::{LlmArgs, OutArgs, Overrides, QdrantArgs, RetrievalTuning, load_config};

/// Evaluate retrieval, answers, Corrective-RAG decisions or budgeted reranking on a dataset.
#[derive(Debug, clap::Args)]
#[command(override_usage = "ragtune eval <retrieval|qa|crag|rerank|build-cmu-set|join-sets> --dataset <DIR> [OPTIONS]")]
pub struct EvalArgs {
    #[command(subcommand)]
    kind: EvalKind,
}

impl EvalArgs {
    /// What the parser cannot check: `eval join-sets` names every dataset's output or none.
    ///
    /// # Errors
    /// The message of the usage error.
    pub fn validate(&self) -> Result<(), String> {
        if let EvalKind::JoinSets(JoinSetsArgs { dataset, name, .. }) = &self.kind
            && !name.is_empty()
            && name.len() != dataset.len()
        {
            return Err(format!(
                "--name is given {} times for {} datasets: name every one or none",
                name.len(),
                dataset.len()
            ));
        }
        Ok(())
    }
}

#[derive(Debug, clap::Subcommand)]
enum EvalKind {
    /// Retrieval on a BEIR dataset: nDCG, recall, MRR, MAP and latency; with --rerank, of the run whose top
    /// passages a reranker reordered.
    Retrieval(RetrievalRerankArgs),
    /// Answers on a QA dataset (the CMU Wikipedia QA set) under named experiments: accuracy, F1, faithfulness,
    /// citation precision, latency and tokens.
    Qa(QaArgs),
    /// Corrective-RAG decision statistics on a BEIR dataset (the heuristic and model-based evaluators, and the
    /// learned one when the config has `[crag.learned]`; thresholds from the config) and nDCG@10 with and without
    /// correction.
    Crag(CragArgs),
    /// The retrieval metrics and the budgeted reranking controller on the retrieved candidates: nDCG@10 per policy
    /// and budget beside a full rerank (scores cached under $RAGTUNE_HOME/rerank-cache).
    Rerank(RerankArgs),
    /// Build a BEIR retrieval set of long documents from the CMU Wikipedia QA set: articles as documents,
    /// questions as queries, document- and passage-level qrels, train and test splits by article title.
    BuildCmuSet(BuildCmuSetArgs),
    /// Join the corpora of several BEIR datasets: for each dataset, a BEIR directory whose corpus is all of theirs
    /// and whose queries and qrels are its own (a larger corpus with the same judgements).
    JoinSets(JoinSetsArgs),
}

/// `eval join-sets`.
#[derive(Debug, clap::Args)]
struct JoinSetsArgs {
    /// A BEIR dataset directory (corpus.jsonl, queries.jsonl, qrels/); two or more, joined in this order.
    #[arg(long, value_name = "DIR", required = true)]
    dataset: Vec<PathBuf>,
    /// The name of each dataset's output directory, in the order of --dataset (default: `joined-` and the
    /// dataset directory's name).
    #[arg(long, value_name = "NAME")]
    name: Vec<String>,
    /// The directory the output directories are written under.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// `eval build-cmu-set`.
#[derive(Debug, clap::Args)]
struct BuildCmuSetArgs {
    /// The CMU QA dataset directory (S08/, S09/, ...).
    #[arg(long, value_name = "DIR")]
    dataset: PathBuf,
    /// The directory to write the BEIR set to.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Write the articles as Markdown under a `# title` heading (header paths for the header boost).
    #[arg(long)]
    markdown: bool,
}

/// `eval retrieval`: a BEIR dataset, and the reranker that reorders the top of every query's passages, if any.
#[derive(Debug, clap::Args)]
struct RetrievalRerankArgs {
    #[command(flatten)]
    beir: RetrievalArgs,
    /// Rerank the top --rerank-depth passages of every query fully with this reranker (`cross-encoder` or `llm`)
    /// and report the metrics of the reranked run; the passages below keep their order after them.
    #[arg(long, value_name = "NAME")]
    rerank: Option<RerankerKind>,
    #[command(flatten)]
    model: RerankModelArgs,
    /// Passages reranked per query with --rerank (default: 100, or every passage retrieved when fewer).
    #[arg(long, value_name = "N", requires = "rerank")]
    rerank_depth: Option<usize>,
    /// With --rerank: order the reranked passages by (1 − W)·z(reranker) + W·z(retrieval), each score
    /// standardised over them (0: the reranker alone). Fit W on a train split.
    #[arg(long, value_name = "W", default_value_t = 0.0, requires = "rerank")]
    rerank_retrieval_weight: f32,
}

/// The reranker's model.
#[derive(Debug, clap::Args)]
pub(crate) struct RerankModelArgs {
    /// The cross-encoder's model directory (`model.onnx` and its tokenizer files; default: the config's `[rerank]
    /// model`); its `max_length` and `batch_size` come from the config's `[rerank]`.
    #[arg(long, value_name = "DIR")]
    rerank_model: Option<String>,
}

impl RerankModelArgs {
    /// `--scorer` into `[crag] scorer`, and `--rerank-model` into `[rerank] model` with `reranker =
    /// "cross-encoder"` (the CRAG scorer is the `[rerank]` cross-encoder).
    pub(crate) fn cross_encoder_scorer(&self, scorer: Option<ScorerKind>, cfg: &mut Config) {
        if let Some(scorer) = scorer {
            cfg.crag.scorer = scorer;
        }
        if let Some(model) = self.rerank_model.clone() {
            cfg.rerank.reranker = RerankerKind::CrossEncoder;
            cfg.rerank.model = Some(model);
        }
    }

    /// The evaluation's reranker `kind`, with this model, else the config's, and the config's sizes.
    fn reranker(self, kind: RerankerKind, cfg: &RerankSettings) -> EvalReranker {
        let settings =
            RerankSettings { reranker: kind, model: self.rerank_model.or_else(|| cfg.model.clone()), ..cfg.clone() };
        EvalReranker { settings, ..EvalReranker::default() }
    }
}

/// A BEIR dataset, how to index and retrieve it, and where the report goes.
#[derive(Debug, clap::Args)]
struct RetrievalArgs {
    /// The BEIR dataset directory (corpus.jsonl, queries.jsonl, qrels/).
    #[arg(long, value_name = "DIR")]
    dataset: PathBuf,
    #[command(flatten)]
    flags: BeirFlags,
}

/// How a BEIR dataset is indexed and retrieved, and where the report goes.
#[derive(Debug, clap::Args)]
struct BeirFlags {
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
    #[command(flatten)]
    out: OutArgs,
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
    #[command(flatten)]
    llm: LlmArgs,
    #[command(flatten)]
    tuning: RetrievalTuning,
    /// Evaluate only the first N queries of the split (for slow transformations).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// How documents are indexed: `passages` (long documents chunked so passages fit the model's window) or
    /// `whole` (one passage per document; the dense model sees only its beginning).
    #[arg(long, value_name = "MODE", default_value = "passages")]
    chunking: EvalChunking,
    /// Words per passage with `--chunking passages` (default 100: passages that fit the model's 256-token window).
    #[arg(long, value_name = "WORDS")]
    chunk_size: Option<usize>,
    /// Words shared by consecutive passages (default 20).
    #[arg(long, value_name = "WORDS")]
    chunk_overlap: Option<usize>,
    /// How a document is scored from its passages: max, sum:N or mean:N (its best N passages).
    #[arg(long, value_name = "HOW", default_value = "max")]
    doc_score: DocScore,
    /// The header boost weight, 0..=1 (default: the config's `[search] header_boost`, 0: off).
    #[arg(long, value_name = "W")]
    header_boost: Option<f32>,
}

/// `eval crag`: a BEIR evaluation read as Corrective-RAG decisions.
#[derive(Debug, clap::Args)]
struct CragArgs {
    #[command(flatten)]
    beir: RetrievalArgs,
    /// "Retrieval succeeded" means a relevant document in the top K.
    #[arg(long = "k", visible_alias = "crag-k", value_name = "K", default_value_t = 10)]
    k: usize,
    /// The model-based evaluator's scorer (default: the config's `[crag] scorer`): `retrieval` (the dense cosine of
    /// the retrieval) or `cross-encoder` (the `[rerank]` cross-encoder, --rerank-model; needs no LLM).
    #[arg(long, value_name = "NAME")]
    scorer: Option<ScorerKind>,
    #[command(flatten)]
    model: RerankModelArgs,
}

/// `eval rerank`: a BEIR evaluation with the reranking controller on its candidates.
#[derive(Debug, clap::Args)]
struct RerankArgs {
    #[command(flatten)]
    beir: RetrievalArgs,
    /// The reranker: `llm` (the LLM relevance judge) or `cross-encoder` (with --rerank-model; needs no LLM).
    #[arg(long, value_name = "NAME", default_value = "llm")]
    reranker: RerankerKind,
    #[command(flatten)]
    model: RerankModelArgs,
    #[command(flatten)]
    budget: RerankBudgetArgs,
}

/// What the reranking controller is compared on.
#[derive(Debug, clap::Args)]
struct RerankBudgetArgs {
    /// Rerank budgets as fractions of the pool, comma-separated.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "0.1,0.2,0.3,0.5,1.0")]
    rerank_budget: Vec<f64>,
    /// Controller policies to compare, comma-separated: greedy, dynamic, uncertainty.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "greedy,uncertainty")]
    policy: Vec<RerankPolicy>,
    /// Candidates per query handed to the controller.
    #[arg(long, value_name = "N", default_value_t = 50)]
    rerank_pool: usize,
    /// Retrieval's weight in the order of the reranked passages, as `[rerank] retrieval_weight` (0: the reranker
    /// alone); for the full rerank, the fixed baseline and every policy.
    #[arg(long, value_name = "W", default_value_t = 0.0)]
    rerank_retrieval_weight: f32,
    /// Write every query's pool to FILE as JSON lines (its candidates in retrieval order with their retrieval and
    /// reranker scores, and the query's judgements), to study policies offline.
    #[arg(long, value_name = "FILE")]
    rerank_per_query: Option<PathBuf>,
}

/// `eval qa`: answer-level evaluation on the CMU Wikipedia QA set.
#[derive(Debug, clap::Args)]
struct QaArgs {
    /// The QA dataset directory (the CMU Wikipedia QA set: S08/, S09/, S10/).
    #[arg(long, value_name = "DIR")]
    dataset: PathBuf,
    /// The named experiments to run, comma-separated (no_retrieval, baseline, sentences, forced_search, refined,
    /// extraction, judge, smart_retry, multi_query, batched_extraction, corrective, answer_first); `none` with
    /// --refinement measures refinement only.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    experiment: Vec<String>,
    /// Also measure knowledge refinement (answer-bearing strips kept, tokens cut).
    #[arg(long)]
    refinement: bool,
    /// Evaluate only the first N questions.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Start N questions into the (hash) order of the questions: `--skip 1000 --limit 100` asks 100 questions of
    /// the calibration pool instead of the usual ones, to check a policy on questions it was not designed on.
    #[arg(long, value_name = "N", default_value_t = 0)]
    skip: usize,
    /// Where cached indexes live (default: $RAGTUNE_HOME/eval-cache).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Rebuild the index even when a cached one exists.
    #[arg(long)]
    reindex: bool,
    /// A knowledge split: index only this semester's articles (e.g. S08) and leave the others to the web search
    /// endpoint of the config's `[web]` section; questions are scored as local or web-only.
    #[arg(long, value_name = "SEMESTER")]
    local_semester: Option<String>,
    #[command(flatten)]
    llm: LlmArgs,
    #[command(flatten)]
    out: OutArgs,
}

pub async fn run(config: Option<&Path>, args: EvalArgs) -> anyhow::Result<()> {
    match args.kind {
        EvalKind::Retrieval(RetrievalRerankArgs { beir, rerank, model, rerank_depth, rerank_retrieval_weight }) => {
            let reranking = rerank.map(|kind| Reranking::Full {
                kind,
                model,
                depth: rerank_depth,
                retrieval_weight: rerank_retrieval_weight,
            });
            retrieval(config, beir, reranking).await
        }
        EvalKind::Rerank(RerankArgs { beir, reranker, model, budget }) => {
            retrieval(config, beir, Some(Reranking::Budgets { kind: reranker, model, budget })).await
        }
        EvalKind::Crag(CragArgs { beir, k, scorer, model }) => {
            let (opts, mut cfg, out) = beir_options(config, beir, None)?;
            model.cross_encoder_scorer(scorer, &mut cfg);
            let report = ragtune_eval::run_crag_eval(&opts, &cfg, k, &mut |line| eprintln!("{line}")).await?;
            print!("{}", ragtune_eval::crag_table(&report));
            out.write(&report)
        }
        EvalKind::Qa(qa) => answers(config, qa).await,
        EvalKind::JoinSets(JoinSetsArgs { dataset, name, out }) => {
            let datasets: Vec<(PathBuf, String)> = dataset
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    (d.clone(), name.get(i).cloned().unwrap_or_else(|| ragtune_eval::joined::default_joined_name(d)))
                })
                .collect();
            let opts = ragtune_eval::JoinOptions { datasets, out };
            let report = ragtune_eval::join_sets(&opts, &mut |line| eprintln!("{line}"))?;
            for s in &report.sets {
                println!("{}: {} documents ({} its own)", s.dir.display(), report.documents, s.own_documents);
            }
            Ok(())
        }
        EvalKind::BuildCmuSet(BuildCmuSetArgs { dataset, out, markdown }) => {
            let opts = ragtune_eval::CmuSetOptions { dataset, out: out.clone(), markdown };
            let report = ragtune_eval::build_cmu_set(&opts, &mut |line| eprintln!("{line}"))?;
            print!("{}", ragtune_eval::cmu_set_table(&report, &out));
            Ok(())
        }
    }
}

/// What `eval retrieval --rerank` and `eval rerank` ask of a reranker.
enum Reranking {
    /// `eval retrieval --rerank`: the top `depth` passages reranked fully.
    Full { kind: RerankerKind, model: RerankModelArgs, depth: Option<usize>, retrieval_weight: f32 },
    /// `eval rerank`: the controller's budget sweep.
    Budgets { kind: RerankerKind, model: RerankModelArgs, budget: RerankBudgetArgs },
}

impl Reranking {
    fn kind(&self) -> RerankerKind {
        match self {
            Self::Full { kind, .. } | Self::Budgets { kind, .. } => *kind,
        }
    }
}

/// `eval retrieval` and `eval rerank`: the retrieval report, with the rerank table when there is one.
async fn retrieval(config: Option<&Path>, beir: RetrievalArgs, rerank: Option<Reranking>) -> anyhow::Result<()> {
    let (opts, _, out) = beir_options(config, beir, rerank)?;
    let report = ragtune_eval::run_eval(&opts, &mut |line| eprintln!("{line}")).await?;
    print!("{}", ragtune_eval::summary_table(&report));
    if let Some(r) = &report.rerank {
        print!("{}", ragtune_eval::rerank_table(r));
    }
    out.write(&report)
}

/// The evaluation options of a BEIR subcommand, the configuration they were read from (with the flags applied by
/// `apply_overrides`), and where the report goes.
fn beir_options(
    config: Option<&Path>,
    RetrievalArgs { dataset, flags: beir }: RetrievalArgs,
    rerank: Option<Reranking>,
) -> anyhow::Result<(EvalOptions, Config, OutArgs)> {
    // The cross-encoder needs no LLM, so only the LLM reranker falls back to the local server.
    let needs_llm = beir.transform.needs_llm() || rerank.as_ref().is_some_and(|r| r.kind() == RerankerKind::Llm);
    let overrides = Overrides {
        qdrant: QdrantArgs { qdrant_url: beir.qdrant_url, collection: None },
        transform: Some(beir.transform),
        tuning: beir.tuning,
        ..Overrides::llm(beir.llm, needs_llm)
    };
    let cfg = load_config(config, overrides)?;
    let mut opts = EvalOptions::new(dataset);
    opts.split = beir.split;
    opts.retriever = beir.retriever;
    opts.top_k = beir.top_k;
    // The evaluation's BM25 starts from the defaults, not the config, so that reports compare with baselines.
    let d = Bm25Settings::default();
    opts.bm25 = Bm25Settings { k1: beir.k1.unwrap_or(d.k1), b: beir.b.unwrap_or(d.b), avg_doc_len: None };
    opts.embedding = cfg.embedding.clone();
    opts.hybrid = cfg.hybrid;
    opts.transform = cfg.transform.clone();
    opts.llm = cfg.llm.clone();
    opts.qdrant = cfg.store.qdrant.clone();
    opts.reindex = beir.reindex;
    if let Some(d) = beir.cache_dir {
        opts.cache_dir = d;
    }
    opts.store = beir.store;
    opts.limit = beir.limit;
    opts.chunking = beir.chunking;
    // Like BM25, the chunk sizes start from the evaluation's defaults (passages that fit the model's window), not
    // the config, so that reports compare with baselines.
    if let Some(n) = beir.chunk_size {
        opts.chunker.chunk_size = n;
    }
    if let Some(n) = beir.chunk_overlap {
        opts.chunker.chunk_overlap = n;
    }
    opts.chunker.validate().map_err(|e| e.context("--chunk-size/--chunk-overlap ([chunking])"))?;
    opts.doc_score = beir.doc_score;
    match rerank {
        Some(Reranking::Full { kind, model, depth, retrieval_weight }) => {
            // Asked for nothing, rerank 100 passages, or all of them when fewer are retrieved.
            let depth = depth.unwrap_or_else(|| opts.passage_depth().min(100));
            opts.full_rerank =
                Some(FullRerank { reranker: model.reranker(kind, &cfg.rerank), depth, retrieval_weight });
        }
        Some(Reranking::Budgets { kind, model, budget }) => {
            opts.rerank = Some(RerankEvalOptions {
                reranker: model.reranker(kind, &cfg.rerank),
                pool: budget.rerank_pool,
                budgets: budget.rerank_budget,
                policies: budget.policy,
                retrieval_weight: budget.rerank_retrieval_weight,
                per_query: budget.rerank_per_query,
                ..RerankEvalOptions::default()
            });
        }
        None => {}
    }
    opts.header_boost = beir.header_boost.unwrap_or(cfg.search.header_boost);
    if !(0.0..=1.0).contains(&opts.header_boost) {
        anyhow::bail!("--header-boost must be between 0 and 1, got {}", opts.header_boost);
    }
    Ok((opts, cfg, beir.out))
}

/// `eval qa`: every experiment on the QA set, one row each.
async fn answers(config: Option<&Path>, qa: QaArgs) -> anyhow::Result<()> {
    let QaArgs { dataset, experiment, refinement, limit, skip, cache_dir, reindex, local_semester, llm, out } = qa;
    let opts = QaEvalOptions {
        dataset,
        // `--experiment none` with `--refinement` measures refinement alone.
        experiments: if experiment.is_empty() {
            vec!["baseline".into()]
        } else {
            experiment.into_iter().filter(|e| e != "none").collect()
        },
        config: load_config(config, Overrides::llm(llm, true))?,
        limit,
        skip,
        cache_dir: cache_dir.unwrap_or_else(|| ragtune::ragtune_home().join("eval-cache")),
        reindex,
        refinement_check: refinement,
        local_semester,
    };
    let report = ragtune_eval::run_qa_eval(&opts, &mut |line| eprintln!("{line}")).await?;
    print!("{}", ragtune_eval::qa_table(&report));
    out.write(&report)?;
    // What finished is kept (the table above, the report), and the run still fails.
    let failed: Vec<String> = report.failed_experiments().map(|(e, err)| format!("{e}: {err}")).collect();
    if !failed.is_empty() {
        anyhow::bail!(
            "{} of {} experiments failed part-way (the report keeps the others, and these marked with their error):\n  {}",
            failed.len(),
            report.experiments.len(),
            failed.join("\n  ")
        );
    }
    Ok(())
}
