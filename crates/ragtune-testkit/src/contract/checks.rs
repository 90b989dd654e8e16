//! The checks of the `VectorStore` contract, one public function each.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ragtune_core::{
    Chunk, ChunkKind, Ctx, EmbeddingSpec, ErrorKind, Filter, Record, ScoredHit, SparseSpec, VectorStore, WriteBatch,
    WriteReport,
};
use serde_json::json;

use super::support::{
    Checker, Counts, DENSE_TOL, Model, Rng, SPARSE_TOL, check_list_shape, delete_documents, dense_req, dense_spec,
    expect_counts, expect_hits, expect_search, get, idf, ids, metadata, passage, record, render_hits, search, setup,
    sparse, sparse_req, sparse_spec, stats, unit, upserts, write,
};

/// A fresh store has zero counts; after `ensure_spaces` it reports the spaces, every search returns one empty
/// list per request, `get` returns `None`, and deleting or writing nothing succeeds.
pub async fn empty_store<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("empty_store");
    let zero = Counts::default();
    c.eq("stats counts of a fresh store", Counts::from(&stats(&c, store).await), zero);
    setup(&c, store).await;
    let s = stats(&c, store).await;
    c.eq("stats counts after ensure_spaces", Counts::from(&s), zero);
    c.eq("stats dense_spec after ensure_spaces", s.dense_spec, Some(dense_spec()));
    c.eq("stats sparse_spec after ensure_spaces", s.sparse_spec, Some(sparse_spec()));
    let requests = [
        dense_req(unit([1.0, 0.0, 0.0, 0.0]), 10, None),
        sparse_req(&[(1, 1.0)], 10, None),
        dense_req(unit([0.0, 1.0, 0.0, 0.0]), 10, Some(Filter::eq("doc_id", "none"))),
    ];
    let lists = search(&c, store, &requests, "searching an empty store").await;
    c.that(
        lists.iter().all(Vec::is_empty),
        format_args!("searching an empty store returned hits: {:?}", lists.iter().map(|l| ids(l)).collect::<Vec<_>>()),
    );
    c.eq("searching with no requests", search(&c, store, &[], "searching with no requests").await.len(), 0);
    c.eq("get of an unknown id in an empty store", get(&c, store, &["nothing"]).await, vec![None]);
    let deleted = c.ok(
        "deleting an unknown document from an empty store",
        store.delete_documents(&Ctx::new(), &["nothing".to_owned()]).await,
    );
    c.eq("report of deleting an unknown document", deleted, WriteReport::default());
    let written = c.ok("writing an empty batch", store.write(&Ctx::new(), WriteBatch::default()).await);
    c.eq("report of an empty batch", written, WriteReport::default());
    c.eq("stats counts at the end", Counts::from(&stats(&c, store).await), zero);
}

/// Records written with every chunk field set come back identical from `get` (one entry per requested id, in
/// request order, `None` for unknown ids); `stats` counts chunks, documents, dense and sparse vectors; a section
/// without vectors is stored but never searched.
pub async fn round_trip<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("round_trip");
    setup(&c, store).await;
    let mut model = Model::default();

    let mut rich = Chunk::new("doc-a#1", "doc-a", "Ünïcödé text, \"quotes\",\ttabs and\nnew lines");
    rich.parent_id = Some("doc-a#s0".into());
    rich.header_path = vec!["Guide".into(), "Install".into()];
    rich.title = Some("Guide".into());
    rich.position = 1;
    rich.metadata = metadata(json!({
        "lang": "en", "year": 2021, "ratio": 0.25, "tags": ["a", "b"],
        "nested": {"k": [1, null, true]}, "draft": false, "empty": ""
    }));
    let mut section = Chunk::new("doc-a#s0", "doc-a", "The whole install section.");
    section.kind = ChunkKind::Section;
    section.header_path = vec!["Guide".into()];
    section.title = Some("Guide".into());
    let records = vec![
        record(rich, Some(unit([1.0, 0.0, 0.0, 0.0])), Some(sparse(&[(1, 1.0), (2, 2.0)]))),
        record(section, None, None),
        record(passage("doc-a#0", "doc-a"), Some(unit([0.0, 1.0, 0.0, 0.0])), Some(sparse(&[(2, 1.0)]))),
        record(passage("doc-b#0", "doc-b"), Some(unit([0.0, 0.0, 1.0, 0.0])), None),
        record(passage("doc-c#0", "doc-c"), None, Some(sparse(&[(3, 1.0)]))),
    ];
    let report = write(&c, store, &mut model, upserts(records), "writing 5 new records").await;
    c.eq("report of writing 5 new records", report, WriteReport { upserted: 5, deleted: 0 });

    let wanted = ["doc-c#0", "missing", "doc-a#1", "doc-a#s0", "doc-b#0", "doc-a#0", "doc-a#1"];
    let expected: Vec<Option<Chunk>> = wanted.iter().map(|id| model.chunk(id)).collect();
    c.eq(
        "get returns the written chunks in request order, None for unknown ids",
        get(&c, store, &wanted).await,
        expected,
    );
    c.eq("get of no ids", get(&c, store, &[]).await, Vec::new());

    let s = stats(&c, store).await;
    let counts = Counts { chunks: 5, documents: 3, dense_vectors: 3, sparse_vectors: 3 };
    c.eq("stats counts after writing 5 records of 3 documents", Counts::from(&s), counts);
    c.eq("stats dense_spec", s.dense_spec, Some(dense_spec()));
    c.eq("stats sparse_spec", s.sparse_spec, Some(sparse_spec()));

    // Searches return the same payloads, and never the section.
    expect_search(&c, store, &model, &dense_req(unit([1.0, 1.0, 1.0, 1.0]), 10, None), "dense search").await;
    expect_search(&c, store, &model, &sparse_req(&[(1, 1.0), (2, 1.0), (3, 1.0)], 10, None), "sparse search").await;
}

