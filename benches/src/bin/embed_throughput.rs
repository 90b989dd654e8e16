//! Embedding throughput of `FastEmbedder` on SciFact passages, for `cargo xtask bench embed`.
//!
//! `embed-throughput --model-dir DIR --ort-library FILE --corpus corpus.jsonl [--passages 512] [--batch-size 32]
//! [--threads 1] [--sessions 1] [--rounds 1] [--dump vectors.f32]` prints one JSON line; `--dump` writes the vectors
//! as little-endian f32 so the Python reference can compare them. It also embeds 200 single-text queries one at a
//! time and then `--sessions` at a time (concurrent calls on the session pool) and reports both throughputs; with
//! `--rounds R` it measures the two alternately R times and reports the medians (and every round), so that a noisy
//! host shows as spread instead of a lucky or unlucky ratio.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ragtune::core::{Ctx, Embedder, TextRole};
use ragtune::embed::{FastEmbedder, FastEmbedderConfig};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut model_dir, mut ort, mut corpus, mut dump) = (None, None, None, None);
    let (mut passages, mut batch, mut threads, mut sessions) = (512usize, 32usize, 1usize, 1usize);
    let mut rounds = 1usize;
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
            "--sessions" => sessions = value()?.parse()?,
            "--rounds" => rounds = value()?.parse::<usize>()?.max(1),
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
    cfg.sessions = sessions;
    let embedder = std::sync::Arc::new(FastEmbedder::new(cfg)?);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(sessions.max(1)).enable_all().build()?;
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
    // Queries: short texts (the first sentence of a passage), one per call, first one at a time, then `sessions`
    // calls in flight at once.
    let queries: Vec<String> =
        texts.iter().take(200).map(|t| t.split(['.', '\n']).next().unwrap_or(t).to_owned()).collect();
    let per_second = |concurrency: usize| -> Result<f64> {
        let embedder = embedder.clone();
        rt.block_on(benches::per_second(&queries, concurrency, move |q| {
            let embedder = embedder.clone();
            async move { Ok(embedder.embed(&Ctx::new(), &[q.as_str()], TextRole::Query).await.map(drop)?) }
        }))
    };
    let (mut one, mut many) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        one.push(per_second(1)?);
        many.push(per_second(sessions.max(1))?);
    }
    let (c1, cn) = (benches::median(&one), benches::median(&many));
    println!(
        "{}",
        serde_json::json!({"impl": "rust-fastembed", "passages": texts.len(), "seconds": seconds, "per_second": texts.len() as f64 / seconds,
            "sessions": sessions, "queries": queries.len(), "rounds": rounds, "queries_per_second_1": c1, "queries_per_second_concurrent": cn,
            "rounds_1": one, "rounds_concurrent": many})
    );
    Ok(())
}
