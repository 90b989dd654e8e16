//! `cargo xtask bench`: the benchmarks.
//!
//! ```text
//! cargo xtask bench              # every criterion benchmark of the `benches` package (release build)
//! cargo xtask bench bm25         # one criterion target (bm25, retrieval, embed_query)
//! cargo xtask bench embed [--passages N] [--batch-size N] [--threads N] [--sessions N]
//!                                # FastEmbedder vs Python onnxruntime on the same model file, same settings
//! cargo xtask bench compare [--docs N] [--queries N] [--rounds N]
//!                                # ragtune against a plain Python pipeline (onnxruntime + tokenizers + numpy,
//!                                # bm25s) on SciFact, same model file, side by side in one run: indexing,
//!                                # query embedding, dense/hybrid/BM25 query latency, at defaults and at one thread;
//!                                # --rounds N: every pair N times, medians
//! cargo xtask bench compare --reranker DIR [--pairs N] [--rounds N] [--batch-size N] [--max-length N]
//!                           [--answer-queries N] [--answer-config FILE] [--share F]
//!                                # ragtune's cross-encoder against Python onnxruntime + tokenizers on the same
//!                                # model file and SciFact (query, passage) pairs: pairs/s at defaults and at one
//!                                # thread, the largest score difference; then `ask --no-llm` p50 with the rerank
//!                                # stage at 30 % of the candidates and without it (`bench/rerank.rs`)
//! cargo xtask bench answer [--queries N] [--config FILE] [--rerank-model DIR [--rerank-share F]]
//!                                # `ask --no-llm` with the model loaded over SciFact test queries: fast path
//!                                # (no correction) and corrected path p50/p99, each stage's share; with
//!                                # --rerank-model, with and without the cross-encoder rerank stage side by side
//! cargo xtask bench scale [--chunks N] [--queries N] [--dir DIR] [--keep] [--reuse]
//!                                # the embedded store on a synthetic corpus of N chunks (default 1,000,000; real
//!                                # SciFact word distribution and vectors + noise): build, size, open, memory,
//!                                # BM25/dense exact/HNSW/hybrid latency, HNSW recall@10
//! cargo xtask bench store [--retriever dense|bm25] [--batch N] [--qdrant-url URL]
//!                                # upsert throughput and BM25/dense/hybrid query latency on SciFact of the
//!                                # embedded store, a Qdrant node and a 3-node Qdrant cluster, side by side (the
//!                                # Qdrant servers are started from ../shared/qdrant/qdrant and stopped after;
//!                                # --qdrant-url or $QDRANT_URL measures that server instead)
//! cargo xtask bench server [--seconds N] [--soak N] [--hostile]
//!                                # ragtune serve under load (oha): search and query at 1/8/32/64 connections
//! ```
//!
//! Benchmarks that need `../shared/data` say so and measure only what they can without it.

use anyhow::{Context, Result, bail};
use ragtune_provision::ModelLayout;

use crate::shell::{self, Shell};

mod rerank;

pub fn run(args: &[String]) -> Result<()> {
    if args.first().is_some_and(|a| a == "embed") {
        return embed(&args[1..]);
    }
    if args.first().is_some_and(|a| a == "scale") {
        return scale(&args[1..]);
    }
    if args.first().is_some_and(|a| a == "answer") {
        return answer(&args[1..]);
    }
    if args.first().is_some_and(|a| a == "compare") {
        if args.iter().any(|a| a == "--reranker") {
            return rerank::compare(&args[1..]);
        }
        return compare(&args[1..]);
    }
    if args.first().is_some_and(|a| a == "store") {
        return store(&args[1..]);
    }
    if args.first().is_some_and(|a| a == "server") {
        return crate::bench_server::run(&args[1..]);
    }
    let sh = Shell::new();
    let mut cmd = sh.cargo(&["bench", "-j2", "-p", "benches"]);
    if let Some((target, rest)) = args.split_first().filter(|(t, _)| !t.starts_with('-')) {
        cmd.args(["--bench", target]).arg("--").args(rest);
    } else {
        cmd.arg("--").args(args);
    }
    shell::run(&mut cmd)
}

