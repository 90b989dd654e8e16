//! The `ragtune` binary end to end: exit codes, messages, and output formats.

use std::path::Path;
use std::process::{Command, Output};

fn ragtune(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ragtune"))
        .args(args)
        .current_dir(cwd)
        .env_remove("RAGTUNE_CONFIG")
        .env_remove("RAGTUNE_STORE")
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

    let out = ragtune(&["eval", "--dataset", "nowhere"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("nowhere"), "{}", text(&out.stderr));

    let out = ragtune(&["calibrate", "--dataset", "nowhere", "--evaluator", "oracle"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unknown evaluator `oracle`"), "{}", text(&out.stderr));

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
}

#[test]
fn migrate_needs_an_existing_source_and_a_known_target() {
    let dir = tempfile::tempdir().unwrap();
    let out = ragtune(&["migrate", "--from", "nowhere", "--to", "embedded", "--to-dir", "x"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("there is no embedded store at nowhere"), "{}", text(&out.stderr));
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
