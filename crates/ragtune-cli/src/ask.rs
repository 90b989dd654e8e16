//! `ragtune ask` and `ragtune query`: the whole answer pipeline, with or without generating the answer.

use std::io::Write;
use std::path::{Path, PathBuf};

use ragtune::Engine;

use crate::args::{LocalLlm, Overrides, QdrantArgs, load_config, snippet, usage_error};

/// A question for the answer pipeline, with the options that override the configuration file.
#[derive(Debug, clap::Args)]
pub struct AskArgs {
    /// The question.
    question: String,
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
    /// Let Corrective RAG search the web for this run (the providers come from the config's `[web]` section).
    #[arg(long, conflicts_with = "no_web")]
    web: bool,
    /// Do not search the web for this run, whatever the config's `[web]` section says.
    #[arg(long)]
    no_web: bool,
    /// Print the whole result (answer, citations, CRAG metadata, faithfulness, cost) as JSON.
    #[arg(long)]
    json: bool,
    /// Print the trace of every step.
    #[arg(long)]
    trace: bool,
    /// Print the answer once it is whole instead of as the LLM generates it (without an LLM it is printed whole
    /// anyway; `--json` never streams).
    #[arg(long)]
    no_stream: bool,
}

/// Why `--web` cannot run without a provider, and how to configure one.
const NO_WEB_PROVIDER: &str = "--web needs a web search provider, and none is configured: add one to the [web] \
    section of the configuration file (--config or $RAGTUNE_CONFIG), for example\n\n    [web.providers.searxng]\n    \
    base_url = \"http://127.0.0.1:8888\"\n\n(providers and their keys: docs/web.md)";

/// Runs the pipeline and prints the result: the answer when `generate` (`ask`), else the context (`query`).
pub async fn run(config: Option<&Path>, args: AskArgs, generate: bool) -> anyhow::Result<()> {
    let AskArgs { question, store, qdrant, llm_url, no_llm, top_k, web, no_web, json, trace, no_stream } = args;
    let overrides = Overrides {
        store,
        qdrant,
        llm_url,
        no_llm,
        local_llm: LocalLlm::WithNoLlmHint,
        web: web.then_some(true),
        ..Overrides::default()
    };
    let cfg = load_config(config, overrides)?;
    // `--web` sets `web.enabled` in the configuration rather than going through `AskOptions::use_web` (which would
    // refuse a configuration with web search off, and which `--web` is for), so its check is here: without a
    // provider, web search would silently search nothing.
    if web && cfg.web.settings.providers.is_empty() {
        usage_error(if generate { "ask" } else { "query" }, NO_WEB_PROVIDER);
    }
    let engine = Engine::open(cfg).await?;
    // The options the HTTP API takes per request, from the flags, checked by the same code (`--web` is the one
    // flag that sets the configuration: the user at the command line is its operator).
    // With an LLM the answer is printed as it is generated (the pipeline's token sink writes to stdout).
    let stream = generate && !json && !no_stream && engine.llm().is_some();
    let tokens = stream.then(|| ragtune::pipeline::TokenSink::new(print_event));
    let use_web = no_web.then_some(false);
    let options = ragtune::commands::AskOptions { top_k, use_web, trace, tokens, ..Default::default() };
    let r = ragtune::commands::ask(&engine, &question, &options, generate).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_answer(&r, trace, stream)?;
    }
    Ok(())
}

/// Prints a piece of the answer as it comes, or says that what was printed is withdrawn (the answer that replaces
/// it follows). A closed stdout is left to the final print to report.
fn print_event(event: ragtune::pipeline::AnswerEvent<'_>) {
    use ragtune::pipeline::{AnswerEvent, RestartReason};
    let mut out = std::io::stdout().lock();
    let _ = match event {
        AnswerEvent::Token(text) | AnswerEvent::Whole(text) => out.write_all(text.as_bytes()),
        AnswerEvent::Restart(RestartReason::Retry) => {
            out.write_all(b"\n[the answer above is withdrawn: a retry asks again]\n")
        }
        AnswerEvent::Restart(RestartReason::Replaced) => {
            out.write_all(b"\n[the answer above is withdrawn; the answer is:]\n")
        }
    };
    let _ = out.flush();
}

/// Prints the result; `streamed`: the answer was printed already, as it was generated.
fn print_answer(r: &ragtune::AskResponse, show_trace: bool, streamed: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match &r.answer {
        Some(_) if streamed => writeln!(out, "\n")?,
        Some(answer) => writeln!(out, "{answer}\n")?,
        None => {}
    }
    if !r.citations.is_empty() {
        writeln!(out, "Sources:")?;
        for c in &r.citations {
            let title = c.title.as_deref().map(|t| format!(" ({t})")).unwrap_or_default();
            // A paged document (PDF) is cited by document and page: `report.pdf p. 3`.
            match r.context.iter().find(|p| p.n == c.n).and_then(ragtune::ContextPassage::pages) {
                Some(pages) => writeln!(out, "  [{}] {} {pages}{title}", c.n, c.doc_id)?,
                None => writeln!(out, "  [{}] {}{title}", c.n, c.chunk_id)?,
            }
        }
    }
    if r.answer.is_none() {
        writeln!(
            out,
            "Context ({}, {} of {} tokens):",
            r.context_report.method, r.context_report.tokens_after, r.context_report.tokens_before
        )?;
        for p in &r.context {
            let pages = p.pages().map(|pages| format!(" {pages}")).unwrap_or_default();
            writeln!(out, "[{}] {}{pages}", p.n, p.chunk_id)?;
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
    if let Some(ttft) = r.ttft_ms {
        let generation = r.generation_ms.map(|g| format!(", generation {g:.0} ms")).unwrap_or_default();
        writeln!(out, "First token after {ttft:.0} ms{generation}")?;
    }
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
