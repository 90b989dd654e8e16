//! `cargo xtask eval [retrieval|qa|crag|rerank]`: builds the `ragtune` binary in release mode, runs
//! `ragtune eval KIND` with the other arguments (`retrieval` when no kind is named), and compares the result with
//! the committed baseline for the same dataset, split and retriever.
//!
//! ```text
//! cargo xtask eval --dataset ../shared/data/beir/scifact --retriever bm25 --out r.json
//! cargo xtask eval crag --dataset ../shared/data/beir/scifact --retriever hybrid --config configs/crag-calibrated.toml
//! ```
//!
//! `--web-corpus DIR` (with `qa`) serves `DIR` as the web for the run (`cargo xtask websearch start --corpus DIR`,
//! stopped afterwards) and passes a config whose `[web]` section searches it; with `--local-semester S08` that is
//! the knowledge-split evaluation:
//!
//! ```text
//! cargo xtask eval qa --dataset ../shared/data/qa/cmu-wiki-qa --local-semester S08 \
//!     --web-corpus ../shared/data/qa/cmu-wiki-qa/S09/data --experiment baseline,corrective --limit 200
//! ```
//!
//! `--matrix` runs every retriever and fusion method on every dataset into one table and an HTML report (see
//! `matrix.rs`).
//!
//! Baselines live in `eval/baselines/<dataset>-<split>-<retriever>.json` (the report JSON of a reference run), or
//! `...-<retriever>-whole.json` for a run with `--chunking whole`.
//! A metric further below its baseline than its tolerance (`baseline.rs`: exact for BM25, 0.015 for model-scored
//! runs, whose numbers differ between CPUs) is reported as a regression and fails the command;
//! `--update-baseline` writes the new report as the baseline instead.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::baseline::{Regression, Scoring};
use crate::shell::{self, Shell};

/// The evaluations of `ragtune eval`, one subcommand each.
const KINDS: [&str; 4] = ["retrieval", "qa", "crag", "rerank"];

pub fn run(args: &[String]) -> Result<()> {
    if args.first().is_some_and(|a| a == "--matrix") {
        return crate::matrix::run(&args[1..]);
    }
    let sh = Shell::new();
    let args_all = args;
    let (kind, args) = split_kind(args);
    let mut forwarded: Vec<String> = Vec::new();
    let mut out: Option<PathBuf> = None;
    let mut update = false;
    let mut web_corpus: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--update-baseline" => update = true,
            "--web-corpus" => web_corpus = Some(PathBuf::from(it.next().context("--web-corpus needs a directory")?)),
            "--out" => {
                let v = it.next().context("--out needs a file name")?;
                out = Some(PathBuf::from(v));
            }
            _ => forwarded.push(a.clone()),
        }
    }
    let out = out.unwrap_or_else(|| sh.target_dir().join("eval").join("last.json"));
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let web = match &web_corpus {
        Some(corpus) => {
            // The run's config is the user's `--config` (if any) with the local search server's [web] section added.
            let mut base = String::new();
            if let Some(i) = forwarded.iter().position(|a| a == "--config") {
                let file = forwarded.get(i + 1).context("--config needs a file")?.clone();
                base = std::fs::read_to_string(&file).with_context(|| format!("cannot read {file}"))?;
                if base.lines().any(|l| l.trim_start().starts_with("[web")) {
                    bail!("--web-corpus adds the [web] section itself: {file} already has one");
                }
                forwarded.drain(i..i + 2);
            }
            let server = crate::websearch::start(&sh, corpus, None)?;
            let config = out.with_extension("web.toml");
            std::fs::write(&config, format!("{base}\n{}", crate::websearch::web_toml(&server)))
                .with_context(|| format!("cannot write {}", config.display()))?;
            forwarded.extend(["--config".to_owned(), config.display().to_string()]);
            Some(server)
        }
        None => None,
    };
    let mut cmd = sh.cargo(&["run", "--release", "--quiet", "-j2", "-p", "ragtune-cli", "--", "eval", kind]);
    cmd.args(&forwarded).arg("--out").arg(&out);
    // Relative paths in the arguments are meant relative to where the user stands, not the workspace root.
    cmd.current_dir(std::env::current_dir().context("no working directory")?);
    crate::qdrant::export_recorded(&mut cmd);
    let outcome = shell::run(&mut cmd);
    if web.is_some() {
        crate::websearch::stop()?;
    }
    outcome?;

    let report: serde_json::Value = read_json(&out)?;
    let Ok(name) = baseline_name(&report) else {
        // CRAG decision reports have no baseline of their own; they are read, not compared.
        println!("(this report kind has no committed baseline to compare with)");
        return Ok(());
    };
    let baseline_path = sh.root().join("eval").join("baselines").join(&name);
    if update {
        std::fs::create_dir_all(baseline_path.parent().context("baseline path has a parent")?)?;
        std::fs::copy(&out, &baseline_path).with_context(|| format!("cannot write {}", baseline_path.display()))?;
        println!("baseline updated: {}", baseline_path.display());
        return Ok(());
    }
    if !baseline_path.is_file() {
        println!("no committed baseline {} (run with --update-baseline to create it)", baseline_path.display());
        return Ok(());
    }
    let baseline = read_json(&baseline_path)?;
    if baseline["config"] != report["config"] {
        println!("baseline {} was made with another config; not comparing", baseline_path.display());
        return Ok(());
    }
    let regressions = compare(&baseline, &report);
    if !regressions.is_empty() {
        bail!(crate::baseline::failure(&regressions, &baseline_path, &crate::baseline::update_command(args_all)));
    }
    Ok(())
}

