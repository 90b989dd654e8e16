//! `cargo xtask bench compare --reranker DIR`: ragtune's cross-encoder against a Python peer, side by side.
//!
//! ```text
//! cargo xtask bench compare --reranker DIR [--pairs N] [--rounds N] [--batch-size N] [--max-length N]
//!                           [--answer-queries N] [--answer-config FILE] [--share F]
//! ```
//!
//! 1. `rerank-compare pairs` writes the (query, passage) pairs once: SciFact's test queries in order, each with the
//!    texts of its top 30 BM25 passages (the evaluation's 100-word passages, title first), until `--pairs` (3000).
//! 2. For ragtune's defaults (the cross-encoder's `[rerank] threads`, one per core) against the peer's
//!    (onnxruntime's default, one per core), then one intra-op thread each, it runs `rerank-compare run` (ragtune's
//!    `CrossEncoderReranker`, loaded as the engine loads it) and `peer_rerank.py` (onnxruntime + tokenizers, tokenising
//!    as fastembed does) on the same model file and pairs, same max_length and batch size, each query's passages in
//!    one reranker call; both dump their scores and the largest difference between the two sides' logits is printed
//!    beside the speed. Before each pair of runs it waits, at most two minutes, for the load average to fall to 1.0;
//!    `--rounds N` runs every pair N times (which side goes first alternates) and prints medians.
//! 3. `answer-latency --rerank-model DIR` (unless `--answer-queries 0`): `ask --no-llm` p50 over the first
//!    `--answer-queries` (300) SciFact test queries with the cross-encoder rerank stage at `--share` (0.3) of the
//!    candidates and without it, side by side (`--answer-config FILE`: the engine configuration both sides start
//!    from, for example `[pipeline] top_k = 30` for a rerank stage that sees 30 candidates).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{figure, json_line, load, median, settle};
use crate::shell::{self, Shell};

/// The options of the cross-encoder comparison.
struct Options {
    model: PathBuf,
    pairs: String,
    rounds: usize,
    batch_size: String,
    max_length: String,
    answer_queries: String,
    share: String,
    answer_config: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        model: PathBuf::new(),
        pairs: "3000".to_owned(),
        rounds: 1,
        batch_size: "16".to_owned(),
        max_length: "256".to_owned(),
        answer_queries: "300".to_owned(),
        share: "0.3".to_owned(),
        answer_config: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().with_context(|| format!("{a} needs a value"))?.clone();
        let positive = |v: &str, name: &str| -> Result<String> {
            v.parse::<usize>().ok().filter(|&n| n >= 1).with_context(|| format!("{name} needs a number >= 1"))?;
            Ok(v.to_owned())
        };
        match a.as_str() {
            "--reranker" => o.model = PathBuf::from(v),
            "--pairs" => o.pairs = positive(&v, a)?,
            "--rounds" => o.rounds = positive(&v, a)?.parse()?,
            "--batch-size" => o.batch_size = positive(&v, a)?,
            "--max-length" => o.max_length = positive(&v, a)?,
            "--answer-queries" => {
                v.parse::<usize>().context("--answer-queries needs a number (0 skips the answer latency)")?;
                o.answer_queries = v;
            }
            "--answer-config" => o.answer_config = Some(std::path::absolute(&v)?),
            "--share" => {
                v.parse::<f64>().ok().filter(|s| *s > 0.0 && *s <= 1.0).context("--share needs a number in (0, 1]")?;
                o.share = v;
            }
            other => bail!(
                "unknown argument {other} with --reranker (use --pairs, --rounds, --batch-size, --max-length, \
                 --answer-queries, --answer-config, --share; --docs and --queries belong to the embedder's comparison)"
            ),
        }
    }
    if o.model.as_os_str().is_empty() {
        bail!("--reranker needs the cross-encoder's directory");
    }
    // A path as the caller wrote it, from where they ran the command (every child runs from the workspace root).
    o.model = std::path::absolute(&o.model)?;
    if !o.model.join("model.onnx").is_file() {
        bail!(
            "--reranker {}: no model.onnx there (a cross-encoder directory holds model.onnx and its tokenizer files)",
            o.model.display()
        );
    }
    Ok(o)
}

