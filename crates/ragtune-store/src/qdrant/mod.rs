//! [`QdrantStore`]: a [`VectorStore`] on a Qdrant server, over gRPC.
//!
//! Over 1,000 lines: every `VectorStore` method is here as its translation to Qdrant's gRPC requests and back
//! (spaces and the collection schema, writes with their payload indexes, dense, sparse and hybrid search, scan,
//! stats); the error, filter and payload conversions are in their own modules and the tests in `tests.rs`. The next
//! split is the schema (`ensure_spaces`, `parse_schema`) and search into modules of their own (issue 45).

mod error;
mod filter;
mod payload;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{StreamExt as _, TryStreamExt as _};
use qdrant_client::qdrant::{
    CollectionInfo, CountPoints, CreateCollection, CreateFieldIndexCollection, CreateVectorNameRequest,
    DeleteCollection, DeletePoints, DenseVectorCreationConfig, Distance as QDistance, FacetCounts, FieldType,
    Filter as QFilter, GetCollectionInfoRequest, GetPoints, Modifier, PayloadIncludeSelector, PointId, PointStruct,
    PointsOperationResponse, PointsSelector, PrefetchQuery, Query, QueryBatchPoints, QueryPoints, ReadConsistency,
    ReadConsistencyType, RetrievedPoint, Rrf, ScoredPoint, SparseVectorConfig, SparseVectorCreationConfig,
    SparseVectorParams, UpdateCollection, UpdateStatus, Value, Vector, VectorInput, VectorParams, VectorParamsMap,
    Vectors, VectorsConfig, WithPayloadSelector, WriteOrdering, WriteOrderingType, create_vector_name_request,
    points_selector::PointsSelectorOneOf, read_consistency, vectors::VectorsOptions, vectors_config,
    with_payload_selector::SelectorOptions,
};
use qdrant_client::{Qdrant, QdrantError};
use ragtune_core::http::{RetryDecision, RetryPolicy};
use ragtune_core::{
    Chunk, Ctx, Distance, EmbeddingSpec, Error, ErrorKind, Filter, Record, Result, ScoredHit, SearchRequest,
    SparseSpec, SparseVector, StoreStats, TraceEvent, VectorQuery, VectorStore, WriteBatch, WriteReport, sort_ranked,
};
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use crate::qdrant_config::QdrantConfig;

use self::error::{Site, classify};
use self::filter::{Translated, keyword, translate};
use self::payload::{
    CHUNK_ID, DOC_ID, KIND, PARENT_ID, TEXT, chunk_from_payload, chunk_payload, json_to_value, payload_chunk_id,
    point_id, point_uuid, value_to_json,
};

/// The named dense vector of a ragtune collection.
const DENSE: &str = "dense";
/// The named sparse vector of a ragtune collection.
const SPARSE: &str = "sparse";
/// Collection metadata keys: the format stamp and the recorded spaces.
const FORMAT_KEY: &str = "ragtune_format";
const FORMAT: &str = "ragtune-qdrant/1";
const DENSE_SPEC_KEY: &str = "ragtune_dense_spec";
const SPARSE_SPEC_KEY: &str = "ragtune_sparse_spec";
/// Collection metadata key saying who computes the sparse IDF; `"client"`: this adapter, from exact counts.
/// Collections without it (made before) keep Qdrant's IDF modifier.
const IDF_KEY: &str = "ragtune_idf";
const CLIENT_IDF: &str = "client";
/// Payload field listing a chunk's sparse term ids (integer index), so that `n(t)` can be counted exactly.
const SPARSE_TERMS: &str = "sparse_terms";
/// Payload fields with a keyword index: deletes and filters by document, chunk, parent and kind use them, and
/// counting documents (a facet) needs the one on `doc_id`.
const INDEXED: [&str; 4] = [DOC_ID, CHUNK_ID, PARENT_ID, KIND];
/// The oldest Qdrant accepted: collection metadata (1.16) and parameterised RRF (1.16) are needed, and 1.17 is
/// the oldest release the adapter was written against.
const MIN_MINOR: u64 = 17;
/// Ids (or documents) per `get`, `count` and `delete` request.
const ID_BATCH: usize = 1024;
/// The most hits one search fetches to complete a group of tied scores at the `top_k` boundary.
const MAX_TIE_LIMIT: u64 = 100_000;
/// How long reads ask one replica rather than a majority after a replica failed a request.
const DEGRADED_READS: Duration = Duration::from_secs(10);
/// Term counts in flight at once while a sparse query's IDF is computed.
const IDF_CONCURRENCY: usize = 8;
/// How often an in-flight request checks the context's cancellation flag.
const CANCEL_POLL: Duration = Duration::from_millis(20);
/// The first retry waits this long; each further retry twice as long, up to [`MAX_BACKOFF`].
const BASE_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts, computed or asked for by the server.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The store's retry policy: [`BASE_BACKOFF`] doubling up to [`MAX_BACKOFF`] (a server's `retry-after` wins, up to
/// the same limit), no jitter, `max_retries` retries.
fn retry_policy(max_retries: u32) -> RetryPolicy {
    RetryPolicy { base: BASE_BACKOFF, max: MAX_BACKOFF, jitter: 0.0, max_retries, seed: 0 }
}

/// A [`VectorStore`] on a [Qdrant](https://qdrant.tech) server (1.17 or newer), over gRPC.
///
/// Layout: one collection per store, with a named dense vector `dense` (size and distance from the
/// [`EmbeddingSpec`]) and a named sparse vector `sparse` without modifier: when [`SparseSpec::idf`], the adapter
/// weights each sparse query by BM25's `ln(1 + (N - n + 0.5) / (n + 0.5))` from exact counts of the live points
/// (each chunk's term ids are also the payload field `sparse_terms`, with an integer index), as the embedded store
/// does; Qdrant's own IDF modifier counts deleted points until it optimizes, and per shard. Collections made
/// before this (without `ragtune_idf = "client"` in their metadata) keep the modifier.
/// The specs themselves are recorded in the collection's metadata (`ragtune_dense_spec`, `ragtune_sparse_spec`,
/// stamped `ragtune_format`); a collection without that stamp is refused rather than written into. Each chunk is
/// one point whose id is a UUID derived from the chunk id (Qdrant ids are integers or UUIDs) and whose payload
/// holds every chunk field (`chunk_id`, `doc_id`, `parent_id`, `kind`, `header_path`, `title`, `source`, `text`,
/// `position`, `metadata`), with keyword indexes on `doc_id`, `chunk_id`, `parent_id` and `kind`. Records without
/// vectors (parent sections) are points with no vector: fetchable, never searched.
///
/// The collection is created by the first [`ensure_spaces`](VectorStore::ensure_spaces) (or the first write),
/// not by [`connect`](Self::connect). A space added later (a dense model after a sparse-only start) is added to
/// the collection as a new named vector, which needs Qdrant 1.18 or newer.
///
/// Writes and atomicity: Qdrant has no transactions over several operations, so a [`WriteBatch`] is applied as
/// ordered operations: every record is validated first (an invalid batch changes nothing), then the records are
/// upserted (in requests of [`QdrantConfig::upsert_batch_size`] points, each waited for, strong ordering), then
/// the points of `delete_docs` that the batch did not just write are deleted. Upserting before deleting means an
/// interrupted write never loses a document; it leaves old and new chunks side by side, and retrying the batch
/// converges. Within one `QdrantStore` (and its clones) a batch is seen whole or not at all, because writes and
/// reads are serialised by a lock: reads run concurrently with each other, writes alone. A reader in another
/// process, or through another `QdrantStore` handle, can observe a batch in progress.
///
/// Search: one `query_batch` request answers every request of a [`search`](VectorStore::search) call. Hits are
/// sorted by descending score, ties by ascending chunk id, and the `top_k` cut is exact even when scores tie at
/// the boundary (the store asks for more hits until the tied group is complete). Scores are Qdrant's (cosine
/// similarity, dot product, or IDF-weighted sparse dot product). Dense search above Qdrant's indexing threshold is
/// approximate (HNSW), as the embedded store's is above its own.
///
/// Errors: unreachable server → [`ErrorKind::Unavailable`]; timeouts, overload and dropped connections →
/// [`ErrorKind::Transient`], retried [`QdrantConfig::max_retries`] times with exponential backoff first; refused
/// input → [`ErrorKind::InvalidInput`]; a rejected API key → [`ErrorKind::Permanent`]. Every request honours the
/// [`Ctx`]'s cancellation and deadline.
///
/// Cost model: a remote store; one call (one round trip) per request batch, more only when ties at the `top_k`
/// boundary need completing. Nothing is charged in the budget's token units.
#[derive(Clone, Debug)]
pub struct QdrantStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Qdrant,
    config: QdrantConfig,
    server_version: String,
    /// Serialises writes against reads of this handle and holds the cached schema (`None`: no collection, or not
    /// read yet). Reads take it shared, writes and schema changes exclusively. It is an async lock held across
    /// the requests of a write on purpose: that is what makes a batch whole to the readers of this handle.
    gate: RwLock<Option<Schema>>,
    /// Set when the server says the collection does not exist although the cache says it does (another process
    /// deleted it): the next read or write reads the schema again.
    stale: AtomicBool,
    /// When a replica last failed a request (a cluster node down): reads ask one replica for a while.
    replica_failed: std::sync::Mutex<Option<std::time::Instant>>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QdrantStore")
            .field("config", &self.config)
            .field("server_version", &self.server_version)
            .finish_non_exhaustive()
    }
}

