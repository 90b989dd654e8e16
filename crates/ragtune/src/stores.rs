//! Opening the configured store: the embedded store, or a Qdrant server when built with the `qdrant` feature. The
//! backends are registered in [`STORES`], one entry each.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use ragtune_core::{
    Chunk, Ctx, EmbeddingSpec, Error, Record, Result, ScoredHit, SearchRequest, SpanVector, SparseSpec, StoreStats,
    VectorStore, WriteBatch, WriteReport,
};
use ragtune_store::{AnnConfig, EmbeddedStore, StoreOptions};

use crate::config::{StoreBackend, StoreConfig};

/// An open store: the seam every layer uses, and the embedded store behind it when that is the backend (for what
/// only it can do, such as `optimize` and `scan`).
#[derive(Debug, Clone)]
pub struct OpenStore {
    /// The store as a [`VectorStore`]: every write through it moves [`generation`](Self::generation) on.
    pub store: Arc<dyn VectorStore>,
    /// The same store when it is the embedded one.
    pub embedded: Option<Arc<EmbeddedStore>>,
    /// How many writes were tried through `store` in this process.
    generation: Arc<AtomicU64>,
}

impl OpenStore {
    /// Wraps `store` so that its writes are counted.
    fn new(store: Arc<dyn VectorStore>, embedded: Option<Arc<EmbeddedStore>>) -> Self {
        let generation = Arc::new(AtomicU64::new(0));
        let store = Arc::new(Generational { inner: store, generation: generation.clone() });
        Self { store, embedded, generation }
    }

    /// A number that changes with every write tried through [`store`](Self::store) (successful or not, so a write
    /// that failed after changing something still counts): the answer caches key on it, so a question asked
    /// after a write never gets an answer computed before it. Writes by other processes (a shared Qdrant
    /// collection) are not seen; the caches' time to live bounds those.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// A store whose writes move a generation counter on, before and after each write: a reader that started during
/// the write caches under a generation no later request uses.
#[derive(Debug)]
struct Generational {
    inner: Arc<dyn VectorStore>,
    generation: Arc<AtomicU64>,
}

impl Generational {
    async fn counted<T>(&self, write: impl Future<Output = Result<T>>) -> Result<T> {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let out = write.await;
        self.generation.fetch_add(1, Ordering::AcqRel);
        out
    }
}

#[async_trait]
impl VectorStore for Generational {
    async fn ensure_spaces(&self, ctx: &Ctx, dense: Option<&EmbeddingSpec>, sparse: Option<&SparseSpec>) -> Result<()> {
        self.inner.ensure_spaces(ctx, dense, sparse).await
    }
    async fn write(&self, ctx: &Ctx, batch: WriteBatch) -> Result<WriteReport> {
        self.counted(self.inner.write(ctx, batch)).await
    }
    async fn get(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Option<Chunk>>> {
        self.inner.get(ctx, ids).await
    }
    async fn search(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
        self.inner.search(ctx, requests).await
    }
    async fn search_without_text(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
        self.inner.search_without_text(ctx, requests).await
    }
    async fn stats(&self, ctx: &Ctx) -> Result<StoreStats> {
        self.inner.stats(ctx).await
    }
    async fn ready(&self, ctx: &Ctx) -> Result<()> {
        self.inner.ready(ctx).await
    }
    async fn span_vectors(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Vec<SpanVector>>> {
        self.inner.span_vectors(ctx, ids).await
    }
    async fn scan(&self, ctx: &Ctx, cursor: Option<String>, limit: usize) -> Result<(Vec<Record>, Option<String>)> {
        self.inner.scan(ctx, cursor, limit).await
    }
    async fn upsert(&self, ctx: &Ctx, records: Vec<Record>) -> Result<WriteReport> {
        self.counted(self.inner.upsert(ctx, records)).await
    }
    async fn delete_documents(&self, ctx: &Ctx, doc_ids: &[String]) -> Result<WriteReport> {
        self.counted(self.inner.delete_documents(ctx, doc_ids)).await
    }
}

/// A boxed future of one of the registry's functions.
type StoreFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// One store backend: the one place where how it opens, where it is, whether it exists and how it is emptied are
/// written. A new backend is a [`StoreBackend`] variant, an entry in [`STORES`], and its settings in
/// [`StoreConfig`]; nothing else matches on the backend (a test checks every variant has exactly one entry).
#[derive(Debug)]
pub struct StoreKind {
    /// The backend this entry serves.
    pub backend: StoreBackend,
    /// Whether the store lives in a local directory (`store.path`), where evaluations can keep files beside it.
    pub local: bool,
    /// Where the index lives, for messages.
    location: fn(&StoreConfig) -> String,
    /// Whether the store already holds an index, when that can be told without connecting (`None`: only opening
    /// tells).
    exists: fn(&StoreConfig) -> Option<bool>,
    open: for<'a> fn(&'a StoreConfig) -> StoreFuture<'a, OpenStore>,
    clear: for<'a> fn(&'a StoreConfig) -> StoreFuture<'a, ()>,
}

/// Every store backend.
pub static STORES: &[StoreKind] = &[
    StoreKind {
        backend: StoreBackend::Embedded,
        local: true,
        location: |config| config.path.display().to_string(),
        exists: |config| Some(EmbeddedStore::exists(&config.path)),
        open: |config| Box::pin(async move { open_embedded(config) }),
        clear: |config| Box::pin(async move { EmbeddedStore::remove(&config.path) }),
    },
    StoreKind {
        backend: StoreBackend::Qdrant,
        local: false,
        location: |config| format!("{} (collection `{}`)", config.qdrant.url, config.qdrant.collection),
        exists: |_| None,
        open: |config| Box::pin(open_qdrant(config)),
        clear: |config| Box::pin(drop_qdrant(config)),
    },
];

/// The registry's entry for `backend`.
///
/// # Panics
/// Never for a variant with an entry in [`STORES`], which a unit test checks for every variant.
#[must_use]
pub fn kind(backend: StoreBackend) -> &'static StoreKind {
    STORES.iter().find(|kind| kind.backend == backend).expect("every store backend has an entry in STORES")
}

