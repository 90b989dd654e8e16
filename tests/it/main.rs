//! ragtune integration tests: real components end to end (one test binary).

mod bad_input;
mod crag_eval;
mod crash;
mod cross_encoder;
mod docs_window;
mod engine;
mod eval;
mod fusion_fit;
mod pipeline;
mod qa_eval;
mod qdrant_faults;
mod qdrant_parity;
mod quantized;
mod query_cache;
mod rerank;
mod scifact;
mod strategies;
mod strip_vectors;
mod transforms;
mod web;

use std::path::PathBuf;

/// `../shared/data` beside the repository (or `$RAGTUNE_DATA`), when present.
pub fn shared_data() -> Option<PathBuf> {
    let dir = std::env::var_os("RAGTUNE_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    dir.is_dir().then_some(dir)
}

/// A lexical engine on a fresh store in `dir` (the embedding model stays off, whatever the machine has
/// provisioned, so these tests see BM25 only; dense paths have tests of their own).
pub async fn engine_in(dir: &std::path::Path) -> ragtune::Engine {
    let mut cfg = ragtune::Config::default();
    cfg.store.path = dir.join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    ragtune::Engine::open(cfg).await.expect("a fresh store opens")
}

/// Whether the embedding model is provisioned; prints why a test skips when it is not, and fails instead when
/// `RAGTUNE_REQUIRE_MODELS=1` (set by `cargo xtask ci` after provisioning).
pub fn models_provisioned() -> bool {
    use std::io::Write;
    let layout = ragtune::provision::ModelLayout::new(ragtune::ragtune_home());
    if layout.is_provisioned() {
        return true;
    }
    let msg = format!("models are not provisioned under {}: run `cargo xtask models`", layout.home().display());
    let required = std::env::var("RAGTUNE_REQUIRE_MODELS").is_ok_and(|v| v == "1");
    assert!(!required, "RAGTUNE_REQUIRE_MODELS=1 but {msg}");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {msg}");
    false
}

/// Whether ONNX Runtime is provisioned (the cross-encoder tests bring their own tiny model); prints why a test skips
/// when it is not, and fails instead when `RAGTUNE_REQUIRE_MODELS=1` (set by `cargo xtask ci` after provisioning).
pub fn onnx_runtime_provisioned() -> bool {
    use std::io::Write;
    let layout = ragtune::provision::ModelLayout::new(ragtune::ragtune_home());
    let library = layout.onnxruntime_library();
    if library.is_file() {
        return true;
    }
    let msg = format!("ONNX Runtime is not provisioned at {}: run `cargo xtask models`", library.display());
    let required = std::env::var("RAGTUNE_REQUIRE_MODELS").is_ok_and(|v| v == "1");
    assert!(!required, "RAGTUNE_REQUIRE_MODELS=1 but {msg}");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {msg}");
    false
}
