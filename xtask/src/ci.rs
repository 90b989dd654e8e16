//! `cargo xtask ci`: what `.ci/run` runs on a fresh clone.
//!
//! Room on the disk for a cold build comes first (see `disk.rs`), then provisioning, then the checks from the
//! cheapest to the most expensive (fmt, clippy, clippy on the `ragtune` binary without default features, layers,
//! deny, the tests), failing fast: the first step that fails stops the run with an error naming it. Every step prints its name and how long it took, and a summary
//! of the durations closes the run. Builds use `-j2`: CI machines have 2 cores.
//!
//! The local LLM server (SmolLM2, provisioned with the rest) is started just before the tests, which get its URL in
//! `RAGTUNE_LLM_URL` and `RAGTUNE_REQUIRE_LLM=1`; a guard stops it after the tests, and also when a step fails.
//! A single-node Qdrant server (`cargo xtask qdrant`) is started the same way, with `QDRANT_URL` and
//! `QDRANT_API_KEY` for the tests, and the `#[ignore]`d Qdrant tests run against it in their own step; without the
//! server binary the step says why and those tests stay listed as skipped. The Python surfaces (`python/`: the
//! package, its LangChain and LlamaIndex retrievers, the official OpenAI and MCP clients against `ragtune serve` and
//! `ragtune mcp`) run in their own step, `python-tests`, in a venv of the pins of `python/requirements-test.txt`. The browser test of the server's page
//! (`#[ignore]`d too) runs in its own step against the Chromium that provisioning installs.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::provision::provision;
use crate::shell::{self, Shell};

/// The cargo-deny checks that run. `advisories` is left out: it needs the RustSec advisory database, which is cloned
/// from GitHub, and GitHub cannot be reached from the machines this project builds on.
const DENY_CHECKS: &[&str] = &["licenses", "bans", "sources"];

