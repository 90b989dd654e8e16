//! `cargo xtask bench`: the benchmarks.
//!
//! ```text
//! cargo xtask bench              # every criterion benchmark of the `benches` package (release build)
//! cargo xtask bench bm25         # one criterion target (bm25, retrieval, embed_query)
//! cargo xtask bench embed [--passages N] [--batch-size N] [--threads N] [--sessions N]
//!                                # FastEmbedder vs Python onnxruntime on the same model file, same settings
//! cargo xtask bench compare [--docs N] [--queries N]
//!                                # ragtune against a plain Python pipeline (onnxruntime + tokenizers + numpy,
//!                                # bm25s) on SciFact, same model file, side by side in one run: indexing,
//!                                # query embedding, dense/hybrid/BM25 query latency, at defaults and at one thread
//! cargo xtask bench answer [--queries N] [--config FILE]
//!                                # `ask --no-llm` with the model loaded over SciFact test queries: fast path
//!                                # (no correction) and corrected path p50/p99, each stage's share
//! cargo xtask bench scale [--chunks N] [--queries N] [--dir DIR] [--keep] [--reuse]
//!                                # the embedded store on a synthetic corpus of N chunks (default 1,000,000; real
//!                                # SciFact word distribution and vectors + noise): build, size, open, memory,
//!                                # BM25/dense exact/HNSW/hybrid latency, HNSW recall@10
//! cargo xtask bench store [--retriever dense|bm25] [--batch N] [--qdrant-url URL]
//!                                # upsert throughput and BM25/dense/hybrid query latency on SciFact of the
//!                                # embedded store, a Qdrant node and a 3-node Qdrant cluster, side by side (the
//!                                # Qdrant servers are started from ../shared/qdrant/qdrant and stopped after;
//!                                # --qdrant-url or $QDRANT_URL measures that server instead)
//! cargo xtask bench server [--seconds N] [--soak N]
//!                                # ragtune serve under load (oha): search and query at 1/8/32/64 connections
//! ```
//!
//! Benchmarks that need `../shared/data` say so and measure only what they can without it.

use anyhow::{Context, Result, bail};
use ragtune_provision::ModelLayout;

use crate::shell::{self, Shell};

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
fn compare(args: &[String]) -> Result<()> {
    let (mut docs, mut queries) = ("1000".to_owned(), "300".to_owned());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().with_context(|| format!("{a} needs a value"))?.clone();
        match a.as_str() {
            "--docs" => docs = v,
            "--queries" => queries = v,
            other => bail!("unknown argument {other} (use --docs, --queries)"),
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
    // (model, threads, ragtune's line, the peer's line, load before, load after)
    let mut rows = Vec::new();
    for (model, dir) in [("int8", layout.minilm_quantized_dir()), ("fp32", layout.minilm_dir())] {
        for threads in ["0", "1"] {
            // The command's own build, or the previous pair, must not weigh on this pair.
            settle(1.0, std::time::Duration::from_secs(120));
            let before = load();
            let mut rust = sh.cmd(&exe);
            rust.arg("--dataset").arg(&dataset).args(common).args(["--threads", threads]);
            if model == "fp32" {
                rust.arg("--fp32");
            }
            let rust = json_line(&mut rust)?;
            let mut py = sh.cmd(&python);
            py.arg(sh.root().join("crates/ragtune-embed/scripts/peer.py")).arg("--model-dir").arg(&dir);
            py.arg("--dataset").arg(&dataset).args(common).args(["--threads", threads]);
            let py = json_line(&mut py)?;
            rows.push((model, threads, rust, py, before, load()));
        }
    }
    // What a user sees who runs each side as shipped: ragtune's defaults (int8) against the peer at its defaults on
    // the model file as distributed (fp32 compute); both measured above, in different pairs.
    let shipped = (rows[0].2.clone(), rows[2].3.clone(), rows[0].4.clone(), rows[2].5.clone());
    println!(
        "\nragtune vs Python peer: SciFact, first {docs} documents, {queries} test queries one at a time, all-MiniLM-L6-v2"
    );
    println!("(ratio = ragtune / peer for throughput, peer / ragtune for latency: above 1 means ragtune is faster)");
    let print = |setting: String, r: &serde_json::Value, p: &serde_json::Value, before: &str, after: &str| {
        println!("\n{setting}  (load average before {before}, after {after})");
        println!("  {:<30} {:>12} {:>12} {:>8}", "", "ragtune", "peer", "ratio");
        let num = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        let (ri, pi) = (num(r, "index_docs_per_second"), num(p, "index_docs_per_second"));
        println!("  {:<30} {:>10.1}/s {:>10.1}/s {:>8.2}", "indexing (dense + BM25)", ri, pi, ri / pi);
        for (label, rk, pk) in [
            ("query embedding", "embed_ms", "embed_ms"),
            ("dense query", "dense_ms", "dense_ms"),
            ("hybrid query (vs peer dense)", "hybrid_ms", "dense_ms"),
            ("BM25 query (peer: bm25s)", "bm25_ms", "bm25_ms"),
        ] {
            for q in ["p50", "p99"] {
                let (rv, pv) = (r[rk][q].as_f64().unwrap_or(f64::NAN), p[pk][q].as_f64().unwrap_or(f64::NAN));
                println!("  {:<30} {:>10.3}ms {:>10.3}ms {:>8.2}", format!("{label} {q}"), rv, pv, pv / rv);
            }
        }
        let (c1, c2) = (num(r, "dense_qps_1"), num(r, "dense_qps_2"));
        println!(
            "  ragtune dense queries/s: {c1:.1} one in flight, {c2:.1} two in flight ({:.2}x; medians of {} alternated rounds)",
            c2 / c1,
            r["dense_qps_rounds"]["1"].as_array().map_or(1, Vec::len)
        );
        println!(
            "  model load: ragtune {:.2} s, peer {:.2} s",
            num(r, "model_load_seconds"),
            num(p, "model_load_seconds")
        );
    };
    for (model, threads, r, p, before, after) in &rows {
        let setting = match *threads {
            "0" => format!("{model} file, both at defaults"),
            n => format!("{model} file, {n} thread each"),
        };
        print(setting, r, p, before, after);
    }
    let (r, p, before, after) = &shipped;
    print(
        "as shipped: ragtune at defaults (int8) vs the peer at defaults on the fp32 file".to_owned(),
        r,
        p,
        before,
        after,
    );
    Ok(())
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
fn json_line(cmd: &mut std::process::Command) -> Result<serde_json::Value> {
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
fn settle(below: f64, max: std::time::Duration) {
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

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "unknown".into(), |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}
