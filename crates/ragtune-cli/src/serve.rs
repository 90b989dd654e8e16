//! `ragtune serve`: the HTTP API (`ragtune-server`) over the configured store, until Ctrl-C or SIGTERM.

use std::path::{Path, PathBuf};

use ragtune::Engine;

use crate::args::{Overrides, QdrantArgs, load_config};

/// Serve the HTTP API (docs/server.md): ask, query, search, index, metrics, and a page at `/`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on (default: the config's server.bind, 127.0.0.1:8080). Anything but loopback needs
    /// an API key ($RAGTUNE_SERVER_API_KEY or server.api_key).
    #[arg(long, value_name = "ADDR")]
    bind: Option<String>,
    /// The store directory.
    #[arg(long, value_name = "DIR", conflicts_with = "qdrant_url")]
    store: Option<PathBuf>,
    #[command(flatten)]
    qdrant: QdrantArgs,
}

pub async fn run(config: Option<&Path>, args: ServeArgs) -> anyhow::Result<()> {
    let ServeArgs { bind, store, qdrant } = args;
    let cfg = load_config(config, Overrides { store, qdrant, server_bind: bind, ..Overrides::default() })?;
    ragtune_server::check_bind(&cfg.server)?;
    let engine = Engine::open(cfg.clone()).await?;
    for note in engine.notes() {
        eprintln!("note: {note}");
    }
    let location = engine.store_location();
    let server = ragtune_server::Server::bind(engine, cfg.server).await?;
    // The one line a script waits for.
    println!("ragtune: serving {location} on http://{}", server.local_addr());
    server.run(ragtune_server::shutdown_signal()).await?;
    eprintln!("ragtune: stopped");
    Ok(())
}
