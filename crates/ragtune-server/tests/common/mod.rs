//! What the server's test files share: an offline engine configuration and a server on a free loopback port.
#![allow(dead_code)] // Each test binary uses its own part.

use ragtune::ServerSettings;
use ragtune_server::Server;

/// A default configuration with its store under `dir`, BM25 only, no LLM and no on-disk LLM cache.
pub fn offline_config(dir: &std::path::Path) -> ragtune::Config {
    let mut cfg = ragtune::Config::default();
    cfg.store.path = dir.join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    cfg.llm.url = String::new();
    cfg.llm.cache = false;
    cfg
}

/// Serves `engine` on a free loopback port: its `http://127.0.0.1:PORT` and the sender that stops it (dropping it
/// stops the server too).
pub async fn serve(engine: ragtune::Engine) -> (String, tokio::sync::oneshot::Sender<()>) {
    let server =
        Server::bind(engine, ServerSettings { bind: "127.0.0.1:0".into(), ..ServerSettings::default() }).await.unwrap();
    let url = format!("http://127.0.0.1:{}", server.local_addr().port());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    (url, stop)
}
