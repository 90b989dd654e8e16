//! The `Embedder` contract suite of the testkit against the caches in front of an embedder (`QueryCache`,
//! `RequestVectors`, over the testkit's fake embedder) and against the real ONNX `FastEmbedder`.
//!
//! The ONNX run needs ONNX Runtime and the model provisioned by `cargo xtask models` under `$RAGTUNE_HOME`;
//! without them it prints why it skips, unless `RAGTUNE_REQUIRE_MODELS=1`, where a missing model fails it.

use std::io::Write;
use std::sync::{Arc, OnceLock};

use ragtune_embed::{FastEmbedder, FastEmbedderConfig, QueryCache, RequestVectors};
use ragtune_provision::ModelLayout;
use ragtune_testkit::contract::embedder::embedder_contract;
use ragtune_testkit::fakes::HashEmbedder;

#[tokio::test]
async fn the_query_cache_meets_the_embedder_contract() {
    embedder_contract(|| async { QueryCache::new(Arc::new(HashEmbedder::new(32)), 100) }).await;
    // A cache too small to hold the suite's texts still answers as its embedder does.
    embedder_contract(|| async { QueryCache::new(Arc::new(HashEmbedder::new(32)), 1) }).await;
}

#[tokio::test]
async fn seeded_strips_spare_the_model_their_texts_and_their_whole_passage() {
    use ragtune_core::{Candidate, Chunk, Ctx, Embedder as _, ScoredHit, SpanVector, TextRole};
    let model = Arc::new(HashEmbedder::new(8));
    let vectors = RequestVectors::new(model.clone());
    let text = "First sentence here. Second one there.";
    let candidate = Candidate::from_hit(ScoredHit { chunk: Chunk::new("c", "d", text), score: 1.0 }, "dense", 1);
    let unit = |i: usize| (0..8).map(|j| if j == i { 1.0 } else { 0.0 }).collect::<Vec<f32>>();
    let spans = vec![
        SpanVector { start: 0, end: 20, vector: unit(0) },
        SpanVector { start: 21, end: 38, vector: unit(1) },
        // A span of another version of the text is left out, of the strips and of the mean.
        SpanVector { start: 30, end: 99, vector: unit(2) },
    ];
    assert_eq!(vectors.seed(std::slice::from_ref(&candidate), &[spans]), 2);
    let got = vectors.embed(&Ctx::new(), &[text, "First sentence here."], TextRole::Passage).await.unwrap();
    assert_eq!(model.calls(), 0, "the whole passage and its strip came from the seed");
    let half = std::f32::consts::FRAC_1_SQRT_2;
    assert!((got[0][0] - half).abs() < 1e-6 && (got[0][1] - half).abs() < 1e-6 && got[0][2] == 0.0, "{:?}", got[0]);
    assert_eq!(got[1], unit(0));
    // A text not seeded goes to the model.
    vectors.embed(&Ctx::new(), &["something else"], TextRole::Passage).await.unwrap();
    assert_eq!(model.calls(), 1);
    // Strips covering less than four fifths of a passage do not stand for it: it is embedded.
    let long = "Only this part is a strip. The rest of this passage was never cut into strips at all.";
    let partial = Candidate::from_hit(ScoredHit { chunk: Chunk::new("p", "d", long), score: 1.0 }, "dense", 1);
    vectors.seed(std::slice::from_ref(&partial), &[vec![SpanVector { start: 0, end: 26, vector: unit(3) }]]);
    vectors.embed(&Ctx::new(), &[long], TextRole::Passage).await.unwrap();
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn request_vectors_meet_the_embedder_contract() {
    embedder_contract(|| async { RequestVectors::new(Arc::new(HashEmbedder::new(32))) }).await;
    // The stack the engine builds: one question's vectors in front of the query cache.
    embedder_contract(|| async {
        RequestVectors::new(Arc::new(QueryCache::new(Arc::new(HashEmbedder::new(32)), 100)))
    })
    .await;
}

/// The provisioned model, loaded once, or `None` after printing why the test skips.
fn fast_embedder() -> Option<Arc<FastEmbedder>> {
    static MODEL: OnceLock<Arc<FastEmbedder>> = OnceLock::new();
    let layout = ModelLayout::new(ragtune_provision::ragtune_home());
    // The model file as shipped (`minilm_dir`), as the ONNX tests load it.
    if !layout.are_wheel_files_provisioned() {
        let msg = format!("models are not provisioned under {}: run `cargo xtask models`", layout.home().display());
        if std::env::var("RAGTUNE_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
            panic!("RAGTUNE_REQUIRE_MODELS=1 but {msg}");
        }
        // Written straight to stderr: libtest captures `eprintln!` of passing tests, and a skip must be seen.
        let _ = writeln!(std::io::stderr(), "SKIPPED: {msg}");
        return None;
    }
    Some(Arc::clone(MODEL.get_or_init(|| {
        let config = FastEmbedderConfig::new(layout.minilm_dir(), layout.onnxruntime_library());
        Arc::new(FastEmbedder::new(config).unwrap())
    })))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_onnx_embedder_meets_the_embedder_contract() {
    let Some(model) = fast_embedder() else { return };
    embedder_contract(|| {
        let model = Arc::clone(&model);
        async move { model }
    })
    .await;
    embedder_contract(|| {
        let model = Arc::clone(&model);
        async move { QueryCache::new(model, 100) }
    })
    .await;
}
