//! The ONNX models for real: all-MiniLM-L6-v2 through `FastEmbedder`, and the cross-encoder code path through
//! `CrossEncoderReranker` on a tiny shipped model.
//!
//! They need ONNX Runtime and the model provisioned by `cargo xtask models` under `$RAGTUNE_HOME` (default: the user's
//! cache directory + `ragtune`). Without them they print why they skip — unless `RAGTUNE_REQUIRE_MODELS=1` (set by
//! `cargo xtask ci` after provisioning), where a missing model fails the test.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ragtune_core::{Candidate, Chunk, Ctx, Embedder, ErrorKind, Reranker, ScoredHit, TextRole, TraceSink};
use ragtune_embed::{CrossEncoderConfig, CrossEncoderReranker, FastEmbedder, FastEmbedderConfig};
use ragtune_provision::ModelLayout;

fn layout() -> ModelLayout {
    ModelLayout::new(ragtune_provision::ragtune_home())
}

/// The provisioned layout, or `None` after printing why the test skips.
fn provisioned() -> Option<ModelLayout> {
    let layout = layout();
    // These tests load the model file as shipped (`minilm_dir`), not the int8 variant the engine builds from it.
    if layout.are_wheel_files_provisioned() {
        return Some(layout);
    }
    let msg = format!("models are not provisioned under {}: run `cargo xtask models`", layout.home().display());
    if std::env::var("RAGTUNE_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
        panic!("RAGTUNE_REQUIRE_MODELS=1 but {msg}");
    }
    // Written straight to stderr: libtest captures `eprintln!` of passing tests, and a skip must be seen.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {msg}");
    None
}

fn embedder() -> Option<&'static FastEmbedder> {
    static MODEL: OnceLock<FastEmbedder> = OnceLock::new();
    let layout = provisioned()?;
    Some(MODEL.get_or_init(|| {
        FastEmbedder::new(FastEmbedderConfig::new(layout.minilm_dir(), layout.onnxruntime_library())).unwrap()
    }))
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[tokio::test]
async fn embeddings_are_normalized_and_semantic() {
    let Some(e) = embedder() else { return };
    assert_eq!(e.spec().dim, 384);
    let texts = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply."];
    let v = e.embed(&Ctx::new(), &texts, TextRole::Passage).await.unwrap();
    assert_eq!(v.len(), 3);
    for x in &v {
        assert_eq!(x.len(), 384);
        assert!((cosine(x, x) - 1.0).abs() < 1e-4);
    }
    let (close, far) = (cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
    assert!(close > 0.5 && far < 0.2 && close > far + 0.3, "similar {close}, unrelated {far}");
    // Deterministic across calls and roles (all-MiniLM has no query prefix).
    let again = e.embed(&Ctx::new(), &texts[..1], TextRole::Query).await.unwrap();
    assert!(cosine(&again[0], &v[0]) > 0.99999);
}

#[tokio::test]
async fn a_batch_equals_one_text_at_a_time_in_order() {
    let Some(e) = embedder() else { return };
    let texts: Vec<String> = (0..100).map(|i| format!("passage number {i} about topic {}", i % 7)).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let sink = TraceSink::new();
    let batch = e.embed(&Ctx::new().with_trace(sink.clone()), &refs, TextRole::Passage).await.unwrap();
    assert_eq!(batch.len(), 100);
    // 100 texts in batches of 32 are four model calls.
    assert_eq!(sink.take()[0].cost.calls, 4);
    for i in [0usize, 31, 32, 33, 99] {
        let one = e.embed(&Ctx::new(), &refs[i..=i], TextRole::Passage).await.unwrap();
        assert!(cosine(&one[0], &batch[i]) > 0.9999, "text {i}");
    }
    assert!(e.embed(&Ctx::new(), &[""], TextRole::Query).await.unwrap()[0].iter().all(|x| x.is_finite()));
    assert!(e.embed(&Ctx::new(), &[], TextRole::Query).await.unwrap().is_empty());
}

#[tokio::test]
async fn truncation_and_cost_are_traced_and_cancellation_stops_work() {
    let Some(e) = embedder() else { return };
    let sink = TraceSink::new();
    let ctx = Ctx::new().with_trace(sink.clone());
    let long = "word ".repeat(2000);
    e.embed(&ctx, &[long.as_str(), "short text"], TextRole::Passage).await.unwrap();
    let events = sink.take();
    let truncated = events.iter().find(|ev| ev.action == "truncated").expect("a truncation event");
    assert_eq!(truncated.detail["texts"], 1);
    let call = events.iter().find(|ev| ev.action == e.spec().model_id).expect("a call event");
    // Two texts run as one batch per session (at most one per text), so that a small call uses every session.
    let batches = e.config().session_count().min(2) as u64;
    assert_eq!((call.cost.docs, call.cost.calls), (2, batches));
    // The long text counts max_length tokens and "short text" its own four ([CLS] short text [SEP]): padding to
    // the batch's longest input is not charged.
    assert_eq!(call.cost.tokens, 256 + 4, "{:?}", call.cost);

    let cancelled = Ctx::new();
    cancelled.cancel.cancel();
    let err = e.embed(&cancelled, &["x"], TextRole::Query).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cancelled);
    let late = Ctx::new().with_timeout(std::time::Duration::ZERO);
    let err = e.embed(&late, &["x"], TextRole::Query).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded);
}