fn embed(args: &[String]) -> Result<()> {
    let (mut passages, mut batch, mut threads) = ("256".to_owned(), "32".to_owned(), "1".to_owned());
    let mut sessions = "1".to_owned();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().with_context(|| format!("{a} needs a value"))?.clone();
        match a.as_str() {
            "--passages" => passages = v,
            "--batch-size" => batch = v,
            "--threads" => threads = v,
            "--sessions" => sessions = v,
            other => bail!("unknown argument {other} (use --passages, --batch-size, --threads, --sessions)"),
        }
    }
    let home = crate::models::provision_models()?;
    let layout = ModelLayout::new(&home);
    let sh = Shell::new();
    let corpus = sh.root().join("../shared/data/beir/scifact/corpus.jsonl");
    if !corpus.is_file() {
        bail!("the embedding benchmark embeds SciFact passages: {} is missing", corpus.display());
    }
    let out_dir = sh.target_dir().join("bench-embed");
    std::fs::create_dir_all(&out_dir)?;
    let dump = out_dir.join("rust-vectors.f32");

    shell::run(&mut sh.cargo(&["build", "--release", "--quiet", "-j2", "-p", "benches", "--bin", "embed-throughput"]))?;
    let exe = sh.target_dir().join("release").join("embed-throughput");
    let common = ["--passages", &passages, "--batch-size", &batch, "--threads", &threads];
    let mut rust = sh.cmd(&exe);
    rust.arg("--model-dir").arg(layout.minilm_dir()).arg("--ort-library").arg(layout.onnxruntime_library());
    rust.arg("--corpus").arg(&corpus).args(common).args(["--sessions", &sessions]).arg("--dump").arg(&dump);
    let rust_out = json_line(&mut rust)?;

    let python = crate::python::venv(&sh, &home)?;
    let mut py = sh.cmd(&python);
    py.arg(sh.root().join("crates/ragtune-embed/scripts/reference_embed.py"));
    py.arg("--model-dir")
        .arg(layout.minilm_dir())
        .arg("--corpus")
        .arg(&corpus)
        .args(common)
        .arg("--compare")
        .arg(&dump);
    let py_out = json_line(&mut py)?;

    let (r, p) = (rust_out["per_second"].as_f64().unwrap_or(0.0), py_out["per_second"].as_f64().unwrap_or(0.0));
    println!(
        "\nembedding throughput, all-MiniLM-L6-v2 (int8 weights), {passages} SciFact passages, batch {batch}, {threads} thread(s)"
    );
    println!("  rust  (fastembed, ort)        {r:>8.1} passages/s");
    println!("  python (onnxruntime, tokenizers) {p:>5.1} passages/s");
    println!("  ratio rust/python             {:>8.2}", if p > 0.0 { r / p } else { f64::NAN });
    println!(
        "  rust, {sessions} session(s): single-text queries {:.1}/s one at a time, {:.1}/s with {sessions} in flight",
        rust_out["queries_per_second_1"].as_f64().unwrap_or(f64::NAN),
        rust_out["queries_per_second_concurrent"].as_f64().unwrap_or(f64::NAN)
    );
    println!(
        "  same vectors: cosine min {:.6}, mean {:.6}",
        py_out["cosine_to_rust"]["min"].as_f64().unwrap_or(f64::NAN),
        py_out["cosine_to_rust"]["mean"].as_f64().unwrap_or(f64::NAN)
    );
    println!("  (2-core machine: compare runs made under the same load; `uptime` now: {})", load());
    Ok(())
}

