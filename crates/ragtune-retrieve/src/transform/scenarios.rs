//! Logic of the transformations with fakes: fallbacks, caching, diversity, routing and multi-hop termination.

use std::sync::Arc;

use ragtune_core::{
    Candidate, Chunk, Ctx, Embedder, Prompt, Query, Record, Retriever, TraceEvent, TraceSink, VectorStore,
};
use ragtune_testkit::MemoryStore;
use ragtune_testkit::fakes::{HashEmbedder, ScriptedFailure, ScriptedLlm, StaticRetriever};
use serde_json::json;

use super::*;

fn schema() -> serde_json::Value {
    json!({"type": "object"})
}

const PASSAGE: Prompt = Prompt {
    id: "t_passage",
    version: 1,
    system: "",
    user: "PASSAGE FOR {{query}}",
    schema: None,
    temperature: 0.7,
    max_tokens: 64,
};
const QUERIES: Prompt = Prompt {
    id: "t_queries",
    version: 1,
    system: "",
    user: "QUERIES x{{n}} FOR {{query}}",
    schema: Some(schema),
    temperature: 0.7,
    max_tokens: 64,
};
const REWRITE_P: Prompt = Prompt {
    id: "t_rewrite",
    version: 1,
    system: "",
    user: "REWRITE {{query}} GIVEN {{context}}",
    schema: Some(schema),
    temperature: 0.0,
    max_tokens: 64,
};
const FOLLOW: Prompt = Prompt {
    id: "t_follow",
    version: 1,
    system: "",
    user: "FOLLOW {{query}} SEEN {{passages}}",
    schema: Some(schema),
    temperature: 0.0,
    max_tokens: 64,
};
const ROUTE_P: Prompt = Prompt {
    id: "t_route",
    version: 1,
    system: "",
    user: "ROUTE {{query}}",
    schema: Some(schema),
    temperature: 0.0,
    max_tokens: 16,
};
const REPAIR: Prompt = Prompt {
    id: "t_repair",
    version: 1,
    system: "",
    user: "REPAIR {{schema}} {{output}}",
    schema: None,
    temperature: 0.0,
    max_tokens: 64,
};

fn traced() -> (Ctx, TraceSink) {
    let sink = TraceSink::new();
    (Ctx::new().with_trace(sink.clone()), sink)
}

fn transform_events(events: &[TraceEvent]) -> Vec<&TraceEvent> {
    events.iter().filter(|e| e.stage == "transform").collect()
}

fn ids(list: &[Candidate]) -> Vec<&str> {
    list.iter().map(|c| c.chunk.id.as_str()).collect()
}

/// A store of three passages embedded by `embedder`.
async fn dense_store(embedder: &HashEmbedder) -> Arc<MemoryStore> {
    let ctx = Ctx::new();
    let store = Arc::new(MemoryStore::new());
    store.ensure_spaces(&ctx, Some(embedder.spec()), None).await.unwrap();
    let texts = [
        ("a", "ascorbic acid deficiency produces bleeding gums"),
        ("b", "rickets follows from too little vitamin D"),
        ("c", "the history of naval voyages"),
    ];
    let records = texts
        .iter()
        .map(|(id, t)| Record {
            chunk: Chunk::new(*id, *id, *t),
            dense: Some(embedder.embed_one(t)),
            sparse: None,
            spans: Vec::new(),
        })
        .collect();
    store.upsert(&ctx, records).await.unwrap();
    store
}