#[tokio::test]
async fn span_vectors_come_from_the_same_pass_and_text_vectors_are_unchanged() {
    let Some(e) = embedder() else { return };
    let ctx = Ctx::new();
    let first = "Scurvy is a disease resulting from a lack of vitamin C.";
    let second = "The stock market fell sharply on Monday.";
    let text = format!("{first} {second}");
    let long = format!("{} Otters hold hands while they sleep.", "filler words ".repeat(300));
    let texts = [text.as_str(), "A man is eating food.", long.as_str()];
    let spans = vec![
        vec![(0, first.len()), (first.len() + 1, text.len())],
        Vec::new(),
        vec![(0, 12), (long.len() - 36, long.len())],
    ];
    let got = e.embed_spans(&ctx, &texts, &spans).await.unwrap();
    // The texts' vectors are the bits `embed` gives (same pooling, same normalisation), so dense retrieval does not
    // change when indexing also pools strips.
    let plain = e.embed(&ctx, &texts, TextRole::Passage).await.unwrap();
    assert_eq!(got.texts, plain);
    assert_eq!(got.spans.iter().map(Vec::len).collect::<Vec<_>>(), [2, 0, 2]);
    // A span vector is unit length and close to the span embedded alone (the model read it in its passage), closer
    // to its own sentence than to the other one.
    let alone = e.embed(&ctx, &[first, second], TextRole::Passage).await.unwrap();
    let (a, b) = (got.spans[0][0].as_ref().unwrap(), got.spans[0][1].as_ref().unwrap());
    assert!((cosine(a, a) - 1.0).abs() < 1e-4);
    assert!(
        cosine(a, &alone[0]) > 0.7 && cosine(a, &alone[0]) > cosine(a, &alone[1]) + 0.2,
        "{}",
        cosine(a, &alone[0])
    );
    assert!(
        cosine(b, &alone[1]) > 0.7 && cosine(b, &alone[1]) > cosine(b, &alone[0]) + 0.2,
        "{}",
        cosine(b, &alone[1])
    );
    // Past the 256-token window the model saw nothing of a span: no vector, rather than a made-up one.
    assert!(got.spans[2][0].is_some());
    assert!(got.spans[2][1].is_none());
    let err = e.embed_spans(&ctx, &texts, &spans[..1]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(e.role_independent());
}

fn tiny_cross_encoder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny-cross-encoder")
}

/// Needs nothing provisioned: a missing runtime is refused before anything is loaded, in every process state.
#[test]
fn a_missing_onnx_runtime_is_an_unavailable_error_not_a_panic() {
    let missing = Path::new("/nonexistent/libonnxruntime.so.1.31.1");
    let errors = [
        ragtune_embed::init_onnx_runtime(missing).unwrap_err(),
        FastEmbedder::new(FastEmbedderConfig::new("/nonexistent/model", missing)).unwrap_err(),
        CrossEncoderReranker::new(CrossEncoderConfig::new(tiny_cross_encoder(), missing, "tiny")).unwrap_err(),
    ];
    for err in errors {
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert!(err.to_string().contains("/nonexistent/libonnxruntime.so.1.31.1"), "{err}");
        assert!(err.to_string().contains("cargo xtask models"), "{err}");
    }
    // A file that is not a library is refused by the loader, unless another test of this process (`cargo test`
    // runs tests as threads of one process) has loaded the real runtime first, which a process keeps.
    let not_a_library = tiny_cross_encoder().join("tokenizer.json");
    if let Err(err) = ragtune_embed::init_onnx_runtime(&not_a_library) {
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert!(err.to_string().contains("tokenizer.json"), "{err}");
    } else {
        assert!(ragtune_embed::onnx_runtime_loaded());
    }
}

#[test]
fn missing_model_files_are_unavailable_errors_not_panics() {
    let Some(layout) = provisioned() else { return };
    let err =
        FastEmbedder::new(FastEmbedderConfig::new("/nonexistent/model", layout.onnxruntime_library())).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.to_string().contains("/nonexistent/model"), "{err}");
    assert!(err.to_string().contains("cargo xtask models"), "{err}");
}

fn candidate(id: &str, text: &str) -> Candidate {
    Candidate::from_hit(ScoredHit { chunk: Chunk::new(id, id, text), score: 0.0 }, "bm25", 1)
}