/// `bench compare`: for each model file (the int8 variant ragtune uses by default, then the file as shipped), both
/// sides at their defaults, then both at one thread, each pair run back to back on the same file.
/// Before each pair it waits, at most two minutes, for the one-minute load average to fall to 1.0, so that its own
/// build or the previous pair does not weigh on the next.
///
/// `--rounds N` runs every pair N times (which side goes first alternates) and prints each figure's median over the
/// rounds, with the range of the per-round ratios: on a host whose speed drifts by 10–30 % between minutes, one pair
/// can land a side on a slow minute.
fn compare(args: &[String]) -> Result<()> {
    let (mut docs, mut queries, mut rounds) = ("1000".to_owned(), "300".to_owned(), 1_usize);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().with_context(|| format!("{a} needs a value"))?.clone();
        match a.as_str() {
            "--docs" => docs = v,
            "--queries" => queries = v,
            "--rounds" => rounds = v.parse().ok().filter(|&r| r >= 1).context("--rounds needs a number >= 1")?,
            other => bail!("unknown argument {other} (use --docs, --queries, --rounds)"),
        }
    }
    let home = crate::models::provision_models()?;
    let layout = ModelLayout::new(&home);
    let sh = Shell::new();
    let dataset = sh.root().join("../shared/data/beir/scifact");
    if !dataset.join("corpus.jsonl").is_file() {
        bail!("the comparison runs on SciFact: {} is missing", dataset.display());
    }
    shell::run(&mut sh.cargo(&["build", "--release", "--quiet", "-j2", "-p", "benches", "--bin", "compare"]))?;
    let exe = sh.target_dir().join("release").join("compare");
    let python = crate::python::venv(&sh, &home)?;
    let common = ["--docs", docs.as_str(), "--queries", queries.as_str()];
    let mut rows = Vec::new();
    for (model, dir) in [("int8", layout.minilm_quantized_dir()), ("fp32", layout.minilm_dir())] {
        for threads in ["0", "1"] {
            let mut pairs = Vec::with_capacity(rounds);
            let before = load();
            for round in 0..rounds {
                // The command's own build, or the previous pair, must not weigh on this pair.
                settle(1.0, std::time::Duration::from_secs(120));
                let mut rust = sh.cmd(&exe);
                rust.arg("--dataset").arg(&dataset).args(common).args(["--threads", threads]);
                if model == "fp32" {
                    rust.arg("--fp32");
                }
                let mut py = sh.cmd(&python);
                py.arg(sh.root().join("crates/ragtune-embed/scripts/peer.py")).arg("--model-dir").arg(&dir);
                py.arg("--dataset").arg(&dataset).args(common).args(["--threads", threads]);
                let (r, p) = if round % 2 == 0 {
                    let r = json_line(&mut rust)?;
                    (r, json_line(&mut py)?)
                } else {
                    let p = json_line(&mut py)?;
                    (json_line(&mut rust)?, p)
                };
                pairs.push((r, p));
            }
            rows.push(Row { model, threads, pairs, before, after: load() });
        }
    }
    // What a user sees who runs each side as shipped: ragtune's defaults (int8) against the peer at its defaults on
    // the model file as distributed (fp32 compute); both measured above, in different pairs.
    let shipped = Row {
        model: "as shipped",
        threads: "0",
        pairs: rows[0].pairs.iter().zip(&rows[2].pairs).map(|((r, _), (_, p))| (r.clone(), p.clone())).collect(),
        before: rows[0].before.clone(),
        after: rows[2].after.clone(),
    };
    println!(
        "\nragtune vs Python peer: SciFact, first {docs} documents, {queries} test queries one at a time, all-MiniLM-L6-v2"
    );
    println!("(ratio = ragtune / peer for throughput, peer / ragtune for latency: above 1 means ragtune is faster)");
    if rounds > 1 {
        println!(
            "({rounds} rounds of each pair: each figure is the median over the rounds, [the lowest and highest \
             per-round ratio] beside it)"
        );
    }
    for row in &rows {
        let setting = match row.threads {
            "0" => format!("{} file, both at defaults", row.model),
            n => format!("{} file, {n} thread each", row.model),
        };
        print_row(&setting, row);
    }
    print_row("as shipped: ragtune at defaults (int8) vs the peer at defaults on the fp32 file", &shipped);
    Ok(())
}

/// One setting of `bench compare`: every round's (ragtune, peer) output and the load around them.
struct Row {
    model: &'static str,
    threads: &'static str,
    pairs: Vec<(serde_json::Value, serde_json::Value)>,
    before: String,
    after: String,
}

/// The median of `values` (the mean of the middle two for an even count); NaN for none. The same definition as
/// `ragtune_evaluators::metrics::percentile(_, 50.0)` and `benches::median`, which xtask does not build (ADR 0007:
/// xtask reaches the engine only through its binaries).
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => f64::midpoint(values[n / 2 - 1], values[n / 2]),
    }
}

/// A figure of one side of one round: `key`, or `key`'s `pick` (`p50`, `p99`).
fn figure(v: &serde_json::Value, key: &str, pick: Option<&str>) -> f64 {
    pick.map_or(&v[key], |p| &v[key][p]).as_f64().unwrap_or(f64::NAN)
}