/// `scan` pages through every record once, whatever the page size: the chunks as written, the dense vectors
/// (within tolerance) and the sparse terms; the last page's cursor is `None`.
pub async fn scan_pages<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("scan_pages");
    setup(&c, store).await;
    let mut model = Model::default();
    let records: Vec<Record> = (0..7)
        .map(|i| {
            let dense = (i % 3 != 2).then(|| unit([1.0, i as f32, 0.5, 0.0]));
            let terms = (i % 2 == 0).then(|| sparse(&[(1, 1.0), (u32::try_from(i).unwrap_or(0) + 2, 0.5)]));
            record(passage(&format!("doc-{}#{i}", i % 3), &format!("doc-{}", i % 3)), dense, terms)
        })
        .collect();
    write(&c, store, &mut model, upserts(records.clone()), "writing 7 records").await;
    let mut seen: BTreeMap<String, Record> = BTreeMap::new();
    let mut cursor = None;
    for page_no in 0..20 {
        let (page, next) = c.ok("scan", store.scan(&Ctx::new(), cursor.take(), 3).await);
        c.that(page.len() <= 3, format_args!("page {page_no} has {} records, more than the limit 3", page.len()));
        for r in page {
            let id = r.chunk.id.clone();
            c.that(seen.insert(id.clone(), r).is_none(), format_args!("scan returned `{id}` twice"));
        }
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    let want: BTreeSet<String> = records.iter().map(|r| r.chunk.id.clone()).collect();
    c.eq("the ids scan returned", seen.keys().cloned().collect::<BTreeSet<_>>(), want);
    for r in &records {
        let Some(got) = seen.get(&r.chunk.id) else { continue };
        c.eq(&format!("the chunk of `{}`", r.chunk.id), Some(got.chunk.clone()), model.chunk(&r.chunk.id));
        match (&r.dense, &got.dense) {
            (None, None) => {}
            (Some(a), Some(b)) => c.that(
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| f64::from((x - y).abs()) <= DENSE_TOL),
                format_args!("the dense vector of `{}`: wrote {a:?}, scanned {b:?}", r.chunk.id),
            ),
            (a, b) => c.fail(format_args!("the dense vector of `{}`: wrote {a:?}, scanned {b:?}", r.chunk.id)),
        }
        let terms = |v: &Option<ragtune_core::SparseVector>| {
            let mut t: Vec<u32> = v.as_ref().map(|v| v.indices.clone()).unwrap_or_default();
            t.sort_unstable();
            t
        };
        c.eq(&format!("the sparse terms of `{}`", r.chunk.id), terms(&got.sparse), terms(&r.sparse));
    }
}

/// Upsert replaces by chunk id: the new text and vectors win, counts do not grow, old sparse terms and the old
/// dense vector no longer match, a replacement without vectors leaves both indexes, and a chunk moved to another
/// document belongs only to the new one.
pub async fn upsert_replaces<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("upsert_replaces");
    setup(&c, store).await;
    let mut model = Model::default();
    let first = vec![
        record(
            Chunk::new("x#0", "x", "old text"),
            Some(unit([1.0, 0.0, 0.0, 0.0])),
            Some(sparse(&[(1, 1.0), (9, 1.0)])),
        ),
        record(passage("x#1", "x"), Some(unit([0.0, 1.0, 0.0, 0.0])), Some(sparse(&[(2, 1.0), (9, 1.0)]))),
        record(passage("m#0", "m-old"), Some(unit([0.0, 0.0, 1.0, 0.0])), Some(sparse(&[(5, 1.0), (9, 1.0)]))),
    ];
    write(&c, store, &mut model, upserts(first), "writing 3 records").await;

    let new_x0 = Chunk::new("x#0", "x", "new text");
    let replacement =
        vec![record(new_x0.clone(), Some(unit([0.0, 0.0, 0.0, 1.0])), Some(sparse(&[(3, 1.0), (9, 1.0)])))];
    let report = write(&c, store, &mut model, upserts(replacement), "replacing x#0").await;
    c.eq("upserted count of replacing one record", report.upserted, 1);
    c.eq("get after replacing x#0", get(&c, store, &["x#0"]).await, vec![Some(new_x0)]);
    expect_counts(&c, store, &model, "after replacing x#0 (counts must not grow)").await;
    let old_term = expect_search(
        &c,
        store,
        &model,
        &sparse_req(&[(1, 1.0)], 10, None),
        "sparse search for a term only the replaced version of x#0 had",
    )
    .await;
    c.that(old_term.is_empty(), "an old sparse term of a replaced chunk still matches");
    for (what, req) in [
        ("sparse search for a term of the new x#0", sparse_req(&[(3, 1.0)], 10, None)),
        ("sparse search for a term all chunks share", sparse_req(&[(9, 1.0)], 10, None)),
        ("dense search near the new vector of x#0", dense_req(unit([0.1, 0.0, 0.0, 1.0]), 10, None)),
        ("dense search near the old vector of x#0", dense_req(unit([1.0, 0.0, 0.1, 0.0]), 10, None)),
    ] {
        expect_search(&c, store, &model, &req, what).await;
    }

    // A replacement without vectors takes the chunk out of both indexes but keeps it fetchable.
    let bare = passage("x#1", "x");
    write(&c, store, &mut model, upserts(vec![record(bare.clone(), None, None)]), "replacing x#1 without vectors")
        .await;
    expect_counts(&c, store, &model, "after replacing x#1 by a record without vectors").await;
    c.eq("get after replacing x#1 without vectors", get(&c, store, &["x#1"]).await, vec![Some(bare)]);
    expect_search(
        &c,
        store,
        &model,
        &sparse_req(&[(2, 1.0), (9, 1.0)], 10, None),
        "sparse search after x#1 lost its vectors",
    )
    .await;
    expect_search(
        &c,
        store,
        &model,
        &dense_req(unit([0.0, 1.0, 0.0, 0.0]), 10, None),
        "dense search after x#1 lost its vectors",
    )
    .await;

    // Moving a chunk to another document.
    let moved = vec![record(passage("m#0", "m-new"), Some(unit([0.0, 0.0, 1.0, 0.0])), Some(sparse(&[(5, 1.0)])))];
    write(&c, store, &mut model, upserts(moved), "moving m#0 from document m-old to m-new").await;
    expect_counts(&c, store, &model, "after moving m#0 to another document").await;
    let report = delete_documents(&c, store, &mut model, &["m-old"], "deleting the document m#0 moved away from").await;
    c.eq("chunks deleted with the document m#0 moved away from", report.deleted, 0);
    c.that(get(&c, store, &["m#0"]).await[0].is_some(), "deleting m#0's old document removed it");
    for doc in ["m-new", "m-old"] {
        let req = dense_req(unit([0.0, 0.0, 1.0, 0.0]), 10, Some(Filter::eq("doc_id", doc)));
        expect_search(&c, store, &model, &req, &format!("dense search filtered on doc_id {doc} after the move")).await;
    }
    let report = delete_documents(&c, store, &mut model, &["m-new"], "deleting m#0's new document").await;
    c.eq("chunks deleted with m#0's new document", report.deleted, 1);
    c.eq("get m#0 after deleting its document", get(&c, store, &["m#0"]).await, vec![None]);
    expect_counts(&c, store, &model, "at the end").await;
}