impl StoreKind {
    /// Where the index `config` names lives, for messages: the directory, or the Qdrant URL and collection.
    #[must_use]
    pub fn location(&self, config: &StoreConfig) -> String {
        (self.location)(config)
    }

    /// Whether the store `config` names holds an index, when that can be told without connecting.
    #[must_use]
    pub fn exists(&self, config: &StoreConfig) -> Option<bool> {
        (self.exists)(config)
    }
}

/// Opens the store named by `config`.
///
/// # Errors
/// Embedded: locked or damaged stores, IO failures. Qdrant: an unreachable server, an unsupported version, or a
/// build without the `qdrant` feature ([`Unavailable`](ragtune_core::ErrorKind::Unavailable)).
pub async fn open_store(config: &StoreConfig) -> Result<OpenStore> {
    (kind(config.backend).open)(config).await
}

/// Empties the store `config` names, so that the next [`open_store`] starts from nothing: the embedded store's
/// database file is deleted (the directory and other files in it stay), a Qdrant collection is dropped. A store
/// that does not exist is not an error.
///
/// # Errors
/// As [`open_store`]; IO failures deleting the embedded store.
pub async fn clear_store(config: &StoreConfig) -> Result<()> {
    (kind(config.backend).clear)(config).await
}

fn open_embedded(config: &StoreConfig) -> Result<OpenStore> {
    let options = StoreOptions {
        ann: AnnConfig { min_vectors: config.ann_min_vectors, ..AnnConfig::default() },
        min_free_bytes: config.min_free_bytes,
    };
    let store = Arc::new(EmbeddedStore::open_with(&config.path, options)?);
    Ok(OpenStore::new(store.clone(), Some(store)))
}

#[cfg(feature = "qdrant")]
async fn open_qdrant(config: &StoreConfig) -> Result<OpenStore> {
    let store = ragtune_store::QdrantStore::connect(config.qdrant.clone()).await?;
    Ok(OpenStore::new(Arc::new(store), None))
}

#[cfg(not(feature = "qdrant"))]
#[allow(clippy::unused_async)]
async fn open_qdrant(config: &StoreConfig) -> Result<OpenStore> {
    Err(no_qdrant(config))
}

/// The error of a build without Qdrant asked for a Qdrant store.
#[cfg(not(feature = "qdrant"))]
fn no_qdrant(config: &StoreConfig) -> Error {
    Error::unavailable(format!(
        "the store is configured as Qdrant ({}) but this ragtune was built without Qdrant support: rebuild with \
         `--features qdrant`",
        config.location()
    ))
}

#[cfg(feature = "qdrant")]
async fn drop_qdrant(config: &StoreConfig) -> Result<()> {
    ragtune_store::QdrantStore::connect(config.qdrant.clone()).await?.drop_collection().await
}

