//! The embedded store: redb for durability, an in-memory index for search.
//!
//! Over 1,000 lines (no tests inside; they are in `tests/embedded.rs`): the store's one state machine, the redb
//! transaction of a batch, its in-memory indexes and their recovery on open, kept together so that a write's
//! durability and visibility rules read in one place.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::{
    Chunk, Ctx, EmbeddingSpec, Error, ErrorKind, Record, Result, ScoredHit, SearchRequest, SpanVector, SparseSpec,
    StoreStats, VectorQuery, VectorStore, WriteBatch, WriteReport,
};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::ann::{Ann, AnnConfig};
use crate::codec;
use crate::index::{Index, prepare_dense};

const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
const CHUNKS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("chunks");
const SPARSE: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("sparse");
const DENSE: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("dense");
/// Span vectors by chunk id (`codec::encode_spans`); created on first open, so stores written before it existed
/// open unchanged and simply have none.
const SPANS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("spans");
/// The approximate dense index snapshot (key `ANN_KEY`) — derived data, see `ann.rs`.
const ANN: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("ann");
/// Chunk ids whose dense vector changed since the snapshot was built.
const ANN_DIRTY: TableDefinition<'_, &str, ()> = TableDefinition::new("ann_dirty");
const ANN_KEY: &str = "hnsw";

const FORMAT_KEY: &str = "format";
const FORMAT_VERSION: &[u8] = b"ragtune-embedded/1";
const DENSE_SPEC_KEY: &str = "dense_spec";
const SPARSE_SPEC_KEY: &str = "sparse_spec";
const DB_FILE: &str = "ragtune.redb";

/// The default, embedded [`VectorStore`]: persistent in one directory, crash-safe, exact search.
///
/// Durability: every [`WriteBatch`] is one redb transaction committed with immediate durability, so after a
/// crash (even `kill -9` or power loss) the store reopens at the last committed batch; redb repairs its file on
/// open. A second writer on the same directory gets an [`ErrorKind::Locked`] error.
///
/// Search: an inverted index (term → postings) for sparse vectors and a flat matrix for dense vectors, both
/// rebuilt from the database on open and swapped under a lock after each commit, so readers see a batch whole or
/// not at all. Payload text is read from the database for the returned hits only.
///
/// Async methods run their work with `tokio::task::spawn_blocking` when called inside a Tokio runtime, and inline
/// otherwise.
#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

/// Options for opening an [`EmbeddedStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// The approximate dense index.
    pub ann: AnnConfig,
    /// The free space the store keeps on its disk: a write that would leave less is refused before it starts,
    /// and the store reports itself not ready ([`VectorStore::ready`]) below it. 8 MiB by default, a margin for
    /// redb's own growth; 0 leaves the disk to fill (then redb's write fails, and the store reopens by itself once
    /// there is space again).
    pub min_free_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self { ann: AnnConfig::default(), min_free_bytes: DEFAULT_MIN_FREE_BYTES }
    }
}

/// What [`EmbeddedStore::optimize`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OptimizeReport {
    /// Dense vectors in the store.
    pub dense_vectors: u64,
    /// Whether an approximate index now serves dense search (false: exact search, below the size threshold).
    pub approximate: bool,
    /// Whether this call (re)built the index.
    pub rebuilt: bool,
    /// Milliseconds spent building.
    pub build_ms: u64,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    /// The database; `None` only while it is being reopened after an I/O error and the reopening failed (a disk
    /// still full): reads and writes say so until a later attempt succeeds.
    db: RwLock<Option<Database>>,
    /// Set by an I/O error of the database (redb then refuses every later operation until it is reopened), cleared
    /// by a successful reopen.
    io_failed: AtomicBool,
    /// The free bytes seen when a write last failed on a full disk (`u64::MAX`: none since the last successful
    /// write): the store is not ready until the disk has more than that again.
    full_at: AtomicU64,
    options: StoreOptions,
    /// Serialises writers (writes, space changes, index builds); readers only take `state`.
    writer: Mutex<()>,
    state: RwLock<State>,
}

#[derive(Debug)]
struct State {
    dense_spec: Option<EmbeddingSpec>,
    sparse_spec: Option<SparseSpec>,
    index: Index,
}

/// The free space below which the store refuses writes and reports itself not ready, by default: a margin for
/// redb's own growth (it extends its file by regions) beyond the estimated size of a batch.
const DEFAULT_MIN_FREE_BYTES: u64 = 8 << 20;

/// Whether `e` is an I/O failure of the database (a full disk, a failed fsync), after which redb refuses every
/// operation until the database is reopened.
fn is_io(e: &redb::Error) -> bool {
    matches!(e, redb::Error::Io(_) | redb::Error::PreviousIo)
}