/// Deleting a document removes all of its chunks (sections included) and nothing else; deleting an unknown
/// document succeeds with nothing deleted; a batch that deletes a document and upserts chunks of it applies the
/// delete first.
pub async fn delete_by_document<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("delete_by_document");
    setup(&c, store).await;
    let mut model = Model::default();
    let mut rng = Rng::new(3);
    let mut section = passage("d1#s", "d1");
    section.kind = ChunkKind::Section;
    let mut records = vec![record(section, None, None)];
    for (id, doc) in [("d1#0", "d1"), ("d1#1", "d1"), ("d2#0", "d2"), ("d2#1", "d2"), ("d3#0", "d3")] {
        records.push(record(passage(id, doc), Some(rng.unit_vector()), Some(sparse(&[(7, 1.0)]))));
    }
    write(&c, store, &mut model, upserts(records), "writing 6 chunks of 3 documents").await;
    let all = ["d1#s", "d1#0", "d1#1", "d2#0", "d2#1", "d3#0"];
    let searches = [dense_req(unit([1.0, 1.0, 0.0, 0.0]), 100, None), sparse_req(&[(7, 1.0)], 100, None)];

    let report = delete_documents(&c, store, &mut model, &["d1"], "deleting document d1").await;
    c.eq("report of deleting d1 (3 chunks)", report, WriteReport { upserted: 0, deleted: 3 });
    let expected: Vec<Option<Chunk>> = all.iter().map(|id| model.chunk(id)).collect();
    c.eq("get after deleting d1", get(&c, store, &all).await, expected);
    expect_counts(&c, store, &model, "after deleting d1").await;
    for req in &searches {
        expect_search(&c, store, &model, req, "search after deleting d1").await;
    }

    let report = delete_documents(&c, store, &mut model, &["no-such-doc"], "deleting an unknown document").await;
    c.eq("report of deleting an unknown document", report, WriteReport::default());
    let report = delete_documents(&c, store, &mut model, &[], "deleting no documents").await;
    c.eq("report of deleting no documents", report, WriteReport::default());
    expect_counts(&c, store, &model, "after deleting an unknown document").await;

    // Delete first, then upsert: d2#0 comes back with its new text, d2#1 stays gone, d2#9 is new.
    let new_d2_0 = Chunk::new("d2#0", "d2", "d2#0 rewritten");
    let batch = WriteBatch {
        delete_docs: vec!["d2".into()],
        upsert: vec![
            record(new_d2_0.clone(), Some(rng.unit_vector()), Some(sparse(&[(7, 2.0)]))),
            record(passage("d2#9", "d2"), Some(rng.unit_vector()), Some(sparse(&[(7, 1.0), (8, 1.0)]))),
        ],
    };
    let report = write(&c, store, &mut model, batch, "one batch deleting d2 and upserting chunks of d2").await;
    c.eq(
        "report of deleting d2 (2 chunks) and upserting 2 chunks of d2",
        report,
        WriteReport { upserted: 2, deleted: 2 },
    );
    let wanted = ["d2#0", "d2#1", "d2#9", "d3#0"];
    let expected = vec![Some(new_d2_0), None, model.chunk("d2#9"), model.chunk("d3#0")];
    c.eq("get after a batch that deletes d2 then upserts d2#0 and d2#9", get(&c, store, &wanted).await, expected);
    expect_counts(&c, store, &model, "after deleting and re-upserting d2 in one batch").await;
    for req in &searches {
        expect_search(&c, store, &model, req, "search after deleting and re-upserting d2").await;
    }

    let report = delete_documents(&c, store, &mut model, &["d2", "d3"], "deleting d2 and d3 together").await;
    c.eq("report of deleting d2 and d3 (3 chunks)", report, WriteReport { upserted: 0, deleted: 3 });
    expect_counts(&c, store, &model, "after deleting every document").await;
    for req in &searches {
        expect_search(&c, store, &model, req, "search after deleting every document").await;
    }
}

