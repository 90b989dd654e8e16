//! ragtune integration tests: real components end to end (one test binary).

mod bad_input;
mod engine;
mod eval;
mod scifact;
mod strategies;

use std::path::PathBuf;

/// `../shared/data` beside the repository (or `$RAGTUNE_DATA`), when present.
pub fn shared_data() -> Option<PathBuf> {
    let dir = std::env::var_os("RAGTUNE_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    dir.is_dir().then_some(dir)
}

/// An engine on a fresh store in `dir`.
pub async fn engine_in(dir: &std::path::Path) -> ragtune::Engine {
    let mut cfg = ragtune::Config::default();
    cfg.store.path = dir.join("store");
    ragtune::Engine::open(cfg).await.expect("a fresh store opens")
}
