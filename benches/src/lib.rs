//! Benchmarks live in `benches/`; this library holds what the benchmark binaries share.

use std::time::Instant;

use ragtune::core::{Candidate, Ctx, ScoredHit, SearchRequest, VectorStore};

/// Runs each call on `store`, one at a time, timed end to end: a call of one request is one list; a call of two
/// (BM25 first, then dense) is a hybrid query, fused by RRF into the top 10 inside the timing. Returns the
/// latencies in milliseconds, sorted, and each call's list (empty for hybrid calls).
///
/// # Errors
/// The store's.
pub async fn time_calls(
    store: &dyn VectorStore,
    ctx: &Ctx,
    calls: Vec<Vec<SearchRequest>>,
) -> anyhow::Result<(Vec<f64>, Vec<Vec<ScoredHit>>)> {
    let (mut ms, mut out) = (Vec::with_capacity(calls.len()), Vec::with_capacity(calls.len()));
    for requests in calls {
        let t = Instant::now();
        let mut lists = store.search(ctx, &requests).await?;
        if lists.len() == 2 {
            let named = |hits: Vec<ScoredHit>, name: &str| -> Vec<Candidate> {
                hits.into_iter().zip(1_u32..).map(|(h, rank)| Candidate::from_hit(h, name, rank)).collect()
            };
            let dense = named(lists.pop().unwrap_or_default(), "dense");
            let bm25 = named(lists.pop().unwrap_or_default(), "bm25");
            std::hint::black_box(ragtune::retrieve::rrf_fuse(&[(1.0, bm25), (1.0, dense)], 60.0, 10));
        }
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        out.push(lists.into_iter().next().unwrap_or_default());
    }
    ms.sort_by(f64::total_cmp);
    Ok((ms, out))
}

/// Runs `work` once per text with `concurrency` calls in flight (each a task on the current runtime, taking the
/// next text as it finishes one) and returns texts per second.
///
/// # Errors
/// The first error of `work`; a task that panicked.
pub async fn per_second<F, Fut>(texts: &[String], concurrency: usize, work: F) -> anyhow::Result<f64>
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let texts = std::sync::Arc::new(texts.to_vec());
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (next, texts, work) = (next.clone(), texts.clone(), work.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(text) = texts.get(i) else { return anyhow::Ok(()) };
                    work(text.clone()).await?;
                }
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }
    Ok(texts.len() as f64 / started.elapsed().as_secs_f64())
}

/// The median of `values` (the mean of the middle two for an even count; NaN for none), by the percentile method
/// of ragtune's reports.
#[must_use]
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    ragtune::evaluators::metrics::percentile(&v, 50.0)
}