/// What a ragtune collection holds, as read from its configuration and metadata.
#[derive(Debug, Clone, Default, PartialEq)]
struct Schema {
    /// The recorded dense space.
    dense: Option<EmbeddingSpec>,
    /// The recorded sparse space.
    sparse: Option<SparseSpec>,
    /// The configured `dense` vector (size, distance), recorded or not.
    dense_vector: Option<(u64, i32)>,
    /// The configured `sparse` vector (whether its scores carry the IDF), recorded or not.
    sparse_vector: Option<bool>,
    /// Payload fields with an index.
    indexed: BTreeSet<String>,
    /// Whether this adapter computes the sparse IDF from exact counts (the `ragtune_idf` metadata), rather than
    /// Qdrant's IDF modifier.
    client_idf: bool,
}

/// What a read needs from the cached schema before it can be answered from it.
#[derive(Debug, Clone, Copy, Default)]
struct Needs {
    dense: bool,
    sparse: bool,
}

impl Needs {
    fn met_by(self, schema: Option<&Schema>) -> bool {
        schema.is_some_and(|s| (!self.dense || s.dense.is_some()) && (!self.sparse || s.sparse.is_some()))
    }
}

impl QdrantStore {
    /// Connects to the server and checks that it answers and is recent enough. The collection is not created
    /// here (see [`ensure_spaces`](VectorStore::ensure_spaces)).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for an unusable configuration (URL scheme, empty collection name, zero batch
    /// size); [`ErrorKind::Unavailable`] when the server cannot be reached (the message names the URL);
    /// [`ErrorKind::Mismatch`] for a server older than 1.17; [`ErrorKind::Permanent`] for a rejected API key.
    pub async fn connect(config: QdrantConfig) -> Result<Self> {
        let mut config = config;
        if config.api_key.as_ref().is_some_and(|k| k.expose().is_empty()) {
            config.api_key = None;
        }
        if !(config.url.starts_with("http://") || config.url.starts_with("https://")) {
            return Err(Error::invalid_input(format!(
                "the Qdrant URL `{}` must start with http:// or https:// and name the gRPC port (usually 6334)",
                config.url
            )));
        }
        if config.collection.trim().is_empty() {
            return Err(Error::invalid_input("the Qdrant collection name is empty"));
        }
        if config.upsert_batch_size == 0 {
            return Err(Error::invalid_input("QdrantConfig::upsert_batch_size must be at least 1"));
        }
        if config.timeout.is_zero() || config.connect_timeout.is_zero() {
            return Err(Error::invalid_input("the Qdrant timeouts must be longer than zero"));
        }
        // Neither the compatibility check (it prints to stdout) nor the connection check (it blocks a thread) of
        // the client: the health check below does both, asynchronously.
        let client = qdrant_client::config::QdrantConfig::from_url(&config.url)
            .api_key(config.api_key.as_ref().map(|k| k.expose().to_owned()))
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            .skip_compatibility_check()
            .build()
            .map_err(|e| classify(e, site(&config), "setting up the client").into_error(1))?;
        let mut store = Inner {
            client,
            config,
            server_version: String::new(),
            gate: RwLock::new(None),
            stale: AtomicBool::new(false),
            replica_failed: std::sync::Mutex::new(None),
        };
        let health =
            store.call(&Ctx::new(), "checking the server (health check)", || store.client.health_check()).await?;
        check_version(&health.version, &store.config.url)?;
        store.server_version = health.version;
        Ok(Self { inner: Arc::new(store) })
    }

    /// The collection this store reads and writes.
    #[must_use]
    pub fn collection(&self) -> &str {
        &self.inner.config.collection
    }

    /// The server's version, as its health check reported it.
    #[must_use]
    pub fn server_version(&self) -> &str {
        &self.inner.server_version
    }

    /// One page of every record in the collection (chunk, dense and sparse vectors), in the server's point order,
    /// and the cursor of the next page (`None` after the last). Pass `None` for the first page. This is how a
    /// collection is copied out (`ragtune migrate --from-qdrant`); the sparse vectors come back as stored (BM25
    /// term weights, without the IDF the store applies at query time).
    ///
    /// # Errors
    /// Server failures; a point that is not a ragtune chunk ([`ErrorKind::Corrupt`]); a cursor that is not one this
    /// method returned ([`ErrorKind::InvalidInput`]).
    pub async fn scan(&self, ctx: &Ctx, cursor: Option<String>, limit: usize) -> Result<(Vec<Record>, Option<String>)> {
        use qdrant_client::qdrant::{
            ScrollPoints, WithVectorsSelector, point_id::PointIdOptions, vector_output, vectors_output,
            with_vectors_selector,
        };
        let inner = &self.inner;
        let _schema = inner.schema_for_read(ctx, Needs::default()).await?;
        let offset = match cursor {
            None => None,
            Some(c) if c.len() == 36 && c.chars().all(|ch| ch.is_ascii_hexdigit() || ch == '-') => {
                Some(PointId { point_id_options: Some(PointIdOptions::Uuid(c)) })
            }
            Some(c) => return Err(Error::invalid_input(format!("`{c}` is not a scan cursor of a Qdrant collection"))),
        };
        let request = ScrollPoints {
            collection_name: inner.config.collection.clone(),
            offset,
            limit: Some(u32::try_from(limit.clamp(1, 10_000)).unwrap_or(10_000)),
            with_payload: Some(payload_selector(Payload::Chunk)),
            with_vectors: Some(WithVectorsSelector {
                selector_options: Some(with_vectors_selector::SelectorOptions::Enable(true)),
            }),
            ..ScrollPoints::default()
        };
        let what = format!("reading the points of the collection `{}`", inner.config.collection);
        let attempt =
            || inner.client.scroll(ScrollPoints { read_consistency: inner.read_consistency(ctx), ..request.clone() });
        let response = match inner.call(ctx, &what, attempt).await {
            Ok(r) => r,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok((Vec::new(), None)),
            Err(e) => return Err(e),
        };
        let mut records = Vec::with_capacity(response.result.len());
        for point in response.result {
            let shown = point_name(point.id.as_ref());
            let chunk = chunk_from_payload(point.payload, &shown, true)?;
            let (mut dense, mut sparse) = (None, None);
            if let Some(vectors_output::VectorsOptions::Vectors(named)) = point.vectors.and_then(|v| v.vectors_options)
            {
                for (name, output) in named.vectors {
                    match (name.as_str(), output.vector) {
                        (DENSE, Some(vector_output::Vector::Dense(v))) => dense = Some(v.data),
                        (SPARSE, Some(vector_output::Vector::Sparse(v))) => {
                            sparse = Some(SparseVector { indices: v.indices, values: v.values });
                        }
                        (other, _) => {
                            return Err(Error::corrupt(format!(
                                "Qdrant point {shown} of `{}` has a vector `{other}` of an unexpected kind",
                                inner.config.collection
                            )));
                        }
                    }
                }
            }
            records.push(Record { chunk, dense, sparse, spans: Vec::new() });
        }
        let next = match response.next_page_offset.and_then(|p| p.point_id_options) {
            Some(PointIdOptions::Uuid(u)) => Some(u),
            Some(PointIdOptions::Num(n)) => {
                return Err(Error::corrupt(format!(
                    "the collection `{}` has a numeric point id ({n}): not a ragtune collection",
                    inner.config.collection
                )));
            }
            None => None,
        };
        Ok((records, next))
    }

