//! The process the crash test kills: writes the workload of `tests::crash` into an embedded store until killed.
//!
//! Usage: `crash_writer <store dir> <first round>`. Prints `ready` once it holds the store, then writes batches
//! (and now and then rebuilds the approximate dense index) forever. Every batch is one atomic `WriteBatch`; after
//! each commit it prints `committed <round>`.

use std::io::Write;
use std::process::ExitCode;

use ragtune::core::{Ctx, VectorStore, WriteBatch};
use ragtune::store::{AnnConfig, EmbeddedStore, StoreOptions};
use tests::crash;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, first] = args.as_slice() else {
        eprintln!("usage: crash_writer <store dir> <first round>");
        return ExitCode::from(2);
    };
    let Ok(first) = first.parse::<u64>() else {
        eprintln!("crash_writer: <first round> must be a number, got `{first}`");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("crash_writer: cannot start a runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(dir, first)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crash_writer: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(dir: &str, first: u64) -> ragtune::core::Result<()> {
    // A low threshold, so the HNSW snapshot and its dirty set are written (and interrupted) too.
    let options =
        StoreOptions { ann: AnnConfig { min_vectors: 200, ..AnnConfig::default() }, ..StoreOptions::default() };
    let store = EmbeddedStore::open_with(dir, options)?;
    let ctx = Ctx::default();
    store.ensure_spaces(&ctx, Some(&crash::dense_spec()), Some(&crash::sparse_spec())).await?;
    println!("ready");
    let _ = std::io::stdout().flush();
    for round in first.. {
        let docs = crash::batch_docs(round);
        let mut batch =
            WriteBatch { delete_docs: docs.iter().map(|&d| crash::doc_id(d)).collect(), upsert: Vec::new() };
        // One round in seven only deletes its first document, so absent documents are part of the workload.
        for (i, &d) in docs.iter().enumerate() {
            if !(round % 7 == 0 && i == 0) {
                batch.upsert.extend(crash::records(d, round));
            }
        }
        store.write(&ctx, batch).await?;
        // Acknowledged: the test checks that every acknowledged batch survives the kill.
        println!("committed {round}");
        if round % 50 == 49 {
            store.optimize().await?;
        }
    }
    Ok(())
}