/// The corpus of the filter check: 16 passages of 4 documents with varied metadata, and 4 sections.
fn filter_corpus() -> Vec<Record> {
    let mut rng = Rng::new(5);
    let langs = [Some("en"), Some("de"), Some("fr"), None];
    let mut out = Vec::new();
    for i in 0..16_u32 {
        let doc = format!("f{}", i / 4);
        let mut chunk = Chunk::new(format!("{doc}#{}", i % 4), doc.clone(), format!("filter passage {i}"));
        chunk.position = i % 4;
        if let Some(lang) = langs[(i % 4) as usize] {
            chunk.metadata.insert("lang".into(), lang.into());
        }
        // Some years are stored as floats: filters compare numbers by value.
        let year = if i % 5 == 0 { json!(f64::from(2015 + i)) } else { json!(2015 + i) };
        chunk.metadata.insert("year".into(), year);
        if i % 2 == 0 {
            chunk.metadata.insert("tags".into(), json!(["a", "b"]));
        } else if i % 3 == 0 {
            chunk.metadata.insert("tags".into(), json!(["c"]));
        }
        chunk.metadata.insert("score".into(), json!(f64::from(i) * 0.125));
        chunk.metadata.insert("draft".into(), json!(i % 3 == 1));
        if i % 4 != 0 {
            chunk.parent_id = Some(format!("{doc}#s"));
        }
        let weight = 1.0 + i as f32 * 0.25;
        out.push(record(chunk, Some(rng.unit_vector()), Some(sparse(&[(100, weight), (200 + i % 3, 1.0)]))));
    }
    for d in 0..4 {
        let mut section = passage(&format!("f{d}#s"), &format!("f{d}"));
        section.kind = ChunkKind::Section;
        section.metadata.insert("lang".into(), "en".into());
        out.push(record(section, None, None));
    }
    out
}

fn filter_cases() -> Vec<Filter> {
    let range = |field: &str, gte: Option<f64>, lte: Option<f64>| Filter::Range { field: field.into(), gte, lte };
    let one_of = |field: &str, values: Vec<serde_json::Value>| Filter::In { field: field.into(), values };
    let not = |f: Filter| Filter::Not(Box::new(f));
    vec![
        Filter::eq("lang", "en"),
        Filter::eq("doc_id", "f2"),
        Filter::eq("id", "f1#3"),
        Filter::eq("parent_id", "f3#s"),
        Filter::eq("kind", "passage"),
        Filter::eq("kind", "section"),
        Filter::eq("year", 2020),
        Filter::eq("year", 2016.0),
        Filter::eq("tags", "b"),
        Filter::eq("draft", true),
        Filter::eq("missing", "x"),
        one_of("lang", vec![json!("de"), json!("fr")]),
        one_of("doc_id", vec![json!("f0"), json!("f3"), json!("no-such-doc")]),
        one_of("year", vec![json!(2016), json!(2025.0)]),
        range("year", Some(2018.0), Some(2022.0)),
        range("score", Some(0.5), None),
        range("score", None, Some(0.375)),
        range("lang", Some(0.0), None),
        Filter::And(vec![Filter::eq("lang", "en"), range("year", Some(2020.0), None)]),
        Filter::Or(vec![Filter::eq("lang", "de"), Filter::eq("tags", "c")]),
        not(Filter::eq("lang", "en")),
        not(Filter::Or(vec![Filter::eq("doc_id", "f0"), Filter::eq("draft", true)])),
        Filter::And(vec![]),
        Filter::Or(vec![]),
        Filter::And(vec![
            not(Filter::eq("doc_id", "f0")),
            Filter::Or(vec![range("score", None, Some(1.0)), Filter::eq("draft", true)]),
        ]),
    ]
}

/// Filtered dense and sparse searches return exactly what a brute-force scan with [`Filter::matches`] over the
/// stored chunks returns: Eq on metadata and built-in fields, In, Range, And/Or/Not, numbers compared by value,
/// arrays matching any element; with a small `top_k` the filter applies before the cut, not after.
pub async fn filters<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("filters");
    setup(&c, store).await;
    let mut model = Model::default();
    write(&c, store, &mut model, upserts(filter_corpus()), "writing the filter corpus").await;
    let dense_query = unit([0.5, -0.25, 0.75, 0.1]);
    let sparse_query = [(100, 1.0), (201, 0.5)];
    for filter in filter_cases() {
        let requests = [
            dense_req(dense_query.clone(), 100, Some(filter.clone())),
            sparse_req(&sparse_query, 100, Some(filter.clone())),
            dense_req(dense_query.clone(), 3, Some(filter.clone())),
            sparse_req(&sparse_query, 3, Some(filter.clone())),
        ];
        let what = format!("search with filter {}", serde_json::to_string(&filter).unwrap_or_default());
        let lists = search(&c, store, &requests, &what).await;
        for (i, (req, hits)) in requests.iter().zip(&lists).enumerate() {
            let kind = ["dense, top 100", "sparse, top 100", "dense, top 3", "sparse, top 3"][i];
            let tol = if i % 2 == 0 { DENSE_TOL } else { SPARSE_TOL };
            expect_hits(&c, &format!("{what} ({kind})"), hits, req, &model, tol);
        }
    }
}

