//! `cargo xtask demo`: the main job end to end on a fresh machine — index the project's own documentation (its
//! reference pages and ADRs; not `docs/experiments/`, the dated logs) into a new embedded store and answer a few questions from it with the `ragtune` binary, printing each answer, its
//! citations and the CRAG decision.
//!
//! The binary is built in release mode once (a newcomer waits for that build, then every step is fast) and run
//! directly, not through `cargo run`. Answers come from the local LLM when `cargo xtask llm start` left a healthy
//! server running, else they are extractive (sentences quoted from the retrieved passages, no LLM needed).
//!
//! ```text
//! cargo xtask demo                         # index docs/, then ask the built-in questions
//! cargo xtask demo "how is BM25 scored?"   # ... or your own
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::shell::{self, Shell};

const QUESTIONS: [&str; 3] = [
    "How does the embedded store survive a crash?",
    "Which BM25 parameters are the default and why?",
    "How do I run an evaluation on SciFact?",
];

pub fn run(args: &[String]) -> Result<()> {
    let started = Instant::now();
    let sh = Shell::new();
    let mut steps: Vec<(&str, Duration)> = Vec::new();

    let step = Instant::now();
    crate::models::provision_models()?;
    steps.push(("models", step.elapsed()));

    let step = Instant::now();
    println!("== building the ragtune binary (release; the first build takes a while, later ones are quick)");
    shell::run(&mut sh.cargo(&["build", "--release", "-p", "ragtune-cli", "-j2"]))?;
    let binary = release_binary(&sh);
    steps.push(("build", step.elapsed()));

    let store = sh.target_dir().join("demo").join("store");
    if store.exists() {
        std::fs::remove_dir_all(&store).with_context(|| format!("cannot clear {}", store.display()))?;
    }
    let store_arg = store.to_string_lossy().into_owned();
    let ragtune = |rest: &[&str]| {
        let mut cmd = sh.cmd(&binary);
        cmd.args(rest);
        cmd
    };

    let step = Instant::now();
    // The reference pages, not the dated experiment logs: those quote the demo's own questions and old numbers.
    println!("\n== indexing the project's docs/ (without the experiment logs) into {}", store.display());
    let docs = sh.root().join("docs");
    shell::run(&mut ragtune(&["index", &docs.to_string_lossy(), "--exclude", "experiments", "--store", &store_arg]))?;
    steps.push(("index", step.elapsed()));

    // A stale server record must not make the answers wait for an LLM that is gone: without a healthy server the
    // answers are extractive on purpose.
    let llm = crate::llm::healthy_url();
    match &llm {
        Some(url) => println!("\n== answering with the local LLM at {url}"),
        None => println!(
            "\n== answering extractively (no local LLM is running; `cargo xtask llm start` starts one, and the demo \
             then uses it)"
        ),
    }
    let questions: Vec<&str> =
        if args.is_empty() { QUESTIONS.to_vec() } else { args.iter().map(String::as_str).collect() };
    let step = Instant::now();
    for q in questions {
        println!("\n== {q}");
        let mut cmd = ragtune(&["ask", q, "--store", &store_arg]);
        match &llm {
            Some(url) => cmd.args(["--llm-url", url]),
            None => cmd.arg("--no-llm"),
        };
        shell::run(&mut cmd)?;
    }
    steps.push(("ask", step.elapsed()));

    println!("\ndemo steps:");
    for (name, elapsed) in &steps {
        println!("  {name:<7} {:>7.1}s", elapsed.as_secs_f64());
    }
    println!("demo: done in {:.1}s wall time", started.elapsed().as_secs_f64());
    Ok(())
}

/// The release binary `cargo build --release -p ragtune-cli` writes.
fn release_binary(sh: &Shell) -> PathBuf {
    let name = format!("ragtune{}", std::env::consts::EXE_SUFFIX);
    sh.target_dir().join("release").join(name)
}