fn db_err(what: &str, dir: &Path, e: impl Into<redb::Error>) -> Error {
    let e: redb::Error = e.into();
    let kind = match &e {
        redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => ErrorKind::Locked,
        redb::Error::Corrupted(_) | redb::Error::UpgradeRequired(_) => ErrorKind::Corrupt,
        // The disk may get space back, and the store reopens after an I/O error: worth trying again later.
        redb::Error::Io(io)
            if matches!(io.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded) =>
        {
            ErrorKind::Unavailable
        }
        redb::Error::PreviousIo => ErrorKind::Unavailable,
        _ => ErrorKind::Permanent,
    };
    if let redb::Error::Io(io) = &e
        && matches!(io.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
    {
        let msg = format!(
            "{what} failed for the store at {}: the disk is full; nothing of this write was kept — free space and \
             retry (the store reopens by itself)",
            dir.display()
        );
        return Error::new(kind, msg).with_source(e);
    }
    let msg = match kind {
        ErrorKind::Locked => format!(
            "the store at {} is locked: another process (or another handle in this one) has it open for writing",
            dir.display()
        ),
        ErrorKind::Corrupt => format!(
            "the store at {} is damaged and cannot be recovered automatically ({what}); re-index into a new directory",
            dir.display()
        ),
        _ => format!("{what} failed for the store at {}", dir.display()),
    };
    Error::new(kind, msg).with_source(e)
}

impl EmbeddedStore {
    /// Opens the store in `dir`, creating the directory and an empty store when absent.
    ///
    /// # Errors
    /// [`ErrorKind::Locked`] when another handle holds the store; [`ErrorKind::Corrupt`] when the database or its
    /// records cannot be read back (the message says which record); IO failures.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, StoreOptions::default())
    }

    /// Whether `dir` holds an embedded store (its database file), without opening it.
    #[must_use]
    pub fn exists(dir: impl AsRef<Path>) -> bool {
        dir.as_ref().join(DB_FILE).is_file()
    }

    /// Deletes the embedded store in `dir` (its database file; the directory and anything else in it stay), so the
    /// next [`open`](Self::open) starts empty. Nothing to delete is not an error. A store another handle holds (a
    /// running server, another command) is refused, never unlinked from under it.
    ///
    /// # Errors
    /// [`ErrorKind::Locked`] when another handle holds the store; IO failures other than the file being absent.
    pub fn remove(dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        let path = dir.join(DB_FILE);
        if path.is_file() {
            // Taking the database's lock is the check that nobody else has it open.
            drop(Database::create(&path).map_err(|e| db_err("deleting", dir, e))?);
        }
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::permanent(format!("cannot delete the store {}", path.display())).with_source(e)),
        }
    }

    /// Opens the store with explicit options.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(dir: impl AsRef<Path>, options: StoreOptions) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::permanent(format!("cannot create the store directory {}", dir.display())).with_source(e)
        })?;
        let path = dir.join(DB_FILE);
        let db = Database::create(&path).map_err(|e| db_err("opening", &dir, e))?;
        let state = Self::load(&db, &dir)?;
        Ok(Self {
            inner: Arc::new(Inner {
                dir,
                db: RwLock::new(Some(db)),
                io_failed: AtomicBool::new(false),
                full_at: AtomicU64::new(u64::MAX),
                options,
                writer: Mutex::new(()),
                state: RwLock::new(state),
            }),
        })
    }

    /// The dense vectors in the store, and how many changed since the approximate dense index was built (`None`
    /// when there is no such index): what decides whether [`optimize`](Self::optimize) is worth its rebuild.
    #[must_use]
    pub fn dense_index_state(&self) -> (u64, Option<usize>) {
        let state = self.inner.read();
        (state.index.dense_count(), state.index.ann.as_ref().map(|a| a.dirty.len()))
    }

    /// Builds (or rebuilds) the approximate dense index when the store holds at least
    /// [`AnnConfig::min_vectors`] dense vectors and the current one is missing or stale, and drops it below the
    /// threshold. Writers wait while it builds; readers go on with the previous index.
    ///
    /// # Errors
    /// IO failures; on error the previous index stays in use.
    pub async fn optimize(&self) -> Result<OptimizeReport> {
        let inner = self.inner.clone();
        blocking(move || inner.optimize()).await
    }

    /// Reads up to `limit` records (chunk, dense and sparse vectors) in ascending chunk id order, starting after
    /// the chunk id `after` (from the beginning when `None`): a consistent page of one committed state, for
    /// exporting the store (`ragtune migrate`) and for benchmarks. Page on with the last id returned; an empty
    /// page means the end.
    ///
    /// # Errors
    /// IO failures; [`ErrorKind::Corrupt`] when a stored record cannot be decoded.
    pub async fn scan(&self, after: Option<String>, limit: usize) -> Result<Vec<Record>> {
        let inner = self.inner.clone();
        blocking(move || inner.scan(after.as_deref(), limit)).await
    }

    /// The directory holding the store.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Creates the tables and stamps the format on first open, in one transaction; a store of another format is
    /// [`ErrorKind::Corrupt`].
    fn stamp_format(db: &Database, dir: &Path) -> Result<()> {
        let err = |what: &str, e: redb::Error| db_err(what, dir, e);
        let tx = db.begin_write().map_err(|e| err("starting a transaction", e.into()))?;
        {
            let mut meta = tx.open_table(META).map_err(|e| err("opening the meta table", e.into()))?;
            let format =
                meta.get(FORMAT_KEY).map_err(|e| err("reading the format", e.into()))?.map(|g| g.value().to_vec());
            match format {
                None => {
                    meta.insert(FORMAT_KEY, FORMAT_VERSION).map_err(|e| err("writing the format", e.into()))?;
                }
                Some(f) if f == FORMAT_VERSION => {}
                Some(f) => {
                    return Err(Error::corrupt(format!(
                        "the store at {} has format `{}`, this ragtune reads `{}`",
                        dir.display(),
                        String::from_utf8_lossy(&f),
                        String::from_utf8_lossy(FORMAT_VERSION)
                    )));
                }
            }
            for t in [CHUNKS, SPARSE, DENSE, SPANS, ANN] {
                tx.open_table(t).map_err(|e| err("creating tables", e.into()))?;
            }
            tx.open_table(ANN_DIRTY).map_err(|e| err("creating tables", e.into()))?;
        }
        tx.commit().map_err(|e| err("committing the format", e.into()))?;
        Ok(())
    }

    fn load(db: &Database, dir: &Path) -> Result<State> {
        let err = |what: &str, e: redb::Error| db_err(what, dir, e);
        Self::stamp_format(db, dir)?;

        let rx = db.begin_read().map_err(|e| err("starting a read", e.into()))?;
        let meta = rx.open_table(META).map_err(|e| err("opening the meta table", e.into()))?;
        let spec = |key: &str| -> Result<Option<Vec<u8>>> {
            Ok(meta.get(key).map_err(|e| err("reading settings", e.into()))?.map(|g| g.value().to_vec()))
        };
        let parse = |key: &str, bytes: &[u8]| {
            Error::corrupt(format!("the store setting `{key}` cannot be read: {}", String::from_utf8_lossy(bytes)))
        };
        let dense_spec: Option<EmbeddingSpec> = match spec(DENSE_SPEC_KEY)? {
            Some(b) => Some(serde_json::from_slice(&b).map_err(|_| parse(DENSE_SPEC_KEY, &b))?),
            None => None,
        };
        let sparse_spec: Option<SparseSpec> = match spec(SPARSE_SPEC_KEY)? {
            Some(b) => Some(serde_json::from_slice(&b).map_err(|_| parse(SPARSE_SPEC_KEY, &b))?),
            None => None,
        };
        let dim = dense_spec.as_ref().map_or(0, |s| s.dim);
        let chunks = rx.open_table(CHUNKS).map_err(|e| err("opening chunks", e.into()))?;
        let count = chunks.len().map_err(|e| err("counting chunks", e.into()))?;
        let mut index = Index::with_capacity(dim, usize::try_from(count).unwrap_or(0));
        let sparse = rx.open_table(SPARSE).map_err(|e| err("opening sparse vectors", e.into()))?;
        let dense = rx.open_table(DENSE).map_err(|e| err("opening dense vectors", e.into()))?;
        // The three tables are keyed by chunk id: read them side by side in key order (a merge join), so each
        // vector is found without a lookup of its own. A vector without a chunk can only come from a bug: it is
        // refused rather than served as a silently partial store.
        let mut sparse_rows = sparse.iter().map_err(|e| err("reading sparse vectors", e.into()))?.peekable();
        let mut dense_rows = dense.iter().map_err(|e| err("reading dense vectors", e.into()))?.peekable();
        let dangling = |name: &str, key: &str| {
            Error::corrupt(format!("the store at {} has a {name} vector for `{key}` but no chunk", dir.display()))
        };
        for entry in chunks.iter().map_err(|e| err("reading chunks", e.into()))? {
            let (k, v) = entry.map_err(|e| err("reading chunks", e.into()))?;
            let key = k.value();
            let chunk = codec::decode_chunk_without_text(key, v.value())?;
            if chunk.id != key {
                return Err(Error::corrupt(format!("stored chunk under key `{key}` has id `{}`", chunk.id)));
            }
            let sv = match next_row(&mut sparse_rows, key, "sparse", &err, &dangling)? {
                Some(row) => Some(codec::decode_sparse(key, row.value())?),
                None => None,
            };
            let dv = match next_row(&mut dense_rows, key, "dense", &err, &dangling)? {
                Some(row) => {
                    let v = codec::decode_dense(key, row.value())?;
                    if v.len() != dim {
                        return Err(Error::corrupt(format!(
                            "stored dense vector of `{key}` has {} dimensions, the store's space has {dim}",
                            v.len()
                        )));
                    }
                    Some(v)
                }
                None => None,
            };
            index.insert(chunk, sv.as_ref(), dv.as_deref());
        }
        // Vectors after the last chunk have no chunk either.
        for (name, rows) in [("sparse", &mut sparse_rows), ("dense", &mut dense_rows)] {
            if let Some(row) = rows.next() {
                let (k, _) = row.map_err(|e| err("checking vectors", e.into()))?;
                return Err(dangling(name, k.value()));
            }
        }
        // The approximate index is derived data: one that cannot be decoded is dropped (dense search falls back
        // to exact) rather than refusing the store; `optimize` builds it again.
        let ann_table = rx.open_table(ANN).map_err(|e| err("opening the dense index", e.into()))?;
        if let Some(bytes) = ann_table.get(ANN_KEY).map_err(|e| err("reading the dense index", e.into()))? {
            let dirty_table = rx.open_table(ANN_DIRTY).map_err(|e| err("opening the dense index", e.into()))?;
            let mut dirty = HashSet::new();
            for entry in dirty_table.iter().map_err(|e| err("reading the dense index", e.into()))? {
                let (k, _) = entry.map_err(|e| err("reading the dense index", e.into()))?;
                dirty.insert(k.value().to_owned());
            }
            index.ann = Ann::decode(bytes.value(), dirty).ok();
        }
        Ok(State { dense_spec, sparse_spec, index })
    }
}