    /// Deletes the collection, if it exists, with everything in it.
    ///
    /// # Errors
    /// Server failures.
    pub async fn drop_collection(&self) -> Result<()> {
        let inner = &*self.inner;
        let mut gate = inner.gate.write().await;
        let request = DeleteCollection { collection_name: inner.config.collection.clone(), timeout: None };
        let what = format!("deleting the collection `{}`", inner.config.collection);
        match inner.call(&Ctx::new(), &what, || inner.client.delete_collection(request.clone())).await {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        *gate = None;
        Ok(())
    }

    /// Server-side hybrid search: one Query API request with two prefetches (dense and sparse, each
    /// `prefetch_limit` deep, same filter) fused by Qdrant's reciprocal rank fusion; returns at most `top_k` hits
    /// sorted by (score descending, chunk id ascending).
    ///
    /// `rrf_k` has the meaning of ragtune's client-side fusion, where the hit at 1-based rank `r` contributes
    /// `1 / (rrf_k + r)`; Qdrant counts ranks from 0, so it is sent as `rrf_k + 1` and the fused scores are the
    /// same. `weights` (dense, sparse) use Qdrant's weighted RRF, whose formula differs from ragtune's
    /// `weight / (k + rank)` (Qdrant divides the rank by the weight), so weighted rankings can differ from
    /// client-side fusion. Ties inside one prefetch list are ordered by Qdrant, not by chunk id, which can also
    /// change fused scores where a list has exactly tied scores. An empty sparse query fuses the dense list alone.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for an invalid sparse vector, non-finite or negative weights, or a collection
    /// lacking one of the two spaces; [`ErrorKind::Mismatch`] for a dense vector of the wrong dimension; server
    /// failures.
    #[allow(clippy::too_many_arguments)]
    pub async fn hybrid_search(
        &self,
        ctx: &Ctx,
        dense: Vec<f32>,
        sparse: SparseVector,
        top_k: usize,
        prefetch_limit: usize,
        rrf_k: u32,
        weights: Option<(f32, f32)>,
        filter: Option<&Filter>,
    ) -> Result<Vec<ScoredHit>> {
        ctx.check()?;
        sparse.validate().map_err(|e| e.context("sparse query"))?;
        if dense.iter().any(|x| !x.is_finite()) {
            return Err(Error::invalid_input("the dense query has a non-finite value"));
        }
        if let Some((d, s)) = weights
            && !(d.is_finite() && s.is_finite() && d >= 0.0 && s >= 0.0)
        {
            return Err(Error::invalid_input(format!("RRF weights must be finite and >= 0, got ({d}, {s})")));
        }
        let inner = &*self.inner;
        let translated = filter.map(translate).transpose()?.unwrap_or(Translated::All);
        let guard = inner.schema_for_read(ctx, Needs { dense: true, sparse: true }).await?;
        let Some(schema) = guard.as_ref() else { return Ok(Vec::new()) };
        let (Some(spec), Some(_)) = (&schema.dense, &schema.sparse) else {
            return Err(Error::invalid_input(format!(
                "hybrid search needs a dense and a sparse space; the collection `{}` has {}",
                inner.config.collection,
                describe_spaces(schema)
            )));
        };
        if dense.len() != spec.dim {
            return Err(query_dim_mismatch(dense.len(), spec));
        }
        if top_k == 0 || prefetch_limit == 0 || matches!(translated, Translated::Nothing) {
            return Ok(Vec::new());
        }
        let filter = translated.into_filter();
        let prefetch = |query: Query, using: &str| PrefetchQuery {
            query: Some(query),
            using: Some(using.to_owned()),
            filter: filter.clone(),
            limit: Some(prefetch_limit as u64),
            ..PrefetchQuery::default()
        };
        let mut prefetches = vec![prefetch(Query::new_nearest(VectorInput::new_dense(dense)), DENSE)];
        let mut rrf_weights = weights.map(|(d, _)| vec![d]);
        if !sparse.is_empty() {
            let idf = if schema.client_idf && schema.sparse.as_ref().is_some_and(|s| s.idf) {
                inner.idf_weights(ctx, &sparse.indices.iter().copied().collect()).await?
            } else {
                HashMap::new()
            };
            let (indices, values) = Inner::weigh(&sparse, &idf);
            prefetches.push(prefetch(Query::new_nearest(VectorInput::new_sparse(indices, values)), SPARSE));
            if let (Some(w), Some((_, s))) = (rrf_weights.as_mut(), weights) {
                w.push(s);
            }
        }
        // The fused list holds at most every prefetched point, so asking for all of them makes the cut below exact
        // whatever the ties.
        let limit = top_k.max(prefetch_limit.saturating_mul(prefetches.len()));
        let request = QueryPoints {
            collection_name: inner.config.collection.clone(),
            prefetch: prefetches,
            query: Some(Query::new_rrf(Rrf {
                k: Some(rrf_k.saturating_add(1)),
                weights: rrf_weights.unwrap_or_default(),
            })),
            limit: Some(limit as u64),
            with_payload: Some(payload_selector(Payload::Chunk)),
            ..QueryPoints::default()
        };
        let what = format!("searching the collection `{}` (hybrid)", inner.config.collection);
        let attempt = || {
            let request = QueryPoints { read_consistency: inner.read_consistency(ctx), ..request.clone() };
            inner.client.query(request)
        };
        let response = match inner.call(ctx, &what, attempt).await {
            Ok(r) => r,
            // Deleted by another process since the schema was read: an empty store.
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut hits = response
            .result
            .into_iter()
            .map(|p| scored_chunk(p, &inner.config.collection))
            .collect::<Result<Vec<ScoredHit>>>()?;
        sort_ranked(&mut hits, |h| (h.score, h.chunk.id.as_str()));
        hits.truncate(top_k);
        Ok(hits)
    }
}

/// The site of requests for error messages.
fn site(config: &QdrantConfig) -> Site<'_> {
    Site { url: &config.url, timeout: config.timeout, connect_timeout: config.connect_timeout }
}

/// Accepts Qdrant 1.x with x >= [`MIN_MINOR`].
fn check_version(version: &str, url: &str) -> Result<()> {
    let mut parts = version.trim_start_matches('v').split('.').map(|p| {
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u64>().ok()
    });
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(1), Some(minor)) if minor >= MIN_MINOR => Ok(()),
        _ => Err(Error::mismatch(format!(
            "Qdrant at {url} is version `{version}`; ragtune's QdrantStore needs Qdrant 1.{MIN_MINOR} or a newer 1.x \
             release (collection metadata, parameterised RRF) — upgrade the server"
        ))),
    }
}

fn distance_name(d: Distance) -> &'static str {
    match d {
        Distance::Cosine => "cosine",
        Distance::Dot => "dot",
    }
}

fn qdrant_distance(d: Distance) -> i32 {
    match d {
        Distance::Cosine => QDistance::Cosine as i32,
        Distance::Dot => QDistance::Dot as i32,
    }
}

fn qdrant_distance_name(d: i32) -> String {
    QDistance::try_from(d).map_or_else(|_| format!("distance #{d}"), |d| d.as_str_name().to_lowercase())
}

fn describe_spaces(s: &Schema) -> String {
    match (&s.dense, &s.sparse) {
        (Some(_), Some(_)) => "both".to_owned(),
        (Some(_), None) => "only a dense space".to_owned(),
        (None, Some(_)) => "only a sparse space".to_owned(),
        (None, None) => "neither".to_owned(),
    }
}

fn query_dim_mismatch(got: usize, spec: &EmbeddingSpec) -> Error {
    Error::mismatch(format!(
        "the query vector has {got} dimensions; the store's space `{}` has {}",
        spec.model_id, spec.dim
    ))
}

/// Which part of a point's payload a read asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Payload {
    /// The whole chunk: everything but the term list, which only counting needs.
    Chunk,
    /// The chunk without its text (`VectorStore::search_without_text`).
    ChunkWithoutText,
    /// The chunk id alone.
    Id,
}

fn payload_selector(part: Payload) -> WithPayloadSelector {
    let exclude = |fields: &[&str]| {
        SelectorOptions::Exclude(qdrant_client::qdrant::PayloadExcludeSelector {
            fields: fields.iter().map(|f| (*f).to_owned()).collect(),
        })
    };
    let options = match part {
        Payload::Chunk => exclude(&[SPARSE_TERMS]),
        Payload::ChunkWithoutText => exclude(&[SPARSE_TERMS, TEXT]),
        Payload::Id => SelectorOptions::Include(PayloadIncludeSelector { fields: vec![CHUNK_ID.to_owned()] }),
    };
    WithPayloadSelector { selector_options: Some(options) }
}

fn filter_selector(filter: QFilter) -> PointsSelector {
    PointsSelector { points_selector_one_of: Some(PointsSelectorOneOf::Filter(filter)) }
}