/// Hits are sorted by descending score with exact ties in ascending chunk id order (byte order: `t#10` before
/// `t#2`), whatever the insertion order; `top_k` is respected and top-k(k) is a prefix of top-k(k+1).
pub async fn top_k_and_ties<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("top_k_and_ties");
    setup(&c, store).await;
    let mut model = Model::default();
    // Scores against the query [1, 0, 0, 0]: 0.9 for t#1, 0.8 for t#9/t#10/t#2, 0.5 for t#5/t#0, 0.1 for t#7.
    let along = |x: f32| vec![x, (1.0 - x * x).sqrt(), 0.0, 0.0];
    let tf = |w: f32| Some(sparse(&[(1, w)]));
    let rec = |id: &str, x: f32, w: f32| record(passage(id, "t"), Some(along(x)), tf(w));
    let first = vec![rec("t#9", 0.8, 2.0), rec("t#5", 0.5, 1.0), rec("t#1", 0.9, 3.0)];
    let second = vec![rec("t#2", 0.8, 2.0), rec("t#7", 0.1, 0.5), rec("t#10", 0.8, 2.0), rec("t#0", 0.5, 1.0)];
    write(&c, store, &mut model, upserts(first), "writing the first batch of tie records").await;
    write(&c, store, &mut model, upserts(second), "writing the second batch of tie records").await;
    let expected = ["t#1", "t#10", "t#2", "t#9", "t#0", "t#5", "t#7"];
    for space in ["dense", "sparse"] {
        let mut previous: Option<Vec<ScoredHit>> = None;
        for k in 1..=expected.len() + 1 {
            let req = if space == "dense" {
                dense_req(vec![1.0, 0.0, 0.0, 0.0], k, None)
            } else {
                sparse_req(&[(1, 1.0)], k, None)
            };
            let what = format!("{space} search with top_k {k}");
            let hits = expect_search(&c, store, &model, &req, &what).await;
            let want = &expected[..k.min(expected.len())];
            c.that(
                ids(&hits) == want,
                format_args!(
                    "{what}: expected ids {want:?} (ties by ascending chunk id), got:\n{}",
                    render_hits(&hits)
                ),
            );
            if let Some(prev) = previous {
                c.that(
                    hits.len() >= prev.len() && ids(&hits[..prev.len()]) == ids(&prev),
                    format_args!(
                        "{what}: top-{} is not a prefix of top-{k}:\n  top-{}:\n{}  top-{k}:\n{}",
                        k - 1,
                        k - 1,
                        render_hits(&prev),
                        render_hits(&hits)
                    ),
                );
            }
            previous = Some(hits);
        }
    }
}

/// Dense search ranks by the dot product of unit vectors (cosine) within 1e-5 of brute force, and never returns
/// chunks without a dense vector (sparse-only passages, sections).
pub async fn dense_scoring<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("dense_scoring");
    setup(&c, store).await;
    let mut model = Model::default();
    let mut rng = Rng::new(11);
    let mut records = Vec::new();
    for i in 0..48 {
        let mut chunk = passage(&format!("v#{i:02}"), &format!("v{}", i % 6));
        let r = match i % 8 {
            7 => record(chunk, None, Some(sparse(&[(1, 1.0)]))),
            6 => {
                chunk.kind = ChunkKind::Section;
                record(chunk, None, None)
            }
            5 => record(chunk, Some(rng.unit_vector()), Some(sparse(&[(1, 1.0)]))),
            _ => record(chunk, Some(rng.unit_vector()), None),
        };
        records.push(r);
    }
    let self_match = records[3].dense.clone().expect("invariant: record 3 has a dense vector");
    write(&c, store, &mut model, upserts(records), "writing 48 records").await;
    let mut queries: Vec<Vec<f32>> = (0..6).map(|_| rng.unit_vector()).collect();
    queries.push(self_match);
    for (q, query) in queries.iter().enumerate() {
        for k in [1, 5, 100] {
            let req = dense_req(query.clone(), k, None);
            expect_search(&c, store, &model, &req, &format!("dense query {q} with top_k {k}")).await;
        }
    }
    let hits = search(&c, store, &[dense_req(queries[6].clone(), 1, None)], "dense search for a stored vector").await;
    c.that(
        hits[0].first().is_some_and(|h| h.chunk.id == "v#03" && (f64::from(h.score) - 1.0).abs() <= DENSE_TOL),
        format_args!(
            "searching the stored vector of v#03 should find it first with score 1:\n{}",
            render_hits(&hits[0])
        ),
    );
}

/// Sparse search scores `sum(idf(t) * q(t) * d(t))` with `idf(t) = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5))`,
/// `N` counting only chunks with a sparse vector, within 1e-4 of a hand computation, before and after a deletion
/// changes `N`; only chunks sharing a term with the query are returned; chunks without a sparse vector and
/// sections without vectors never are, though `get` finds them.
pub async fn sparse_scoring<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("sparse_scoring");
    setup(&c, store).await;
    let mut model = Model::default();
    let mut section = passage("s#sec", "ss");
    section.kind = ChunkKind::Section;
    let records = vec![
        record(passage("s#a", "sa"), Some(unit([1.0, 0.0, 0.0, 0.0])), Some(sparse(&[(1, 2.0), (2, 1.0)]))),
        record(passage("s#b", "sb"), None, Some(sparse(&[(1, 1.0)]))),
        record(passage("s#c", "sc"), None, Some(sparse(&[(3, 1.5)]))),
        record(passage("s#d", "sd"), Some(unit([0.0, 1.0, 0.0, 0.0])), None),
        record(section.clone(), None, None),
    ];
    write(&c, store, &mut model, upserts(records), "writing 5 records, 3 with sparse vectors").await;
    let query = [(1, 1.0), (2, 0.5)];
    let expect_exact = |hits: &[ScoredHit], total: f64, what: &str| {
        // Term 1 is in s#a (weight 2) and s#b (weight 1); term 2 only in s#a (weight 1).
        let (idf1, idf2) = (idf(total, 2.0), idf(total, 1.0));
        let want = [("s#a", idf1 * 1.0 * 2.0 + idf2 * 0.5 * 1.0), ("s#b", idf1 * 1.0 * 1.0)];
        c.eq(&format!("{what}: ids"), ids(hits), want.iter().map(|w| w.0).collect());
        for (hit, (id, score)) in hits.iter().zip(want) {
            c.that(
                (f64::from(hit.score) - score).abs() <= SPARSE_TOL,
                format_args!(
                    "{what}: `{id}` scored {} but sum(idf * q * d) with idf = ln(1 + (N - n + 0.5) / (n + 0.5)) and \
                     N = {total} (chunks with a sparse vector) gives {score:.6}",
                    hit.score
                ),
            );
        }
    };
    let req = sparse_req(&query, 10, None);
    let hits = expect_search(&c, store, &model, &req, "sparse search over 3 sparse chunks").await;
    expect_exact(&hits, 3.0, "sparse search over 3 sparse chunks");
    c.eq("get of a section without vectors", get(&c, store, &["s#sec"]).await, vec![Some(section)]);

    delete_documents(&c, store, &mut model, &["sc"], "deleting s#c").await;
    let hits = expect_search(&c, store, &model, &req, "sparse search after deleting s#c").await;
    expect_exact(&hits, 2.0, "sparse search after deleting s#c (N = 2)");
    for (what, req) in [
        ("sparse search for the deleted chunk's only term", sparse_req(&[(3, 1.0)], 10, None)),
        ("sparse search for a term no chunk has", sparse_req(&[(99, 1.0)], 10, None)),
        ("dense search (sparse-only chunks and sections never match)", dense_req(unit([0.0, 1.0, 0.0, 0.0]), 10, None)),
    ] {
        expect_search(&c, store, &model, &req, what).await;
    }
}