/// The tiny cross-encoder in `tests/data` has UNTRAINED weights (see `scripts/make_tiny_cross_encoder.py`): it
/// exercises the real ONNX path of `CrossEncoderReranker`; no ranking quality is claimed from it.
#[tokio::test]
async fn the_cross_encoder_runs_the_real_onnx_path() {
    let Some(layout) = provisioned() else { return };
    let reranker = CrossEncoderReranker::new(CrossEncoderConfig::new(
        tiny_cross_encoder(),
        layout.onnxruntime_library(),
        "tiny-untrained",
    ))
    .unwrap();
    assert_eq!(reranker.name(), "cross-encoder:tiny-untrained");
    let cands = vec![
        candidate("a", "the stock market fell"),
        candidate("b", "scurvy is caused by vitamin c deficiency"),
        candidate("c", "a cat sat on the mat"),
    ];
    let sink = TraceSink::new();
    let ctx = Ctx::new().with_trace(sink.clone());
    let scores = reranker.score(&ctx, "vitamin c deficiency scurvy", &cands).await.unwrap();
    assert_eq!(scores.len(), 3);
    assert!(scores.iter().all(|s| s.is_finite()));
    // The untrained graph scores shared words: the passage sharing four words with the query is first.
    assert!(scores[1] > scores[0] && scores[1] > scores[2], "{scores:?}");
    // Input order is kept and scores are deterministic.
    let reversed: Vec<Candidate> = cands.iter().rev().cloned().collect();
    let again = reranker.score(&Ctx::new(), "vitamin c deficiency scurvy", &reversed).await.unwrap();
    assert_eq!(again, scores.iter().rev().copied().collect::<Vec<_>>());
    let call = &sink.take()[0];
    assert_eq!((call.cost.docs, call.cost.calls), (3, 1));
    assert!(call.cost.tokens > 3 * 4, "{:?}", call.cost);
    // What was reported fits what the cost model declares for three pairs (the controller's reservation).
    assert!(call.cost.fits_within(&reranker.cost_model().estimate(3)), "{:?}", call.cost);
    assert!(reranker.score(&Ctx::new(), "q", &[]).await.unwrap().is_empty());

    // Batches smaller than the candidate list give the same scores in the same order.
    let mut config = CrossEncoderConfig::new(tiny_cross_encoder(), layout.onnxruntime_library(), "tiny-untrained");
    config.batch_size = 2;
    let small_batches = CrossEncoderReranker::new(config).unwrap();
    let mut five = cands.clone();
    five.extend([candidate("d", "vitamin c"), candidate("e", "the market")]);
    let sink = TraceSink::new();
    let batched =
        small_batches.score(&Ctx::new().with_trace(sink.clone()), "vitamin c deficiency scurvy", &five).await.unwrap();
    let whole = reranker.score(&Ctx::new(), "vitamin c deficiency scurvy", &five).await.unwrap();
    let event = &sink.take()[0];
    assert_eq!(event.cost.calls, 1, "one reranker call, whatever the inference batching");
    assert_eq!(event.detail["inference_batches"], 3);
    assert!(event.cost.fits_within(&small_batches.cost_model().estimate(5)), "{:?}", event.cost);
    for (a, b) in batched.iter().zip(&whole) {
        assert!((a - b).abs() < 1e-5, "{batched:?} vs {whole:?}");
    }
    let cancelled = Ctx::new();
    cancelled.cancel.cancel();
    assert_eq!(reranker.score(&cancelled, "q", &five).await.unwrap_err().kind(), ErrorKind::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_pool_gives_the_same_vectors_in_the_same_order_alone_and_concurrently() {
    let Some(layout) = provisioned() else { return };
    let config = |sessions, lone_threads| {
        let mut c = FastEmbedderConfig::new(layout.minilm_dir(), layout.onnxruntime_library());
        c.batch_size = 2;
        c.sessions = sessions;
        c.lone_threads = lone_threads;
        c
    };
    // One session and no lone-call session: every call runs on the same one-thread session.
    let one = FastEmbedder::new(config(1, 1)).unwrap();
    // Three sessions plus a two-thread session for lone one-batch calls.
    let pool = std::sync::Arc::new(FastEmbedder::new(config(3, 2)).unwrap());
    // Texts of different lengths, so batches are formed out of input order and spread over the sessions.
    let texts: Vec<String> = (0..11).map(|i| format!("text {i} {}", "with more words ".repeat(i % 4))).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let expected = one.embed(&Ctx::new(), &refs, TextRole::Passage).await.unwrap();
    let got = pool.embed(&Ctx::new(), &refs, TextRole::Passage).await.unwrap();
    assert_eq!(got.len(), expected.len());
    for (a, b) in got.iter().zip(&expected) {
        assert!(cosine(a, b) > 0.9999, "the same vector whichever session embedded it");
    }
    // A lone single-text call runs on the two-thread session: the same vector.
    let lone = pool.embed(&Ctx::new(), &[refs[5]], TextRole::Query).await.unwrap();
    assert!(cosine(&lone[0], &expected[5]) > 0.9999, "the lone-call session gives the same vector");
    // Concurrent single-text calls, each on whichever session is free.
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let (pool, text) = (pool.clone(), texts[i].clone());
            tokio::spawn(async move { pool.embed(&Ctx::new(), &[text.as_str()], TextRole::Query).await.unwrap() })
        })
        .collect();
    for (i, call) in calls.into_iter().enumerate() {
        let v = call.await.unwrap();
        assert!(cosine(&v[0], &expected[i]) > 0.9999, "call {i}");
    }
}