/// Runs the comparison; `args` are `bench compare`'s, `--reranker DIR` among them.
pub fn compare(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let home = crate::models::provision_models()?;
    let sh = Shell::new();
    let dataset = sh.root().join("../shared/data/beir/scifact");
    if !dataset.join("corpus.jsonl").is_file() {
        bail!("the cross-encoder comparison runs on SciFact: {} is missing", dataset.display());
    }
    let answer = o.answer_queries != "0";
    let mut build = sh.cargo(&["build", "--release", "--quiet", "-j2", "-p", "benches", "--bin", "rerank-compare"]);
    if answer {
        build.args(["--bin", "answer-latency"]);
    }
    shell::run(&mut build)?;
    let exe = sh.target_dir().join("release").join("rerank-compare");
    let python = crate::python::venv(&sh, &home)?;
    let out_dir = sh.target_dir().join("bench-rerank");
    std::fs::create_dir_all(&out_dir)?;

    let pairs_file = out_dir.join(format!("pairs-{}.jsonl", o.pairs));
    let mut make = sh.cmd(&exe);
    make.arg("pairs").arg("--dataset").arg(&dataset).args(["--pairs", &o.pairs]).arg("--out").arg(&pairs_file);
    let made = json_line(&mut make)?;

    let common = ["--batch-size", o.batch_size.as_str(), "--max-length", o.max_length.as_str()];
    let mut rows = Vec::new();
    for threads in ["0", "1"] {
        let before = load();
        let mut runs = Vec::with_capacity(o.rounds);
        for round in 0..o.rounds {
            // The command's own build, or the previous pair, must not weigh on this pair.
            settle(1.0, std::time::Duration::from_secs(120));
            let (ours, theirs) =
                (out_dir.join(format!("ragtune-{threads}.f32")), out_dir.join(format!("peer-{threads}.f32")));
            let mut rust = sh.cmd(&exe);
            rust.arg("run").arg("--model").arg(&o.model).arg("--pairs").arg(&pairs_file);
            rust.args(["--threads", threads]).args(common).arg("--dump").arg(&ours);
            let mut py = sh.cmd(&python);
            py.arg(sh.root().join("crates/ragtune-embed/scripts/peer_rerank.py")).arg("--model-dir").arg(&o.model);
            py.arg("--pairs").arg(&pairs_file).args(["--threads", threads]).args(common).arg("--dump").arg(&theirs);
            let (r, p) = if round % 2 == 0 {
                let r = json_line(&mut rust)?;
                (r, json_line(&mut py)?)
            } else {
                let p = json_line(&mut py)?;
                (json_line(&mut rust)?, p)
            };
            let diff = score_difference(&ours, &theirs)?;
            runs.push(Run { ragtune: r, peer: p, diff });
        }
        rows.push(Row { threads, runs, before, after: load() });
    }

    println!(
        "\nragtune's cross-encoder vs Python peer (onnxruntime + tokenizers): {}, {} (query, passage) pairs of SciFact \
         ({} test queries, each with its top BM25 passages; passages of {:.0} words on average)",
        o.model.display(),
        made["pairs"],
        rows[0].runs[0].ragtune["queries"],
        made["mean_passage_words"].as_f64().unwrap_or(f64::NAN)
    );
    let first = &rows[0].runs[0].peer;
    println!(
        "same model file, max_length {}, batch {}, each query's passages in one call; pairs of {:.0} tokens on average, \
         {} cut at max_length",
        o.max_length,
        o.batch_size,
        first["mean_pair_tokens"].as_f64().unwrap_or(f64::NAN),
        first["pairs_truncated"]
    );
    println!("(ratio = ragtune / peer for pairs/s, peer / ragtune for latency: above 1 means ragtune is faster)");
    if o.rounds > 1 {
        println!(
            "({} rounds of each pair: each figure is the median over the rounds, [the lowest and highest per-round \
             ratio] beside it)",
            o.rounds
        );
    }
    for row in &rows {
        print_row(row);
    }

    if answer {
        settle(1.0, std::time::Duration::from_secs(120));
        let mut cmd = sh.cmd(sh.target_dir().join("release").join("answer-latency"));
        cmd.arg("--dataset").arg(&dataset).args(["--queries", &o.answer_queries]);
        cmd.arg("--rerank-model").arg(&o.model).args(["--rerank-share", &o.share]);
        if let Some(config) = &o.answer_config {
            cmd.arg("--config").arg(config);
        }
        println!("\n(load average before the answer latency: {})", load());
        shell::run(&mut cmd)?;
    }
    Ok(())
}

