//! `ragtune migrate`: copy a store into another: an embedded store into a Qdrant collection or another embedded
//! store, or a Qdrant collection back into an embedded store.

use std::path::{Path, PathBuf};

use ragtune::StoreBackend;

use crate::args::{Overrides, QdrantArgs, load_config, progress_bar};

/// Copy a store (chunks, payloads, dense and sparse vectors) into another: an embedded store into a Qdrant
/// collection or another embedded store, or (`--from-qdrant`) a Qdrant collection into an embedded store.
/// Idempotent: an interrupted migration can be run again.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The embedded store to read (default: the config's store.path).
    #[arg(long, value_name = "DIR", conflicts_with = "from_qdrant")]
    from: Option<PathBuf>,
    /// Read the Qdrant collection named by --qdrant-url/--collection (or the config) instead; the target is then
    /// an embedded store (--to embedded --to-dir DIR).
    #[arg(long)]
    from_qdrant: bool,
    /// The target backend: `qdrant` or `embedded`.
    #[arg(long, value_name = "BACKEND")]
    to: StoreBackend,
    /// The target directory for `--to embedded`.
    #[arg(long, value_name = "DIR", required_if_eq("to", "embedded"))]
    to_dir: Option<PathBuf>,
    /// The Qdrant collection: the target, or the source with --from-qdrant.
    #[command(flatten)]
    qdrant: QdrantArgs,
    /// Empty the target first (a Qdrant collection is dropped; an embedded store's database file is deleted).
    #[arg(long)]
    replace: bool,
    /// Records per write.
    #[arg(long, default_value_t = 256)]
    batch: usize,
}

pub async fn run(config: Option<&Path>, args: MigrateArgs) -> anyhow::Result<()> {
    let MigrateArgs { from, from_qdrant, to, to_dir, qdrant, replace, batch } = args;
    let cfg = load_config(config, Overrides { store: from, qdrant, ..Overrides::default() })?;
    let mut source_cfg = cfg.store.clone();
    source_cfg.backend = if from_qdrant { StoreBackend::Qdrant } else { StoreBackend::Embedded };
    let mut target_cfg = cfg.store.clone();
    target_cfg.backend = to;
    if ragtune::stores::kind(to).local {
        target_cfg.path = to_dir.ok_or_else(|| anyhow::anyhow!("--to {to} needs --to-dir DIR"))?;
    } else if from_qdrant {
        anyhow::bail!("--from-qdrant copies a Qdrant collection into an embedded store: use --to embedded")
    }
    // Checked before the target is opened (which creates an empty Qdrant collection).
    if ragtune::stores::kind(source_cfg.backend).exists(&source_cfg) == Some(false) {
        anyhow::bail!("there is no store at {} to migrate (use --from DIR)", source_cfg.location());
    }
    if replace {
        ragtune::stores::clear_store(&target_cfg).await?;
    }
    let target = ragtune::stores::open_store(&target_cfg).await?;
    let bar = progress_bar("migrating", "records", false)?;
    let report = ragtune::stores::migrate(&source_cfg, &*target.store, batch, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .await?;
    bar.finish_and_clear();
    println!(
        "migrated {} records from {} to {} in {:.2} s; the target holds {} chunks",
        report.records,
        source_cfg.location(),
        target_cfg.location(),
        report.seconds,
        report.target_chunks
    );
    Ok(())
}