/// `cargo xtask calibrate`: fits the model-based CRAG evaluator's thresholds (or, with `--fusion`, the hybrid
/// fusion) on a training split and writes them into a config file (`ragtune calibrate` in release mode; every
/// argument is forwarded).
///
/// ```text
/// cargo xtask calibrate --dataset ../shared/data/beir/scifact --split train --out configs/crag-calibrated.toml
/// cargo xtask calibrate --fusion --dataset ../shared/data/beir/scifact --split train
/// ```
pub fn calibrate(args: &[String]) -> Result<()> {
    let sh = Shell::new();
    let mut cmd = sh.cargo(&["run", "--release", "--quiet", "-j2", "-p", "ragtune-cli", "--", "calibrate"]);
    cmd.args(args);
    cmd.current_dir(std::env::current_dir().context("no working directory")?);
    shell::run(&mut cmd)
}

/// The evaluation named first (`retrieval` when none is) and the arguments after it.
fn split_kind(args: &[String]) -> (&'static str, &[String]) {
    match args.first().and_then(|first| KINDS.iter().find(|kind| **kind == first.as_str())) {
        Some(kind) => (kind, &args[1..]),
        None => ("retrieval", args),
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

fn baseline_name(report: &serde_json::Value) -> Result<String> {
    let field = |k: &str| report[k].as_str().map(str::to_owned);
    let dataset = field("dataset").context("report has no dataset")?;
    let split = field("split").context("report has no split")?;
    let retriever = report["config"]["retriever"].as_str().context("report has no retriever")?;
    // A transformation (and the LLM behind it) gets baselines of its own.
    let transform = match report["config"]["transform"]["kind"].as_str() {
        Some(kind) => format!("-{kind}"),
        None => String::new(),
    };
    // Whole-document indexing (`--chunking whole`) is compared with its own baselines; chunked runs, the default,
    // with the plain name.
    let whole = if report["config"]["chunking"].as_str() == Some("whole-documents") { "-whole" } else { "" };
    Ok(format!("{dataset}-{split}-{retriever}{transform}{whole}.json"))
}

/// Prints every metric beside its baseline and its tolerance, and returns the regressions.
fn compare(baseline: &serde_json::Value, report: &serde_json::Value) -> Vec<Regression> {
    let scoring = Scoring::of_report(report);
    let mut regressions = Vec::new();
    println!("{:<20} {:>9} {:>9} {:>8} {:>9}", "metric", "baseline", "now", "delta", "tolerance");
    // Document-level metrics, then passage-level ones when the baseline has them.
    for (level, prefix) in [(&baseline["metrics"], ""), (&baseline["passage_level"]["metrics"], "passage ")] {
        let now_level = if prefix.is_empty() { &report["metrics"] } else { &report["passage_level"]["metrics"] };
        let Some(metrics) = level.as_object() else { continue };
        for (name, base) in metrics {
            let (Some(base), Some(now)) = (base.as_f64(), now_level[name].as_f64()) else { continue };
            let name = format!("{prefix}{name}");
            println!("{name:<20} {base:>9.4} {now:>9.4} {:>+8.4} {:>9.4}", now - base, scoring.tolerance());
            regressions.extend(Regression::check(name, now, base, scoring));
        }
    }
    regressions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_beyond_tolerance_is_a_regression() {
        let lines = |base: serde_json::Value, now: serde_json::Value| -> Vec<String> {
            compare(&base, &now).iter().map(Regression::line).collect()
        };
        let dense = serde_json::json!({"retriever": "dense", "embedder": {"spec": {"model_id": "m@int8-dynamic"}}});
        let bm25 = serde_json::json!({"retriever": "bm25"});
        // Issue 42: a fresh machine's dense run against the committed SciFact baseline passes.
        let base = serde_json::json!({"config": dense, "metrics": {"recall@10": 0.8243, "ndcg@10": 0.6682}});
        let now = serde_json::json!({"config": dense, "metrics": {"recall@10": 0.8133, "ndcg@10": 0.6645}});
        assert!(lines(base.clone(), now).is_empty());
        let now = serde_json::json!({"config": dense, "metrics": {"recall@10": 0.80, "ndcg@10": 0.6645}});
        let got = lines(base, now);
        assert!(got.len() == 1 && got[0].starts_with("recall@10: measured 0.8000, baseline 0.8243"), "{got:?}");
        // BM25 is exact, on passage-level metrics too.
        let base = serde_json::json!({"config": bm25, "metrics": {}, "passage_level": {"metrics": {"ndcg@10": 0.6}}});
        let now = serde_json::json!({"config": bm25, "metrics": {}, "passage_level": {"metrics": {"ndcg@10": 0.5999}}});
        let got = lines(base, now);
        assert!(got.len() == 1 && got[0].starts_with("passage ndcg@10: measured 0.5999, baseline 0.6000"), "{got:?}");
    }

    #[test]
    fn whole_document_runs_have_baselines_of_their_own() {
        let report = |chunking: &str| serde_json::json!({"dataset": "scifact", "split": "test", "config": {"retriever": "dense", "chunking": chunking}});
        assert_eq!(baseline_name(&report("whole-documents")).unwrap(), "scifact-test-dense-whole.json");
        assert_eq!(
            baseline_name(&report("passages/size=100/overlap=20/section=1000")).unwrap(),
            "scifact-test-dense.json"
        );
    }

    #[test]
    fn the_evaluation_is_named_first_and_defaults_to_retrieval() {
        let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<String>>();
        let crag = args(&["crag", "--dataset", "d"]);
        assert_eq!(split_kind(&crag), ("crag", &crag[1..]));
        let plain = args(&["--dataset", "d", "--retriever", "bm25"]);
        assert_eq!(split_kind(&plain), ("retrieval", &plain[..]));
        let qa = args(&["qa"]);
        assert_eq!(split_kind(&qa), ("qa", &qa[1..]));
    }

    #[test]
    fn baseline_names_come_from_the_report() {
        let r = serde_json::json!({"dataset": "scifact", "split": "test", "config": {"retriever": "bm25"}});
        assert_eq!(baseline_name(&r).unwrap(), "scifact-test-bm25.json");
        let r = serde_json::json!({"dataset": "scifact", "split": "test", "config": {"retriever": "hybrid", "transform": {"kind": "hyde"}}});
        assert_eq!(baseline_name(&r).unwrap(), "scifact-test-hybrid-hyde.json");
    }
}