/// A read guard on the open database.
struct DbRef<'a>(RwLockReadGuard<'a, Option<Database>>);

impl std::ops::Deref for DbRef<'_> {
    type Target = Database;

    fn deref(&self) -> &Database {
        self.0.as_ref().expect("invariant: `Inner::db` checks that the database is open")
    }
}

/// About how many bytes a record takes in the database (its text, metadata and vectors, before redb's own pages).
fn approx_bytes(r: &Record) -> u64 {
    let chunk = r.chunk.text.len() + r.chunk.title.as_ref().map_or(0, String::len) + 256;
    let dense = r.dense.as_ref().map_or(0, |v| v.len() * 4);
    let sparse = r.sparse.as_ref().map_or(0, |v| v.indices.len() * 8);
    let spans: usize = r.spans.iter().map(|s| s.vector.len() * 4 + 8).sum();
    (chunk + dense + sparse + spans) as u64
}

/// The bytes an unprivileged writer can still use on the file system holding `dir`; `None` where it cannot be
/// told.
#[cfg(unix)]
fn free_bytes(dir: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(dir).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(not(unix))]
fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}

/// One table's rows in key order, read beside the chunks table's.
type Rows<'a> = std::iter::Peekable<redb::Range<'a, &'static str, &'static [u8]>>;