pub fn run(args: &[String]) -> Result<()> {
    if !args.is_empty() {
        bail!("`cargo xtask ci` takes no arguments, got {args:?}");
    }
    let started = Instant::now();
    let mut shell = Shell::new();
    let mut steps = Steps::default();

    // A CI build is cold or nearly so: incremental caches cost disk (the largest part of a debug target directory)
    // and save nothing. See `disk.rs`.
    shell.cargo_env("CARGO_INCREMENTAL", "0");
    steps.run("disk", || crate::disk::prepare(&shell.target_dir()))?;
    steps.run("provision", || provision(&mut shell))?;
    steps.run("fmt", || shell::run(&mut shell.cargo(&["fmt", "--all", "--", "--check"])))?;
    steps.run("clippy", || {
        shell::run(&mut shell.cargo(&["clippy", "--workspace", "--all-targets", "-j2", "--", "-D", "warnings"]))
    })?;
    // The tool without its default features (no Qdrant backend, no gRPC stack) must build too: the workspace
    // build above unifies features, so a `#[cfg(feature = "qdrant")]` left out of one use shows only here.
    steps.run("no-default-features", || {
        shell::run(&mut shell.cargo(&[
            "clippy",
            "-p",
            "ragtune-cli",
            "--no-default-features",
            "-j2",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    steps.run("layers", || crate::layers::report(shell.root()))?;
    steps.run("deny", || {
        println!(
            "note: skipping `cargo deny check advisories`: the advisory database is cloned from GitHub and cannot \
             be fetched offline; checking {} only",
            DENY_CHECKS.join(", ")
        );
        let mut cmd = shell.cargo(&["deny", "check"]);
        cmd.args(DENY_CHECKS);
        shell::run(&mut cmd)
    })?;
    let llm = steps.run("llm", || crate::llm::start_guarded(&shell, crate::llm::model(crate::llm::CI_MODEL)?))?;
    let qdrant = steps.run("qdrant", || crate::qdrant::start_guarded(&shell))?;
    // Models and the LLM were provisioned above: a test that cannot find them must fail, not skip.
    let mut test_env = vec![
        ("RAGTUNE_REQUIRE_MODELS", "1"),
        ("RAGTUNE_REQUIRE_TRAINER", "1"),
        ("RAGTUNE_LLM_URL", llm.url()),
        ("RAGTUNE_REQUIRE_LLM", "1"),
    ];
    if let Some(qdrant) = &qdrant {
        test_env.extend([("QDRANT_URL", qdrant.url()), ("QDRANT_API_KEY", qdrant.api_key())]);
    }
    steps.run("nextest", || {
        let mut cmd = shell.cargo(&["nextest", "run", "--workspace", "--profile", "ci", "--build-jobs", "2"]);
        shell::run(cmd.envs(test_env.iter().copied()))
    })?;
    if qdrant.is_some() {
        // The tests that need a Qdrant server are `#[ignore]`d so that a plain run lists them as skipped, never as
        // passed; here they run against the server started above. `--workspace` keeps the features of the run above.
        steps.run("qdrant-tests", || {
            let mut cmd = shell.cargo(&["nextest", "run", "--workspace", "--profile", "ci", "--build-jobs", "2"]);
            cmd.args(["--run-ignored", "only", "-E", crate::qdrant::TESTS]);
            shell::run(cmd.envs(test_env.iter().copied()))
        })?;
    }
    // The Python surfaces (the `ragtune` package, the official OpenAI and MCP clients, LangChain and LlamaIndex)
    // against the debug binary the tests above built, in a venv of pinned packages from PyPI.
    steps.run("python-tests", || {
        shell::run(&mut shell.cargo(&["build", "-p", "ragtune-cli", "-j2"]))?;
        let home = ragtune_provision::ragtune_home();
        let python = crate::python::test_venv(&shell, &home)?;
        let binary = shell.target_dir().join("debug").join("ragtune");
        let mut cmd = shell.cmd(&python);
        cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]).arg(shell.root().join("python").join("tests"));
        shell::run(cmd.env("RAGTUNE_BIN", &binary))
    })?;
    // The page's test in a real headless browser is `#[ignore]`d for plain runs (it needs Debian's Chromium, which
    // provisioning installed above); its screenshot stays in target/tmp/page.png.
    steps.run("browser-tests", || {
        let mut cmd = shell.cargo(&["nextest", "run", "--workspace", "--profile", "ci", "--build-jobs", "2"]);
        cmd.args(["--run-ignored", "only", "-E", "binary_id(ragtune-server::browser)"]);
        shell::run(cmd.envs(test_env.iter().copied()))
    })?;
    steps.run("doctests", || {
        shell::run(shell.cargo(&["test", "--workspace", "--doc", "-j2"]).envs(test_env.iter().copied()))
    })?;
    if let Some(qdrant) = qdrant {
        qdrant.stop()?;
    }
    llm.stop()?;

    steps.summary();
    println!("ci: all steps passed in {}", seconds(started.elapsed()));
    Ok(())
}

/// The steps run so far and how long each took.
#[derive(Debug, Default)]
struct Steps {
    done: Vec<(&'static str, Duration)>,
}

impl Steps {
    /// Runs one step between banners; on failure prints the summary so far and names the step in the error.
    fn run<T>(&mut self, name: &'static str, step: impl FnOnce() -> Result<T>) -> Result<T> {
        println!("\n==> ci: {name}");
        let started = Instant::now();
        let result = step();
        let elapsed = started.elapsed();
        match result {
            Ok(value) => {
                println!("<== ci: {name} passed in {}", seconds(elapsed));
                self.done.push((name, elapsed));
                Ok(value)
            }
            Err(error) => {
                self.summary();
                Err(error.context(format!("ci step `{name}` failed after {}", seconds(elapsed))))
            }
        }
    }

    fn summary(&self) {
        println!("\nci step durations:");
        for (name, elapsed) in &self.done {
            println!("  {name:<10} {:>8}", seconds(*elapsed));
        }
    }
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}