#[tokio::test]
async fn hyde_searches_with_the_generated_passage_caches_it_and_falls_back_when_the_llm_fails() {
    let embedder = Arc::new(HashEmbedder::new(64));
    let store = dense_store(&embedder).await;
    let llm = Arc::new(ScriptedLlm::new("ascorbic acid deficiency produces bleeding gums"));
    let config = HydeConfig { include_query: false, ..HydeConfig::new(PASSAGE) };
    let hyde = HydeRetriever::new("hyde", llm.clone(), embedder.clone(), store.clone(), config);
    let (ctx, sink) = traced();
    let q = Query::new("what causes scurvy?").with_top_k(2);
    let out = hyde.retrieve(&ctx, std::slice::from_ref(&q)).await.unwrap();
    assert_eq!(out[0][0].chunk.id, "a", "the passage's embedding finds the passage it paraphrases");
    assert!(out[0][0].sources.contains_key("hyde"));
    let events = sink.take();
    let t = transform_events(&events);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].detail["cached"], false);
    assert_eq!(t[0].cost.calls, 1);
    // The same query again: answered from the cache, no new call.
    let again = hyde.retrieve(&ctx, std::slice::from_ref(&q)).await.unwrap();
    assert_eq!(ids(&again[0]), ids(&out[0]));
    assert_eq!(llm.calls(), 1);
    assert_eq!(transform_events(&sink.take())[0].detail["cached"], true);

    // The LLM down: the query's own embedding, and the trace says why.
    let down =
        HydeRetriever::new("hyde", Arc::new(ScriptedLlm::down()), embedder.clone(), store, HydeConfig::new(PASSAGE));
    let (ctx, sink) = traced();
    let out = down.retrieve(&ctx, &[Query::new("rickets vitamin D").with_top_k(1)]).await.unwrap();
    assert_eq!(out[0][0].chunk.id, "b");
    let events = sink.take();
    assert_eq!(transform_events(&events)[0].detail["fallback"], "plain query");
    assert!(transform_events(&events)[0].detail["reason"].as_str().unwrap().contains("transient"));
}

fn inner() -> Arc<StaticRetriever> {
    Arc::new(
        StaticRetriever::new("bm25")
            .with_ranking("what causes scurvy?", &[("a", 3.0), ("c", 1.0)])
            .with_ranking("vitamin C deficiency", &[("a", 2.0), ("b", 1.0)])
            .with_ranking("ascorbic acid lack", &[("d", 2.0)])
            .with_ranking("scurvy cause", &[("e", 1.0)]),
    )
}

#[tokio::test]
async fn multi_query_fuses_the_original_and_diverse_generations_and_drops_near_duplicates() {
    let reply =
        json!({"queries": ["vitamin C deficiency", "What causes scurvy", "ascorbic acid lack", "", "scurvy cause"]});
    let llm = Arc::new(ScriptedLlm::new(reply.to_string()));
    let mq = MultiQueryRetriever::new(
        "multi_query",
        llm.clone(),
        inner(),
        MultiQueryConfig { n: 2, ..MultiQueryConfig::new(QUERIES, REPAIR) },
    );
    let (ctx, sink) = traced();
    let out = mq.retrieve(&ctx, &[Query::new("what causes scurvy?").with_top_k(10)]).await.unwrap();
    // q0 = original, q1 = "vitamin C deficiency", q2 = "ascorbic acid lack" ("What causes scurvy" is a duplicate
    // of the original, "" is unusable, "scurvy cause" is beyond n = 2).
    assert_eq!(ids(&out[0]), ["a", "d", "b", "c"], "a is in two lists; then the first of a list, then ties by id");
    assert!(out[0][0].sources.contains_key("q0:bm25") && out[0][0].sources.contains_key("q1:bm25"));
    let events = sink.take();
    let t = transform_events(&events);
    assert_eq!(t[0].detail["kept"], json!(["vitamin C deficiency", "ascorbic acid lack"]));
    let dropped = t[0].detail["dropped"].to_string();
    assert!(dropped.contains("similar to") && dropped.contains("empty") && dropped.contains("beyond n"), "{dropped}");
    assert!(llm.requests()[0].messages[0].content.contains("QUERIES x2 FOR what causes scurvy?"));

    // Garbage from the LLM (not JSON, twice): only the original is searched.
    let garbage = Arc::new(ScriptedLlm::new("I cannot do that."));
    let mq = MultiQueryRetriever::new("multi_query", garbage.clone(), inner(), MultiQueryConfig::new(QUERIES, REPAIR));
    let (ctx, sink) = traced();
    let out = mq.retrieve(&ctx, &[Query::new("what causes scurvy?")]).await.unwrap();
    assert_eq!(ids(&out[0]), ["a", "c"]);
    assert_eq!(garbage.calls(), 2, "the answer, then one repair");
    assert!(transform_events(&sink.take())[0].detail["reason"].as_str().unwrap().starts_with("malformed_output"));
}

