//! The `ragtune` command-line tool: index documents into the embedded store (or a Qdrant server), search them,
//! answer questions, evaluate on BEIR and QA datasets, calibrate the CRAG evaluators and the hybrid fusion, and migrate an embedded store
//! into Qdrant. Exit codes: 0 success, 1 runtime error, 2 usage error.
//!
//! One module per command over the shared argument groups of [`args`], where every command-line override of the
//! configuration file is applied by one function ([`args::apply_overrides`]).

mod args;
mod ask;
mod calibrate;
mod completions;
mod eval;
mod index;
mod mcp;
mod migrate;
mod search;
mod serve;
mod train;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

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
    Index(index::IndexArgs),
    /// Search the store.
    Search(search::SearchArgs),
    /// Answer a question with the whole pipeline: retrieve, judge and correct the retrieval (Corrective RAG),
    /// refine or extract the context, generate an answer with citations (extractive without an LLM), judge its
    /// faithfulness, retry when the smart-retry policy says so.
    Ask(ask::AskArgs),
    /// The context the pipeline would answer from (retrieval, correction, refinement or extraction), without
    /// generating an answer.
    Query(ask::AskArgs),
    /// Evaluate retrieval, answers, Corrective-RAG decisions or budgeted reranking:
    /// `eval retrieval | qa | crag | rerank`.
    Eval(eval::EvalArgs),
    /// Fit the model-based CRAG evaluator's two thresholds (or, with --fusion, the hybrid fusion) on a training
    /// split and write them to a config file.
    Calibrate(calibrate::CalibrateArgs),
    /// Copy an embedded store (chunks, payloads, dense and sparse vectors) into a Qdrant collection or another
    /// embedded store. Idempotent: an interrupted migration can be run again.
    Migrate(migrate::MigrateArgs),
    /// Serve the HTTP API (ask, query, search, index, metrics, a page at /) until Ctrl-C or SIGTERM.
    Serve(serve::ServeArgs),
    /// Print the shell completion script: `ragtune completions bash|zsh|fish` (e.g. `ragtune completions bash >
    /// ~/.local/share/bash-completion/completions/ragtune`).
    Completions(completions::CompletionsArgs),
    /// Serve the store to AI assistants over the Model Context Protocol on stdio: tools search, ask and
    /// index_documents (docs/mcp.md).
    Mcp(mcp::McpArgs),
    /// Train a model: `train reranker` fine-tunes a cross-encoder on train judgements, with hard negatives from
    /// hybrid retrieval (needs Debian's python3-torch; docs/train.md).
    Train(train::TrainArgs),
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = cli.config.as_deref();
    match cli.command {
        Command::Index(args) => index::run(config, args).await,
        Command::Search(args) => search::run(config, args).await,
        Command::Ask(args) => ask::run(config, args, true).await,
        Command::Query(args) => ask::run(config, args, false).await,
        Command::Eval(args) => eval::run(config, args).await,
        Command::Calibrate(args) => calibrate::run(config, args).await,
        Command::Migrate(args) => migrate::run(config, args).await,
        Command::Serve(args) => serve::run(config, args).await,
        Command::Completions(args) => completions::run(Cli::command(), &args),
        Command::Mcp(args) => mcp::run(config, args).await,
        Command::Train(args) => train::run(config, args).await,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Checks the parser cannot express are usage errors too (exit code 2, with clap's usage line).
    let checked = match &cli.command {
        Command::Calibrate(args) => args.validate(),
        Command::Eval(args) => args.validate(),
        _ => Ok(()),
    };
    if let Err(message) = checked {
        Cli::command().error(clap::error::ErrorKind::ArgumentConflict, message).exit();
    }
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