/// The space of a store is fixed: `ensure_spaces` with another dense model id, dimension or sparse encoder is a
/// `Mismatch`; a batch with an invalid record (dense vector of the wrong dimension, non-finite value, unsorted
/// sparse indices) fails and applies nothing, neither its valid records nor its deletes; a dense query of the
/// wrong dimension is a `Mismatch`.
pub async fn space_mismatch<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("space_mismatch");
    setup(&c, store).await;
    let mut model = Model::default();
    let valid =
        |id: &str, doc: &str| record(passage(id, doc), Some(unit([1.0, 2.0, 3.0, 4.0])), Some(sparse(&[(1, 1.0)])));
    write(&c, store, &mut model, upserts(vec![valid("v#0", "v")]), "writing one valid record").await;
    c.ok(
        "ensure_spaces again with the same specs",
        store.ensure_spaces(&Ctx::new(), Some(&dense_spec()), Some(&sparse_spec())).await,
    );
    let other_model = EmbeddingSpec { model_id: "another-model".into(), ..dense_spec() };
    let other_dim = EmbeddingSpec { dim: 8, ..dense_spec() };
    let other_sparse = SparseSpec { encoder_id: "another-encoder".into(), ..sparse_spec() };
    for (what, dense, sparse) in [
        ("ensure_spaces with another dense model id", Some(&other_model), Some(&sparse_spec())),
        ("ensure_spaces with another dense dimension", Some(&other_dim), Some(&sparse_spec())),
        ("ensure_spaces with another sparse encoder", Some(&dense_spec()), Some(&other_sparse)),
    ] {
        let e = c.err(what, store.ensure_spaces(&Ctx::new(), dense, sparse).await);
        c.eq(&format!("{what}: error kind ({})", e.message()), e.kind(), ErrorKind::Mismatch);
    }
    let s = stats(&c, store).await;
    c.eq("stats dense_spec after refused ensure_spaces", s.dense_spec, Some(dense_spec()));
    c.eq("stats sparse_spec after refused ensure_spaces", s.sparse_spec, Some(sparse_spec()));

    let mut wrong_dim = valid("bad#0", "bad");
    wrong_dim.dense = Some(vec![1.0, 0.0, 0.0]);
    let mut not_finite = valid("bad#1", "bad");
    not_finite.dense = Some(vec![f32::NAN, 0.0, 0.0, 0.0]);
    let mut unsorted = valid("bad#2", "bad");
    unsorted.sparse = Some(ragtune_core::SparseVector { indices: vec![3, 1], values: vec![1.0, 1.0] });
    for (what, bad) in [
        ("a dense vector of 3 dimensions", wrong_dim),
        ("a non-finite dense value", not_finite),
        ("unsorted sparse indices", unsorted),
    ] {
        let batch = WriteBatch { delete_docs: vec!["v".into()], upsert: vec![valid("ok#0", "ok"), bad] };
        let what = format!("a batch deleting v and upserting a valid record and one with {what}");
        let e = c.err(&what, store.write(&Ctx::new(), batch).await);
        c.that(
            matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Mismatch),
            format_args!("{what}: error kind is {} ({}); expected invalid_input or mismatch", e.kind(), e.message()),
        );
        let expected = vec![model.chunk("v#0"), None];
        c.eq(
            &format!("{what}: nothing of the failed batch may be applied (get v#0, ok#0)"),
            get(&c, store, &["v#0", "ok#0"]).await,
            expected,
        );
        expect_counts(&c, store, &model, &format!("after the failed batch with {what}")).await;
    }

    let e = c.err(
        "a dense query of 3 dimensions",
        store.search(&Ctx::new(), &[dense_req(vec![1.0, 0.0, 0.0], 10, None)]).await,
    );
    c.eq(&format!("error kind of a dense query of 3 dimensions ({})", e.message()), e.kind(), ErrorKind::Mismatch);
    expect_search(
        &c,
        store,
        &model,
        &dense_req(unit([1.0, 0.0, 0.0, 0.0]), 10, None),
        "dense search after the refused writes",
    )
    .await;
}

