//! Embedding throughput of `FastEmbedder` on SciFact passages, for `cargo xtask bench embed`.
//!
//! `embed-throughput --model-dir DIR --ort-library FILE --corpus corpus.jsonl [--passages 512] [--batch-size 32]
//! [--threads 1] [--dump vectors.f32]` prints one JSON line; `--dump` writes the vectors as little-endian f32 so the
//! Python reference can compare them.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ragtune::core::{Ctx, Embedder, TextRole};
use ragtune::embed::{FastEmbedder, FastEmbedderConfig};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut model_dir, mut ort, mut corpus, mut dump) = (None, None, None, None);
    let (mut passages, mut batch, mut threads) = (512usize, 32usize, 1usize);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--model-dir" => model_dir = Some(PathBuf::from(value()?)),
            "--ort-library" => ort = Some(PathBuf::from(value()?)),
            "--corpus" => corpus = Some(PathBuf::from(value()?)),
            "--dump" => dump = Some(PathBuf::from(value()?)),
            "--passages" => passages = value()?.parse()?,
            "--batch-size" => batch = value()?.parse()?,
            "--threads" => threads = value()?.parse()?,
            other => bail!("unknown argument {other}"),
        }
    }
    let (Some(model_dir), Some(ort), Some(corpus)) = (model_dir, ort, corpus) else {
        bail!("--model-dir, --ort-library and --corpus are required");
    };
    let texts = ragtune::ingest::load_jsonl_documents(&corpus)?
        .items
        .into_iter()
        .take(passages)
        .map(|d| match d.title.filter(|t| !t.trim().is_empty()) {
            Some(t) => format!("{}\n{}", t.trim(), d.text),
            None => d.text,
        })
        .collect::<Vec<_>>();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut cfg = FastEmbedderConfig::new(model_dir, ort);
    cfg.batch_size = batch;
    cfg.intra_threads = threads;
    let embedder = FastEmbedder::new(cfg)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let ctx = Ctx::new();
    // Warm-up on one batch, as the Python reference does.
    rt.block_on(embedder.embed(&ctx, &refs[..batch.min(refs.len())], TextRole::Passage))?;
    let started = Instant::now();
    let vectors = rt.block_on(embedder.embed(&ctx, &refs, TextRole::Passage))?;
    let seconds = started.elapsed().as_secs_f64();
    if let Some(path) = dump {
        let bytes: Vec<u8> = vectors.iter().flatten().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!(
        "{}",
        serde_json::json!({"impl": "rust-fastembed", "passages": texts.len(), "seconds": seconds, "per_second": texts.len() as f64 / seconds})
    );
    Ok(())
}
