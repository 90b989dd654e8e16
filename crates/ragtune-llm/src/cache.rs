//! `CachedLlm`: answers kept on disk, keyed by the model and the whole rendered request, within a size bound.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use ragtune_core::{Ctx, Error, Llm, LlmRequest, LlmResponse, Result, TraceEvent};

/// How much a [`CachedLlm`] directory may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// The most answers kept (20,000 by default).
    pub max_entries: usize,
    /// The most bytes of answers kept (256 MiB by default).
    pub max_bytes: u64,
}

impl Default for CacheLimits {
    fn default() -> Self {
        Self { max_entries: 20_000, max_bytes: 256 << 20 }
    }
}

/// A decorator that stores every answer of the inner [`Llm`] in a directory and answers repeated requests from
/// it, so evaluation runs are fast and reproducible (a sampled HyDE passage is generated once).
///
/// The key is a 128-bit hash of the model name and the complete request (messages, temperature, seed, schema):
/// a prompt whose wording or version changes never reuses old answers. A cached response carries the cost of the
/// call that produced it (reports stay identical across runs); the trace marks it `cached`. Entries are written
/// atomically (temporary file, then rename); an unreadable entry is treated as a miss and rewritten. Errors are
/// never cached.
///
/// The directory is bounded by [`CacheLimits`] (by default 20,000 answers and 256 MiB). When a write takes it over
/// either limit, the least recently used answers (by file modification time: a hit touches its entry) are removed
/// until it holds at most 90% of both, so the directory is not rescanned on every write. Eviction is best effort:
/// a file that cannot be listed or removed is left, and never fails the call. Other processes may share the
/// directory; the bound then holds after each process's next eviction.
#[derive(Debug, Clone)]
pub struct CachedLlm {
    inner: Arc<dyn Llm>,
    dir: PathBuf,
    limits: CacheLimits,
    /// Entries and bytes in the directory, counted on the first write and kept up to date since; `None` until
    /// then. Held while evicting, so that two evictions do not race.
    usage: Arc<Mutex<Option<(usize, u64)>>>,
    /// The last modification time given to an entry: each new one is later, so that entries written or read
    /// within one tick of the file system clock still evict in the order they were used. A separate lock from
    /// `usage`, so that a hit never waits for an eviction.
    last_stamp: Arc<Mutex<Option<SystemTime>>>,
}

impl CachedLlm {
    /// Caches the answers of `inner` under `dir` (created when missing), within the default [`CacheLimits`].
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn new(inner: Arc<dyn Llm>, dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::permanent(format!("cannot create the LLM cache directory {}", dir.display())).with_source(e)
        })?;
        Ok(Self { inner, dir, limits: CacheLimits::default(), usage: Arc::default(), last_stamp: Arc::default() })
    }

    /// The same cache within `limits`.
    #[must_use]
    pub fn with_limits(mut self, limits: CacheLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The cache directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The limits.
    #[must_use]
    pub fn limits(&self) -> CacheLimits {
        self.limits
    }

    fn path(&self, request: &LlmRequest) -> PathBuf {
        let key = format!("{}\n{}", self.inner.name(), serde_json::to_string(request).unwrap_or_default());
        self.dir.join(format!("{:032x}.json", xxhash_rust::xxh3::xxh3_128(key.as_bytes())))
    }

    fn read(path: &Path) -> Option<LlmResponse> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// Writes the entry; its size when it was written.
    fn write(path: &Path, response: &LlmResponse) -> Option<u64> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        // A cache that cannot be written only costs speed: the answer is returned either way.
        let bytes = serde_json::to_vec(response).ok()?;
        std::fs::write(&tmp, &bytes).ok()?;
        if std::fs::rename(&tmp, path).is_err() {
            let _ = std::fs::remove_file(&tmp);
            return None;
        }
        Some(bytes.len() as u64)
    }

    /// Marks the entry as used now (best effort).
    fn touch(&self, path: &Path) {
        let stamp = self.stamp();
        if let Ok(file) = std::fs::File::options().write(true).open(path) {
            let _ = file.set_modified(stamp);
        }
    }

    /// Now, or just after the last stamp given if the clock has not moved past it.
    fn stamp(&self) -> SystemTime {
        let mut last = self.last_stamp.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = SystemTime::now();
        let stamp = match *last {
            Some(l) if now <= l => l + Duration::from_micros(1),
            _ => now,
        };
        *last = Some(stamp);
        stamp
    }

    /// Stores the answer, then evicts if the directory went over its limits.
    async fn store(&self, path: PathBuf, response: &LlmResponse) {
        let Some(size) = Self::write(&path, response) else { return };
        self.touch(&path);
        let this = self.clone();
        // Listing and removing thousands of files is blocking work: off the async workers. A failure (even a
        // panic) only leaves the directory larger.
        let _ = tokio::task::spawn_blocking(move || this.account(&path, size)).await;
    }

    fn account(&self, written: &Path, size: u64) {
        let mut usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (entries, bytes) = match *usage {
            Some((entries, bytes)) => (entries + 1, bytes + size),
            // The first write counts what is there, the new entry included.
            None => scan(&self.dir).iter().fold((0, 0), |(n, b), e| (n + 1, b + e.size)),
        };
        *usage = Some(if entries > self.limits.max_entries || bytes > self.limits.max_bytes {
            self.evict(written)
        } else {
            (entries, bytes)
        });
    }

    /// Removes the least recently used entries (never `keep`, the one just written) until at most 90% of both
    /// limits are used; what is left.
    fn evict(&self, keep: &Path) -> (usize, u64) {
        let mut entries = scan(&self.dir);
        // Oldest first; ties by name, so eviction is deterministic for the same directory.
        entries.sort_by(|a, b| a.modified.cmp(&b.modified).then_with(|| a.path.cmp(&b.path)));
        let max_entries = self.limits.max_entries - self.limits.max_entries / 10;
        let max_bytes = self.limits.max_bytes - self.limits.max_bytes / 10;
        let mut count = entries.len();
        let mut bytes: u64 = entries.iter().map(|e| e.size).sum();
        for e in &entries {
            if count <= max_entries && bytes <= max_bytes {
                break;
            }
            if e.path != keep && std::fs::remove_file(&e.path).is_ok() {
                count -= 1;
                bytes -= e.size;
            }
        }
        (count, bytes)
    }
}

