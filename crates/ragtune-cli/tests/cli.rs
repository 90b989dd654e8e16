//! The `ragtune` binary end to end: exit codes, messages, and output formats.

use std::path::Path;
use std::process::{Command, Output};

use ragtune_testkit::fixtures::tiny_beir;

fn ragtune(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ragtune"))
        .args(args)
        .current_dir(cwd)
        .env_remove("RAGTUNE_CONFIG")
        .env_remove("RAGTUNE_STORE")
        // No LLM from the environment: the evaluations that need one fail the same way on every machine.
        .env_remove("RAGTUNE_LLM_URL")
        // An empty home: no provisioned models, so these tests see the lexical engine whatever the machine has.
        .env("RAGTUNE_HOME", cwd.join("home"))
        .output()
        .expect("the ragtune binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn corpus(dir: &Path) {
    let docs = dir.join("docs");
    std::fs::create_dir_all(docs.join("guide")).unwrap();
    std::fs::write(
        docs.join("guide/install.md"),
        "# Install\n\nRun the installer. It needs two gigabytes of disk.\n\n## Upgrading\n\nUpgrades keep your data.\n",
    )
    .unwrap();
    std::fs::write(docs.join("faq.txt"), "Scurvy is caused by a lack of vitamin C in the diet.").unwrap();
    std::fs::write(docs.join("broken.md"), b"valid start \xff\xfe invalid bytes").unwrap();
}

#[test]
fn index_then_search_prints_ranked_hits() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    let out = ragtune(&["index", "docs", "--store", "store"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("indexed 2 documents"), "{stdout}");
    // The invalid UTF-8 file is reported, with its path, and the rest was indexed.
    assert!(text(&out.stderr).contains("broken.md"), "{}", text(&out.stderr));

    let out = ragtune(&["search", "what causes scurvy", "--store", "store", "-k", "1"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with(" 1. faq.txt"), "{stdout}");
    assert!(stdout.contains("vitamin C"), "{stdout}");

    let out = ragtune(&["search", "upgrading data", "--store", "store", "--json"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &json["hits"][0];
    assert_eq!(first["chunk"]["doc_id"], "guide/install.md");
    assert_eq!(first["chunk"]["header_path"][1], "Upgrading");
    assert_eq!(first["sources"]["bm25"]["rank"], 1);
    assert_eq!(json["trace"][0]["stage"], "route");
    assert_eq!(json["trace"][0]["action"], "bm25");
    assert!(json["trace"][0]["detail"]["fallback"].is_string(), "the trace says why dense retrieval is off");
    assert_eq!(json["trace"][1]["stage"], "retrieve");
}

#[test]
fn index_exclude_skips_matching_files_and_names_a_bad_pattern() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    let out =
        ragtune(&["index", "docs", "--exclude", "guide", "--exclude", "*.md", "--store", "s", "--json"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // faq.txt alone: guide/ is not entered and broken.md is not read (so it is no problem either).
    assert_eq!(report["documents"], 1, "{report}");
    assert_eq!(report["issues"].as_array().map(Vec::len), Some(0), "{report}");

    let out = ragtune(&["index", "docs", "--exclude", "guide/[a", "--store", "s2"], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("\"guide/[a\" is not a glob"), "{}", text(&out.stderr));
}

#[test]
fn usage_errors_exit_with_2() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(ragtune(&[], dir.path()).status.code(), Some(2));
    assert_eq!(ragtune(&["search"], dir.path()).status.code(), Some(2));
    assert_eq!(ragtune(&["index", "x", "--no-such-flag"], dir.path()).status.code(), Some(2));
    assert_eq!(ragtune(&["search", "q", "-k", "many"], dir.path()).status.code(), Some(2));
}

#[test]
fn runtime_errors_exit_with_1_and_say_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let out = ragtune(&["index", "missing-folder", "--store", "s"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("missing-folder"), "{}", text(&out.stderr));

    let out = ragtune(&["search", "anything", "--store", "empty-store"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no index yet"), "{}", text(&out.stderr));

    corpus(dir.path());
    assert_eq!(ragtune(&["index", "docs", "--store", "s"], dir.path()).status.code(), Some(0));
    let out = ragtune(&["search", "   ", "--store", "s"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("the query is empty"), "{}", text(&out.stderr));

    let huge = "word ".repeat(20_000);
    let out = ragtune(&["search", &huge, "--store", "s"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("bytes long"), "{}", text(&out.stderr));

    let out = ragtune(&["calibrate", "--dataset", "nowhere", "--evaluator", "oracle"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unknown evaluator `oracle`"), "{}", text(&out.stderr));

    let out = ragtune(&["calibrate", "--fusion", "--dataset", "nowhere"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("nowhere"), "{}", text(&out.stderr));

    std::fs::write(dir.path().join("fit.json"), "{}").unwrap();
    let out = ragtune(&["calibrate", "--fusion", "--from-fit-json", "fit.json"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("fit.json: not a fit `calibrate --fit-json` wrote"), "{err}");

    let out = ragtune(&["calibrate", "--evaluator", "learned", "--dataset", "nowhere"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("nowhere"), "{}", text(&out.stderr));
    let args = ["calibrate", "--evaluator", "learned", "--dataset", "nowhere", "--incorrect-precision", "1.5"];
    let out = ragtune(&args, dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--incorrect-precision must be within [0, 1], got 1.5"),
        "{}",
        text(&out.stderr)
    );

    std::fs::write(dir.path().join("learned.toml"), "[crag]\nevaluator = \"learned\"\n").unwrap();
    let out = ragtune(&["--config", "learned.toml", "search", "x"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("learned.toml") && err.contains("needs a [crag.learned] section"), "{err}");

    std::fs::write(dir.path().join("weights.toml"), "[hybrid]\ndense_weight = -0.5\n").unwrap();
    let out = ragtune(&["--config", "weights.toml", "search", "x"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("weights.toml") && err.contains("[hybrid]: dense_weight must be"), "{err}");

    // A flag is held to the bounds of what it sets, as an HTTP request is.
    let out = ragtune(&["ask", "what causes scurvy?", "--store", "s", "--no-llm", "-k", "5000"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("top_k must be 1 to 1000, got 5000"), "{}", text(&out.stderr));
    let out = ragtune(&["eval", "retrieval", "--dataset", "nowhere", "--dense-weight=-1"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("dense_weight must be"), "{}", text(&out.stderr));
    std::fs::write(dir.path().join("topk.toml"), "[pipeline]\ntop_k = 100000\n").unwrap();
    let out = ragtune(&["--config", "topk.toml", "search", "x"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("[pipeline] top_k must be 1 to 1000"), "{}", text(&out.stderr));

    std::fs::write(dir.path().join("bad.toml"), "[bm25]\nk1 = \"high\"\n").unwrap();
    let out = ragtune(&["--config", "bad.toml", "search", "x"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("bad.toml"), "{}", text(&out.stderr));
}

#[test]
fn a_locked_store_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    let _held = ragtune::store::EmbeddedStore::open(dir.path().join("s")).unwrap();
    let out = ragtune(&["index", "docs", "--store", "s"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("locked"), "{}", text(&out.stderr));
}

#[test]
fn migrate_copies_a_store_that_then_answers_the_same() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    let out = ragtune(&["index", "docs", "--store", "store"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out =
        ragtune(&["migrate", "--from", "store", "--to", "embedded", "--to-dir", "copy", "--batch", "2"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("migrated "), "{stdout}");

    let search = |store: &str| {
        let out = ragtune(&["search", "upgrades keep data", "--store", store, "--json"], dir.path());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["hits"].clone()
    };
    let (a, b) = (search("store"), search("copy"));
    assert!(!a.as_array().unwrap().is_empty());
    assert_eq!(a, b, "the copy ranks and scores exactly like the original");

    // Running it again changes nothing (upserts by chunk id).
    let again = ragtune(&["migrate", "--from", "store", "--to", "embedded", "--to-dir", "copy"], dir.path());
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(search("copy"), b);

    // --replace empties the target first: a smaller store copied over the copy leaves only its own chunks.
    std::fs::create_dir(dir.path().join("small")).unwrap();
    std::fs::write(dir.path().join("small").join("one.md"), "# One\n\nA single note about nightly backups.\n").unwrap();
    let out = ragtune(&["index", "small", "--store", "small-store"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let replace = ["migrate", "--from", "small-store", "--to", "embedded", "--to-dir", "copy", "--replace"];
    let out = ragtune(&replace, dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let records: u64 = stdout["migrated ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(stdout.contains(&format!("the target holds {records} chunks")), "{stdout}");
    assert_ne!(search("copy"), b);
}

#[test]
fn migrate_needs_an_existing_source_and_a_known_target() {
    let dir = tempfile::tempdir().unwrap();
    let out = ragtune(&["migrate", "--from", "nowhere", "--to", "embedded", "--to-dir", "x"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("there is no store at nowhere"), "{}", text(&out.stderr));
    let out =
        ragtune(&["migrate", "--from-qdrant", "--to", "qdrant", "--qdrant-url", "http://127.0.0.1:9"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("use --to embedded"), "{}", text(&out.stderr));
    let out = ragtune(&["migrate", "--from-qdrant", "--from", "x", "--to", "embedded", "--to-dir", "y"], dir.path());
    assert_eq!(out.status.code(), Some(2), "--from names an embedded source, --from-qdrant a Qdrant one");
    let out = ragtune(
        &["migrate", "--from-qdrant", "--qdrant-url", "http://127.0.0.1:9", "--to", "embedded", "--to-dir", "y"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot reach Qdrant at http://127.0.0.1:9"), "{}", text(&out.stderr));
    let out = ragtune(&["migrate", "--to", "elsewhere"], dir.path());
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(text(&out.stderr).contains("unknown store `elsewhere`"), "{}", text(&out.stderr));
}

#[test]
fn an_unreachable_qdrant_is_a_clear_runtime_error() {
    let dir = tempfile::tempdir().unwrap();
    // Port 9 (discard) has no Qdrant: connection refused at once.
    let out = ragtune(&["search", "anything", "--qdrant-url", "http://127.0.0.1:9"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("cannot reach Qdrant at http://127.0.0.1:9"), "{err}");
}

fn report(dir: &Path, name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
}

#[test]
fn eval_subcommands_report_and_the_flag_form_of_earlier_releases_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    tiny_beir(&dir.path().join("tiny"));
    let beir = ["--dataset", "tiny", "--top-k", "10", "--cache-dir", "cache"];
    let run = |args: &[&str]| {
        let out = ragtune(args, dir.path());
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        out
    };
    let retrieval = run(&[&["eval", "retrieval"][..], &beir, &["--out", "r.json"]].concat());
    assert!(text(&retrieval.stdout).contains("ndcg@10        1.0000"), "{}", text(&retrieval.stdout));
    assert_eq!(report(dir.path(), "r.json")["metrics"]["ndcg@10"], 1.0);
    let crag = run(&[&["eval", "crag"][..], &beir, &["--k", "1", "--out", "crag.json"]].concat());
    assert!(text(&crag.stdout).contains("model:retrieval"), "{}", text(&crag.stdout));

    // `ragtune eval --dataset DIR` without a subcommand (deprecated for one release) is now a usage error.
    for args in [&["eval", "--dataset", "tiny"][..], &["eval", "--dataset", "tiny", "--crag"][..]] {
        let out = ragtune(args, dir.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("ragtune eval <retrieval|qa|crag|rerank"), "{}", text(&out.stderr));
    }
    // The subcommands fail with the error that names the problem.
    let out = ragtune(&["eval", "rerank", "--dataset", "tiny", "--policy", "dynamic"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("need an LLM"), "{}", text(&out.stderr));
    let out = ragtune(&["eval", "qa", "--dataset", "tiny", "--experiment", "baseline"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no semester directories"), "{}", text(&out.stderr));
    let out = ragtune(&["eval", "retrieval", "--dataset", "nowhere"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("nowhere"), "{}", text(&out.stderr));
}

#[test]
fn no_llm_keeps_the_evaluations_off_a_running_local_server() {
    let dir = tempfile::tempdir().unwrap();
    tiny_beir(&dir.path().join("tiny"));
    // A local server as `cargo xtask llm start` records it (nothing listens there).
    std::fs::create_dir_all(dir.path().join("home/llm")).unwrap();
    std::fs::write(dir.path().join("home/llm/server.json"), r#"{"url": "http://127.0.0.1:9"}"#).unwrap();
    let args = ["eval", "rerank", "--dataset", "tiny", "--policy", "dynamic"];
    let found = ragtune(&args, dir.path());
    assert!(text(&found.stderr).contains("using the local LLM at http://127.0.0.1:9"), "{}", text(&found.stderr));
    let without = ragtune(&[&args[..], &["--no-llm"]].concat(), dir.path());
    assert_eq!(without.status.code(), Some(1));
    let said = text(&without.stderr);
    assert!(said.contains("need an LLM") && !said.contains("using the local LLM"), "{said}");
    // The cross-encoder needs no LLM: the local server is not looked for, and its model is what fails.
    let args = ["eval", "rerank", "--dataset", "tiny", "--reranker", "cross-encoder", "--rerank-model", "nowhere"];
    let cross = ragtune(&args, dir.path());
    assert_eq!(cross.status.code(), Some(1));
    let said = text(&cross.stderr);
    assert!(said.contains("nowhere") && !said.contains("LLM"), "{said}");
    let args = ["eval", "retrieval", "--dataset", "tiny", "--rerank", "cross-encoder", "--rerank-model", "nowhere"];
    let cross = ragtune(&args, dir.path());
    assert_eq!(cross.status.code(), Some(1));
    let said = text(&cross.stderr);
    assert!(said.contains("nowhere") && !said.contains("LLM"), "{said}");
    // Naming an LLM and refusing one is a usage error.
    let both = ragtune(&[&args[..], &["--no-llm", "--llm-url", "http://127.0.0.1:9"]].concat(), dir.path());
    assert_eq!(both.status.code(), Some(2), "{}", text(&both.stderr));
}

#[test]
fn eval_crag_and_calibrate_take_the_cross_encoder_scorer_and_its_model() {
    let dir = tempfile::tempdir().unwrap();
    tiny_beir(&dir.path().join("tiny"));
    // The scorer's model is loaded before anything is indexed: a missing one fails at once, naming it, with no LLM.
    for command in [&["eval", "crag"][..], &["calibrate", "--split", "test"]] {
        let args = [command, &["--dataset", "tiny", "--scorer", "cross-encoder", "--rerank-model", "nowhere"]].concat();
        let out = ragtune(&args, dir.path());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out.stderr));
        let said = text(&out.stderr);
        assert!(said.contains("nowhere") && !said.contains("LLM"), "{args:?}: {said}");
        assert!(!dir.path().join("home/eval-cache").exists(), "{args:?}: nothing was indexed");
    }
    // Without a model the scorer says where one comes from.
    let out = ragtune(&["eval", "crag", "--dataset", "tiny", "--scorer", "cross_encoder"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--rerank-model"), "{}", text(&out.stderr));
    let out = ragtune(&["eval", "crag", "--dataset", "tiny", "--scorer", "bert"], dir.path());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cross_encoder"), "the names are listed: {}", text(&out.stderr));
}

#[test]
fn eval_usage_errors_exit_with_2() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["eval"][..],
        &["eval", "retrieval"],
        &["eval", "retrieval", "--dataset", "tiny", "--crag"],
        &["eval", "qa", "--dataset", "tiny", "--retriever", "bm25"],
        &["eval", "nonsense", "--dataset", "tiny"],
        &["calibrate", "--fusion", "--dataset", "tiny", "--evaluator", "heuristic"],
        &["calibrate", "--fusion", "--dataset", "tiny", "--incorrect-recall", "0.5"],
        &["calibrate", "--dataset", "tiny", "--stress", "bm25:0.6"],
        &["calibrate", "--dataset", "tiny", "--min-gain", "0"],
        &["calibrate", "--dataset", "tiny", "--fit-json", "fit.json"],
        &["calibrate", "--fusion", "--dataset", "tiny", "--min-gain", "none"],
        &["eval", "retrieval", "--dataset", "tiny", "--rerank-depth", "5"],
        &["eval", "retrieval", "--dataset", "tiny", "--rerank", "colbert"],
        &["eval", "rerank", "--dataset", "tiny", "--reranker", "colbert"],
    ] {
        assert_eq!(ragtune(args, dir.path()).status.code(), Some(2), "{args:?}");
    }
    let out = ragtune(&["eval", "rerank", "--dataset", "tiny", "--policy", "greedy,random"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("unknown rerank policy `random`; available: greedy, dynamic, uncertainty"), "{err}");
    // `eval join-sets` names every dataset's output or none.
    let args = ["eval", "join-sets", "--dataset", "a", "--dataset", "b", "--name", "x", "--out", "j"];
    let out = ragtune(&args, dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--name is given 1 times for 2 datasets"), "{}", text(&out.stderr));
    // A floor on the worst gain is a number.
    let out = ragtune(&["calibrate", "--fusion", "--dataset", "a", "--min-gain", "NaN"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--min-gain must be a finite number, got NaN"), "{}", text(&out.stderr));
    // Several datasets are for `--fusion` only.
    let out = ragtune(&["calibrate", "--dataset", "a", "--dataset", "b"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("--dataset is given 2 times: only --fusion fits on several datasets"), "{err}");
    // A stress names the weakened retriever and a rate in (0, 1].
    for stress in ["hybrid:0.5", "bm25:2", "dense"] {
        let out = ragtune(&["calibrate", "--fusion", "--dataset", "tiny", "--stress", stress], dir.path());
        assert_eq!(out.status.code(), Some(2), "{stress}");
        let err = text(&out.stderr);
        assert!(err.contains("a stress is `bm25:RATE` or `dense:RATE` with RATE in (0, 1]"), "{stress}: {err}");
    }
    let out = ragtune(&["eval", "retrieval", "--dataset", "tiny", "--fusion", "mean"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("unknown fusion method `mean`; available: rrf, convex, dbsf"), "{err}");
    for (flag, value, message) in [
        ("--doc-score", "sum:0", "unknown document score `sum:0`; available: max, sum:N, mean:N"),
        ("--chunking", "sections", "unknown chunking `sections`; available: passages, whole"),
    ] {
        let out = ragtune(&["eval", "retrieval", "--dataset", "tiny", flag, value], dir.path());
        assert_eq!(out.status.code(), Some(2), "{flag}");
        assert!(text(&out.stderr).contains(message), "{}", text(&out.stderr));
    }
    assert_eq!(ragtune(&["eval", "build-cmu-set", "--dataset", "x"], dir.path()).status.code(), Some(2), "--out");
    // A missing dataset is a runtime error that names it.
    let out = ragtune(&["eval", "build-cmu-set", "--dataset", "nowhere", "--out", "set"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("nowhere"), "{}", text(&out.stderr));
}

#[test]
fn ask_and_query_answer_without_an_llm() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    assert_eq!(ragtune(&["index", "docs", "--store", "s"], dir.path()).status.code(), Some(0));

    let out = ragtune(&["ask", "what causes scurvy?", "--store", "s", "--no-llm"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("Scurvy is caused by a lack of vitamin C"), "{stdout}");
    assert!(stdout.contains("Sources:\n  [1] faq.txt (faq)") && stdout.contains("Answer: Extractive"), "{stdout}");

    let out = ragtune(&["query", "what causes scurvy?", "--store", "s", "--no-llm", "-k", "2", "--json"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["answer"].is_null(), "query does not generate: {v}");
    assert_eq!(v["context"][0]["chunk_id"], "faq.txt");
    assert_eq!(v["trace"], serde_json::json!([]), "the trace is only printed with --trace");
}

#[test]
fn web_and_no_web_turn_the_configured_web_search_on_and_off_for_one_run() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    assert_eq!(ragtune(&["index", "docs", "--store", "s"], dir.path()).status.code(), Some(0));
    let searx = ragtune_testkit::fixtures::SearxServer::start(serde_json::json!({"url": "https://example.org/cup",
        "title": "Cup", "content": "The football team scored four goals on Saturday.", "engine": "test", "score": 1.0}));
    let url = &searx.url;
    let count = || searx.requests();
    let question = "How many goals did the football team score?";
    for (enabled, flag, asked) in [(true, "--no-web", false), (false, "--web", true)] {
        let toml = format!("[web]\nenabled = {enabled}\n[web.providers.searxng]\nbase_url = \"{url}\"\n");
        std::fs::write(dir.path().join("web.toml"), toml).unwrap();
        let before = count();
        let args = ["--config", "web.toml", "query", question, "--store", "s", "--no-llm", "--json", flag];
        let out = ragtune(&args, dir.path());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["crag"]["decision"], "INCORRECT", "{v}");
        assert_eq!(count() > before, asked, "{flag}: the server was asked: {}", count() > before);
        assert_eq!(v["crag"]["web_search_used"], asked, "{flag}: {v}");
        if asked {
            assert_eq!(v["crag"]["web_providers"], serde_json::json!(["searxng"]), "{v}");
        }
    }
    let out = ragtune(&["query", question, "--store", "s", "--web", "--no-web"], dir.path());
    assert_eq!(out.status.code(), Some(2), "--web and --no-web conflict");
}

/// `ragtune serve` on a free port in `cwd` over the store `store`; the child and its base URL (read from the line
/// the server prints when it is ready).
fn serve(cwd: &Path, store: &str) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_ragtune"))
        .args(["serve", "--store", store, "--bind", "127.0.0.1:0"])
        .current_dir(cwd)
        .env_remove("RAGTUNE_CONFIG")
        .env_remove("RAGTUNE_STORE")
        .env_remove("RAGTUNE_LLM_URL")
        .env("RAGTUNE_HOME", cwd.join("home"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("ragtune serve starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line).expect("the ready line");
    let url = line.trim().rsplit(' ').next().expect("`… on http://ADDR`").to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    (child, url)
}

#[test]
fn serve_killed_during_writes_keeps_every_acknowledged_batch() {
    use ragtune_testkit::http::request;
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let (mut server, url) = serve(dir.path(), "store");
    // A writer streams batches as fast as it can; the server is SIGKILLed while it writes.
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let (url, acknowledged) = (url.clone(), Arc::clone(&acknowledged));
        std::thread::spawn(move || {
            for b in 0..10_000 {
                let docs: Vec<serde_json::Value> = (0..4)
                    .map(|i| serde_json::json!({"id": format!("b{b}-d{i}"), "text": format!("batch{b} document{i} token{b}x{i}")}))
                    .collect();
                let body = serde_json::json!({ "documents": docs }).to_string();
                match request("PUT", &url, "/v1/documents", &[], Some(&body)) {
                    Ok(r) if r.status == 200 => acknowledged.lock().unwrap().push(b),
                    Ok(r) => panic!("batch {b}: {} {}", r.status, r.body),
                    // The server is gone: this batch was not acknowledged, and nothing more will be.
                    Err(_) => return b,
                }
            }
            panic!("the server was never killed");
        })
    };
    while acknowledged.lock().unwrap().len() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    server.kill().unwrap();
    server.wait().unwrap();
    let first_refused = writer.join().unwrap();
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert_eq!(acknowledged, (0..first_refused).collect::<Vec<_>>(), "batches are acknowledged in order");

    let (mut server, url) = serve(dir.path(), "store");
    let stats = request("GET", &url, "/v1/stats", &[], None).unwrap().json();
    let documents = stats["stats"]["documents"].as_u64().unwrap();
    // The batch in flight at the kill may have committed without its answer arriving: whole or not at all.
    assert!(documents == 4 * acknowledged.len() as u64 || documents == 4 * (acknowledged.len() as u64 + 1), "{stats}");
    for b in &acknowledged {
        for i in 0..4 {
            let q = serde_json::json!({"query": format!("token{b}x{i}"), "top_k": 1}).to_string();
            let r = request("POST", &url, "/v1/search", &[], Some(&q)).unwrap().json();
            assert_eq!(r["hits"][0]["chunk"]["doc_id"], format!("b{b}-d{i}"), "{r}");
        }
    }
    server.kill().unwrap();
    server.wait().unwrap();
}

/// A fusion fit of two queries whose relevant documents are `relevant`, saved as `calibrate --fit-json` saves it.
fn saved_fit(name: &str, relevant: [&str; 2]) -> (ragtune_eval::DatasetFit, String) {
    use ragtune_testkit::fixtures::ranked_list as list;
    let queries = vec![
        ragtune_eval::fusion::FusionQuery {
            id: "q1".into(),
            bm25: list("bm25", &[("a1", 20.0), ("x1", 5.0), ("y1", 4.0)]),
            dense: list("dense", &[("x1", 0.61), ("a1", 0.60), ("y1", 0.58)]),
            bm25_terms: 2,
        },
        ragtune_eval::fusion::FusionQuery {
            id: "q2".into(),
            bm25: list("bm25", &[("x2", 4.1), ("y2", 4.0), ("a2", 3.9)]),
            dense: list("dense", &[("a2", 0.64), ("x2", 0.60), ("y2", 0.59)]),
            bm25_terms: 2,
        },
    ];
    let mut qrels = ragtune::evaluators::metrics::Qrels::new();
    for (q, d) in [("q1", relevant[0]), ("q2", relevant[1])] {
        qrels.entry(q.to_owned()).or_default().insert(d.to_owned(), 1);
    }
    let grid = ragtune_eval::FusionGrid::default();
    let fit =
        ragtune_eval::fusion::fit_fusion(&queries, &qrels, &ragtune::HybridSettings::default(), &grid, 100).unwrap();
    let dataset = ragtune_eval::DatasetFit { name: name.into(), fit };
    let conditions = ragtune_eval::fusion::FitConditions {
        split: "train".into(),
        chunking: ragtune_eval::EvalChunking::Passages,
        limit: None,
    };
    let joint = ragtune_eval::joint_fit(vec![dataset.clone()], None).unwrap();
    (dataset, ragtune_eval::fusion::saved_fit_json(&joint, &conditions).unwrap())
}

#[test]
fn calibrate_chooses_from_saved_fits_as_from_fresh_ones_and_refuses_mismatched_files() {
    let dir = tempfile::tempdir().unwrap();
    let (a, a_json) = saved_fit("a", ["a1", "a2"]);
    let (b, b_json) = saved_fit("b", ["a1", "x2"]);
    std::fs::write(dir.path().join("a.json"), &a_json).unwrap();
    std::fs::write(dir.path().join("b.json"), &b_json).unwrap();
    let out = ragtune(
        &["calibrate", "--fusion", "--from-fit-json", "a.json", "--from-fit-json", "b.json", "--out", "f.toml"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("a.json: the fits of 1 datasets on `train`: a"), "{}", text(&out.stderr));
    let want = ragtune_eval::fusion_toml(&ragtune_eval::joint_fit(vec![a, b], None).unwrap(), "train");
    assert_eq!(std::fs::read_to_string(dir.path().join("f.toml")).unwrap(), want);
    assert!(want.contains("from a `train` (2 queries) and b `train` (2 queries)"), "{want}");

    // One dataset twice, another indexing, another split: refused before anything is fused or written.
    for (extra, says) in [
        (&["--from-fit-json", "a.json"][..], "the dataset `a` is given twice"),
        (&["--chunking", "whole"], "a.json: fitted with passages indexing on every query, not with whole indexing"),
        (&["--limit", "5"], "not with passages indexing on the first 5 queries"),
        (&["--split", "dev"], "a.json: fitted on the `train` split, not on `dev`"),
        // Saved files are read and the names checked before a fresh dataset is opened (`nowhere` does not exist).
        (&["--dataset", "nowhere"], "the dataset `a` is given twice"),
    ] {
        let mut args = vec!["calibrate", "--fusion", "--from-fit-json", "a.json", "--out", "g.toml"];
        args.extend_from_slice(extra);
        if extra[0] == "--dataset" {
            args.extend_from_slice(&["--from-fit-json", "a.json"]);
        }
        let out = ragtune(&args, dir.path());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", text(&out.stderr));
        assert!(!dir.path().join("g.toml").exists(), "{args:?}");
    }
}

/// A QA dataset in the CMU Wikipedia QA layout: one semester, one article, two questions.
fn tiny_cmu_qa(root: &Path) {
    let set = root.join("S08/data/set1");
    std::fs::create_dir_all(&set).unwrap();
    let text = "Scurvy is a disease. Scurvy is caused by a lack of vitamin C in the diet. James Lind showed in 1747 \
                that citrus fruit cures scurvy.";
    std::fs::write(set.join("a1.txt"), text).unwrap();
    std::fs::write(set.join("a1.txt.clean"), text).unwrap();
    let rows = [
        "ArticleTitle\tQuestion\tAnswer\tDifficultyFromQuestioner\tDifficultyFromAnswerer\tArticleFile",
        "Scurvy\tWhat is scurvy caused by?\ta lack of vitamin C\teasy\teasy\tdata/set1/a1",
        "Scurvy\tIs scurvy a disease?\tyes\teasy\teasy\tdata/set1/a1",
    ];
    std::fs::write(root.join("S08/question_answer_pairs.txt"), rows.join("\n") + "\n").unwrap();
}

#[test]
fn eval_qa_refuses_experiments_it_cannot_run_before_running_any() {
    let dir = tempfile::tempdir().unwrap();
    tiny_cmu_qa(&dir.path().join("tiny-qa"));
    let args = ["eval", "qa", "--dataset", "tiny-qa", "--cache-dir", "cache", "--out", "qa.json", "--no-llm"];
    // Issue 42: the third experiment needs an LLM; before, the first two ran for minutes and no report was written.
    let out = ragtune(&[&args[..], &["--experiment", "baseline,corrective,answer_first"]].concat(), dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("1 of the 3 experiments requested cannot run, so none was started"), "{err}");
    assert!(err.contains("answer_first: needs an LLM, and this run has none"), "{err}");
    // Nothing ran: no index was built, no experiment started, no report was written.
    assert!(!err.contains("indexing") && !err.contains("experiment baseline"), "{err}");
    assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
    assert!(!dir.path().join("qa.json").exists() && !dir.path().join("cache").exists());
    // Every experiment that cannot run is listed, with why.
    let out = ragtune(&[&args[..], &["--experiment", "no_retrieval,baseline,nope,answer_first"]].concat(), dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("3 of the 4 experiments requested cannot run, so none was started"), "{err}");
    for line in ["no_retrieval: needs an LLM", "nope: unknown experiment `nope`", "answer_first: needs an LLM"] {
        assert!(err.contains(&format!("\n  {line}")), "{line}: {err}");
    }
    assert!(!dir.path().join("qa.json").exists() && !dir.path().join("cache").exists());

    // The experiments that answer without an LLM run, and the report is written.
    let out = ragtune(&[&args[..], &["--experiment", "baseline,corrective"]].concat(), dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = report(dir.path(), "qa.json");
    let names: Vec<&str> =
        report["experiments"].as_array().unwrap().iter().map(|e| e["experiment"].as_str().unwrap()).collect();
    assert_eq!(names, ["baseline", "corrective"]);
    assert!(report["experiments"][0].get("error").is_none(), "{report}");
}

#[cfg(unix)]
#[test]
fn index_skips_symlinks_and_oversized_files_and_indexes_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("faq.txt"), "Scurvy is caused by a lack of vitamin C in the diet.").unwrap();
    // Outside the indexed folder: a link must not bring it in.
    std::fs::write(dir.path().join("secret.txt"), "The vault password is swordfish.").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), docs.join("linked.txt")).unwrap();
    std::os::unix::fs::symlink("..", docs.join("parent")).unwrap();
    // Sparse: 64 MiB and one byte by its metadata, nothing written.
    let huge = std::fs::File::create(docs.join("huge.txt")).unwrap();
    huge.set_len(64 * 1024 * 1024 + 1).unwrap();

    let out = ragtune(&["index", "docs", "--store", "s"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("indexed 1 documents"), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("3 problems (the rest was indexed)"), "{err}");
    for name in ["linked.txt", "parent"] {
        assert!(err.contains(&format!("{name}: skipped symlink")), "{name}: {err}");
    }
    assert!(err.contains("huge.txt: skipped: the file is 67108865 bytes, over the cap of 67108864 bytes"), "{err}");

    // Nothing from outside the folder was indexed: its words match nothing; the folder's own file is there.
    for (query, expect) in [("vault password swordfish", &[][..]), ("vitamin scurvy", &["faq.txt"][..])] {
        let out = ragtune(&["search", query, "--store", "s", "--json"], dir.path());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let ids: Vec<&str> =
            json["hits"].as_array().unwrap().iter().map(|h| h["chunk"]["doc_id"].as_str().unwrap()).collect();
        assert_eq!(ids, expect, "{query}");
    }
}

#[test]
fn a_document_whose_id_looks_like_a_chunk_id_does_not_overwrite_that_chunk() {
    let dir = tempfile::tempdir().unwrap();
    // `a` is long enough to be chunked (its first passage is `a#0`); `a#0` is short and indexed whole.
    let long = format!("Aardvarks dig burrows at night. {}", "Filler words about nothing in particular. ".repeat(60));
    let lines = [
        serde_json::json!({"id": "a", "text": long}).to_string(),
        serde_json::json!({"id": "a#0", "text": "Zebras have black and white stripes."}).to_string(),
    ];
    std::fs::write(dir.path().join("docs.jsonl"), lines.join("\n") + "\n").unwrap();
    let out = ragtune(&["index", "docs.jsonl", "--store", "s", "--json"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["documents"], 2, "{report}");
    let written = report["passages"].as_u64().unwrap() + report["sections"].as_u64().unwrap();
    assert!(report["passages"].as_u64().unwrap() >= 3, "`a` is chunked: {report}");
    assert_eq!(report["store"]["chunks"].as_u64(), Some(written), "no chunk overwrote another: {report}");
    assert_eq!(report["store"]["documents"], 2, "{report}");

    for (query, doc) in [("aardvarks burrows", "a"), ("zebras stripes", "a#0")] {
        let out = ragtune(&["search", query, "--store", "s", "--json", "-k", "1"], dir.path());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let chunk = &json["hits"][0]["chunk"];
        assert_eq!(chunk["doc_id"], doc, "{query}: {json}");
        let wanted = if doc == "a" { "Aardvarks" } else { "Zebras" };
        assert!(chunk["text"].as_str().unwrap().starts_with(wanted), "{query}: {json}");
    }
}

#[test]
fn web_without_a_configured_provider_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    assert_eq!(ragtune(&["index", "docs", "--store", "s"], dir.path()).status.code(), Some(0));
    // No config at all, and a `[web]` section that turns web search on but names no provider.
    std::fs::write(dir.path().join("no-provider.toml"), "[web]\nenabled = true\n").unwrap();
    for config in [None, Some("no-provider.toml")] {
        for command in ["ask", "query"] {
            let mut args: Vec<&str> = config.map_or_else(Vec::new, |c| vec!["--config", c]);
            args.extend([command, "what causes scurvy?", "--store", "s", "--no-llm", "--web"]);
            let out = ragtune(&args, dir.path());
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
            let err = text(&out.stderr);
            assert!(err.contains("--web needs a web search provider, and none is configured"), "{args:?}: {err}");
            assert!(err.contains("[web.providers.searxng]") && err.contains("docs/web.md"), "{args:?}: {err}");
            assert!(text(&out.stdout).is_empty(), "{args:?}: nothing was answered: {}", text(&out.stdout));
        }
    }
    // Without --web the question is answered from the corpus as before.
    let out = ragtune(&["ask", "what causes scurvy?", "--store", "s", "--no-llm"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A PDF written by hand (uncompressed, one Helvetica text line per 12 words), one page per entry of `pages`, so
/// the CLI tests need no PDF library.
fn hand_written_pdf(pages: &[String]) -> Vec<u8> {
    let n = pages.len();
    // Objects: 1 catalog, 2 page tree, 3 font, then a page and its content stream for each page.
    let kids: Vec<String> = (0..n).map(|i| format!("{} 0 R", 4 + 2 * i)).collect();
    let mut objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        format!("<< /Type /Pages /Kids [{}] /Count {n} /MediaBox [0 0 595 842] >>", kids.join(" ")),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
    ];
    for (i, text) in pages.iter().enumerate() {
        let words: Vec<&str> = text.split_whitespace().collect();
        let lines: String = words.chunks(12).map(|l| format!("({}) Tj T*\n", l.join(" "))).collect();
        let stream = format!("BT /F1 10 Tf 14 TL 50 780 Td\n{lines}ET");
        objects.push(format!(
            "<< /Type /Page /Parent 2 0 R /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
            5 + 2 * i
        ));
        objects.push(format!("<< /Length {} >>\nstream\n{stream}\nendstream", stream.len()));
    }
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for o in offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    let trailer = format!("trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n", objects.len() + 1);
    out.extend_from_slice(trailer.as_bytes());
    out
}

#[test]
fn pdf_and_html_are_indexed_broken_files_reported_and_citations_show_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let filler = |p: &str, n: usize| (0..n).map(|k| format!("{p}{k}")).collect::<Vec<_>>().join(" ");
    let pages = [
        filler("alpha", 250),
        format!("Scurvy is caused by a lack of vitamin C in the diet. {}", filler("beta", 100)),
        filler("gamma", 250),
    ];
    let pdf = hand_written_pdf(&pages);
    std::fs::write(docs.join("report.pdf"), &pdf).unwrap();
    std::fs::write(docs.join("corrupt.pdf"), &pdf[..pdf.len() / 2]).unwrap();
    std::fs::write(docs.join("x.html"), b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR").unwrap();
    std::fs::write(
        docs.join("page.html"),
        "<html><head><title>Ships</title><script>var navzebra = 1;</script></head><body>\
         <nav><a href=/>navzebra home</a></nav><div class=\"cookie-banner\">navzebra cookies</div>\
         <main><h1>Ships</h1><p>Sailors on long voyages carried limes and lemons.</p></main>\
         <footer>navzebra footer</footer></body></html>",
    )
    .unwrap();

    let out = ragtune(&["index", "docs", "--store", "s"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("indexed 2 documents"), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("corrupt.pdf: truncated PDF"), "{err}");
    assert!(err.contains("x.html: binary content, not html"), "{err}");

    // The PDF's passage carries its pages; the HTML page's text is searchable, its boilerplate is not.
    let search = |query: &str| {
        let out = ragtune(&["search", query, "--store", "s", "--json", "-k", "1"], dir.path());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let hit = search("what causes scurvy vitamin");
    let chunk = &hit["hits"][0]["chunk"];
    assert_eq!(chunk["doc_id"], "report.pdf", "{hit}");
    let page = chunk["metadata"]["page"].as_u64().unwrap();
    let last_page = chunk["metadata"]["last_page"].as_u64().unwrap_or(page);
    assert!(page <= 2 && 2 <= last_page, "{hit}");
    assert_eq!(search("limes lemons voyages")["hits"][0]["chunk"]["doc_id"], "page.html");
    assert_eq!(search("navzebra")["hits"], serde_json::json!([]));

    // The answer's context and its printed sources name the page.
    let out = ragtune(&["query", "what causes scurvy?", "--store", "s", "--no-llm", "-k", "1", "--json"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["context"][0]["page"].as_u64(), Some(page), "{v}");
    let pages = if last_page > page { format!("pp. {page}\u{2013}{last_page}") } else { format!("p. {page}") };
    let out = ragtune(&["ask", "what causes scurvy?", "--store", "s", "--no-llm", "-k", "1"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(&format!("Sources:\n  [1] report.pdf {pages} (report)")), "{stdout}");
    let out = ragtune(&["ask", "what causes scurvy?", "--store", "s", "--no-llm", "-k", "1", "--json"], dir.path());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["citations"][0]["pages"].as_str(), Some(pages.as_str()), "the citation carries its pages: {v}");
}

#[test]
fn completions_name_every_subcommand_in_each_shell() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let out = ragtune(&["completions", shell], dir.path());
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(!script.trim().is_empty(), "{shell}: empty script");
        for sub in ["index", "search", "ask", "query", "eval", "serve", "migrate", "completions"] {
            assert!(script.contains(sub), "{shell}: the script does not name `{sub}`");
        }
    }
    let out = ragtune(&["completions", "powershell"], dir.path());
    assert_eq!(out.status.code(), Some(2), "an unknown shell is a usage error");
}

/// With an LLM, `ask` prints the answer as it is generated: the scripted LLM holds the rest of its answer until the
/// test has read the first token from the binary's stdout. `--no-stream` and `--json` print it whole.
#[test]
fn ask_prints_the_llms_answer_as_it_is_generated() {
    use ragtune_testkit::http::{Gate, Reply, SSE_DONE, ScriptedServer, chat_chunk};
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path());
    assert_eq!(ragtune(&["index", "docs", "--store", "s"], dir.path()).status.code(), Some(0));
    // Only the answer asks the LLM.
    let toml =
        "[llm]\ncache = false\n[crag]\nenabled = false\n[pipeline]\njudge = false\nretry = false\ncontext = \"full\"\n";
    std::fs::write(dir.path().join("llm.toml"), toml).unwrap();
    let gate = Gate::new();
    let streamed = Reply::event_stream()
        .send(chat_chunk("Scurvy", None))
        .wait(&gate)
        .send(chat_chunk(" comes from a lack of vitamin C [1].", Some("stop")))
        .send(SSE_DONE);
    let whole = serde_json::json!({"choices": [{"message": {"content": "Vitamin C [1]."}, "finish_reason": "stop"}]});
    let llm = ScriptedServer::start(vec![streamed, Reply::json(200, &whole.to_string())]).unwrap();
    let args = ["--config", "llm.toml", "ask", "what causes scurvy?", "--store", "s", "--llm-url", llm.url()];
    let mut child = Command::new(env!("CARGO_BIN_EXE_ragtune"))
        .args(args)
        .current_dir(dir.path())
        .env_remove("RAGTUNE_CONFIG")
        .env_remove("RAGTUNE_LLM_URL")
        .env("RAGTUNE_HOME", dir.path().join("home"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0_u8; 6];
    stdout.read_exact(&mut first).unwrap();
    // The first token is out while the LLM still holds the rest of the answer.
    assert_eq!(&first, b"Scurvy");
    gate.open();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let printed = format!("Scurvy{rest}");
    assert!(printed.starts_with("Scurvy comes from a lack of vitamin C [1].\n\nSources:\n  [1] faq.txt"), "{printed}");
    assert!(printed.contains("Answer: Llm") && printed.contains("First token after"), "{printed}");

    for flag in ["--no-stream", "--json"] {
        let out = ragtune(&[&args[..], &[flag]].concat(), dir.path());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        if flag == "--json" {
            let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!((v["answer"].as_str(), v.get("ttft_ms")), (Some("Vitamin C [1]."), None), "{v}");
        } else {
            assert!(stdout.starts_with("Vitamin C [1].\n\nSources:") && !stdout.contains("First token"), "{stdout}");
        }
    }
    assert!(llm.requests()[0].contains("\"stream\":true") && !llm.requests()[1].contains("\"stream\""));
}
