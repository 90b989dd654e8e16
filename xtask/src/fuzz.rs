//! `cargo xtask fuzz [TARGET ...] [--seconds N]`: the cargo-fuzz targets of `fuzz/` (libFuzzer on the nightly
//! toolchain), each for N seconds (default 60), one after another, with a summary of runs and crashes.
//!
//! ```text
//! cargo xtask fuzz                          # loaders, chunker, config, request_bodies, html_text: 60 s each
//! cargo xtask fuzz chunker --seconds 600    # one target, ten minutes
//! ```
//!
//! cargo-fuzz is installed from crates.io when missing. Inputs that crash are kept in `fuzz/artifacts/TARGET/`
//! (reproduce with `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-…`); the corpus grows in
//! `fuzz/corpus/TARGET/` (not committed).

use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::shell::{self, Shell};

/// The targets in `fuzz/fuzz_targets/`.
const TARGETS: [&str; 5] = ["loaders", "chunker", "config", "request_bodies", "html_text"];

pub fn run(args: &[String]) -> Result<()> {
    let (targets, seconds) = parse_args(args)?;
    let sh = Shell::new();
    if shell::probe(sh.cmd("cargo").args(["fuzz", "--version"])).is_none() {
        println!("fuzz: installing cargo-fuzz from crates.io");
        shell::run(sh.cmd("cargo").args(["install", "cargo-fuzz", "--locked", "-j2"]))?;
    }
    let dir = sh.root().join("fuzz");
    let mut summary = Vec::new();
    for target in &targets {
        let corpus = dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus).with_context(|| format!("cannot create {}", corpus.display()))?;
        println!("\n==> fuzz: {target} for {seconds} s");
        let started = Instant::now();
        let mut cmd = sh.cmd("cargo");
        // No sanitizer: the code under test is safe Rust, where the findings are panics; the build and the runs
        // are several times faster without ASan.
        cmd.current_dir(&dir).args(["+nightly", "fuzz", "run", target, "-s", "none", "-O", "-j", "1", "--"]).args([
            format!("-max_total_time={seconds}"),
            "-rss_limit_mb=2048".to_owned(),
            "-print_final_stats=1".to_owned(),
        ]);
        cmd.env("CARGO_BUILD_JOBS", "2");
        let outcome = shell::run(&mut cmd);
        summary.push((*target, started.elapsed().as_secs(), outcome.is_ok()));
    }
    println!("\nfuzz summary:");
    for (target, secs, ok) in &summary {
        println!("  {target:<14} {secs:>5} s  {}", if *ok { "no crash" } else { "CRASH (see fuzz/artifacts)" });
    }
    if summary.iter().any(|(_, _, ok)| !ok) {
        bail!("a fuzz target crashed: the input is under fuzz/artifacts/");
    }
    Ok(())
}

fn parse_args(args: &[String]) -> Result<(Vec<&'static str>, u64)> {
    let mut targets = Vec::new();
    let mut seconds = 60;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--seconds" {
            let v = it.next().context("--seconds needs a number")?;
            seconds = v.parse().ok().filter(|s| *s > 0).with_context(|| format!("--seconds: `{v}`"))?;
        } else if let Some(t) = TARGETS.iter().find(|t| **t == a.as_str()) {
            targets.push(*t);
        } else {
            bail!("unknown fuzz target or flag `{a}` (targets: {})", TARGETS.join(", "));
        }
    }
    if targets.is_empty() {
        targets = TARGETS.to_vec();
    }
    Ok((targets, seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_seconds_parse() {
        let args = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(parse_args(&[]).unwrap(), (TARGETS.to_vec(), 60));
        assert_eq!(parse_args(&args("chunker --seconds 600")).unwrap(), (vec!["chunker"], 600));
        assert!(parse_args(&args("nope")).unwrap_err().to_string().contains("unknown fuzz target"));
        assert!(parse_args(&args("--seconds 0")).is_err());
        // Every target has its source file.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("fuzz").join("fuzz_targets");
        for t in TARGETS {
            assert!(root.join(format!("{t}.rs")).is_file(), "fuzz/fuzz_targets/{t}.rs");
        }
    }
}