/// How old a writer's temporary file must be to count as left by a crash.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// One cached answer on disk.
struct Entry {
    path: PathBuf,
    modified: SystemTime,
    size: u64,
}

/// The answers in `dir` (`*.json`); temporary files a crashed writer left more than an hour ago are removed on the
/// way. An unreadable directory or entry is skipped.
fn scan(dir: &Path) -> Vec<Entry> {
    let Ok(listing) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out = Vec::new();
    for item in listing.flatten() {
        let path = item.path();
        let Ok(meta) = item.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => out.push(Entry { path, modified, size: meta.len() }),
            Some(ext) if ext.starts_with("tmp") && modified.elapsed().is_ok_and(|age| age > STALE_TMP) => {
                let _ = std::fs::remove_file(&path);
            }
            _ => {}
        }
    }
    out
}

#[async_trait]
impl Llm for CachedLlm {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn generate(&self, ctx: &Ctx, requests: &[LlmRequest]) -> Result<Vec<LlmResponse>> {
        let mut out = Vec::with_capacity(requests.len());
        for request in requests {
            let path = self.path(request);
            if let Some(hit) = Self::read(&path) {
                self.touch(&path);
                ctx.trace(TraceEvent::new("llm", "cached").detail("model", hit.model.clone()).cost(hit.cost));
                out.push(hit);
                continue;
            }
            let mut fresh = self.inner.generate(ctx, std::slice::from_ref(request)).await?;
            let response = fresh.pop().ok_or_else(|| Error::permanent("the LLM returned no response"))?;
            self.store(path, &response).await;
            out.push(response);
        }
        Ok(out)
    }

