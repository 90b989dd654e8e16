//! `CachedReranker`: reranker scores kept on disk, so policies and budgets can be replayed without the model.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use ragtune_core::{Budget, Candidate, Cost, CostModel, Ctx, Error, Reranker, Result, TraceEvent, TraceSink};
use serde::{Deserialize, Serialize};

/// A decorator that stores every score of the inner [`Reranker`] in a directory and answers repeated
/// `(reranker, query, document)` pairs from it.
///
/// The key is the inner reranker's name, the query text, the candidate's chunk id and a hash of the text the
/// reranker sees ([`Chunk::indexable_text`](ragtune_core::Chunk::indexable_text)), so an edited document or a
/// renamed (re-versioned) reranker never reuses an old score. Each key is one JSON file named by a 128-bit hash
/// of the key; the file repeats the key, and a file whose key differs (a hash collision) or that does not parse
/// is a miss and is rewritten. Writes are atomic (temporary file, then rename). Errors are never cached.
/// A reranker whose name does not change with its weights (a cross-encoder named after its directory) is given
/// the weights' identity with [`with_model_id`](Self::with_model_id), which joins the key: another `model.onnx`
/// under the same name never replays the scores of the first.
///
/// **Cost.** The cost model is the inner one (the worst case: every document a miss). Misses are scored by one
/// inner call whose reported cost (its `rerank` trace events, forwarded unchanged; the declared estimate if it
/// reports none) is split evenly over its documents and stored with their scores. A hit reports its stored
/// share in a `rerank`/`cache` event, so a replay of the same batches charges what the original run was charged
/// and budgets stop where they stopped; with other batch sizes the per-call part of the cost is spread
/// differently.
#[derive(Debug, Clone)]
pub struct CachedReranker {
    inner: Arc<dyn Reranker>,
    dir: PathBuf,
    /// What the key calls the reranker: its name, and the identity of its model when one is given.
    key_name: String,
}