/// A `search` call with several requests returns one list per request, in request order, each equal to what
/// the request returns alone.
pub async fn request_order<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("request_order");
    setup(&c, store).await;
    let mut model = Model::default();
    let mut rng = Rng::new(17);
    let records = (0..30)
        .map(|i| {
            let terms = [(i % 5, 1.0 + (i % 7) as f32), (10 + i % 3, 1.0)];
            record(passage(&format!("r#{i:02}"), &format!("r{}", i % 3)), Some(rng.unit_vector()), Some(sparse(&terms)))
        })
        .collect();
    write(&c, store, &mut model, upserts(records), "writing 30 records").await;
    let q1 = rng.unit_vector();
    let requests = vec![
        dense_req(q1.clone(), 3, None),
        sparse_req(&[(2, 1.0), (11, 0.5)], 5, None),
        dense_req(rng.unit_vector(), 2, Some(Filter::eq("doc_id", "r1"))),
        sparse_req(&[(99, 1.0)], 5, None),
        dense_req(rng.unit_vector(), 1, None),
        sparse_req(&[(4, 1.0)], 4, Some(Filter::eq("doc_id", "r2"))),
        dense_req(q1, 3, None),
    ];
    let lists = search(&c, store, &requests, "one search call with 7 requests").await;
    for (i, (req, hits)) in requests.iter().zip(&lists).enumerate() {
        let what = format!("list {} of a search call with 7 requests", i + 1);
        let tol = if matches!(req.vector, ragtune_core::VectorQuery::Dense(_)) { DENSE_TOL } else { SPARSE_TOL };
        expect_hits(&c, &what, hits, req, &model, tol);
        let alone = search(&c, store, std::slice::from_ref(req), &format!("request {} alone", i + 1)).await;
        c.eq(&format!("{what} compared with the same request alone"), ids(hits), ids(&alone[0]));
    }
}

/// One write of 5,000 records of 500 documents succeeds and is counted; searches, filters, `get` and a large
/// delete work on the result.
pub async fn large_batch<S: VectorStore + ?Sized>(store: &S) {
    let c = Checker::new("large_batch");
    setup(&c, store).await;
    let mut model = Model::default();
    let mut rng = Rng::new(23);
    let records: Vec<Record> = (0..5_000_u32)
        .map(|i| {
            let doc = format!("big-{:03}", i / 10);
            let terms = [(1, 1.0), (2 + i / 10, 1.0), (1_000 + i, 1.0)];
            record(passage(&format!("{doc}#{}", i % 10), &doc), Some(rng.unit_vector()), Some(sparse(&terms)))
        })
        .collect();
    let report = write(&c, store, &mut model, upserts(records), "writing 5,000 records in one batch").await;
    c.eq("report of writing 5,000 records", report, WriteReport { upserted: 5_000, deleted: 0 });
    let counts = Counts { chunks: 5_000, documents: 500, dense_vectors: 5_000, sparse_vectors: 5_000 };
    c.eq("stats counts after writing 5,000 records", Counts::from(&stats(&c, store).await), counts);
    let searches = [
        ("dense search, top 10", dense_req(rng.unit_vector(), 10, None)),
        ("sparse search for one record's own term", sparse_req(&[(1_000 + 4_321, 1.0), (1, 0.1)], 5, None)),
        ("sparse search for a term every record has (all tied)", sparse_req(&[(1, 1.0)], 20, None)),
        (
            "dense search filtered on one document",
            dense_req(rng.unit_vector(), 100, Some(Filter::eq("doc_id", "big-123"))),
        ),
    ];
    for (what, req) in &searches {
        expect_search(&c, store, &model, req, what).await;
    }
    let wanted = ["big-000#0", "big-432#1", "big-499#9", "big-500#0"];
    let expected: Vec<Option<Chunk>> = wanted.iter().map(|id| model.chunk(id)).collect();
    c.eq("get after writing 5,000 records", get(&c, store, &wanted).await, expected);

    let doomed: Vec<String> = (0..100).map(|d| format!("big-{:03}", d * 5)).collect();
    let batch = WriteBatch { delete_docs: doomed, upsert: Vec::new() };
    let report = write(&c, store, &mut model, batch, "deleting 100 documents in one batch").await;
    c.eq("report of deleting 100 documents of 10 chunks", report, WriteReport { upserted: 0, deleted: 1_000 });
    expect_counts(&c, store, &model, "after deleting 100 documents").await;
    for (what, req) in &searches {
        expect_search(&c, store, &model, req, &format!("{what}, after deleting 100 documents")).await;
    }
}

const BASE: usize = 4;
const PER_BATCH: usize = 8;
const BATCHES: usize = 24;
const READERS: usize = 4;
const SHARED_TERM: u32 = 42;

/// Sets the flag when dropped, so reader tasks stop even when the writer panics.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A record of the concurrency check: every record has the same vectors, so every search returns all of them.
fn shared_record(id: String, doc: &str, generation: usize) -> Record {
    let mut chunk = Chunk::new(id, doc, "shared tokens");
    chunk.metadata.insert("generation".into(), json!(generation));
    record(chunk, Some(unit([1.0, 1.0, 1.0, 1.0])), Some(sparse(&[(SHARED_TERM, 1.0)])))
}

/// Checks that one hit list shows whole batches only.
///
/// Batch `g` atomically replaces document `live` by `PER_BATCH` chunks of generation `g` and adds `PER_BATCH`
/// chunks of the new document `batch-g`. So a consistent view holds `base` whole, and either no `live` and no
/// batch document, or `live` of one generation `g` and exactly the documents `batch-0..=g`, each whole.
fn check_snapshot(c: &Checker, what: &str, hits: &[ScoredHit], only_live: bool) {
    let mut docs: BTreeMap<&str, (usize, BTreeSet<u64>)> = BTreeMap::new();
    for h in hits {
        let generation = h.chunk.metadata.get("generation").and_then(serde_json::Value::as_u64).unwrap_or(u64::MAX);
        let entry = docs.entry(h.chunk.doc_id.as_str()).or_default();
        entry.0 += 1;
        entry.1.insert(generation);
    }
    let fail = |why: &str| {
        let summary: Vec<String> =
            docs.iter().map(|(d, (n, g))| format!("{d}: {n} chunks, generations {g:?}")).collect();
        c.fail(format_args!("{what}: {why} (a reader saw a partially applied batch?)\n    {}", summary.join("\n    ")))
    };
    let live = docs.get("live").map(|(n, g)| (*n, g.iter().copied().collect::<Vec<_>>()));
    let live_generation = match live {
        None => None,
        Some((n, g)) if n == PER_BATCH && g.len() == 1 => Some(g[0]),
        Some(_) => fail(&format!("document `live` must have {PER_BATCH} chunks of one generation")),
    };
    if only_live {
        if docs.keys().any(|d| *d != "live") {
            fail("a search filtered on doc_id `live` returned other documents");
        }
        return;
    }
    if docs.get("base").map(|e| e.0) != Some(BASE) {
        fail(&format!("document `base` must have {BASE} chunks"));
    }
    let batch_docs: Vec<(&str, usize, &BTreeSet<u64>)> =
        docs.iter().filter(|(d, _)| d.starts_with("batch-")).map(|(d, (n, g))| (*d, *n, g)).collect();
    let expected_batches = live_generation.map_or(0, |g| g as usize + 1);
    if batch_docs.len() != expected_batches {
        fail(&format!(
            "with `live` at generation {live_generation:?} there must be {expected_batches} batch documents"
        ));
    }
    for (i, (doc, n, generations)) in batch_docs.iter().enumerate() {
        let whole = *doc == format!("batch-{i:03}") && *n == PER_BATCH && generations.iter().eq([i as u64].iter());
        if !whole {
            fail(&format!("document `{doc}` must be `batch-{i:03}` with {PER_BATCH} chunks of generation {i}"));
        }
    }
}