    /// A cached answer is handed over whole, in one piece; a fresh one streams from the inner LLM and is stored
    /// once it is whole (a stream that fails stores nothing).
    async fn generate_stream(
        &self,
        ctx: &Ctx,
        request: &LlmRequest,
        on_token: &mut (dyn for<'t> FnMut(&'t str) + Send),
    ) -> Result<LlmResponse> {
        let path = self.path(request);
        if let Some(hit) = Self::read(&path) {
            self.touch(&path);
            ctx.trace(TraceEvent::new("llm", "cached").detail("model", hit.model.clone()).cost(hit.cost));
            if !hit.text.is_empty() {
                on_token(&hit.text);
            }
            return Ok(hit);
        }
        let response = self.inner.generate_stream(ctx, request, on_token).await?;
        self.store(path, &response).await;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use ragtune_core::{Cost, Message, Role};

    use super::*;

    /// An LLM that answers each request with its user message, padded to `pad` bytes, and counts its calls.
    #[derive(Debug, Default)]
    struct Echo {
        calls: AtomicUsize,
        pad: usize,
    }

    #[async_trait]
    impl Llm for Echo {
        fn name(&self) -> &str {
            "echo"
        }

        async fn generate(&self, _: &Ctx, requests: &[LlmRequest]) -> Result<Vec<LlmResponse>> {
            self.calls.fetch_add(requests.len(), Ordering::SeqCst);
            Ok(requests
                .iter()
                .map(|r| LlmResponse {
                    text: format!("{:<pad$}", r.messages[0].content, pad = self.pad),
                    cost: Cost::new(1, 0, 1),
                    finish_reason: "stop".into(),
                    model: "echo".into(),
                })
                .collect())
        }
    }

    fn request(n: usize) -> LlmRequest {
        LlmRequest {
            messages: vec![Message { role: Role::User, content: format!("question {n}") }],
            temperature: 0.0,
            max_tokens: 8,
            seed: Some(0),
            stop: Vec::new(),
            json_schema: None,
        }
    }

    fn entries(dir: &Path) -> (usize, u64) {
        scan(dir).iter().fold((0, 0), |(n, b), e| (n + 1, b + e.size))
    }

    /// Asks for request `n`; whether the inner LLM was called.
    async fn ask(cache: &CachedLlm, inner: &Echo, n: usize) -> bool {
        let before = inner.calls.load(Ordering::SeqCst);
        let out = cache.generate(&Ctx::new(), &[request(n)]).await.unwrap();
        assert!(out[0].text.starts_with(&format!("question {n}")));
        inner.calls.load(Ordering::SeqCst) > before
    }

    #[test]
    fn the_default_limits_are_documented_ones() {
        assert_eq!(CacheLimits::default(), CacheLimits { max_entries: 20_000, max_bytes: 256 * 1024 * 1024 });
    }

    #[tokio::test]
    async fn the_directory_stays_within_max_entries_and_the_least_recently_used_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(Echo::default());
        let limits = CacheLimits { max_entries: 10, max_bytes: u64::MAX };
        let cache = CachedLlm::new(inner.clone(), dir.path()).unwrap().with_limits(limits);
        for n in 0..10 {
            assert!(ask(&cache, &inner, n).await);
        }
        assert_eq!(entries(dir.path()).0, 10, "at the limit nothing is evicted");
        // A hit makes entry 0 the most recently used: 1 and 2 are now the oldest.
        assert!(!ask(&cache, &inner, 0).await);
        assert!(ask(&cache, &inner, 10).await);
        assert_eq!(entries(dir.path()).0, 9, "over the limit, down to 90%");
        for n in [0, 3, 4, 5, 6, 7, 8, 9, 10] {
            assert!(!ask(&cache, &inner, n).await, "entry {n} survived");
        }
        assert!(ask(&cache, &inner, 1).await, "entry 1 was evicted");
        for n in 11..200 {
            ask(&cache, &inner, n).await;
            assert!(entries(dir.path()).0 <= 10, "after entry {n}");
        }
        for n in 195..200 {
            assert!(!ask(&cache, &inner, n).await, "recent entry {n} survived");
        }
        // A fresh decorator on the same directory (another run) counts what is there before adding.
        let again = CachedLlm::new(inner.clone(), dir.path()).unwrap().with_limits(limits);
        for n in 1000..1030 {
            ask(&again, &inner, n).await;
            assert!(entries(dir.path()).0 <= 10, "after entry {n}");
        }
    }

    #[tokio::test]
    async fn the_directory_stays_within_max_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(Echo { pad: 1000, ..Echo::default() });
        let limits = CacheLimits { max_entries: usize::MAX, max_bytes: 10_000 };
        let cache = CachedLlm::new(inner.clone(), dir.path()).unwrap().with_limits(limits);
        for n in 0..100 {
            ask(&cache, &inner, n).await;
            let (count, bytes) = entries(dir.path());
            assert!(bytes <= 10_000 && count >= (n + 1).min(5), "after entry {n}: {count} entries, {bytes} bytes");
        }
        assert!(!ask(&cache, &inner, 99).await && !ask(&cache, &inner, 98).await);
    }

    #[tokio::test]
    async fn a_cache_that_cannot_be_written_or_evicted_still_answers() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(Echo::default());
        let limits = CacheLimits { max_entries: 1, max_bytes: 1 };
        let cache = CachedLlm::new(inner.clone(), dir.path().join("gone")).unwrap().with_limits(limits);
        std::fs::remove_dir(dir.path().join("gone")).unwrap();
        for n in 0..3 {
            assert!(ask(&cache, &inner, n).await);
        }
        // An entry larger than the byte limit on its own is kept: it is the one just written.
        std::fs::create_dir(dir.path().join("gone")).unwrap();
        assert!(ask(&cache, &inner, 3).await);
        assert!(!ask(&cache, &inner, 3).await);
    }

    /// Streams request 1; the response and its pieces.
    async fn stream(cache: &CachedLlm) -> (LlmResponse, Vec<String>) {
        let mut pieces = Vec::new();
        let request = request(1);
        let response =
            cache.generate_stream(&Ctx::new(), &request, &mut |p: &str| pieces.push(p.to_owned())).await.unwrap();
        (response, pieces)
    }

    #[tokio::test]
    async fn a_streamed_request_is_cached_and_a_hit_streams_in_one_piece() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(Echo::default());
        let cache = CachedLlm::new(inner.clone(), dir.path()).unwrap();
        let (fresh, pieces) = stream(&cache).await;
        assert_eq!((pieces, inner.calls.load(Ordering::SeqCst)), (vec!["question 1".to_owned()], 1));
        let (hit, pieces) = stream(&cache).await;
        assert_eq!((pieces, inner.calls.load(Ordering::SeqCst)), (vec!["question 1".to_owned()], 1), "no call");
        assert_eq!(hit, fresh);
        // The streamed answer is the one a whole request reads.
        assert!(!ask(&cache, &inner, 1).await);
    }
}
