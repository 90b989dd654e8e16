//! `ragtune migrate`: copy an embedded store into a Qdrant collection or another embedded store.

use std::path::{Path, PathBuf};

use ragtune::StoreBackend;

use crate::args::{Overrides, QdrantArgs, load_config, progress_bar};

/// Copy an embedded store (chunks, payloads, dense and sparse vectors) into a Qdrant collection or another
/// embedded store. Idempotent: an interrupted migration can be run again.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The embedded store to read (default: the config's store.path).
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
    /// The target backend: `qdrant` or `embedded`.
    #[arg(long, value_name = "BACKEND")]
    to: StoreBackend,
    /// The target directory for `--to embedded`.
    #[arg(long, value_name = "DIR", required_if_eq("to", "embedded"))]
    to_dir: Option<PathBuf>,
    #[command(flatten)]
    qdrant: QdrantArgs,
    /// Delete the target collection first (Qdrant only).
    #[arg(long)]
    replace: bool,
    /// Records per write.
    #[arg(long, default_value_t = 256)]
    batch: usize,
}

pub async fn run(config: Option<&Path>, args: MigrateArgs) -> anyhow::Result<()> {
    let MigrateArgs { from, to, to_dir, qdrant, replace, batch } = args;
    // The Qdrant flags describe the target; the source is always the embedded store at `--from`.
    let cfg = load_config(config, Overrides { store: from, qdrant, ..Overrides::default() })?;
    let source_dir = cfg.store.path.clone();
    if !source_dir.join("ragtune.redb").is_file() {
        anyhow::bail!("there is no embedded store at {} to migrate (use --from DIR)", source_dir.display());
    }
    let source = ragtune::store::EmbeddedStore::open(&source_dir)?;
    let mut target_cfg = cfg.store.clone();
    target_cfg.backend = to;
    match to {
        StoreBackend::Embedded => {
            target_cfg.path = to_dir.ok_or_else(|| anyhow::anyhow!("--to embedded needs --to-dir DIR"))?;
        }
        StoreBackend::Qdrant if replace => ragtune::stores::drop_collection(&target_cfg).await?,
        StoreBackend::Qdrant => {}
    }
    let target = ragtune::stores::open_store(&target_cfg).await?;
    let bar = progress_bar("migrating", "records", false)?;
    let report = ragtune::stores::migrate(&source, &*target.store, batch, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .await?;
    bar.finish_and_clear();
    println!(
        "migrated {} records from {} to {} in {:.2} s; the target holds {} chunks",
        report.records,
        source_dir.display(),
        target_cfg.location(),
        report.seconds,
        report.target_chunks
    );
    Ok(())
}
