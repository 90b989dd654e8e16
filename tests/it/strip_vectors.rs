//! Strip vectors: pooled from each passage's forward pass at indexing time and stored with it, so that answering
//! embeds no strip of a stored passage; the question's vector memory embeds nothing twice.

use std::sync::Arc;

use ragtune::core::{Candidate, Chunk, Ctx, Embedder, SpanVector, TextRole};
use ragtune::{Chunking, Config, Engine, RequestVectors};
use ragtune_testkit::fakes::HashEmbedder;

fn candidate(id: &str, text: &str) -> Candidate {
    Candidate { chunk: Chunk::new(id, id, text), score: 1.0, sources: Default::default() }
}

#[tokio::test]
async fn seeded_strips_and_texts_seen_once_are_not_embedded_again() {
    let model = Arc::new(HashEmbedder::new(8));
    let memory = RequestVectors::new(model.clone());
    let c = candidate("a", "First strip here. Second strip here.");
    let seeded = model.embed_one("anything");
    let spans = vec![vec![
        SpanVector { start: 0, end: 17, vector: seeded.clone() },
        // Outside the text, or of another dimension: ignored, never a panic.
        SpanVector { start: 30, end: 99, vector: seeded.clone() },
        SpanVector { start: 18, end: 36, vector: vec![1.0; 3] },
    ]];
    assert_eq!(memory.seed(std::slice::from_ref(&c), &spans), 1);
    let ctx = Ctx::new();
    let got = memory.embed(&ctx, &["First strip here."], TextRole::Passage).await.unwrap();
    assert_eq!((model.calls(), &got[0]), (0, &seeded), "a seeded strip costs no inference");
    // A text embedded once is remembered for the rest of the question.
    let second = memory.embed(&ctx, &["Second strip here.", "First strip here."], TextRole::Passage).await.unwrap();
    assert_eq!(model.calls(), 1);
    assert_eq!(second, [model.embed_one("Second strip here."), seeded.clone()]);
    memory.embed(&ctx, &["Second strip here."], TextRole::Passage).await.unwrap();
    assert_eq!(model.calls(), 1);
    // A passage joined from known strips gets their normalised mean, with no inference; an unknown part, none.
    assert!(memory.seed_mean("First strip here. Second strip here.", &["First strip here.", "Second strip here."]));
    let joined = memory.embed(&ctx, &["First strip here. Second strip here."], TextRole::Passage).await.unwrap();
    let mean: Vec<f32> = seeded.iter().zip(model.embed_one("Second strip here.")).map(|(a, b)| a + b).collect();
    let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt();
    let cos: f32 = joined[0].iter().zip(&mean).map(|(a, b)| a * b / norm).sum();
    assert!((cos - 1.0).abs() < 1e-5 && model.calls() == 1, "cosine {cos}, calls {}", model.calls());
    assert!(!memory.seed_mean("other", &["First strip here.", "never seen"]));
    // The fake says nothing about roles, so a query of the same text is another vector and is embedded.
    assert!(!model.role_independent());
    memory.embed(&ctx, &["Second strip here."], TextRole::Query).await.unwrap();
    assert_eq!(model.calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexing_stores_strip_vectors_and_answering_embeds_no_stored_strip() {
    if !crate::models_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.store.path = dir.path().join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::On;
    cfg.embedding.sessions = 1;
    // Refinement's strips as the context (without an LLM the default extraction mode reads whole passages).
    cfg.pipeline.context = ragtune::ContextMode::Refine;
    let mut engine = Engine::open(cfg).await.unwrap();
    let docs = vec![
        ragtune::core::Document::new(
            "scurvy",
            "Scurvy is a disease resulting from a lack of vitamin C. Early symptoms include weakness and sore arms. \
             Sailors on long voyages were often affected.",
        ),
        ragtune::core::Document::new(
            "rickets",
            "Rickets is a condition that results in weak or soft bones in children. It is caused by a lack of \
             vitamin D or calcium.",
        ),
    ];
    engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    let ids = ["scurvy".to_owned(), "rickets".to_owned()];
    let stored = engine.store().span_vectors(&Ctx::new(), &ids).await.unwrap();
    let strips = ragtune::evaluators::refine::decompose(&docs[0].text, engine.config().refine.max_strip_words);
    assert_eq!(stored[0].len(), strips.len(), "one vector per strip of the passage");
    assert_eq!(stored[0][0].text_in(&docs[0].text), Some(strips[0].as_str()));
    assert!(stored[1].len() >= 2);

    // Answering without an LLM: refinement and the judge find every strip's vector in the store or in the
    // question's memory; only the question and the context passages reach the model.
    let r = engine.ask("What causes scurvy?").await.unwrap();
    assert!(r.answer.is_some());
    let seeded = r.trace.iter().find(|e| e.stage == "refine" && e.action == "strip_vectors").expect("seeded");
    assert!(seeded.detail["strips"].as_u64().unwrap() >= 4, "{:?}", seeded.detail);
    assert!(r.trace.iter().any(|e| e.stage == "embed" && e.action == "request_hit"));
    // Passages embedded at query time: only the judge's context passages, never a strip (queries are the
    // question and, when the retrieval is corrected, its rewrites).
    let model_id = engine.embedder().unwrap().spec().model_id.clone();
    let passages_embedded = |r: &ragtune::AskResponse| -> u64 {
        r.trace
            .iter()
            .filter(|e| e.stage == "embed" && e.action == model_id && e.detail["role"] == "passage")
            .map(|e| e.cost.docs)
            .sum()
    };
    // Every strip of these short passages lies inside the model's window and was pooled at indexing; the judge's
    // passages are refined passages, whose vectors are their strips' mean: nothing is embedded but the question.
    let embedded = passages_embedded(&r);
    assert_eq!(embedded, 0, "passages embedded while answering: {:?}", r.trace);

    // Without stored strip vectors (`embedding.strip_vectors = false`) the same question embeds its strips.
    let dir2 = tempfile::tempdir().unwrap();
    let mut cfg = engine.config().clone();
    cfg.store.path = dir2.path().join("store");
    cfg.embedding.strip_vectors = false;
    let mut plain = Engine::open_with_embedder(cfg, engine.embedder().cloned()).await.unwrap();
    plain.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    assert!(plain.store().span_vectors(&Ctx::new(), &ids).await.unwrap().iter().all(Vec::is_empty));
    let r2 = plain.ask("What causes scurvy?").await.unwrap();
    let embedded2 = passages_embedded(&r2);
    assert!(embedded2 >= 4, "{embedded2} passages embedded without strip vectors");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strips_past_the_window_are_pooled_from_the_passages_tail_when_asked() {
    if !crate::models_provisioned() {
        return;
    }
    // About 700 tokens: the model's 256-token window sees the first third.
    let text: String = (0..60)
        .map(|i| format!("Sentence number {i} says that otters in river {} hold hands while they sleep. ", i % 7))
        .collect();
    let docs = vec![ragtune::core::Document::new("long", text.trim_end())];
    let strips = ragtune::evaluators::refine::decompose(&docs[0].text, Config::default().refine.max_strip_words);
    let stored = |past_window: bool| {
        let docs = docs.clone();
        async move {
            let dir = tempfile::tempdir().unwrap();
            let mut cfg = Config::default();
            cfg.store.path = dir.path().join("store");
            cfg.embedding.mode = ragtune::EmbeddingMode::On;
            cfg.embedding.sessions = 1;
            cfg.embedding.strip_vectors_past_window = past_window;
            let mut engine = Engine::open(cfg).await.unwrap();
            let report = engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
            // The passage is longer than the window, and the report says so (only the first pass counts).
            assert_eq!(report.truncated, 1);
            engine.store().span_vectors(&Ctx::new(), &["long".to_owned()]).await.unwrap().remove(0)
        }
    };
    let first_window = stored(false).await;
    assert!(
        !first_window.is_empty() && first_window.len() < strips.len() / 2,
        "{} of {}",
        first_window.len(),
        strips.len()
    );
    let all = stored(true).await;
    assert_eq!(all.len(), strips.len(), "every strip has a vector");
    // The strips inside the first window are pooled from the same pass either way.
    assert_eq!(all[..first_window.len()], first_window[..]);
    for (s, strip) in all.iter().zip(&strips) {
        assert_eq!(s.text_in(&docs[0].text), Some(strip.as_str()));
    }
}