/// The next row of `rows` when it is keyed `key` (and consumes it), `None` when the next row has a later key. The
/// chunks are read in key order too, so a row keyed before `key` belongs to no chunk: that is corruption (`dangling`).
fn next_row<'a>(
    rows: &mut Rows<'a>,
    key: &str,
    name: &str,
    err: &impl Fn(&str, redb::Error) -> Error,
    dangling: &impl Fn(&str, &str) -> Error,
) -> Result<Option<redb::AccessGuard<'a, &'static [u8]>>> {
    let order = match rows.peek() {
        None => return Ok(None),
        Some(Ok((k, _))) => k.value().cmp(key),
        Some(Err(_)) => std::cmp::Ordering::Equal,
    };
    match order {
        std::cmp::Ordering::Greater => Ok(None),
        std::cmp::Ordering::Less => match rows.next() {
            Some(Ok((k, _))) => Err(dangling(name, k.value())),
            _ => Err(Error::corrupt(format!("the {name} table changed while it was read"))),
        },
        std::cmp::Ordering::Equal => match rows.next() {
            Some(Ok((_, v))) => Ok(Some(v)),
            Some(Err(e)) => Err(err(&format!("reading {name} vectors"), e.into())),
            None => Ok(None),
        },
    }
}

impl Inner {
    fn read(&self) -> RwLockReadGuard<'_, State> {
        // A poisoned lock means a panic in another thread mid-update; the index is rebuilt from the
        // database only on reopen, so surface nothing here and keep serving (updates are applied after commit
        // in a way that cannot panic halfway except on an invariant violation).
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn err(&self, what: &str, e: impl Into<redb::Error>) -> Error {
        let e: redb::Error = e.into();
        if is_io(&e) {
            self.io_failed.store(true, Ordering::Release);
        }
        if let redb::Error::Io(io) = &e
            && matches!(io.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
        {
            self.full_at.store(free_bytes(&self.dir).unwrap_or(0), Ordering::Release);
        }
        db_err(what, &self.dir, e)
    }

    /// The open database, or why there is none.
    fn db(&self) -> Result<DbRef<'_>> {
        let guard = self.db.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            return Err(Error::unavailable(format!(
                "the store at {} is closed after an I/O error and could not be reopened yet (is the disk full?); it \
                 reopens by itself once it can",
                self.dir.display()
            )));
        }
        Ok(DbRef(guard))
    }

    /// After an I/O error, closes and reopens the database (redb repairs it to the last commit) and reloads the
    /// index from it, so that the store recovers once the disk has space again. The caller holds the writer lock.
    ///
    /// # Errors
    /// Why it cannot reopen yet (the database stays closed, or failed, until a later call succeeds).
    fn recover(&self) -> Result<()> {
        if !self.io_failed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.check_space(0)?;
        // redb holds the file's lock while it is open: close it before opening again. The two locks are taken
        // one at a time (readers take the state's, then the database's).
        *self.db.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        let db = Database::create(self.dir.join(DB_FILE)).map_err(|e| db_err("reopening", &self.dir, e))?;
        let state = EmbeddedStore::load(&db, &self.dir)?;
        *self.write_lock() = state;
        *self.db.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(db);
        self.io_failed.store(false, Ordering::Release);
        Ok(())
    }

    /// Refuses a write of about `bytes` when the disk holding the store has too little space for it, before redb
    /// tries (and fails halfway, which closes the database until it is reopened).
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] saying how much space there is and how much the write needs.
    fn check_space(&self, bytes: u64) -> Result<()> {
        let Some(free) = free_bytes(&self.dir) else { return Ok(()) };
        let margin = self.options.min_free_bytes;
        if margin == 0 {
            return Ok(());
        }
        let need = bytes.saturating_mul(3).saturating_add(margin);
        if free < need {
            return Err(Error::unavailable(format!(
                "the disk holding the store at {} has {} KiB free and this write needs about {} KiB: free space and \
                 retry; nothing of this write was kept",
                self.dir.display(),
                free / 1024,
                need / 1024
            )));
        }
        Ok(())
    }

    /// Whether the store can read and write now: reopens a database that failed, and checks the disk's space.
    fn ready(&self) -> Result<()> {
        if self.io_failed.load(Ordering::Acquire) {
            // Recover only when no writer is busy: a readiness probe never waits behind a write.
            if let Ok(_writer) = self.writer.try_lock() {
                self.recover()?;
            } else {
                return Err(Error::unavailable(format!(
                    "the store at {} failed to write and is waiting to reopen",
                    self.dir.display()
                )));
            }
        }
        self.db().map(drop)?;
        let full_at = self.full_at.load(Ordering::Acquire);
        if full_at != u64::MAX && free_bytes(&self.dir).is_some_and(|free| free <= full_at.saturating_add(1 << 20)) {
            return Err(Error::unavailable(format!(
                "the disk holding the store at {} filled up during a write and has not got space back since",
                self.dir.display()
            )));
        }
        self.check_space(0)
    }

    fn writer(&self) -> MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ensure_spaces(&self, dense: Option<&EmbeddingSpec>, sparse: Option<&SparseSpec>) -> Result<()> {
        let _writer = self.writer();
        self.recover()?;
        let mut state = self.write_lock();
        let mut updates: Vec<(&str, Vec<u8>)> = Vec::new();
        if let Some(want) = dense {
            if want.dim == 0 {
                return Err(Error::invalid_input("a dense space needs a dimension > 0"));
            }
            match &state.dense_spec {
                Some(have) if have != want => {
                    return Err(Error::mismatch(format!(
                        "the store at {} holds dense vectors of `{}` ({} dimensions, {:?}); refusing `{}` ({} dimensions, {:?}) — use another store directory or re-index",
                        self.dir.display(),
                        have.model_id,
                        have.dim,
                        have.distance,
                        want.model_id,
                        want.dim,
                        want.distance
                    )));
                }
                Some(_) => {}
                None => updates.push((DENSE_SPEC_KEY, serde_json::to_vec(want).unwrap_or_default())),
            }
        }
        if let Some(want) = sparse {
            match &state.sparse_spec {
                Some(have) if have != want => {
                    return Err(Error::mismatch(format!(
                        "the store at {} holds sparse vectors of `{}`; refusing `{}` — use another store directory or re-index",
                        self.dir.display(),
                        have.encoder_id,
                        want.encoder_id
                    )));
                }
                Some(_) => {}
                None => updates.push((SPARSE_SPEC_KEY, serde_json::to_vec(want).unwrap_or_default())),
            }
        }
        if updates.is_empty() {
            return Ok(());
        }
        let tx = self.db()?.begin_write().map_err(|e| self.err("starting a transaction", e))?;
        {
            let mut meta = tx.open_table(META).map_err(|e| self.err("opening settings", e))?;
            for (k, v) in &updates {
                meta.insert(*k, v.as_slice()).map_err(|e| self.err("writing settings", e))?;
            }
        }
        tx.commit().map_err(|e| self.err("committing settings", e))?;
        if let Some(d) = dense.filter(|_| state.dense_spec.is_none()) {
            state.dense_spec = Some(d.clone());
            state.index.set_dim(d.dim);
        }
        if let Some(s) = sparse.filter(|_| state.sparse_spec.is_none()) {
            state.sparse_spec = Some(s.clone());
        }
        Ok(())
    }

    fn validate(state: &State, records: &mut [Record]) -> Result<()> {
        for r in records.iter_mut() {
            let id = &r.chunk.id;
            crate::record::check_record(r, state.dense_spec.as_ref(), state.sparse_spec.is_some())?;
            if let (Some(v), Some(spec)) = (&mut r.dense, &state.dense_spec) {
                prepare_dense(v, spec.distance);
            }
            if !r.spans.is_empty() {
                let Some(spec) = &state.dense_spec else {
                    return Err(Error::invalid_input(format!(
                        "chunk `{id}` has span vectors but the store has no dense space yet: call ensure_spaces first"
                    )));
                };
                for s in &r.spans {
                    if s.text_in(&r.chunk.text).is_none() {
                        return Err(Error::invalid_input(format!(
                            "chunk `{id}` has a span vector for bytes {}..{}, which is not a span of its text ({} bytes)",
                            s.start,
                            s.end,
                            r.chunk.text.len()
                        )));
                    }
                    if s.vector.len() != spec.dim {
                        return Err(Error::mismatch(format!(
                            "chunk `{id}` has a span vector of {} dimensions; the store's space `{}` has {}",
                            s.vector.len(),
                            spec.model_id,
                            spec.dim
                        )));
                    }
                    if s.vector.iter().any(|x| !x.is_finite()) || s.vector.iter().all(|&x| x == 0.0) {
                        return Err(Error::invalid_input(format!("chunk `{id}` has a non-finite or zero span vector")));
                    }
                }
            }
        }
        Ok(())
    }

    fn write(&self, ctx: &Ctx, mut batch: WriteBatch) -> Result<WriteReport> {
        ctx.check()?;
        // The write lock is held from before the commit until the index is updated, so that a reader sees the
        // database and the index at the same version (readers fetch payloads under the read lock).
        let _writer = self.writer();
        self.recover()?;
        self.check_space(batch.upsert.iter().map(approx_bytes).sum())?;
        let mut state = self.write_lock();
        Self::validate(&state, &mut batch.upsert)?;
        let mut removed: Vec<String> = Vec::new();
        for doc in &batch.delete_docs {
            removed.extend(state.index.chunk_ids_of_doc(doc));
        }
        let removed_set: HashSet<&str> = removed.iter().map(String::as_str).collect();
        // Later records with the same id replace earlier ones in the same batch.
        let mut last: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, r) in batch.upsert.iter().enumerate() {
            last.insert(r.chunk.id.as_str(), i);
        }
        let replaced = last.keys().filter(|id| state.index.contains(id) && !removed_set.contains(*id)).count() as u64;

        let tx = self.db()?.begin_write().map_err(|e| self.err("starting a transaction", e))?;
        {
            let mut chunks = tx.open_table(CHUNKS).map_err(|e| self.err("opening chunks", e))?;
            let mut sparse = tx.open_table(SPARSE).map_err(|e| self.err("opening sparse vectors", e))?;
            let mut dense = tx.open_table(DENSE).map_err(|e| self.err("opening dense vectors", e))?;
            let mut spans = tx.open_table(SPANS).map_err(|e| self.err("opening span vectors", e))?;
            for id in &removed {
                chunks.remove(id.as_str()).map_err(|e| self.err("deleting", e))?;
                sparse.remove(id.as_str()).map_err(|e| self.err("deleting", e))?;
                dense.remove(id.as_str()).map_err(|e| self.err("deleting", e))?;
                spans.remove(id.as_str()).map_err(|e| self.err("deleting", e))?;
            }
            for &i in last.values() {
                let r = &batch.upsert[i];
                let id = r.chunk.id.as_str();
                chunks.insert(id, codec::encode_chunk(&r.chunk)?.as_slice()).map_err(|e| self.err("writing", e))?;
                match &r.sparse {
                    Some(v) => sparse.insert(id, codec::encode_sparse(v).as_slice()).map(drop),
                    None => sparse.remove(id).map(drop),
                }
                .map_err(|e| self.err("writing", e))?;
                match &r.dense {
                    Some(v) => dense.insert(id, codec::encode_dense(v).as_slice()).map(drop),
                    None => dense.remove(id).map(drop),
                }
                .map_err(|e| self.err("writing", e))?;
                if r.spans.is_empty() {
                    spans.remove(id).map(drop)
                } else {
                    spans.insert(id, codec::encode_spans(&r.spans).as_slice()).map(drop)
                }
                .map_err(|e| self.err("writing", e))?;
            }
            // Every changed id is dirty for the approximate index, in the same transaction as the change.
            if state.index.ann.is_some() {
                let mut dirty = tx.open_table(ANN_DIRTY).map_err(|e| self.err("opening the dense index", e))?;
                for id in removed.iter().map(String::as_str).chain(last.keys().copied()) {
                    dirty.insert(id, ()).map_err(|e| self.err("writing", e))?;
                }
            }
        }
        tx.commit().map_err(|e| self.err("committing", e))?;
        self.full_at.store(u64::MAX, Ordering::Release);

        for id in removed.iter().map(String::as_str).chain(last.keys().copied()) {
            state.index.mark_dirty(id);
        }
        for id in &removed {
            state.index.remove(id);
        }
        for &i in last.values() {
            let r = &batch.upsert[i];
            let mut chunk = r.chunk.clone();
            chunk.text = String::new();
            state.index.insert(chunk, r.sparse.as_ref(), r.dense.as_deref());
        }
        Ok(WriteReport { upserted: last.len() as u64, deleted: removed.len() as u64 + replaced })
    }

    fn scan(&self, after: Option<&str>, limit: usize) -> Result<Vec<Record>> {
        let rx = self.db()?.begin_read().map_err(|e| self.err("starting a read", e))?;
        let chunks = rx.open_table(CHUNKS).map_err(|e| self.err("opening chunks", e))?;
        let sparse = rx.open_table(SPARSE).map_err(|e| self.err("opening sparse vectors", e))?;
        let dense = rx.open_table(DENSE).map_err(|e| self.err("opening dense vectors", e))?;
        let spans = rx.open_table(SPANS).map_err(|e| self.err("opening span vectors", e))?;
        let range = match after {
            Some(a) => chunks.range::<&str>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
            None => chunks.range::<&str>(..),
        }
        .map_err(|e| self.err("reading chunks", e))?;
        let mut out = Vec::with_capacity(limit.min(4096));
        for entry in range.take(limit) {
            let (k, v) = entry.map_err(|e| self.err("reading chunks", e))?;
            let key = k.value();
            let chunk = codec::decode_chunk(key, v.value())?;
            let sparse = match sparse.get(key).map_err(|e| self.err("reading sparse vectors", e))? {
                Some(g) => Some(codec::decode_sparse(key, g.value())?),
                None => None,
            };
            let dense = match dense.get(key).map_err(|e| self.err("reading dense vectors", e))? {
                Some(g) => Some(codec::decode_dense(key, g.value())?),
                None => None,
            };
            let spans = match spans.get(key).map_err(|e| self.err("reading span vectors", e))? {
                Some(g) => codec::decode_spans(key, g.value())?,
                None => Vec::new(),
            };
            out.push(Record { chunk, dense, sparse, spans });
        }
        Ok(out)
    }

    fn span_vectors(&self, ids: &[String]) -> Result<Vec<Vec<SpanVector>>> {
        let rx = self.db()?.begin_read().map_err(|e| self.err("starting a read", e))?;
        let spans = rx.open_table(SPANS).map_err(|e| self.err("opening span vectors", e))?;
        ids.iter()
            .map(|id| match spans.get(id.as_str()).map_err(|e| self.err("reading span vectors", e))? {
                Some(g) => codec::decode_spans(id, g.value()),
                None => Ok(Vec::new()),
            })
            .collect()
    }

    fn optimize(&self) -> Result<OptimizeReport> {
        let _writer = self.writer();
        self.recover()?;
        let cfg = self.options.ann;
        let (vectors, current) = {
            let state = self.read();
            let current = state.index.ann.as_ref().map(|a| (a.len(), a.dirty.len()));
            (state.index.dense_count(), current)
        };
        let mut report = OptimizeReport { dense_vectors: vectors, ..OptimizeReport::default() };
        if vectors < cfg.min_vectors as u64 {
            if current.is_some() {
                let tx = self.db()?.begin_write().map_err(|e| self.err("starting a transaction", e))?;
                tx.delete_table(ANN).map_err(|e| self.err("dropping the dense index", e))?;
                tx.delete_table(ANN_DIRTY).map_err(|e| self.err("dropping the dense index", e))?;
                tx.commit().map_err(|e| self.err("committing", e))?;
                self.write_lock().index.ann = None;
            }
            return Ok(report);
        }
        report.approximate = true;
        if current.is_some_and(|(_, dirty)| dirty == 0) {
            return Ok(report);
        }
        let started = Instant::now();
        let items = self.read().index.dense_vectors();
        let ann = Ann::build(&cfg, items)?;
        let bytes = ann.encode()?;
        let tx = self.db()?.begin_write().map_err(|e| self.err("starting a transaction", e))?;
        {
            let mut table = tx.open_table(ANN).map_err(|e| self.err("opening the dense index", e))?;
            table.insert(ANN_KEY, bytes.as_slice()).map_err(|e| self.err("writing the dense index", e))?;
        }
        tx.delete_table(ANN_DIRTY).map_err(|e| self.err("resetting the dense index", e))?;
        tx.commit().map_err(|e| self.err("committing the dense index", e))?;
        self.write_lock().index.ann = Some(ann);
        report.rebuilt = true;
        report.build_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(report)
    }

    fn fetch(&self, ids: &[String]) -> Result<Vec<Option<Chunk>>> {
        let rx = self.db()?.begin_read().map_err(|e| self.err("starting a read", e))?;
        let chunks = rx.open_table(CHUNKS).map_err(|e| self.err("opening chunks", e))?;
        ids.iter()
            .map(|id| match chunks.get(id.as_str()).map_err(|e| self.err("reading a chunk", e))? {
                Some(g) => codec::decode_chunk(id, g.value()).map(Some),
                None => Ok(None),
            })
            .collect()
    }

    /// The hits of each request; with `text` false, their chunks come from the in-memory index, which holds every
    /// field but the text, and nothing is read from disk.
    fn search(&self, ctx: &Ctx, requests: &[SearchRequest], text: bool) -> Result<Vec<Vec<ScoredHit>>> {
        self.search_in(&self.read(), ctx, requests, text)
    }

    /// Whether `requests` are cheap enough to run on the caller's thread: exact dense scans (no approximate index
    /// would answer them) of at most [`INLINE_DENSE_WORK`] multiply-adds in all, keyword searches over at most
    /// [`INLINE_SPARSE_POSTINGS`] postings in all in an index of at most [`INLINE_SPARSE_SLOTS`] chunks, and, when
    /// their texts are read, at most [`INLINE_READS`] hits.
    fn cheap(state: &State, requests: &[SearchRequest], text: bool) -> bool {
        let dim = state.dense_spec.as_ref().map_or(0, |s| s.dim) as u64;
        let (mut dense, mut postings, mut sparse) = (0u64, 0u64, false);
        for r in requests {
            match &r.vector {
                VectorQuery::Dense(_) => {
                    if state.index.ann.as_ref().is_some_and(|ann| r.top_k <= ann.ef_search()) {
                        return false;
                    }
                    dense = dense.saturating_add(state.index.dense_count().saturating_mul(dim));
                }
                VectorQuery::Sparse(q) => {
                    postings = postings.saturating_add(state.index.sparse_postings(q));
                    sparse = true;
                }
            }
        }
        dense <= INLINE_DENSE_WORK
            && postings <= INLINE_SPARSE_POSTINGS
            && (!sparse || state.index.slot_count() <= INLINE_SPARSE_SLOTS)
            && (!text || requests.iter().map(|r| r.top_k).sum::<usize>() <= INLINE_READS)
    }

    fn search_in(
        &self,
        state: &State,
        ctx: &Ctx,
        requests: &[SearchRequest],
        text: bool,
    ) -> Result<Vec<Vec<ScoredHit>>> {
        let mut out = Vec::with_capacity(requests.len());
        for req in requests {
            ctx.check()?;
            let hits = match &req.vector {
                VectorQuery::Sparse(q) => {
                    q.validate().map_err(|e| e.context("sparse query"))?;
                    match &state.sparse_spec {
                        Some(spec) => state.index.search_sparse(q, spec.idf, req.top_k, req.filter.as_ref()),
                        None => Vec::new(),
                    }
                }
                VectorQuery::Dense(q) => match &state.dense_spec {
                    Some(spec) if q.len() != spec.dim => {
                        return Err(Error::mismatch(format!(
                            "the query vector has {} dimensions; the store's space `{}` has {}",
                            q.len(),
                            spec.model_id,
                            spec.dim
                        )));
                    }
                    Some(spec) => {
                        let mut q = q.clone();
                        prepare_dense(&mut q, spec.distance);
                        state.index.search_dense(&q, req.top_k, req.filter.as_ref())
                    }
                    None => Vec::new(),
                },
            };
            if !text {
                let list = hits
                    .iter()
                    .map(|h| {
                        let slot = state.index.slot(h.slot).ok_or_else(|| {
                            Error::corrupt(format!("a search hit points at an empty slot in {}", self.dir.display()))
                        })?;
                        Ok(ScoredHit { chunk: slot.chunk.clone(), score: h.score })
                    })
                    .collect::<Result<Vec<_>>>()?;
                out.push(list);
                continue;
            }
            let ids: Vec<String> =
                hits.iter().map(|h| state.index.slot(h.slot).map(|s| s.chunk.id.clone()).unwrap_or_default()).collect();
            let chunks = self.fetch(&ids)?;
            let mut list = Vec::with_capacity(hits.len());
            for ((h, c), id) in hits.iter().zip(chunks).zip(&ids) {
                let chunk = c.ok_or_else(|| {
                    Error::corrupt(format!(
                        "chunk `{id}` is indexed but missing from the store at {}",
                        self.dir.display()
                    ))
                })?;
                list.push(ScoredHit { chunk, score: h.score });
            }
            out.push(list);
        }
        Ok(out)
    }

    fn stats(&self) -> StoreStats {
        let state = self.read();
        let mut settings = BTreeMap::new();
        settings.insert("backend".to_owned(), "embedded".into());
        settings.insert("path".to_owned(), self.dir.display().to_string().into());
        let dense_index = match &state.index.ann {
            Some(ann) => format!("hnsw ({} vectors indexed, {} changed since)", ann.len(), ann.dirty.len()),
            None => "exact".to_owned(),
        };
        settings.insert("dense_index".to_owned(), dense_index.into());
        StoreStats {
            chunks: state.index.chunks(),
            documents: state.index.documents(),
            dense_vectors: state.index.dense_count(),
            sparse_vectors: state.index.sparse_count(),
            dense_spec: state.dense_spec.clone(),
            sparse_spec: state.sparse_spec.clone(),
            settings,
        }
    }
}