#[tokio::test]
async fn rewrite_uses_the_conversation_and_falls_back_to_the_question() {
    let llm = Arc::new(ScriptedLlm::new(json!({"query": "scurvy cause"}).to_string()));
    let rw = RewriteRetriever::new("rewrite", llm.clone(), inner(), RewriteConfig::new(REWRITE_P, REPAIR));
    let mut q = Query::new("what causes it?");
    q.context = vec!["Tell me about scurvy.".into()];
    let (ctx, sink) = traced();
    let out = rw.retrieve(&ctx, &[q]).await.unwrap();
    assert_eq!(ids(&out[0]), ["e"], "retrieved with the rewrite");
    assert!(llm.requests()[0].messages[0].content.contains("GIVEN Tell me about scurvy."));
    assert_eq!(transform_events(&sink.take())[0].detail["rewrite"], "scurvy cause");

    // An empty rewrite or a failing LLM: the original question.
    for llm in [ScriptedLlm::new(json!({"query": "  "}).to_string()), ScriptedLlm::down()] {
        let rw = RewriteRetriever::new("rewrite", Arc::new(llm), inner(), RewriteConfig::new(REWRITE_P, REPAIR));
        let (ctx, sink) = traced();
        let out = rw.retrieve(&ctx, &[Query::new("what causes scurvy?")]).await.unwrap();
        assert_eq!(ids(&out[0]), ["a", "c"]);
        assert_eq!(transform_events(&sink.take())[0].detail["fallback"], "plain query");
    }
}

#[tokio::test]
async fn synonym_expansion_merges_the_expanded_query_and_leaves_unknown_words_alone() {
    let table = Arc::new(SynonymTable::parse("causes, cause\n").unwrap());
    let inner = Arc::new(
        StaticRetriever::new("bm25")
            .with_ranking("scurvy causes", &[("a", 2.0)])
            .with_ranking("scurvy causes cause", &[("a", 2.0), ("e", 1.0)])
            .with_ranking("rickets", &[("b", 1.0)]),
    );
    let ex = SynonymExpansionRetriever::new("expand", inner, table);
    let (ctx, sink) = traced();
    let out = ex.retrieve(&ctx, &[Query::new("scurvy causes"), Query::new("rickets")]).await.unwrap();
    assert_eq!(ids(&out[0]), ["a", "e"]);
    assert!(out[0][0].sources.contains_key("orig:bm25") && out[0][0].sources.contains_key("expanded:bm25"));
    assert_eq!(ids(&out[1]), ["b"]);
    assert_eq!(out[1][0].sources.keys().collect::<Vec<_>>(), ["bm25"], "not expanded, untouched");
    assert_eq!(transform_events(&sink.take())[0].detail["added"], json!(["cause"]));
}

fn plan(name: &str, max_results: usize) -> RoutePlan {
    let r = StaticRetriever::new(name)
        .with_ranking("what causes scurvy?", &[("a", 3.0), ("b", 2.0), ("c", 1.0)])
        .with_ranking(
            "Compare the treatment of scurvy in the British Navy and the French Navy, and explain why outcomes differed.",
            &[("a", 3.0), ("b", 2.0), ("c", 1.0)],
        );
    RoutePlan { retriever: Arc::new(r), budget: RouteBudget { retrieval_steps: 1, rerank_docs: 10, max_results } }
}

#[tokio::test]
async fn the_router_picks_the_plan_of_the_complexity_and_the_llm_verdict_wins_unless_it_fails() {
    let complex_q =
        "Compare the treatment of scurvy in the British Navy and the French Navy, and explain why outcomes differed.";
    let router =
        RoutedRetriever::new("routed", plan("simple_plan", 1), plan("moderate_plan", 2), plan("complex_plan", 3));
    let (ctx, sink) = traced();
    let out = router.retrieve(&ctx, &[Query::new("what causes scurvy?"), Query::new(complex_q)]).await.unwrap();
    assert_eq!((out[0].len(), out[1].len()), (1, 3), "top_k cut to each plan's max_results");
    assert!(out[0][0].sources.contains_key("simple_plan") && out[1][0].sources.contains_key("complex_plan"));
    let routes: Vec<String> = sink.take().iter().filter(|e| e.stage == "route").map(|e| e.action.clone()).collect();
    assert_eq!(routes, ["simple", "complex"]);

    let llm = Arc::new(ScriptedLlm::new(json!({"complexity": "moderate"}).to_string()));
    let router =
        RoutedRetriever::new("routed", plan("simple_plan", 1), plan("moderate_plan", 2), plan("complex_plan", 3))
            .with_llm(llm, ROUTE_P, REPAIR);
    let (decision, _) = router.decide(&Ctx::new(), &Query::new("what causes scurvy?")).await;
    assert_eq!(
        (decision.complexity, decision.heuristic, decision.llm),
        (Complexity::Moderate, Complexity::Simple, Some(Complexity::Moderate))
    );

    let router =
        RoutedRetriever::new("routed", plan("simple_plan", 1), plan("moderate_plan", 2), plan("complex_plan", 3))
            .with_llm(Arc::new(ScriptedLlm::new(json!({"complexity": "enormous"}).to_string())), ROUTE_P, REPAIR);
    let (decision, _) = router.decide(&Ctx::new(), &Query::new("what causes scurvy?")).await;
    assert_eq!(decision.complexity, Complexity::Simple, "an answer outside the schema falls back to the heuristic");
    assert!(decision.llm_error.is_some());
}