/// One round of one setting: both sides' output and the largest difference between their scores.
struct Run {
    ragtune: serde_json::Value,
    peer: serde_json::Value,
    diff: Difference,
}

/// One setting (`threads` "0": each side at its defaults) over the rounds, and the load around them.
struct Row {
    threads: &'static str,
    runs: Vec<Run>,
    before: String,
    after: String,
}

/// How far the two sides' scores of the same pairs are apart.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Difference {
    /// The largest absolute difference between the two logits of one pair.
    max_abs: f64,
    /// The largest absolute logit of either side (the scale `max_abs` is read against).
    max_score: f64,
    pairs: usize,
}

/// Compares two dumps of little-endian f32 scores, pair by pair.
fn score_difference(ours: &Path, theirs: &Path) -> Result<Difference> {
    let read = |p: &Path| -> Result<Vec<f32>> {
        let bytes = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
        Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    };
    difference(&read(ours)?, &read(theirs)?)
}

fn difference(a: &[f32], b: &[f32]) -> Result<Difference> {
    if a.len() != b.len() {
        bail!("the two sides scored {} and {} pairs", a.len(), b.len());
    }
    let (mut max_abs, mut max_score) = (0.0_f64, 0.0_f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        // A NaN on either side is the largest difference there is.
        max_abs = if (x - y).is_nan() { f64::INFINITY } else { max_abs.max((x - y).abs()) };
        max_score = max_score.max(x.abs()).max(y.abs());
    }
    Ok(Difference { max_abs, max_score, pairs: a.len() })
}

fn print_row(row: &Row) {
    let setting = match row.threads {
        "0" => "both at defaults (ragtune: `[rerank] threads`, one per core; peer: onnxruntime's, one per core)",
        _ => "one intra-op thread each",
    };
    println!("\n{setting}  (load average before {}, after {})", row.before, row.after);
    println!("  {:<30} {:>12} {:>12} {:>8}", "", "ragtune", "peer", "ratio");
    let line = |label: &str, key: &str, pick: Option<&str>, throughput: bool| {
        let rounds: Vec<(f64, f64)> =
            row.runs.iter().map(|x| (figure(&x.ragtune, key, pick), figure(&x.peer, key, pick))).collect();
        super::print_ratio_line(label, &rounds, throughput, 2, throughput);
    };
    line("pairs scored", "pairs_per_second", None, true);
    line("one query's passages p50", "query_ms", Some("p50"), false);
    line("one query's passages p99", "query_ms", Some("p99"), false);
    let threads = |v: &serde_json::Value| v["threads"].as_u64().map_or_else(|| "?".to_owned(), |t| t.to_string());
    let first = &row.runs[0];
    let peer_threads = match threads(&first.peer).as_str() {
        "0" => "onnxruntime's default".to_owned(),
        t => t.to_owned(),
    };
    println!("  intra-op threads: ragtune {}, peer {peer_threads}", threads(&first.ragtune));
    println!(
        "  model load: ragtune {:.2} s, peer {:.2} s",
        median(row.runs.iter().map(|x| figure(&x.ragtune, "model_load_seconds", None)).collect()),
        median(row.runs.iter().map(|x| figure(&x.peer, "model_load_seconds", None)).collect())
    );
    let worst = row.runs.iter().map(|x| x.diff).fold(None::<Difference>, |w, d| match w {
        Some(w) if w.max_abs >= d.max_abs => Some(w),
        _ => Some(d),
    });
    if let Some(d) = worst {
        println!(
            "  same scores: max |ragtune − peer| = {:.2e} over {} pairs (largest |logit| {:.3}; the worst round)",
            d.max_abs, d.pairs, d.max_score
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_differences() {
        let d = difference(&[1.0, -2.0, 0.5], &[1.0, -2.5, 0.25]).unwrap();
        assert_eq!((d.max_abs, d.max_score, d.pairs), (0.5, 2.5, 3));
        assert!(difference(&[f32::NAN], &[1.0]).unwrap().max_abs.is_infinite(), "a NaN is no agreement");
        assert!(difference(&[1.0], &[]).is_err(), "different pair counts");
    }
}