/// `get` reads at most this many chunks on the caller's thread, when the index lock is free: a few page reads and
/// decodes, tens of microseconds, less than the round trip to the blocking pool (hybrid retrieval's fill of the fused
/// top k is the caller this is for). More ids, or a writer holding the lock, go to the blocking pool.
const INLINE_READS: usize = 32;

/// Runs blocking store work off the async executor when there is one.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn_blocking(f).await.map_err(|e| Error::permanent("a store task failed").with_source(e))?
        }
        Err(_) => f(),
    }
}

impl EmbeddedStore {
    /// A search: on the caller's thread when it is cheap and the index lock is free, else on the blocking pool.
    async fn search_with(&self, ctx: &Ctx, requests: &[SearchRequest], text: bool) -> Result<Vec<Vec<ScoredHit>>> {
        if let Ok(state) = self.inner.state.try_read()
            && Inner::cheap(&state, requests, text)
        {
            return self.inner.search_in(&state, ctx, requests, text);
        }
        let (inner, ctx, requests) = (self.inner.clone(), ctx.clone(), requests.to_vec());
        blocking(move || inner.search(&ctx, &requests, text)).await
    }
}

/// A search runs on the caller's thread when the index lock is free and it is this small (see `Inner::cheap`): tens
/// of microseconds, less than the round trip to the blocking pool, which a dense query pays after its embedding, on
/// its critical path. Measured on this project's 2-core host, a search sent to the pool also comes back slower when
/// the pool's threads have been idle for a while (docs/performance.md), so keyword searches of a small index run
/// inline too. Larger collections and approximate searches go to the pool.
///
/// Exact dense search: stored vectors × dimensions (1,000 vectors of 384 dimensions are 384,000).
const INLINE_DENSE_WORK: u64 = 1 << 20;
/// Keyword search: the postings of the query's terms.
const INLINE_SPARSE_POSTINGS: u64 = 1 << 15;
/// Keyword search: the chunks of the index (its score accumulator spans them).
const INLINE_SPARSE_SLOTS: u64 = 1 << 16;