fn hops_inner() -> Arc<StaticRetriever> {
    Arc::new(
        StaticRetriever::new("bm25")
            .with_ranking("who treated scurvy first?", &[("lind", 2.0)])
            .with_ranking("James Lind trial", &[("lind", 2.0), ("trial", 1.0)])
            .with_ranking("citrus in the Navy", &[("navy", 1.0)])
            .with_ranking("nothing new here", &[("lind", 1.0)]),
    )
}

#[tokio::test]
async fn multi_hop_follows_up_until_done_and_stops_on_repeats_nothing_new_failures_and_max_hops() {
    // Two follow-ups, then done.
    let llm = Arc::new(
        ScriptedLlm::new("not used")
            // The more specific keys first: replies are matched in order.
            .with_reply("[2] navy", json!({"done": true, "follow_up": ""}).to_string())
            .with_reply(
                "SEEN [1] lind\n[2] trial",
                json!({"done": false, "follow_up": "citrus in the Navy"}).to_string(),
            )
            .with_reply("SEEN [1] lind\n", json!({"done": false, "follow_up": "James Lind trial"}).to_string()),
    );
    let mh = MultiHopRetriever::new(
        "multi_hop",
        llm,
        hops_inner(),
        MultiHopConfig { max_hops: 5, ..MultiHopConfig::new(FOLLOW, REPAIR) },
    );
    let (ctx, sink) = traced();
    let out = mh.retrieve(&ctx, &[Query::new("who treated scurvy first?")]).await.unwrap();
    assert_eq!(ids(&out[0]), ["lind", "navy", "trial"]);
    let events = sink.take();
    let stopped = events.iter().rev().find_map(|e| e.detail.get("stopped")).unwrap();
    assert_eq!(stopped, "the LLM found the passages sufficient");

    let stop_reason = |llm: ScriptedLlm, max_hops: usize| async move {
        let mh = MultiHopRetriever::new(
            "multi_hop",
            Arc::new(llm),
            hops_inner(),
            MultiHopConfig { max_hops, ..MultiHopConfig::new(FOLLOW, REPAIR) },
        );
        let (ctx, sink) = traced();
        let out = mh.retrieve(&ctx, &[Query::new("who treated scurvy first?")]).await.unwrap();
        assert!(!out[0].is_empty(), "the first hop's results are always kept");
        let events = sink.take();
        events.iter().rev().find_map(|e| e.detail.get("stopped").cloned()).unwrap().as_str().unwrap().to_owned()
    };
    let repeat = ScriptedLlm::new(json!({"done": false, "follow_up": "Who treated scurvy first?"}).to_string());
    assert!(stop_reason(repeat, 5).await.contains("repeats an earlier query"));
    let stale = ScriptedLlm::new(json!({"done": false, "follow_up": "nothing new here"}).to_string());
    assert_eq!(stop_reason(stale, 5).await, "the follow-up found nothing new");
    assert!(stop_reason(ScriptedLlm::down(), 5).await.starts_with("the LLM failed"));
    let endless = ScriptedLlm::new(json!({"done": false, "follow_up": "James Lind trial"}).to_string())
        .with_reply("[2] trial", json!({"done": false, "follow_up": "citrus in the Navy"}).to_string());
    assert_eq!(stop_reason(endless, 2).await, "reached max_hops = 2");
    let flaky =
        ScriptedLlm::new(json!({"done": true, "follow_up": ""}).to_string()).failing(ScriptedFailure::FirstCalls(2));
    assert!(stop_reason(flaky, 3).await.starts_with("the LLM failed"), "a failed call and its repair end the hops");
}
