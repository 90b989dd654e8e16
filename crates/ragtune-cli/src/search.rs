//! `ragtune search`: the ranked hits of one retrieval strategy, with an optional query transformation.

use std::io::Write;
use std::path::Path;

use ragtune::{Engine, Strategy, Transform};

use crate::args::{Overrides, StoreArgs, load_config, snippet};

/// Search the store.
#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// The query.
    query: String,
    #[command(flatten)]
    store: StoreArgs,
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
}

pub async fn run(config: Option<&Path>, args: SearchArgs) -> anyhow::Result<()> {
    let SearchArgs { query, store, top_k, strategy, transform, llm_url, json } = args;
    let cfg = load_config(config, Overrides { transform, llm_url, ..Overrides::store(store) })?;
    let k = top_k.unwrap_or(cfg.search.top_k);
    let strategy = strategy.unwrap_or(cfg.search.strategy);
    let engine = Engine::open(cfg).await?;
    let options = ragtune::commands::SearchOptions { top_k: Some(k), strategy: Some(strategy), trace: true };
    let response = ragtune::commands::search(&engine, &query, &options).await?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&response)?)?;
        return Ok(());
    }
    for event in response.trace.iter().filter(|e| e.stage == "route") {
        if let Some(why) = event.detail.get("fallback").and_then(|v| v.as_str()) {
            eprintln!("note: searching with {} only — {why}", event.action);
        }
    }
    if response.hits.is_empty() {
        writeln!(out, "no results")?;
    }
    for (i, c) in response.hits.iter().enumerate() {
        let path = if c.chunk.header_path.is_empty() {
            String::new()
        } else {
            format!("  [{}]", c.chunk.header_path.join(" > "))
        };
        writeln!(out, "{:>2}. {}  {:.4}{}", i + 1, c.chunk.id, c.score, path)?;
        writeln!(out, "    {}", snippet(&c.chunk.text, 160))?;
    }
    Ok(())
}