#[async_trait]
impl VectorStore for EmbeddedStore {
    /// [`EmbeddedStore::scan`] in chunk id order; the cursor is the last id of the page.
    async fn scan(&self, ctx: &Ctx, cursor: Option<String>, limit: usize) -> Result<(Vec<Record>, Option<String>)> {
        ctx.check()?;
        let page = EmbeddedStore::scan(self, cursor, limit.max(1)).await?;
        let next = (page.len() >= limit.max(1)).then(|| page.last().map(|r| r.chunk.id.clone())).flatten();
        Ok((page, next))
    }

    async fn ensure_spaces(
        &self,
        _ctx: &Ctx,
        dense: Option<&EmbeddingSpec>,
        sparse: Option<&SparseSpec>,
    ) -> Result<()> {
        let inner = self.inner.clone();
        let (dense, sparse) = (dense.cloned(), sparse.cloned());
        blocking(move || inner.ensure_spaces(dense.as_ref(), sparse.as_ref())).await
    }

    async fn write(&self, ctx: &Ctx, batch: WriteBatch) -> Result<WriteReport> {
        let (inner, ctx) = (self.inner.clone(), ctx.clone());
        blocking(move || inner.write(&ctx, batch)).await
    }

    async fn get(&self, _ctx: &Ctx, ids: &[String]) -> Result<Vec<Option<Chunk>>> {
        if ids.len() <= INLINE_READS
            && let Ok(_state) = self.inner.state.try_read()
        {
            return self.inner.fetch(ids);
        }
        let (inner, ids) = (self.inner.clone(), ids.to_vec());
        blocking(move || {
            // Hold the read lock so a concurrent write is seen whole or not at all.
            let _state = inner.read();
            inner.fetch(&ids)
        })
        .await
    }

    async fn search(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
        self.search_with(ctx, requests, true).await
    }

    async fn search_without_text(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
        self.search_with(ctx, requests, false).await
    }

    async fn stats(&self, _ctx: &Ctx) -> Result<StoreStats> {
        Ok(self.inner.stats())
    }

    async fn ready(&self, _ctx: &Ctx) -> Result<()> {
        let inner = self.inner.clone();
        blocking(move || inner.ready()).await
    }

    async fn span_vectors(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Vec<SpanVector>>> {
        ctx.check()?;
        let (inner, ids) = (self.inner.clone(), ids.to_vec());
        blocking(move || {
            // Under the read lock, like `get`: a concurrent write is seen whole or not at all.
            let _state = inner.read();
            inner.span_vectors(&ids)
        })
        .await
    }
}