/// The ordering of writes. On one node every ordering is the same. With replicas, `Strong` sends each write through
/// the shard's permanent leader, so a write fails while the node holding it is down; `Medium` goes through a leader
/// elected among the live replicas, so the cluster keeps accepting writes with a node down. ragtune's writes are
/// idempotent upserts by chunk id, so a change of leader cannot reorder them into a different result.
fn write_ordering(config: &QdrantConfig) -> Option<WriteOrdering> {
    let replicated = config.replication_factor.is_some_and(|r| r > 1);
    let ordering = if replicated { WriteOrderingType::Medium } else { WriteOrderingType::Strong };
    Some(WriteOrdering { r#type: ordering as i32 })
}

/// A point id for messages.
fn point_name(id: Option<&PointId>) -> String {
    use qdrant_client::qdrant::point_id::PointIdOptions;
    match id.and_then(|p| p.point_id_options.as_ref()) {
        Some(PointIdOptions::Uuid(u)) => u.clone(),
        Some(PointIdOptions::Num(n)) => n.to_string(),
        None => "(no id)".to_owned(),
    }
}

fn metadata_string(v: Option<&Value>) -> Option<String> {
    match value_to_json(v?.clone()).ok()? {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

/// Reads a collection's schema and checks that its vector configuration matches the recorded specs.
///
/// # Errors
/// [`ErrorKind::Mismatch`] for a collection not created by ragtune or whose vectors do not match its recorded
/// specs ("collection schema mismatch"); [`ErrorKind::Corrupt`] for unreadable recorded specs.
fn parse_schema(info: CollectionInfo, collection: &str) -> Result<Schema> {
    let config = info.config.unwrap_or_default();
    let metadata = config.metadata;
    check_format(&metadata, collection)?;
    let dense: Option<EmbeddingSpec> = spec(&metadata, DENSE_SPEC_KEY, collection)?;
    let sparse: Option<SparseSpec> = spec(&metadata, SPARSE_SPEC_KEY, collection)?;
    let params = config.params.unwrap_or_default();
    let dense_vector = match params.vectors_config.and_then(|c| c.config) {
        None => None,
        Some(vectors_config::Config::ParamsMap(map)) => map.map.get(DENSE).map(|p| (p.size, p.distance)),
        Some(vectors_config::Config::Params(_)) => {
            return Err(Error::mismatch(format!(
                "collection schema mismatch: the collection `{collection}` has a single unnamed vector; ragtune's \
                 collections have named vectors `{DENSE}` and `{SPARSE}`"
            )));
        }
    };
    let client_idf = metadata_string(metadata.get(IDF_KEY)).as_deref() == Some(CLIENT_IDF);
    let modifier = params.sparse_vectors_config.and_then(|c| c.map.get(SPARSE).map(|p| p.modifier));
    // `sparse_vector` says whether the collection's sparse scores carry the IDF. With client-side IDF the vector
    // has no modifier and the IDF follows the recorded spec (a vector without one takes any).
    let sparse_vector = match modifier {
        None => None,
        Some(m) if client_idf => {
            if m.is_some_and(|m| m == Modifier::Idf as i32) {
                return Err(Error::mismatch(format!(
                    "collection schema mismatch: the collection `{collection}` computes the IDF in ragtune but its \
                     `{SPARSE}` vector has Qdrant's IDF modifier too"
                )));
            }
            Some(sparse.as_ref().is_none_or(|s| s.idf))
        }
        Some(m) => Some(m == Some(Modifier::Idf as i32)),
    };
    check_vectors(collection, dense.as_ref(), sparse.as_ref(), dense_vector, sparse_vector)?;
    Ok(Schema {
        dense,
        sparse,
        dense_vector,
        sparse_vector,
        indexed: info.payload_schema.into_keys().collect(),
        client_idf,
    })
}

/// Refuses a collection that ragtune did not create, or of another ragtune format.
fn check_format(metadata: &HashMap<String, Value>, collection: &str) -> Result<()> {
    match metadata_string(metadata.get(FORMAT_KEY)).as_deref() {
        Some(FORMAT) => {}
        Some(other) => {
            return Err(Error::mismatch(format!(
                "the collection `{collection}` has the ragtune format `{other}`; this ragtune reads `{FORMAT}`"
            )));
        }
        None => {
            return Err(Error::mismatch(format!(
                "the collection `{collection}` exists but was not created by ragtune (its metadata has no \
                 `{FORMAT_KEY}`); use another collection name or delete it"
            )));
        }
    }
    Ok(())
}

/// A space recorded in the collection's metadata under `key`, if there is one.
fn spec<T: serde::de::DeserializeOwned>(
    metadata: &HashMap<String, Value>,
    key: &str,
    collection: &str,
) -> Result<Option<T>> {
    let Some(v) = metadata.get(key) else { return Ok(None) };
    let json = value_to_json(v.clone()).ok().and_then(|j| serde_json::from_value(j).ok()).ok_or_else(|| {
        Error::corrupt(format!("the collection `{collection}` has an unreadable `{key}` in its metadata"))
    })?;
    Ok(Some(json))
}

/// Refuses a collection whose vectors do not match the spaces it records: the `dense` vector's size and distance,
/// the `sparse` vector's IDF.
fn check_vectors(
    collection: &str,
    dense: Option<&EmbeddingSpec>,
    sparse: Option<&SparseSpec>,
    dense_vector: Option<(u64, i32)>,
    sparse_vector: Option<bool>,
) -> Result<()> {
    if let Some(spec) = dense {
        let want = (spec.dim as u64, qdrant_distance(spec.distance));
        match dense_vector {
            None => {
                return Err(Error::mismatch(format!(
                    "collection schema mismatch: the collection `{collection}` records dense vectors of `{}` but has \
                     no `{DENSE}` vector",
                    spec.model_id
                )));
            }
            Some(have) if have != want => {
                return Err(Error::mismatch(format!(
                    "collection schema mismatch: the collection `{collection}` records dense vectors of `{}` ({} \
                     dimensions, {}) but its `{DENSE}` vector has {} dimensions, {}",
                    spec.model_id,
                    spec.dim,
                    distance_name(spec.distance),
                    have.0,
                    qdrant_distance_name(have.1)
                )));
            }
            Some(_) => {}
        }
    }
    if let Some(spec) = sparse {
        match sparse_vector {
            None => {
                return Err(Error::mismatch(format!(
                    "collection schema mismatch: the collection `{collection}` records sparse vectors of `{}` but \
                     has no `{SPARSE}` vector",
                    spec.encoder_id
                )));
            }
            Some(idf) if idf != spec.idf => {
                return Err(Error::mismatch(format!(
                    "collection schema mismatch: the collection `{collection}` records sparse vectors of `{}` {} the \
                     IDF modifier, but its `{SPARSE}` vector is configured {} it",
                    spec.encoder_id,
                    if spec.idf { "with" } else { "without" },
                    if idf { "with" } else { "without" }
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A scored point as a hit.
fn scored_chunk(p: ScoredPoint, collection: &str) -> Result<ScoredHit> {
    let score = p.score;
    let chunk = chunk_from_payload(p.payload, &PointName(p.id.as_ref(), collection), true)?;
    Ok(ScoredHit { chunk, score })
}

/// Names a point in error messages.
struct PointName<'a>(Option<&'a PointId>, &'a str);

impl fmt::Display for PointName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.and_then(|id| id.point_id_options.as_ref()) {
            Some(qdrant_client::qdrant::point_id::PointIdOptions::Uuid(u)) => write!(f, "{u} in `{}`", self.1),
            Some(qdrant_client::qdrant::point_id::PointIdOptions::Num(n)) => write!(f, "{n} in `{}`", self.1),
            None => write!(f, "(no id) in `{}`", self.1),
        }
    }
}

/// Waits until the context is cancelled (never, if it is not).
async fn cancelled(ctx: &Ctx) {
    while !ctx.cancel.is_cancelled() {
        tokio::time::sleep(CANCEL_POLL).await;
    }
}

/// Waits until the context's deadline (never, without one).
async fn deadline(ctx: &Ctx) {
    match ctx.deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

impl Inner {
    /// Runs one request with retries of transient failures, honouring the context's cancellation and deadline.
    async fn call<T, F, Fut>(&self, ctx: &Ctx, what: &str, f: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, QdrantError>>,
    {
        let policy = retry_policy(self.config.max_retries);
        let mut attempt: u32 = 0;
        let mut last_failure: Option<String> = None;
        loop {
            ctx.check()?;
            attempt += 1;
            let outcome = tokio::select! {
                r = f() => r,
                () = cancelled(ctx) => return Err(Error::new(ErrorKind::Cancelled, "the request was cancelled")),
                () = deadline(ctx) => {
                    return Err(Error::new(ErrorKind::DeadlineExceeded, format!("the request's deadline passed while {what}")));
                }
            };
            let failure = match outcome {
                Ok(v) => {
                    if let Some(error) = last_failure {
                        // A request that needed retries answered late: degraded, and said so in the trace.
                        ctx.trace(
                            TraceEvent::new("store", "retried")
                                .detail("request", what)
                                .detail("attempts", attempt)
                                .detail("last_error", error)
                                .detail("url", self.config.url.as_str()),
                        );
                    }
                    return Ok(v);
                }
                Err(e) => classify(e, site(&self.config), what),
            };
            last_failure = Some(failure.message.clone());
            if failure.replica_down
                && let Ok(mut since) = self.replica_failed.lock()
            {
                *since = Some(std::time::Instant::now());
            }
            if failure.kind == ErrorKind::NotFound {
                self.stale.store(true, Ordering::Release);
            }
            // No jitter, so the draw does not matter.
            let decision = policy.decide_for(ctx, attempt - 1, failure.kind, failure.retry_after, 0.5);
            let RetryDecision::Wait { wait, .. } = decision else {
                return Err(failure.into_error(attempt));
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = cancelled(ctx) => return Err(Error::new(ErrorKind::Cancelled, "the request was cancelled")),
            }
        }
    }

    /// Whether the cached schema can answer a request with these needs.
    fn fresh(&self, needs: Needs, schema: Option<&Schema>) -> bool {
        !self.stale.load(Ordering::Acquire) && needs.met_by(schema)
    }

    /// The consistency of a read. With replicas, a read after a write must reach one that has applied it, so
    /// reads ask a majority; but a majority of two replicas is both, and a node that is down would fail every read.
    /// For [`DEGRADED_READS`] after a replica failed, reads ask one replica instead, and each such read says so in
    /// the trace (`store` / `degraded`).
    fn read_consistency(&self, ctx: &Ctx) -> Option<ReadConsistency> {
        self.config.replication_factor.filter(|&r| r > 1)?;
        let since = self.replica_failed.lock().map_or(None, |t| *t);
        if let Some(since) = since.filter(|t| t.elapsed() < DEGRADED_READS) {
            ctx.trace(
                TraceEvent::new("store", "degraded")
                    .detail("reason", "a replica was unreachable: reading from one replica instead of a majority")
                    .detail("url", self.config.url.as_str())
                    .detail("since_ms", u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)),
            );
            return Some(ReadConsistency { value: Some(read_consistency::Value::Factor(1)) });
        }
        Some(ReadConsistency { value: Some(read_consistency::Value::Type(ReadConsistencyType::Majority as i32)) })
    }

    fn collection(&self) -> &str {
        &self.config.collection
    }

    /// Reads the collection's schema from the server; `None` when the collection does not exist.
    async fn load_schema(&self, ctx: &Ctx) -> Result<Option<Schema>> {
        let request = GetCollectionInfoRequest { collection_name: self.config.collection.clone() };
        let what = format!("reading the collection `{}`", self.collection());
        match self.call(ctx, &what, || self.client.collection_info(request.clone())).await {
            Ok(response) => {
                let info = response.result.ok_or_else(|| {
                    Error::corrupt(format!(
                        "Qdrant at {} returned no information about `{}`",
                        self.config.url,
                        self.collection()
                    ))
                })?;
                let schema = parse_schema(info, self.collection())?;
                self.stale.store(false, Ordering::Release);
                Ok(Some(schema))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The schema for a read, from the cache when it can answer; otherwise read again (a collection created or
    /// extended by another process since is then seen).
    async fn schema_for_read(&self, ctx: &Ctx, needs: Needs) -> Result<RwLockReadGuard<'_, Option<Schema>>> {
        {
            let gate = self.gate.read().await;
            if self.fresh(needs, gate.as_ref()) {
                return Ok(gate);
            }
        }
        let mut gate = self.gate.write().await;
        if !self.fresh(needs, gate.as_ref()) {
            *gate = self.load_schema(ctx).await?;
        }
        Ok(RwLockWriteGuard::downgrade(gate))
    }

    async fn ensure_spaces(&self, ctx: &Ctx, dense: Option<&EmbeddingSpec>, sparse: Option<&SparseSpec>) -> Result<()> {
        ctx.check()?;
        if dense.is_some_and(|d| d.dim == 0) {
            return Err(Error::invalid_input("a dense space needs a dimension > 0"));
        }
        let mut gate = self.gate.write().await;
        // Always read afresh: another process may have created or extended the collection.
        let mut current = self.load_schema(ctx).await?;
        if current.is_none() {
            if dense.is_none() && sparse.is_none() {
                *gate = None;
                return Ok(());
            }
            current = Some(self.create_collection(ctx, dense, sparse).await?);
        }
        let mut schema = current.expect("invariant: the collection exists or was just created");
        // Refuse before changing anything.
        self.refuse_mismatch(&schema, dense, sparse)?;
        let add_dense = dense.filter(|_| schema.dense.is_none());
        let add_sparse = sparse.filter(|_| schema.sparse.is_none());
        // Add what is missing: first the vectors (when absent), then the record of the specs, so that an
        // interruption leaves a vector without a recorded spec, which the next call completes.
        if let Some(want) = add_dense.filter(|_| schema.dense_vector.is_none()) {
            let config = create_vector_name_request::VectorConfig::DenseConfig(DenseVectorCreationConfig {
                size: want.dim as u64,
                distance: qdrant_distance(want.distance),
                multivector_config: None,
                datatype: None,
            });
            self.add_vector(ctx, DENSE, config).await?;
            schema.dense_vector = Some((want.dim as u64, qdrant_distance(want.distance)));
        }
        if let Some(want) = add_sparse.filter(|_| schema.sparse_vector.is_none()) {
            let config = create_vector_name_request::VectorConfig::SparseConfig(SparseVectorCreationConfig {
                modifier: (want.idf && !schema.client_idf).then_some(Modifier::Idf as i32),
                datatype: None,
            });
            self.add_vector(ctx, SPARSE, config).await?;
            schema.sparse_vector = Some(want.idf);
        }
        if add_dense.is_some() || add_sparse.is_some() {
            let metadata = spec_metadata(add_dense, add_sparse)?;
            let request = UpdateCollection {
                collection_name: self.config.collection.clone(),
                metadata,
                ..UpdateCollection::default()
            };
            let what = format!("recording the spaces of the collection `{}`", self.collection());
            self.call(ctx, &what, || self.client.update_collection(request.clone())).await?;
            schema.dense = schema.dense.or_else(|| add_dense.cloned());
            schema.sparse = schema.sparse.or_else(|| add_sparse.cloned());
        }
        self.ensure_indexes(ctx, &mut schema).await?;
        *gate = Some(schema);
        Ok(())
    }

    /// Refuses spaces the collection cannot take: other recorded spaces, or vectors of another size, distance or
    /// IDF than the new spaces need.
    fn refuse_mismatch(
        &self,
        schema: &Schema,
        dense: Option<&EmbeddingSpec>,
        sparse: Option<&SparseSpec>,
    ) -> Result<()> {
        if let (Some(want), Some(have)) = (dense, &schema.dense)
            && want != have
        {
            return Err(Error::mismatch(format!(
                "the collection `{}` on Qdrant at {} holds dense vectors of `{}` ({} dimensions, {}); refusing `{}` \
                 ({} dimensions, {}) — use another collection or delete this one and re-index",
                self.collection(),
                self.config.url,
                have.model_id,
                have.dim,
                distance_name(have.distance),
                want.model_id,
                want.dim,
                distance_name(want.distance)
            )));
        }
        if let (Some(want), Some(have)) = (sparse, &schema.sparse)
            && want != have
        {
            return Err(Error::mismatch(format!(
                "the collection `{}` on Qdrant at {} holds sparse vectors of `{}`; refusing `{}` — use another \
                 collection or delete this one and re-index",
                self.collection(),
                self.config.url,
                have.encoder_id,
                want.encoder_id
            )));
        }
        let add_dense = dense.filter(|_| schema.dense.is_none());
        let add_sparse = sparse.filter(|_| schema.sparse.is_none());
        if let (Some(want), Some(have)) = (add_dense, schema.dense_vector)
            && have != (want.dim as u64, qdrant_distance(want.distance))
        {
            return Err(Error::mismatch(format!(
                "collection schema mismatch: the collection `{}` has a `{DENSE}` vector of {} dimensions, {}; \
                 refusing `{}` ({} dimensions, {})",
                self.collection(),
                have.0,
                qdrant_distance_name(have.1),
                want.model_id,
                want.dim,
                distance_name(want.distance)
            )));
        }
        if let (Some(want), Some(idf)) = (add_sparse, schema.sparse_vector)
            && !schema.client_idf
            && idf != want.idf
        {
            return Err(Error::mismatch(format!(
                "collection schema mismatch: the collection `{}` has a `{SPARSE}` vector {} the IDF modifier; \
                 refusing `{}`, which needs it {}",
                self.collection(),
                if idf { "with" } else { "without" },
                want.encoder_id,
                if want.idf { "on" } else { "off" }
            )));
        }
        Ok(())
    }

    /// Adds a named vector to the existing collection (Qdrant 1.18 or newer).
    async fn add_vector(&self, ctx: &Ctx, name: &str, config: create_vector_name_request::VectorConfig) -> Result<()> {
        let request = CreateVectorNameRequest {
            collection_name: self.config.collection.clone(),
            wait: Some(true),
            vector_name: name.to_owned(),
            timeout: None,
            ordering: write_ordering(&self.config),
            vector_config: Some(config),
        };
        let what = format!("adding the vector `{name}` to the collection `{}`", self.collection());
        match self.call(ctx, &what, || self.client.create_vector_name(request.clone())).await {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.kind(), ErrorKind::Permanent | ErrorKind::InvalidInput | ErrorKind::NotFound) => {
                Err(Error::mismatch(format!(
                    "the collection `{}` was created without a `{name}` vector and Qdrant {} at {} could not add one \
                     ({}); adding a vector to an existing collection needs Qdrant 1.18 or newer — otherwise delete \
                     the collection and re-index with both spaces",
                    self.collection(),
                    self.server_version,
                    self.config.url,
                    e.message()
                ))
                .with_source(e))
            }
            Err(e) => Err(e),
        }
    }

    /// Creates the collection with the vectors of the given spaces, records them, and indexes the payload.
    async fn create_collection(
        &self,
        ctx: &Ctx,
        dense: Option<&EmbeddingSpec>,
        sparse: Option<&SparseSpec>,
    ) -> Result<Schema> {
        let mut vectors = HashMap::new();
        if let Some(d) = dense {
            vectors.insert(
                DENSE.to_owned(),
                VectorParams { size: d.dim as u64, distance: qdrant_distance(d.distance), ..VectorParams::default() },
            );
        }
        let sparse_vectors_config = sparse.map(|_| SparseVectorConfig {
            map: HashMap::from([(
                SPARSE.to_owned(),
                // The IDF is computed by this adapter from exact counts (see `idf_weights`), not by the server.
                SparseVectorParams { index: None, modifier: None },
            )]),
        });
        let mut metadata = spec_metadata(dense, sparse)?;
        metadata.insert(FORMAT_KEY.to_owned(), payload::string(FORMAT));
        metadata.insert(IDF_KEY.to_owned(), payload::string(CLIENT_IDF));
        // `on_disk_payload` is deprecated in favour of `payload.memory`, which servers before 1.20 do not know;
        // every server this adapter supports understands the old flag.
        #[allow(deprecated)]
        let request = CreateCollection {
            collection_name: self.config.collection.clone(),
            shard_number: self.config.shard_number,
            replication_factor: self.config.replication_factor,
            write_consistency_factor: self.config.write_consistency_factor,
            on_disk_payload: Some(self.config.on_disk_payload),
            // Named vectors even when there are none yet, so that spaces can be added by name later.
            vectors_config: Some(VectorsConfig {
                config: Some(vectors_config::Config::ParamsMap(VectorParamsMap { map: vectors })),
            }),
            sparse_vectors_config,
            metadata,
            ..CreateCollection::default()
        };
        let what = format!("creating the collection `{}`", self.collection());
        if let Err(e) = self.call(ctx, &what, || self.client.create_collection(request.clone())).await {
            // Another process may have created it in the meantime; then check that one instead.
            return match self.load_schema(ctx).await? {
                Some(schema) => Ok(schema),
                None => Err(e),
            };
        }
        let mut schema = Schema {
            dense: dense.cloned(),
            sparse: sparse.cloned(),
            dense_vector: dense.map(|d| (d.dim as u64, qdrant_distance(d.distance))),
            sparse_vector: sparse.map(|s| s.idf),
            indexed: BTreeSet::new(),
            client_idf: true,
        };
        self.ensure_indexes(ctx, &mut schema).await?;
        Ok(schema)
    }

    /// Creates the keyword payload indexes that are missing.
    async fn ensure_indexes(&self, ctx: &Ctx, schema: &mut Schema) -> Result<()> {
        for field in INDEXED {
            if schema.indexed.contains(field) {
                continue;
            }
            let request = CreateFieldIndexCollection {
                collection_name: self.config.collection.clone(),
                wait: Some(true),
                field_name: field.to_owned(),
                field_type: Some(FieldType::Keyword as i32),
                field_index_params: None,
                ordering: write_ordering(&self.config),
                timeout: None,
            };
            let what = format!("indexing the payload field `{field}` of the collection `{}`", self.collection());
            self.call(ctx, &what, || self.client.create_field_index(request.clone())).await?;
            schema.indexed.insert(field.to_owned());
        }
        if schema.client_idf && !schema.indexed.contains(SPARSE_TERMS) {
            let request = CreateFieldIndexCollection {
                collection_name: self.config.collection.clone(),
                wait: Some(true),
                field_name: SPARSE_TERMS.to_owned(),
                field_type: Some(FieldType::Integer as i32),
                field_index_params: None,
                ordering: write_ordering(&self.config),
                timeout: None,
            };
            let what = format!("indexing the payload field `{SPARSE_TERMS}` of the collection `{}`", self.collection());
            self.call(ctx, &what, || self.client.create_field_index(request.clone())).await?;
            schema.indexed.insert(SPARSE_TERMS.to_owned());
        }
        Ok(())
    }

    /// The IDF of each term, `ln(1 + (N - n + 0.5) / (n + 0.5))` with `N` the chunks that have a sparse vector and
    /// `n` those holding the term, from exact counts of the live points. Qdrant's own IDF modifier counts deleted
    /// points until its optimizer rewrites their segment, and each shard counts only its own points; exact
    /// counts give the embedded store's scores in both cases.
    async fn idf_weights(&self, ctx: &Ctx, terms: &BTreeSet<u32>) -> Result<HashMap<u32, f32>> {
        if terms.is_empty() {
            return Ok(HashMap::new());
        }
        let total =
            self.count(ctx, Some(QFilter::must([qdrant_client::qdrant::Condition::has_vector(SPARSE)]))).await?;
        // One exact count per term, a few in flight at once: a query's terms cost one round trip's latency per
        // `IDF_CONCURRENCY` terms rather than one per term.
        let counts = futures_util::stream::iter(terms.iter().copied())
            .map(|term| async move {
                let filter = QFilter::must([qdrant_client::qdrant::Condition::matches(SPARSE_TERMS, i64::from(term))]);
                self.count(ctx, Some(filter)).await.map(|n| (term, n))
            })
            .buffer_unordered(IDF_CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(counts
            .into_iter()
            .map(|(term, with_term)| {
                let with_term = with_term as f64;
                let idf = (1.0 + (total as f64 - with_term + 0.5) / (with_term + 0.5)).ln();
                (term, idf as f32)
            })
            .collect())
    }

    /// The sparse query as sent: weighted by the IDF when this adapter computes it.
    fn weigh(q: &SparseVector, weights: &HashMap<u32, f32>) -> (Vec<u32>, Vec<f32>) {
        let values = q.indices.iter().zip(&q.values).map(|(t, v)| v * weights.get(t).copied().unwrap_or(1.0)).collect();
        (q.indices.clone(), values)
    }

    /// Validates the records against the schema and builds their points. Nothing is sent.
    fn prepare(&self, schema: Option<&Schema>, records: &[&Record]) -> Result<Vec<PointStruct>> {
        let mut points = Vec::with_capacity(records.len());
        for r in records {
            let id = &r.chunk.id;
            crate::record::check_record(
                r,
                schema.and_then(|s| s.dense.as_ref()),
                schema.is_some_and(|s| s.sparse.is_some()),
            )?;
            let mut vectors = HashMap::new();
            if let Some(v) = &r.sparse {
                vectors.insert(SPARSE.to_owned(), Vector::new_sparse(v.indices.clone(), v.values.clone()));
            }
            if let Some(v) = &r.dense {
                vectors.insert(DENSE.to_owned(), Vector::new_dense(v.clone()));
            }
            let mut payload = chunk_payload(&r.chunk)?;
            if let Some(v) = r.sparse.as_ref().filter(|_| schema.is_some_and(|s| s.client_idf)) {
                let terms: Vec<Value> = v.indices.iter().map(|&t| Value::from(i64::from(t))).collect();
                payload.insert(SPARSE_TERMS.to_owned(), Value::from(terms));
            }
            points.push(PointStruct {
                id: Some(point_id(id)),
                payload,
                // A point without vectors still needs an (empty) map of named vectors: the server refuses `None`.
                vectors: Some(Vectors {
                    vectors_options: Some(VectorsOptions::Vectors(qdrant_client::qdrant::NamedVectors { vectors })),
                }),
            });
        }
        Ok(points)
    }

    async fn write(&self, ctx: &Ctx, batch: WriteBatch) -> Result<WriteReport> {
        ctx.check()?;
        let mut gate = self.gate.write().await;
        // Later records with the same id replace earlier ones in the same batch.
        let mut last: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, r) in batch.upsert.iter().enumerate() {
            last.insert(r.chunk.id.as_str(), i);
        }
        let records: Vec<&Record> = last.values().map(|&i| &batch.upsert[i]).collect();
        let delete_docs: Vec<&str> =
            batch.delete_docs.iter().map(String::as_str).collect::<BTreeSet<_>>().into_iter().collect();
        let needs = Needs {
            dense: batch.upsert.iter().any(|r| r.dense.is_some()),
            sparse: batch.upsert.iter().any(|r| r.sparse.is_some()),
        };
        if !self.fresh(needs, gate.as_ref()) {
            *gate = self.load_schema(ctx).await?;
        }
        // Every record is validated, replaced duplicates too; only the last of each id is sent.
        let all: Vec<&Record> = batch.upsert.iter().collect();
        let mut prepared: Vec<Option<PointStruct>> = self.prepare(gate.as_ref(), &all)?.into_iter().map(Some).collect();
        let points: Vec<PointStruct> = last.values().filter_map(|&i| prepared[i].take()).collect();
        if records.is_empty() && delete_docs.is_empty() {
            return Ok(WriteReport::default());
        }
        if gate.is_none() {
            if records.is_empty() {
                // No collection: nothing to delete.
                return Ok(WriteReport::default());
            }
            // Records without vectors may be written before any space is fixed; they need a collection.
            *gate = Some(self.create_collection(ctx, None, None).await?);
        }

        // What the batch replaces and removes, counted before anything changes, as the embedded store counts it:
        // every chunk of a deleted document, plus every existing chunk the batch overwrites outside those.
        let removed = self.count_docs(ctx, &delete_docs).await?;
        let doomed: HashSet<&str> = delete_docs.iter().copied().collect();
        let ids: Vec<&str> = last.keys().copied().collect();
        let existing = self.existing_docs(ctx, &ids).await?;
        let replaced = existing.values().filter(|doc| !doomed.contains(doc.as_str())).count() as u64;

        let total = points.len();
        let mut done = 0;
        let mut points = points.into_iter();
        while done < total {
            let chunk: Vec<PointStruct> = points.by_ref().take(self.config.upsert_batch_size).collect();
            done += chunk.len();
            let request = qdrant_client::qdrant::UpsertPoints {
                collection_name: self.config.collection.clone(),
                wait: Some(true),
                points: chunk,
                ordering: write_ordering(&self.config),
                ..Default::default()
            };
            let what = format!("upserting {} points into the collection `{}`", request.points.len(), self.collection());
            let response = self.call(ctx, &what, || self.client.upsert_points(request.clone())).await?;
            self.confirm(&response, &what)?;
        }

        if removed > 0 {
            // Only chunks the batch did not just write go: after the upserts, a point of a deleted document that
            // survives must be one of this batch's records of that document.
            for group in delete_docs.chunks(ID_BATCH) {
                let group_set: HashSet<&str> = group.iter().copied().collect();
                let keep: Vec<PointId> = records
                    .iter()
                    .filter(|r| group_set.contains(r.chunk.doc_id.as_str()))
                    .map(|r| point_id(&r.chunk.id))
                    .collect();
                let mut filter = QFilter::must([docs_condition(group)]);
                if !keep.is_empty() {
                    filter.must_not.push(qdrant_client::qdrant::Condition::has_id(keep));
                }
                let request = DeletePoints {
                    collection_name: self.config.collection.clone(),
                    wait: Some(true),
                    points: Some(filter_selector(filter)),
                    ordering: write_ordering(&self.config),
                    ..DeletePoints::default()
                };
                let what = format!(
                    "deleting the chunks of {} documents from the collection `{}`",
                    group.len(),
                    self.collection()
                );
                let response = self.call(ctx, &what, || self.client.delete_points(request.clone())).await?;
                self.confirm(&response, &what)?;
            }
        }
        Ok(WriteReport { upserted: records.len() as u64, deleted: removed + replaced })
    }

    /// Checks that a waited-for write was applied.
    fn confirm(&self, response: &PointsOperationResponse, what: &str) -> Result<()> {
        let status = response.result.as_ref().map(|r| r.status);
        if status == Some(UpdateStatus::Completed as i32) {
            return Ok(());
        }
        let name = status
            .and_then(|s| UpdateStatus::try_from(s).ok())
            .map_or_else(|| "no status".to_owned(), |s| s.as_str_name().to_owned());
        Err(Error::transient(format!(
            "Qdrant at {} did not confirm {what} ({name}); the write is idempotent, retry it",
            self.config.url
        )))
    }

    /// How many chunks the documents hold (exact).
    async fn count_docs(&self, ctx: &Ctx, docs: &[&str]) -> Result<u64> {
        let mut total = 0;
        for group in docs.chunks(ID_BATCH) {
            total += self.count(ctx, Some(QFilter::must([docs_condition(group)]))).await?;
        }
        Ok(total)
    }

    /// An exact count of the points matching the filter.
    async fn count(&self, ctx: &Ctx, filter: Option<QFilter>) -> Result<u64> {
        let request = CountPoints {
            collection_name: self.config.collection.clone(),
            filter,
            exact: Some(true),
            ..CountPoints::default()
        };
        let what = format!("counting points of the collection `{}`", self.collection());
        let attempt =
            || self.client.count(CountPoints { read_consistency: self.read_consistency(ctx), ..request.clone() });
        let response = self.call(ctx, &what, attempt).await?;
        Ok(response.result.map_or(0, |r| r.count))
    }

    /// The stored document of each of the chunk ids that exist.
    async fn existing_docs(&self, ctx: &Ctx, ids: &[&str]) -> Result<HashMap<String, String>> {
        let mut out = HashMap::new();
        for group in ids.chunks(ID_BATCH) {
            let points = self.retrieve(ctx, group, Some(&[CHUNK_ID, DOC_ID])).await?;
            for p in points {
                let Some(chunk_id) = payload_chunk_id(&p.payload).map(str::to_owned) else { continue };
                let doc = match p.payload.get(DOC_ID).and_then(|v| v.kind.clone()) {
                    Some(qdrant_client::qdrant::value::Kind::StringValue(d)) => d,
                    _ => String::new(),
                };
                out.insert(chunk_id, doc);
            }
        }
        Ok(out)
    }

    /// Fetches points by chunk id, with the whole payload or only the given fields.
    async fn retrieve(&self, ctx: &Ctx, ids: &[&str], fields: Option<&[&str]>) -> Result<Vec<RetrievedPoint>> {
        let with_payload = match fields {
            None => payload_selector(Payload::Chunk),
            Some(fields) => WithPayloadSelector {
                selector_options: Some(SelectorOptions::Include(PayloadIncludeSelector {
                    fields: fields.iter().map(|f| (*f).to_owned()).collect(),
                })),
            },
        };
        let request = GetPoints {
            collection_name: self.config.collection.clone(),
            ids: ids.iter().map(|id| point_id(id)).collect(),
            with_payload: Some(with_payload),
            ..GetPoints::default()
        };
        let what = format!("fetching {} points of the collection `{}`", ids.len(), self.collection());
        let attempt =
            || self.client.get_points(GetPoints { read_consistency: self.read_consistency(ctx), ..request.clone() });
        Ok(self.call(ctx, &what, attempt).await?.result)
    }

    /// Fetches whole chunks by id; the payload's chunk id must be the requested one.
    async fn fetch(&self, ctx: &Ctx, ids: &[&str]) -> Result<HashMap<String, Chunk>> {
        let mut out = HashMap::with_capacity(ids.len());
        for group in ids.chunks(ID_BATCH) {
            let wanted: HashMap<String, &str> = group.iter().map(|id| (point_uuid(id), *id)).collect();
            for p in self.retrieve(ctx, group, None).await? {
                let uuid = match p.id.as_ref().and_then(|i| i.point_id_options.as_ref()) {
                    Some(qdrant_client::qdrant::point_id::PointIdOptions::Uuid(u)) => u.to_lowercase(),
                    _ => String::new(),
                };
                let chunk = chunk_from_payload(p.payload, &PointName(p.id.as_ref(), self.collection()), true)?;
                match wanted.get(&uuid) {
                    Some(id) if *id == chunk.id => {
                        out.insert(chunk.id.clone(), chunk);
                    }
                    _ => {
                        return Err(Error::corrupt(format!(
                            "point {uuid} of the collection `{}` holds chunk `{}`, not the chunk whose id hashes to it \
                             (a point written by something other than ragtune, or a hash collision)",
                            self.collection(),
                            chunk.id
                        )));
                    }
                }
            }
        }
        Ok(out)
    }

    async fn get(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Option<Chunk>>> {
        ctx.check()?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let gate = self.schema_for_read(ctx, Needs::default()).await?;
        if gate.is_none() {
            return Ok(vec![None; ids.len()]);
        }
        let unique: Vec<&str> = ids.iter().map(String::as_str).collect::<BTreeSet<_>>().into_iter().collect();
        let found = match self.fetch(ctx, &unique).await {
            Ok(found) => found,
            // Deleted by another process since the schema was read: an empty store.
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(vec![None; ids.len()]),
            Err(e) => return Err(e),
        };
        drop(gate);
        Ok(ids.iter().map(|id| found.get(id).cloned()).collect())
    }

    /// The hits of each request, their chunks read as `part` says (`Chunk` or `ChunkWithoutText`).
    async fn search(&self, ctx: &Ctx, requests: &[SearchRequest], part: Payload) -> Result<Vec<Vec<ScoredHit>>> {
        ctx.check()?;
        let mut out: Vec<Vec<ScoredHit>> = vec![Vec::new(); requests.len()];
        // Refuse invalid queries before anything is sent.
        let filters = checked_filters(requests)?;
        if requests.is_empty() {
            return Ok(out);
        }
        let needs = Needs {
            dense: requests.iter().any(|r| matches!(r.vector, VectorQuery::Dense(_))),
            sparse: requests.iter().any(|r| matches!(r.vector, VectorQuery::Sparse(_))),
        };
        let gate = self.schema_for_read(ctx, needs).await?;
        let Some(schema) = gate.as_ref() else { return Ok(out) };
        let weights = self.idf_weights(ctx, &idf_terms(schema, requests)).await?;
        let mut plans = plans(schema, requests, filters, &weights)?;
        let mut first_round = true;
        while plans.iter().any(|p| !p.done) {
            let pending: Vec<usize> = (0..plans.len()).filter(|&i| !plans[i].done).collect();
            let request = QueryBatchPoints {
                collection_name: self.config.collection.clone(),
                query_points: pending
                    .iter()
                    .map(|&i| plans[i].request(self, if first_round { part } else { Payload::Id }))
                    .collect(),
                read_consistency: None,
                timeout: None,
            };
            let what = format!("searching the collection `{}` ({} queries)", self.collection(), pending.len());
            let attempt = || {
                let consistency = self.read_consistency(ctx);
                let mut request = request.clone();
                request.read_consistency.clone_from(&consistency);
                for q in &mut request.query_points {
                    q.read_consistency.clone_from(&consistency);
                }
                self.client.query_batch(request)
            };
            let response = match self.call(ctx, &what, attempt).await {
                Ok(r) => r,
                // Deleted by another process since the schema was read: an empty store.
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(out),
                Err(e) => return Err(e),
            };
            if response.result.len() != pending.len() {
                return Err(Error::permanent(format!(
                    "Qdrant at {} answered {} of {} queries while {what}",
                    self.config.url,
                    response.result.len(),
                    pending.len()
                )));
            }
            for (&i, result) in pending.iter().zip(response.result) {
                plans[i].absorb(result.result, first_round.then_some(part), self.collection())?;
            }
            // Rounds that complete a tie only need ids; the few payloads missing are fetched at the end.
            first_round = false;
        }
        let missing: Vec<&str> = plans
            .iter()
            .flat_map(|p| p.hits.iter().filter(|(id, _)| !p.chunks.contains_key(id)).map(|(id, _)| id.as_str()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let fetched = if missing.is_empty() { HashMap::new() } else { self.fetch(ctx, &missing).await? };
        drop(gate);
        for plan in plans {
            let Plan { index, hits, mut chunks, .. } = plan;
            out[index] = hits
                .into_iter()
                .filter_map(|(id, score)| {
                    // A chunk deleted by another process between rounds is no longer a hit.
                    let chunk = chunks.remove(&id).or_else(|| fetched.get(&id).cloned())?;
                    Some(ScoredHit { chunk, score })
                })
                .collect();
        }
        Ok(out)
    }

    async fn stats(&self, ctx: &Ctx) -> Result<StoreStats> {
        ctx.check()?;
        let gate = self.gate.read().await;
        let schema = self.load_schema(ctx).await?;
        let mut settings = BTreeMap::new();
        settings.insert("backend".to_owned(), "qdrant".into());
        settings.insert("url".to_owned(), self.config.url.clone().into());
        settings.insert("collection".to_owned(), self.config.collection.clone().into());
        settings.insert("server_version".to_owned(), self.server_version.clone().into());
        let Some(schema) = schema else {
            drop(gate);
            return Ok(StoreStats { settings, ..StoreStats::default() });
        };
        let with_vector = |name: &str, present: bool| {
            let filter = QFilter::must([qdrant_client::qdrant::Condition::has_vector(name)]);
            async move { if present { self.count(ctx, Some(filter)).await } else { Ok(0) } }
        };
        let chunks = self.count(ctx, None).await?;
        let (dense_vectors, sparse_vectors, documents) = tokio::try_join!(
            with_vector(DENSE, schema.dense_vector.is_some()),
            with_vector(SPARSE, schema.sparse_vector.is_some()),
            self.count_documents(ctx, chunks),
        )?;
        drop(gate);
        Ok(StoreStats {
            chunks,
            documents,
            dense_vectors,
            sparse_vectors,
            dense_spec: schema.dense,
            sparse_spec: schema.sparse,
            settings,
        })
    }

    /// Distinct documents, exactly: a facet over the `doc_id` index as deep as there are points.
    async fn count_documents(&self, ctx: &Ctx, points: u64) -> Result<u64> {
        if points == 0 {
            return Ok(0);
        }
        let request = FacetCounts {
            collection_name: self.config.collection.clone(),
            key: DOC_ID.to_owned(),
            filter: None,
            // There cannot be more documents than points.
            limit: Some(points),
            exact: Some(true),
            timeout: None,
            read_consistency: None,
            shard_key_selector: None,
        };
        let what = format!("counting the documents of the collection `{}`", self.collection());
        let attempt =
            || self.client.facet(FacetCounts { read_consistency: self.read_consistency(ctx), ..request.clone() });
        let response = self.call(ctx, &what, attempt).await?;
        // An exact facet also lists values whose points were all deleted, with a count of 0 (Qdrant 1.19).
        Ok(response.hits.iter().filter(|hit| hit.count > 0).count() as u64)
    }
}

/// `doc_id` is one of the documents (an exact keyword match, never full text).
fn docs_condition(docs: &[&str]) -> qdrant_client::qdrant::Condition {
    match docs {
        [one] => keyword(DOC_ID, (*one).to_owned()),
        many => qdrant_client::qdrant::Condition::matches(
            DOC_ID,
            qdrant_client::qdrant::r#match::MatchValue::Keywords(qdrant_client::qdrant::RepeatedStrings {
                strings: many.iter().map(|d| (*d).to_owned()).collect(),
            }),
        ),
    }
}

/// The records of the `ragtune_*_spec` metadata keys of the given specs.
fn spec_metadata(dense: Option<&EmbeddingSpec>, sparse: Option<&SparseSpec>) -> Result<HashMap<String, Value>> {
    let mut metadata = HashMap::new();
    let encode = |v: serde_json::Result<serde_json::Value>| {
        v.ok()
            .and_then(|j| json_to_value(&j).ok())
            .ok_or_else(|| Error::invalid_input("a space cannot be recorded in the collection's metadata"))
    };
    if let Some(d) = dense {
        metadata.insert(DENSE_SPEC_KEY.to_owned(), encode(serde_json::to_value(d))?);
    }
    if let Some(s) = sparse {
        metadata.insert(SPARSE_SPEC_KEY.to_owned(), encode(serde_json::to_value(s))?);
    }
    Ok(metadata)
}

/// The filter of each request, after checking every query (finite dense values, a valid sparse vector): invalid
/// queries are refused before anything is sent.
fn checked_filters(requests: &[SearchRequest]) -> Result<Vec<Translated>> {
    let mut filters = Vec::with_capacity(requests.len());
    for req in requests {
        match &req.vector {
            VectorQuery::Sparse(q) => q.validate().map_err(|e| e.context("sparse query"))?,
            VectorQuery::Dense(q) if q.iter().any(|x| !x.is_finite()) => {
                return Err(Error::invalid_input("the dense query has a non-finite value"));
            }
            VectorQuery::Dense(_) => {}
        }
        filters.push(req.filter.as_ref().map(translate).transpose()?.unwrap_or(Translated::All));
    }
    Ok(filters)
}

/// The sparse terms whose IDF the client applies (when the collection's schema says it does): every term of the
/// sparse queries that ask for hits.
fn idf_terms(schema: &Schema, requests: &[SearchRequest]) -> BTreeSet<u32> {
    if !(schema.client_idf && schema.sparse.as_ref().is_some_and(|s| s.idf)) {
        return BTreeSet::new();
    }
    requests
        .iter()
        .filter(|r| r.top_k > 0)
        .filter_map(|r| match &r.vector {
            VectorQuery::Sparse(q) => Some(q.indices.iter().copied()),
            VectorQuery::Dense(_) => None,
        })
        .flatten()
        .collect()
}

/// One plan per request the collection can answer (its space exists, it asks for hits, its filter can match),
/// with the query to send and how many hits to ask for.
fn plans(
    schema: &Schema,
    requests: &[SearchRequest],
    filters: Vec<Translated>,
    weights: &HashMap<u32, f32>,
) -> Result<Vec<Plan>> {
    let mut plans = Vec::new();
    for (index, (req, filter)) in requests.iter().zip(filters).enumerate() {
        let (query, using) = match &req.vector {
            VectorQuery::Dense(q) => {
                let Some(spec) = &schema.dense else { continue };
                if q.len() != spec.dim {
                    return Err(query_dim_mismatch(q.len(), spec));
                }
                (Query::new_nearest(VectorInput::new_dense(q.clone())), DENSE)
            }
            VectorQuery::Sparse(q) => {
                if schema.sparse.is_none() || q.is_empty() {
                    continue;
                }
                let (indices, values) = Inner::weigh(q, weights);
                (Query::new_nearest(VectorInput::new_sparse(indices, values)), SPARSE)
            }
        };
        if req.top_k == 0 || matches!(filter, Translated::Nothing) {
            continue;
        }
        let limit = (req.top_k as u64).saturating_add((req.top_k as u64 / 4).max(8));
        plans.push(Plan {
            index,
            query,
            using,
            filter: filter.into_filter(),
            top_k: req.top_k,
            limit,
            hits: Vec::new(),
            chunks: HashMap::new(),
            done: false,
        });
    }
    Ok(plans)
}

/// One search request on its way through the rounds that complete ties at the `top_k` boundary.
struct Plan {
    index: usize,
    query: Query,
    using: &'static str,
    filter: Option<QFilter>,
    top_k: usize,
    /// How many hits the next round asks for.
    limit: u64,
    /// All hits of the last round, in ranking order: (chunk id, score).
    hits: Vec<(String, f32)>,
    /// Payloads read in the first round.
    chunks: HashMap<String, Chunk>,
    done: bool,
}

impl Plan {
    fn request(&self, inner: &Inner, part: Payload) -> QueryPoints {
        QueryPoints {
            collection_name: inner.config.collection.clone(),
            query: Some(self.query.clone()),
            using: Some(self.using.to_owned()),
            filter: self.filter.clone(),
            limit: Some(self.limit),
            with_payload: Some(payload_selector(part)),
            // Set per attempt on the batch request (see `Inner::read_consistency`).
            read_consistency: None,
            ..QueryPoints::default()
        }
    }

    /// Takes a round's hits and decides whether the `top_k` cut is exact.
    ///
    /// Every point not returned scores at most the lowest returned score. So when the server returned fewer hits
    /// than asked, or the lowest returned score is below the k-th, every point tied with the k-th is in hand and
    /// the cut by (score, chunk id) is exact; otherwise the tied group may continue and the next round asks for
    /// four times as many.
    /// `chunks`: the payload part the round asked for when it holds chunks, `None` when it holds ids alone.
    fn absorb(&mut self, points: Vec<ScoredPoint>, chunks: Option<Payload>, collection: &str) -> Result<()> {
        let full_page = points.len() as u64 >= self.limit;
        let mut hits = Vec::with_capacity(points.len());
        for p in points {
            let Some(id) = payload_chunk_id(&p.payload).map(str::to_owned) else {
                return Err(Error::corrupt(format!(
                    "Qdrant point {} has no `{CHUNK_ID}` in its payload",
                    PointName(p.id.as_ref(), collection)
                )));
            };
            if let Some(part) = chunks {
                let with_text = part == Payload::Chunk;
                let chunk = chunk_from_payload(p.payload, &PointName(p.id.as_ref(), collection), with_text)?;
                self.chunks.insert(id.clone(), chunk);
            }
            hits.push((id, p.score));
        }
        sort_ranked(&mut hits, |(id, score)| (*score, id.as_str()));
        let complete = !full_page
            || match (hits.get(self.top_k - 1), hits.last()) {
                (Some(kth), Some(lowest)) => lowest.1 < kth.1,
                _ => true,
            };
        if complete {
            hits.truncate(self.top_k);
            self.hits = hits;
            self.done = true;
        } else if self.limit >= MAX_TIE_LIMIT {
            return Err(Error::permanent(format!(
                "more than {MAX_TIE_LIMIT} hits tie at the score of hit {} in the collection `{collection}`, so the \
                 top {} cannot be ordered by chunk id; narrow the search with a filter",
                self.top_k, self.top_k
            )));
        } else {
            self.limit = self.limit.saturating_mul(4).min(MAX_TIE_LIMIT);
            self.hits = hits;
        }
        Ok(())
    }
}

#[async_trait]
impl VectorStore for QdrantStore {
    /// [`QdrantStore::scan`]: the server's point order, its scroll offset as the cursor.
    async fn scan(&self, ctx: &Ctx, cursor: Option<String>, limit: usize) -> Result<(Vec<Record>, Option<String>)> {
        QdrantStore::scan(self, ctx, cursor, limit).await
    }

    async fn ensure_spaces(&self, ctx: &Ctx, dense: Option<&EmbeddingSpec>, sparse: Option<&SparseSpec>) -> Result<()> {
        self.inner.ensure_spaces(ctx, dense, sparse).await
    }

    async fn write(&self, ctx: &Ctx, batch: WriteBatch) -> Result<WriteReport> {
        self.inner.write(ctx, batch).await
    }

    async fn get(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Option<Chunk>>> {
        self.inner.get(ctx, ids).await
    }

    async fn search(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
        self.inner.search(ctx, requests, Payload::Chunk).await
    }

    async fn search_without_text(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
        self.inner.search(ctx, requests, Payload::ChunkWithoutText).await
    }

    async fn stats(&self, ctx: &Ctx) -> Result<StoreStats> {
        self.inner.stats(ctx).await
    }

    /// One health check of the server (no counts: `stats` costs four calls, one a facet over every document).
    async fn ready(&self, ctx: &Ctx) -> Result<()> {
        let inner = &self.inner;
        inner.call(ctx, "checking the server (health check)", || inner.client.health_check()).await.map(drop)
    }
}

#[cfg(test)]
mod tests;