async fn read_round<S: VectorStore + ?Sized>(c: &Checker, store: &S, reader: usize) {
    let all = 10_000;
    let requests = [
        sparse_req(&[(SHARED_TERM, 1.0)], all, None),
        dense_req(unit([1.0, 1.0, 1.0, 1.0]), all, None),
        sparse_req(&[(SHARED_TERM, 1.0)], all, Some(Filter::eq("doc_id", "live"))),
        dense_req(unit([1.0, 1.0, 1.0, 1.0]), all, Some(Filter::eq("doc_id", "live"))),
    ];
    let what = format!("reader {reader}: search");
    let lists = match store.search(&Ctx::new(), &requests).await {
        Ok(lists) => lists,
        Err(e) => c.fail(format_args!("{what} failed while a writer was writing: {} error: {}", e.kind(), e.chain())),
    };
    c.eq(&format!("{what}: number of hit lists"), lists.len(), requests.len());
    for (i, (req, hits)) in requests.iter().zip(&lists).enumerate() {
        let what = format!("{what}, request {}", i + 1);
        check_list_shape(c, &what, req, hits);
        check_snapshot(c, &what, hits, i >= 2);
    }
    let s = match store.stats(&Ctx::new()).await {
        Ok(s) => s,
        Err(e) => c.fail(format_args!("reader {reader}: stats failed while a writer was writing: {}", e.chain())),
    };
    let counts = Counts::from(&s);
    let batches = (s.chunks as usize).saturating_sub(BASE + PER_BATCH) / PER_BATCH;
    let expected = if s.chunks as usize == BASE {
        Counts { chunks: BASE as u64, documents: 1, dense_vectors: BASE as u64, sparse_vectors: BASE as u64 }
    } else {
        let chunks = (BASE + PER_BATCH + batches * PER_BATCH) as u64;
        Counts { chunks, documents: 2 + batches as u64, dense_vectors: chunks, sparse_vectors: chunks }
    };
    c.eq(&format!("reader {reader}: stats show whole batches only"), counts, expected);
}

/// Several reader tasks search while a writer applies batches: readers never get an error and never see part of
/// a batch (each batch replaces one document and adds another; a view holds every batch up to some point, each
/// whole, and nothing after it); `stats` counts whole batches only.
///
/// The readers are `tokio::spawn`ed, so this check needs a Tokio runtime and a `'static` store. On a
/// current-thread runtime readers and writer interleave at every await point (between batches, and inside the
/// store wherever it awaits); on a multi-thread runtime they also run in parallel, which is the stronger test.
pub async fn concurrent_readers_with_writer<S: VectorStore + ?Sized + 'static>(store: Arc<S>) {
    let c = Checker::new("concurrent_readers_with_writer");
    setup(&c, &*store).await;
    let base: Vec<Record> = (0..BASE).map(|i| shared_record(format!("base#{i}"), "base", 0)).collect();
    c.ok("writing the base document", store.upsert(&Ctx::new(), base).await);
    let done = Arc::new(AtomicBool::new(false));
    let stop = StopOnDrop(Arc::clone(&done));
    let readers: Vec<_> = (0..READERS)
        .map(|reader| {
            let store = Arc::clone(&store);
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                let mut rounds = 0_u64;
                loop {
                    let last = done.load(Ordering::Acquire);
                    read_round(&c, &*store, reader).await;
                    rounds += 1;
                    if last {
                        return rounds;
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for b in 0..BATCHES {
        let mut upsert: Vec<Record> = (0..PER_BATCH).map(|i| shared_record(format!("live#{i}"), "live", b)).collect();
        let doc = format!("batch-{b:03}");
        upsert.extend((0..PER_BATCH).map(|i| shared_record(format!("{doc}#{i}"), &doc, b)));
        let batch = WriteBatch { delete_docs: vec!["live".into()], upsert };
        c.ok(&format!("writer: batch {b}"), store.write(&Ctx::new(), batch).await);
        tokio::task::yield_now().await;
    }
    drop(stop);
    for (reader, handle) in readers.into_iter().enumerate() {
        match handle.await {
            Ok(rounds) => c.that(rounds > 0, format_args!("reader {reader} never searched")),
            Err(e) => c.fail(format_args!("reader {reader} failed: {}", super::panic_message(e))),
        }
    }
    read_round(&c, &*store, READERS).await;
    let s = stats(&c, &*store).await;
    let chunks = (BASE + PER_BATCH * (BATCHES + 1)) as u64;
    let want = Counts { chunks, documents: 2 + BATCHES as u64, dense_vectors: chunks, sparse_vectors: chunks };
    c.eq("stats after every batch", Counts::from(&s), want);
}