/// Prints one figure of a side-by-side comparison: each side's median over the rounds (`rounds` holds (ragtune, peer)
/// per round), the ratio of the medians (`rust_over_peer`: ragtune / peer, a throughput; else peer / ragtune, a
/// latency; above 1 means ragtune is faster), and the range of the per-round ratios when there are several rounds.
/// Throughputs print as `/s`, latencies as ms with `ms_decimals` decimals.
pub(crate) fn print_ratio_line(
    label: &str,
    rounds: &[(f64, f64)],
    throughput: bool,
    ms_decimals: usize,
    rust_over_peer: bool,
) {
    let r = median(rounds.iter().map(|(r, _)| *r).collect());
    let p = median(rounds.iter().map(|(_, p)| *p).collect());
    let ratio = |r: f64, p: f64| if rust_over_peer { r / p } else { p / r };
    let per_round: Vec<f64> = rounds.iter().map(|(r, p)| ratio(*r, *p)).collect();
    let range = if per_round.len() > 1 {
        let lo = per_round.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!(" [{lo:.2}–{hi:.2}]")
    } else {
        String::new()
    };
    let (rs, ps) = if throughput {
        (format!("{r:>10.1}/s"), format!("{p:>10.1}/s"))
    } else {
        (format!("{r:>10.ms_decimals$}ms"), format!("{p:>10.ms_decimals$}ms"))
    };
    println!("  {label:<30} {rs} {ps} {:>8.2}{range}", ratio(r, p));
}

/// Prints one setting: every figure's median over the rounds, and the per-round ratios' range when there are rounds.
fn print_row(setting: &str, row: &Row) {
    println!("\n{setting}  (load average before {}, after {})", row.before, row.after);
    println!("  {:<30} {:>12} {:>12} {:>8}", "", "ragtune", "peer", "ratio");
    let line = |label: &str, unit: &str, rk: &str, pk: &str, pick: Option<&str>, rust_over_peer: bool| {
        let rounds: Vec<(f64, f64)> =
            row.pairs.iter().map(|(r, p)| (figure(r, rk, pick), figure(p, pk, pick))).collect();
        print_ratio_line(label, &rounds, unit == "/s", 3, rust_over_peer);
    };
    line("indexing (dense + BM25)", "/s", "index_docs_per_second", "index_docs_per_second", None, true);
    for (label, rk, pk) in [
        ("query embedding", "embed_ms", "embed_ms"),
        ("dense query", "dense_ms", "dense_ms"),
        ("hybrid query (vs peer dense)", "hybrid_ms", "dense_ms"),
        ("BM25 query (peer: bm25s)", "bm25_ms", "bm25_ms"),
    ] {
        for q in ["p50", "p99"] {
            line(&format!("{label} {q}"), "ms", rk, pk, Some(q), false);
        }
    }
    let ours = |key: &str| median(row.pairs.iter().map(|(r, _)| figure(r, key, None)).collect());
    let (c1, c2) = (ours("dense_qps_1"), ours("dense_qps_2"));
    let scaling: Vec<f64> =
        row.pairs.iter().map(|(r, _)| figure(r, "dense_qps_2", None) / figure(r, "dense_qps_1", None)).collect();
    println!(
        "  ragtune dense queries/s: {c1:.1} one in flight, {c2:.1} two in flight ({:.2}x; per run, medians of {} \
         alternated rounds: {})",
        c2 / c1,
        row.pairs.first().and_then(|(r, _)| r["dense_qps_rounds"]["1"].as_array()).map_or(1, Vec::len),
        scaling.iter().map(|s| format!("{s:.2}x")).collect::<Vec<_>>().join(", ")
    );
    println!(
        "  model load: ragtune {:.2} s, peer {:.2} s",
        ours("model_load_seconds"),
        median(row.pairs.iter().map(|(_, p)| figure(p, "model_load_seconds", None)).collect())
    );
}

/// `bench scale`: the binary parses the arguments; a million chunks unless told otherwise.
fn scale(args: &[String]) -> Result<()> {
    let sh = Shell::new();
    let dataset = sh.root().join("../shared/data/beir/scifact");
    if !dataset.join("corpus.jsonl").is_file() {
        bail!("the scale benchmark samples SciFact's words and vectors: {} is missing", dataset.display());
    }
    crate::models::provision_models()?;
    shell::run(&mut sh.cargo(&["build", "--release", "--quiet", "-j2", "-p", "benches", "--bin", "scale"]))?;
    let mut cmd = sh.cmd(sh.target_dir().join("release").join("scale"));
    cmd.arg("--dataset").arg(&dataset);
    if !args.iter().any(|a| a == "--chunks") {
        cmd.args(["--chunks", "1000000"]);
    }
    if !args.iter().any(|a| a == "--dir") {
        cmd.arg("--dir").arg(sh.target_dir().join("tmp").join("scale"));
    }
    cmd.args(args);
    println!("(load average before: {})", load());
    shell::run(&mut cmd)
}