/// One cached score with its full key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Entry {
    reranker: String,
    query: String,
    doc_id: String,
    text_hash: String,
    score: f32,
    cost: Cost,
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The 128-bit FNV-1a hash: stable across platforms and releases.
fn fnv1a_128(parts: &[&[u8]]) -> u128 {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for part in parts {
        for &b in *part {
            h ^= u128::from(b);
            h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
        }
        // A separator byte that text cannot confuse with a part boundary shift.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    h
}

/// Splits `total` into `n` shares that add up to it, the remainders going to the first shares.
fn split(total: Cost, n: usize) -> Vec<Cost> {
    let n64 = n as u64;
    let part = |c: u64, i: u64| c / n64 + u64::from(i < c % n64);
    (0..n64).map(|i| Cost::new(part(total.tokens, i), part(total.docs, i), part(total.calls, i))).collect()
}

impl CachedReranker {
    /// Caches the scores of `inner` under `dir` (created when missing).
    ///
    /// # Errors
    /// [`Permanent`](ragtune_core::ErrorKind::Permanent) when the directory cannot be created.
    pub fn new(inner: Arc<dyn Reranker>, dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::permanent(format!("cannot create the rerank cache directory {}", dir.display())).with_source(e)
        })?;
        let key_name = inner.name().to_owned();
        Ok(Self { inner, dir, key_name })
    }

    /// Keys the scores by `model_id` (for example `sha256:` and the hash of the model's weights) as well as by the
    /// reranker's name.
    #[must_use]
    pub fn with_model_id(mut self, model_id: &str) -> Self {
        self.key_name = format!("{}@{model_id}", self.inner.name());
        self
    }

    /// The cache directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry_for(&self, query: &str, candidate: &Candidate) -> (PathBuf, Entry) {
        let text = candidate.chunk.indexable_text();
        let text_hash = format!("{:032x}", fnv1a_128(&[text.as_bytes()]));
        let entry = Entry {
            reranker: self.key_name.clone(),
            query: query.to_owned(),
            doc_id: candidate.chunk.id.clone(),
            text_hash,
            score: 0.0,
            cost: Cost::ZERO,
        };
        let key = fnv1a_128(&[
            entry.reranker.as_bytes(),
            entry.query.as_bytes(),
            entry.doc_id.as_bytes(),
            entry.text_hash.as_bytes(),
        ]);
        (self.dir.join(format!("{key:032x}.json")), entry)
    }

    fn read(path: &Path, key: &Entry) -> Option<Entry> {
        let entry: Entry = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        let same = entry.reranker == key.reranker
            && entry.query == key.query
            && entry.doc_id == key.doc_id
            && entry.text_hash == key.text_hash;
        (same && entry.score.is_finite()).then_some(entry)
    }

    fn write(path: &Path, entry: &Entry) {
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
        // A cache that cannot be written only costs speed: the score is returned either way.
        if let Ok(bytes) = serde_json::to_vec(entry)
            && std::fs::write(&tmp, bytes).is_ok()
            && std::fs::rename(&tmp, path).is_err()
        {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

#[async_trait]
impl Reranker for CachedReranker {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn cost_model(&self) -> CostModel {
        self.inner.cost_model()
    }

    async fn score(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<Vec<f32>> {
        ctx.check()?;
        let mut scores: Vec<Option<f32>> = vec![None; candidates.len()];
        let mut hit_cost = Cost::ZERO;
        let mut misses: Vec<(usize, PathBuf, Entry)> = Vec::new();
        for (i, candidate) in candidates.iter().enumerate() {
            let (path, key) = self.entry_for(query, candidate);
            match Self::read(&path, &key) {
                Some(hit) => {
                    scores[i] = Some(hit.score);
                    hit_cost += hit.cost;
                }
                None => misses.push((i, path, key)),
            }
        }
        let hits = candidates.len() - misses.len();
        let mut own_cost = hit_cost;
        let mut result = Ok(());
        if !misses.is_empty() {
            let batch: Vec<Candidate> = misses.iter().map(|(i, _, _)| candidates[*i].clone()).collect();
            let sink = TraceSink::new();
            let inner_ctx = Ctx {
                budget: Budget::new(ctx.budget.limit.saturating_sub(&hit_cost)),
                deadline: ctx.deadline,
                cancel: ctx.cancel.clone(),
                trace: Some(sink.clone()),
            };
            let scored = self.inner.score(&inner_ctx, query, &batch).await;
            let mut measured = Cost::ZERO;
            for event in sink.take() {
                if event.stage == "rerank" {
                    measured += event.cost;
                }
                ctx.trace(event);
            }
            if measured == Cost::ZERO {
                // The inner reranker reports nothing: it is charged what it declares, here on its behalf.
                measured = self.inner.cost_model().estimate(batch.len());
                own_cost += measured;
            }
            result = scored.and_then(|fresh| {
                if fresh.len() != batch.len() || fresh.iter().any(|s| !s.is_finite()) {
                    return Err(Error::permanent(format!(
                        "reranker `{}` returned {} scores (or a non-finite one) for {} documents",
                        self.inner.name(),
                        fresh.len(),
                        batch.len()
                    )));
                }
                for (((i, path, mut entry), score), cost) in
                    misses.into_iter().zip(fresh).zip(split(measured, batch.len()))
                {
                    entry.score = score;
                    entry.cost = cost;
                    Self::write(&path, &entry);
                    scores[i] = Some(score);
                }
                Ok(())
            });
        }
        ctx.trace(
            TraceEvent::new("rerank", "cache")
                .detail("reranker", self.inner.name())
                .detail("hits", hits)
                .detail("misses", candidates.len() - hits)
                .cost(own_cost),
        );
        result?;
        scores
            .into_iter()
            .map(|s| s.ok_or_else(|| Error::permanent("invariant broken: a cached batch left a document unscored")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::{Chunk, ScoredHit};
    use ragtune_testkit::fakes::{ScriptedFailure, ScriptedReranker};

    fn candidate(id: &str, text: &str) -> Candidate {
        Candidate::from_hit(ScoredHit { chunk: Chunk::new(id, id, text), score: 0.0 }, "bm25", 1)
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().expect("a runtime").block_on(f)
    }

    /// Scores `cands` through the cache and renders the scores, the inner calls so far and the cost charged in
    /// `rerank` events.
    fn check(cache: &CachedReranker, inner: &ScriptedReranker, query: &str, cands: &[Candidate], expect: &str) {
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let scores = block_on(cache.score(&ctx, query, cands));
        let charged = sink.take().iter().filter(|e| e.stage == "rerank").fold(Cost::ZERO, |a, e| a + e.cost);
        let got = format!(
            "{} | inner calls {} | charged {}/{}/{}",
            scores.map_or_else(|e| e.message().to_owned(), |s| format!("{s:?}")),
            inner.calls(),
            charged.tokens,
            charged.docs,
            charged.calls
        );
        assert_eq!(got, expect);
    }

    #[test]
    fn hits_skip_the_model_and_replay_the_cost() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(ScriptedReranker::new().with_score("good", 0.9).with_default(0.1));
        let cache = CachedReranker::new(inner.clone(), dir.path()).unwrap();
        let a = candidate("a", "good");
        let b = candidate("b", "bad");
        check(&cache, &inner, "q", &[a.clone(), b.clone()], "[0.9, 0.1] | inner calls 1 | charged 0/2/1");
        check(&cache, &inner, "q", &[b.clone(), a.clone()], "[0.1, 0.9] | inner calls 1 | charged 0/2/1");
        // A new document is a miss; so is the same document for another query or with another text.
        let c = candidate("c", "good");
        check(&cache, &inner, "q", &[a.clone(), c], "[0.9, 0.9] | inner calls 2 | charged 0/2/2");
        check(&cache, &inner, "other", &[a], "[0.9] | inner calls 3 | charged 0/1/1");
        check(&cache, &inner, "q", &[candidate("b", "now good")], "[0.1] | inner calls 4 | charged 0/1/1");
        // A second cache over the same directory answers from disk.
        let fresh = Arc::new(ScriptedReranker::new().failing(ScriptedFailure::Always));
        let replay = CachedReranker::new(fresh.clone(), dir.path()).unwrap();
        check(&replay, &fresh, "q", &[b], "[0.1] | inner calls 0 | charged 0/1/0");
    }

    #[test]
    fn errors_are_not_cached_and_damaged_entries_are_misses() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(ScriptedReranker::new().with_default(0.5).failing(ScriptedFailure::FirstCalls(1)));
        let cache = CachedReranker::new(inner.clone(), dir.path()).unwrap();
        let a = candidate("a", "text");
        check(
            &cache,
            &inner,
            "q",
            std::slice::from_ref(&a),
            "scripted reranker `scripted` failed call 1 on purpose | inner calls 1 | charged 0/1/1",
        );
        check(&cache, &inner, "q", std::slice::from_ref(&a), "[0.5] | inner calls 2 | charged 0/1/1");
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            std::fs::write(entry.unwrap().path(), b"{ not json").unwrap();
        }
        check(&cache, &inner, "q", std::slice::from_ref(&a), "[0.5] | inner calls 3 | charged 0/1/1");
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "temporary files are renamed into place");
    }

    #[test]
    fn another_model_under_the_same_name_never_replays_the_first_ones_scores() {
        let dir = tempfile::tempdir().unwrap();
        let first = Arc::new(ScriptedReranker::new().with_default(0.1));
        let second = Arc::new(ScriptedReranker::new().with_default(0.7));
        let a = candidate("a", "text");
        let cache = CachedReranker::new(first.clone(), dir.path()).unwrap().with_model_id("sha256:aa");
        check(&cache, &first, "q", std::slice::from_ref(&a), "[0.1] | inner calls 1 | charged 0/1/1");
        // Same name (`scripted`), same directory, other weights: a miss.
        let other = CachedReranker::new(second.clone(), dir.path()).unwrap().with_model_id("sha256:bb");
        check(&other, &second, "q", std::slice::from_ref(&a), "[0.7] | inner calls 1 | charged 0/1/1");
        // The first model's identity again replays its score (and its charge) without calling the model.
        let again = CachedReranker::new(second.clone(), dir.path()).unwrap().with_model_id("sha256:aa");
        check(&again, &second, "q", std::slice::from_ref(&a), "[0.1] | inner calls 1 | charged 0/1/1");
    }

    #[test]
    fn costs_split_into_shares_that_add_up() {
        let shares = split(Cost::new(10, 3, 1), 3);
        assert_eq!(shares, vec![Cost::new(4, 1, 1), Cost::new(3, 1, 0), Cost::new(3, 1, 0)]);
        assert_eq!(shares.into_iter().fold(Cost::ZERO, |a, b| a + b), Cost::new(10, 3, 1));
    }
}