#[cfg(not(feature = "qdrant"))]
async fn drop_qdrant(config: &StoreConfig) -> Result<()> {
    open_qdrant(config).await.map(drop)
}

/// What a migration copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct MigrateReport {
    /// Records copied (chunks with their vectors, sections included).
    pub records: u64,
    /// Chunks in the target afterwards.
    pub target_chunks: u64,
    /// Seconds spent.
    pub seconds: f64,
}

/// Copies every record of the store `source` names (an embedded store, or a Qdrant collection) into `target` in
/// batches of `batch` records, fixing the target's spaces to the source's first (a target of other spaces is a
/// `Mismatch` error before anything is written). Writing is idempotent (upserts by chunk id), so an interrupted
/// migration can simply be run again. `progress` is called with the records copied so far and the total.
///
/// # Errors
/// A missing source ([`NotFound`](ragtune_core::ErrorKind::NotFound)); source read failures; target space
/// mismatches and write failures; counts that disagree afterwards.
pub async fn migrate(
    source: &StoreConfig,
    target: &dyn VectorStore,
    batch: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<MigrateReport> {
    use ragtune_core::{Ctx, WriteBatch};
    let started = std::time::Instant::now();
    let ctx = Ctx::new();
    if kind(source.backend).exists(source) == Some(false) {
        return Err(Error::not_found(format!("there is no store at {} to migrate", source.location())));
    }
    let source = open_store(source).await?.store;
    let stats = source.stats(&ctx).await?;
    target.ensure_spaces(&ctx, stats.dense_spec.as_ref(), stats.sparse_spec.as_ref()).await?;
    let mut cursor: Option<String> = None;
    let mut copied = 0_u64;
    loop {
        let (page, next) = source.scan(&ctx, cursor.take(), batch.max(1)).await?;
        if page.is_empty() {
            break;
        }
        copied += page.len() as u64;
        target.write(&ctx, WriteBatch { delete_docs: Vec::new(), upsert: page }).await?;
        progress(copied, stats.chunks);
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let target_chunks = target.stats(&ctx).await?.chunks;
    if target_chunks < copied {
        return Err(Error::permanent(format!(
            "the migration wrote {copied} records but the target holds {target_chunks} chunks"
        )));
    }
    Ok(MigrateReport { records: copied, target_chunks, seconds: started.elapsed().as_secs_f64() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_has_exactly_one_entry() {
        for backend in StoreBackend::ALL {
            assert_eq!(STORES.iter().filter(|kind| kind.backend == *backend).count(), 1, "{backend:?}");
        }
        assert_eq!(STORES.len(), StoreBackend::ALL.len());
    }

    #[tokio::test]
    async fn an_embedded_store_is_opened_told_apart_from_an_empty_directory_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig { path: dir.path().join("store"), ..StoreConfig::default() };
        let embedded = kind(StoreBackend::Embedded);
        assert!(embedded.local);
        assert_eq!(embedded.location(&config), config.path.display().to_string());
        assert_eq!(embedded.exists(&config), Some(false));
        let open = open_store(&config).await.unwrap();
        assert!(open.embedded.is_some());
        let err = clear_store(&config).await.unwrap_err();
        assert_eq!(err.kind(), ragtune_core::ErrorKind::Locked, "an open store is never deleted: {err}");
        assert_eq!(embedded.exists(&config), Some(true));
        drop(open);
        assert_eq!(embedded.exists(&config), Some(true));
        std::fs::write(config.path.join("keep.txt"), "a file of the user's").unwrap();
        clear_store(&config).await.unwrap();
        assert_eq!(embedded.exists(&config), Some(false));
        assert!(config.path.join("keep.txt").is_file(), "clearing deletes the store's file only");
        clear_store(&config).await.unwrap();
    }

    #[test]
    fn a_qdrant_store_is_named_by_its_url_and_collection_and_never_guessed_to_exist() {
        let mut config = StoreConfig { backend: StoreBackend::Qdrant, ..StoreConfig::default() };
        config.qdrant.collection = "docs".into();
        let qdrant = kind(StoreBackend::Qdrant);
        assert!(!qdrant.local);
        assert!(qdrant.location(&config).ends_with("(collection `docs`)"), "{}", qdrant.location(&config));
        assert_eq!(qdrant.exists(&config), None);
    }
}