/// `bench answer`: the LLM-free answer path with the model loaded (the binary parses the arguments).
fn answer(args: &[String]) -> Result<()> {
    crate::models::provision_models()?;
    let sh = Shell::new();
    let dataset = sh.root().join("../shared/data/beir/scifact");
    if !dataset.join("corpus.jsonl").is_file() {
        bail!("the answer benchmark runs on SciFact: {} is missing", dataset.display());
    }
    shell::run(&mut sh.cargo(&["build", "--release", "--quiet", "-j2", "-p", "benches", "--bin", "answer-latency"]))?;
    let mut cmd = sh.cmd(sh.target_dir().join("release").join("answer-latency"));
    cmd.arg("--dataset").arg(&dataset).args(args);
    println!("(load average before: {})", load());
    shell::run(&mut cmd)
}

fn store(args: &[String]) -> Result<()> {
    let sh = Shell::new();
    let dataset = sh.root().join("../shared/data/beir/scifact");
    if !dataset.join("corpus.jsonl").is_file() {
        bail!("the store benchmark indexes SciFact: {} is missing", dataset.display());
    }
    // Dense vectors need the model; without it the benchmark still measures BM25.
    let mut args = args.to_vec();
    if !args.iter().any(|a| a == "--retriever") {
        let dense = crate::models::provision_models().is_ok();
        args.extend(["--retriever".to_owned(), if dense { "dense" } else { "bm25" }.to_owned()]);
    }
    shell::run(&mut sh.cargo(&["build", "--release", "--quiet", "-j2", "-p", "benches", "--bin", "store-bench"]))?;
    let exe = sh.target_dir().join("release").join("store-bench");
    let mut cmd = sh.cmd(&exe);
    cmd.arg("--dataset").arg(&dataset).args(&args);
    // Servers of its own, one node and a cluster, unless the caller named one.
    let named =
        args.iter().any(|a| a == "--qdrant-url") || std::env::var_os("QDRANT_URL").is_some_and(|u| !u.is_empty());
    let single = if named {
        None
    } else {
        crate::qdrant::start_guarded_at(&sh, crate::qdrant::Layout::named("qdrant-bench-1"), 1)?
    };
    let cluster = if named {
        None
    } else {
        crate::qdrant::start_guarded_at(&sh, crate::qdrant::Layout::named("qdrant-bench-3"), 3)?
    };
    if let Some(server) = &single {
        cmd.arg("--qdrant-url").arg(server.url()).env("QDRANT_API_KEY", server.api_key());
    }
    if let Some(server) = &cluster {
        cmd.arg("--qdrant-cluster-url").arg(server.url()).env("QDRANT_CLUSTER_API_KEY", server.api_key());
    }
    println!("(load average before: {})", load());
    let outcome = shell::run(&mut cmd);
    for server in [single, cluster].into_iter().flatten() {
        server.stop()?;
    }
    outcome
}

/// Runs a command and parses the last line of its stdout as JSON.
pub(crate) fn json_line(cmd: &mut std::process::Command) -> Result<serde_json::Value> {
    println!("$ {}", shell::display(cmd));
    let out = cmd.output().with_context(|| format!("cannot run `{}`", shell::display(cmd)))?;
    if !out.status.success() {
        bail!("`{}` failed: {}", shell::display(cmd), String::from_utf8_lossy(&out.stderr));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().context("no output")?;
    println!("{line}");
    serde_json::from_str(line).with_context(|| format!("not JSON: {line}"))
}

/// Waits until the one-minute load average is at most `below` (a build or an earlier run has faded), for at most
/// `max`; says how long it waited and what the load was then.
pub(crate) fn settle(below: f64, max: std::time::Duration) {
    let one_minute = || {
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()))
    };
    let started = std::time::Instant::now();
    while one_minute().is_some_and(|l| l > below) && started.elapsed() < max {
        std::thread::sleep(std::time::Duration::from_secs(5));
    }
    let waited = started.elapsed().as_secs();
    if waited > 0 {
        println!("  (waited {waited} s for the load to settle; load average now {})", load());
    }
}

pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "unknown".into(), |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_over_rounds() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
        let run = serde_json::json!({"dense_ms": {"p50": 2.5}, "index_docs_per_second": 30.0});
        assert_eq!(figure(&run, "dense_ms", Some("p50")), 2.5);
        assert_eq!(figure(&run, "index_docs_per_second", None), 30.0);
        assert!(figure(&run, "hybrid_ms", Some("p50")).is_nan(), "a side without the figure (the peer's hybrid)");
    }
}
