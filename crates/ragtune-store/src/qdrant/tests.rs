//! Unit tests of the parts of `QdrantStore` that need no server: configuration, version and schema checks, and
//! the completion of ties at the `top_k` boundary.

use qdrant_client::qdrant::{CollectionConfig, CollectionParams, PayloadSchemaInfo, point_id::PointIdOptions};
use ragtune_core::Distance;

use super::*;

#[test]
fn debug_output_hides_the_api_key() {
    let config = QdrantConfig { api_key: Some("s3cr3t-key-value".into()), ..QdrantConfig::default() };
    let shown = format!("{config:?} {config:#?}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
    let none = format!("{:?}", QdrantConfig::default());
    assert!(none.contains("api_key: None"), "{none}");
}

#[test]
fn defaults() {
    let c = QdrantConfig::default();
    assert_eq!(c.collection, "ragtune");
    assert_eq!(c.timeout, Duration::from_secs(30));
    assert_eq!(c.connect_timeout, Duration::from_secs(5));
    assert_eq!(c.max_retries, 3);
    assert!(c.on_disk_payload);
    assert_eq!(c.upsert_batch_size, 256);
}

#[test]
fn server_versions() {
    for ok in ["1.17.0", "1.19.1", "1.21.0", "v1.20.0", "1.20.0-dev"] {
        check_version(ok, "http://q:6334").unwrap_or_else(|e| panic!("{ok}: {}", e.message()));
    }
    for old in ["1.16.3", "1.9.0", "0.11.0", "2.0.0", "", "dev"] {
        let e = check_version(old, "http://q:6334").expect_err(old);
        assert_eq!(e.kind(), ErrorKind::Mismatch);
        assert!(e.message().contains("http://q:6334") && e.message().contains("1.17"), "{}", e.message());
    }
}

fn dense_spec() -> EmbeddingSpec {
    EmbeddingSpec { model_id: "m".into(), dim: 384, normalized: true, distance: Distance::Cosine }
}

fn sparse_spec() -> SparseSpec {
    SparseSpec { encoder_id: "bm25".into(), idf: true }
}

/// Collection information as the server would describe a collection with these vectors and metadata.
fn info(
    dense: Option<(u64, QDistance)>,
    sparse: Option<Option<Modifier>>,
    metadata: HashMap<String, Value>,
) -> CollectionInfo {
    let mut map = HashMap::new();
    if let Some((size, distance)) = dense {
        map.insert(DENSE.to_owned(), VectorParams { size, distance: distance as i32, ..VectorParams::default() });
    }
    let sparse_vectors_config = sparse.map(|m| SparseVectorConfig {
        map: HashMap::from([(SPARSE.to_owned(), SparseVectorParams { index: None, modifier: m.map(|m| m as i32) })]),
    });
    CollectionInfo {
        config: Some(CollectionConfig {
            params: Some(CollectionParams {
                vectors_config: Some(VectorsConfig {
                    config: Some(vectors_config::Config::ParamsMap(VectorParamsMap { map })),
                }),
                sparse_vectors_config,
                ..CollectionParams::default()
            }),
            metadata,
            ..CollectionConfig::default()
        }),
        payload_schema: HashMap::from([(DOC_ID.to_owned(), PayloadSchemaInfo::default())]),
        ..CollectionInfo::default()
    }
}

fn ragtune_metadata(dense: Option<&EmbeddingSpec>, sparse: Option<&SparseSpec>) -> HashMap<String, Value> {
    let mut m = spec_metadata(dense, sparse).unwrap();
    m.insert(FORMAT_KEY.to_owned(), payload::string(FORMAT));
    m
}

#[track_caller]
fn check_schema_err(info: CollectionInfo, kind: ErrorKind, expect: &str) {
    let e = parse_schema(info, "docs").expect_err("an error");
    assert_eq!(e.kind(), kind, "{}", e.message());
    assert!(e.message().contains(expect), "`{}` does not contain `{expect}`", e.message());
}

#[test]
fn schemas_round_trip_through_collection_metadata() {
    let (d, s) = (dense_spec(), sparse_spec());
    let both = parse_schema(
        info(Some((384, QDistance::Cosine)), Some(Some(Modifier::Idf)), ragtune_metadata(Some(&d), Some(&s))),
        "docs",
    )
    .unwrap();
    assert_eq!(both.dense, Some(d.clone()));
    assert_eq!(both.sparse, Some(s.clone()));
    assert_eq!(both.dense_vector, Some((384, QDistance::Cosine as i32)));
    assert_eq!(both.sparse_vector, Some(true));
    assert!(both.indexed.contains(DOC_ID));

    let sparse_only =
        parse_schema(info(None, Some(Some(Modifier::Idf)), ragtune_metadata(None, Some(&s))), "docs").unwrap();
    assert_eq!((sparse_only.dense, sparse_only.dense_vector), (None, None));
    // A vector whose spec was not recorded yet (an interrupted ensure_spaces) is reported, not refused.
    let unrecorded =
        parse_schema(info(Some((384, QDistance::Dot)), None, ragtune_metadata(None, None)), "docs").unwrap();
    assert_eq!(unrecorded.dense_vector, Some((384, QDistance::Dot as i32)));
    assert_eq!(unrecorded.dense, None);
    let no_idf = SparseSpec { idf: false, ..s };
    let plain = parse_schema(info(None, Some(None), ragtune_metadata(None, Some(&no_idf))), "docs").unwrap();
    assert_eq!(plain.sparse_vector, Some(false));
}

#[test]
fn schema_mismatches_are_named() {
    let (d, s) = (dense_spec(), sparse_spec());
    check_schema_err(info(None, None, HashMap::new()), ErrorKind::Mismatch, "was not created by ragtune");
    let mut other_format = ragtune_metadata(None, None);
    other_format.insert(FORMAT_KEY.to_owned(), payload::string("ragtune-qdrant/9"));
    check_schema_err(info(None, None, other_format), ErrorKind::Mismatch, "ragtune-qdrant/9");
    check_schema_err(
        info(Some((768, QDistance::Cosine)), Some(Some(Modifier::Idf)), ragtune_metadata(Some(&d), Some(&s))),
        ErrorKind::Mismatch,
        "collection schema mismatch: the collection `docs` records dense vectors of `m` (384 dimensions, cosine) but \
         its `dense` vector has 768 dimensions, cosine",
    );
    check_schema_err(
        info(Some((384, QDistance::Dot)), None, ragtune_metadata(Some(&d), None)),
        ErrorKind::Mismatch,
        "has 384 dimensions, dot",
    );
    check_schema_err(info(None, None, ragtune_metadata(Some(&d), None)), ErrorKind::Mismatch, "has no `dense` vector");
    check_schema_err(info(None, None, ragtune_metadata(None, Some(&s))), ErrorKind::Mismatch, "has no `sparse` vector");
    check_schema_err(
        info(None, Some(None), ragtune_metadata(None, Some(&s))),
        ErrorKind::Mismatch,
        "with the IDF modifier, but its `sparse` vector is configured without it",
    );
    let mut unreadable = ragtune_metadata(None, None);
    unreadable.insert(DENSE_SPEC_KEY.to_owned(), payload::string("not a spec"));
    check_schema_err(info(None, None, unreadable), ErrorKind::Corrupt, "unreadable `ragtune_dense_spec`");
    let mut unnamed = info(None, None, ragtune_metadata(None, None));
    if let Some(p) = unnamed.config.as_mut().and_then(|c| c.params.as_mut()) {
        p.vectors_config =
            Some(VectorsConfig { config: Some(vectors_config::Config::Params(VectorParams::default())) });
    }
    check_schema_err(unnamed, ErrorKind::Mismatch, "single unnamed vector");
}

fn point(id: &str, score: f32) -> ScoredPoint {
    let payload = chunk_payload(&Chunk::new(id, "d", format!("text of {id}"))).unwrap();
    ScoredPoint {
        id: Some(PointId { point_id_options: Some(PointIdOptions::Uuid(point_uuid(id))) }),
        payload,
        score,
        ..ScoredPoint::default()
    }
}

fn plan(top_k: usize, limit: u64) -> Plan {
    Plan {
        index: 0,
        query: Query::new_nearest(VectorInput::new_dense(vec![1.0])),
        using: DENSE,
        filter: None,
        top_k,
        limit,
        hits: Vec::new(),
        chunks: HashMap::new(),
        done: false,
    }
}

fn render(p: &Plan) -> String {
    p.hits.iter().enumerate().map(|(i, (id, s))| format!("{}. {id}  {s:.2}\n", i + 1)).collect()
}

/// Feeds one round of hits (in the server's order) to a plan; `expect` is the outcome: the rendered hits when
/// the cut is exact, or `more <limit>` when another round is needed.
#[track_caller]
fn check(top_k: usize, limit: u64, round: &[(&str, f32)], expect: &str) {
    let mut p = plan(top_k, limit);
    p.absorb(round.iter().map(|&(id, s)| point(id, s)).collect(), Some(Payload::Chunk), "docs").unwrap();
    let got = if p.done { render(&p) } else { format!("more {}", p.limit) };
    assert_eq!(got, expect);
}

#[test]
fn ties_at_the_boundary_are_completed() {
    // Fewer hits than asked: everything is in hand; ties are ordered by chunk id.
    check(2, 10, &[("b", 0.9), ("c", 0.5), ("a", 0.5)], "1. b  0.90\n2. a  0.50\n");
    // A full page whose lowest score is below the k-th: exact.
    check(2, 3, &[("b", 0.9), ("c", 0.5), ("d", 0.1)], "1. b  0.90\n2. c  0.50\n");
    // A full page ending inside the tie of the k-th: ask for four times as many.
    check(2, 3, &[("b", 0.9), ("c", 0.5), ("a", 0.5)], "more 12");
    // Ties above the k-th are harmless.
    check(1, 3, &[("z", 0.9), ("y", 0.9), ("x", 0.1)], "1. y  0.90\n");
    check(3, 3, &[("z", 0.9), ("y", 0.9), ("x", 0.9)], "more 12");
}

#[test]
fn a_second_round_needs_only_ids() {
    let mut p = plan(1, 2);
    p.absorb(vec![point("b", 0.5), point("a", 0.5)], Some(Payload::Chunk), "docs").unwrap();
    assert!(!p.done);
    let ids_only = |id: &str, s: f32| {
        let mut pt = point(id, s);
        pt.payload.retain(|k, _| k == CHUNK_ID);
        pt
    };
    p.absorb(vec![ids_only("b", 0.5), ids_only("a", 0.5), ids_only("0", 0.5)], None, "docs").unwrap();
    assert!(p.done);
    assert_eq!(render(&p), "1. 0  0.50\n");
    // The payloads of the first round are kept; `0` must be fetched.
    assert!(p.chunks.contains_key("a") && !p.chunks.contains_key("0"));
}

#[test]
fn endless_ties_are_refused() {
    let mut p = plan(1, MAX_TIE_LIMIT);
    let tied = (0..MAX_TIE_LIMIT)
        .map(|i| ScoredPoint {
            payload: HashMap::from([(CHUNK_ID.to_owned(), payload::string(&i.to_string()))]),
            score: 0.5,
            ..ScoredPoint::default()
        })
        .collect();
    let e = p.absorb(tied, None, "docs").expect_err("too many ties");
    assert_eq!(e.kind(), ErrorKind::Permanent);
    assert!(e.message().contains("tie"), "{}", e.message());
}

#[test]
fn points_without_a_chunk_id_are_corrupt() {
    let mut p = plan(1, 10);
    let mut pt = point("a", 0.5);
    pt.payload.clear();
    let e = p.absorb(vec![pt], Some(Payload::Chunk), "docs").expect_err("no chunk id");
    assert_eq!(e.kind(), ErrorKind::Corrupt);
}

#[test]
fn a_round_without_texts_decodes_chunks_without_them() {
    let mut p = plan(2, 10);
    let mut pt = point("a", 0.5);
    pt.payload.remove(TEXT);
    // Asked without the text, the payload is a whole chunk; asked for everything, it is a broken one.
    plan(2, 10).absorb(vec![pt.clone()], Some(Payload::Chunk), "docs").expect_err("the text is required");
    p.absorb(vec![pt], Some(Payload::ChunkWithoutText), "docs").unwrap();
    let chunk = &p.chunks["a"];
    assert_eq!((chunk.id.as_str(), chunk.doc_id.as_str(), chunk.text.as_str()), ("a", "d", ""));
    let selector = payload_selector(Payload::ChunkWithoutText);
    let Some(SelectorOptions::Exclude(exclude)) = selector.selector_options else { panic!("{selector:?}") };
    assert_eq!(exclude.fields, [SPARSE_TERMS, TEXT]);
}

#[test]
fn deleting_documents_matches_keywords_exactly() {
    let one = docs_condition(&["doc with spaces"]);
    let many = docs_condition(&["a b", "c"]);
    for c in [one, many] {
        let Some(qdrant_client::qdrant::condition::ConditionOneOf::Field(f)) = c.condition_one_of else {
            panic!("a field condition")
        };
        let value = f.r#match.and_then(|m| m.match_value).expect("a match");
        assert!(
            matches!(
                value,
                qdrant_client::qdrant::r#match::MatchValue::Keyword(_)
                    | qdrant_client::qdrant::r#match::MatchValue::Keywords(_)
            ),
            "{value:?}"
        );
    }
}
