//! `ragtune index`: index a folder, a JSONL file or a BEIR directory.

use std::path::{Path, PathBuf};

use ragtune::Engine;

use crate::args::{Overrides, StoreArgs, load_config, progress_bar};

/// Index a folder of Markdown/text files, a JSONL file, or a BEIR directory.
#[derive(Debug, clap::Args)]
pub struct IndexArgs {
    /// What to index.
    path: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Skip the files and folders of a folder that this glob matches: a name at any depth without `/`
    /// (`experiments`, `*.txt`), a path from the folder with one (`notes/drafts`). Repeatable.
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
}

pub async fn run(config: Option<&Path>, args: IndexArgs) -> anyhow::Result<()> {
    let IndexArgs { path, store, json, exclude } = args;
    let mut engine = Engine::open(load_config(config, Overrides::store(store))?).await?;
    let bar = progress_bar("indexing", "documents", json)?;
    let report = engine
        .index_path(&path, &exclude, &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        })
        .await?;
    bar.finish_and_clear();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "indexed {} documents into {} ({} passages, {} sections) in {:.2} s; the store holds {} chunks of {} documents",
        report.documents,
        engine.store_location(),
        report.passages,
        report.sections,
        report.seconds,
        report.store.chunks,
        report.store.documents
    );
    if report.truncated > 0 {
        eprintln!(
            "warning: {} passages are longer than the embedding model's window: their dense vectors see only their \
             beginning (index with chunking, or lower the chunk size)",
            report.truncated
        );
    }
    if !report.issues.is_empty() {
        eprintln!("{} problems (the rest was indexed):", report.issues.len());
        for issue in report.issues.iter().take(20) {
            eprintln!("  {issue}");
        }
        if report.issues.len() > 20 {
            eprintln!("  … and {} more (use --json for all)", report.issues.len() - 20);
        }
    }
    Ok(())
}
