//! Header boost: a small bonus for hits whose header path shares keywords with the query (seed 003, section 7).
//!
//! A passage cut from a Markdown section carries the headings above it (`Chunk::header_path`); when the query
//! names what a heading names ("install on Linux" against `Guide > Install > Linux`), the passage is more likely
//! on topic than its text alone says.
//! The bonus is the Jaccard overlap of the query's keywords and the header path's keywords, times a weight, times
//! the spread of the list's scores (best minus worst), added to the hit's score, and the list is ranked again
//! (`sort_ranked`: ties by chunk id). Scaling by the spread makes a weight mean the same for every score scale:
//! RRF scores are around 0.02, cosines around 0.5, BM25 scores around 10; with weight 0.1 a hit whose headers
//! match the query's keywords exactly moves up by a tenth of the list's spread.
//! Hits without headers get nothing, so a corpus without headers (BEIR abstracts) is ranked exactly as before.
//! Keywords are core's ([`ragtune_core::text::keywords`]), the ones the judges read.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::text::{jaccard, keywords};
use ragtune_core::{Candidate, Ctx, Error, Query, Result, Retriever, TraceEvent, sort_ranked};

/// One boosted hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Boost {
    /// The chunk.
    pub chunk_id: String,
    /// The Jaccard overlap of the query's and the header path's keywords.
    pub jaccard: f32,
    /// What was added to its score.
    pub added: f32,
}

/// The boosts as the trace records them (`[{"chunk", "jaccard", "added"}]`), one rendering for every stage that
/// applies the boost.
#[must_use]
pub fn boosts_json(boosts: &[Boost]) -> serde_json::Value {
    boosts
        .iter()
        .map(|b| serde_json::json!({"chunk": b.chunk_id, "jaccard": f64::from(b.jaccard), "added": f64::from(b.added)}))
        .collect()
}

/// Adds the header boost to the hits of `list` (ranked, best first) and ranks it again; returns the boosted hits in
/// list order. A `weight` of 0 (or one that is not finite and positive), a query without keywords and a list
/// without header paths change nothing.
pub fn header_boost(query: &str, list: &mut [Candidate], weight: f32) -> Vec<Boost> {
    if !(weight.is_finite() && weight > 0.0) || list.iter().all(|c| c.chunk.header_path.is_empty()) {
        return Vec::new();
    }
    let wanted: BTreeSet<String> = keywords(query).into_iter().collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let (lo, hi) =
        list.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), c| (lo.min(c.score), hi.max(c.score)));
    // One hit, or hits of one score: the spread is 0, so the scale falls back to the score itself (or 1).
    let spread = hi - lo;
    let scale = if spread > 0.0 && spread.is_finite() {
        spread
    } else if hi.is_finite() && hi != 0.0 {
        hi.abs()
    } else {
        1.0
    };
    let mut boosts = Vec::new();
    for c in list.iter_mut().filter(|c| !c.chunk.header_path.is_empty()) {
        let headers: BTreeSet<String> = c.chunk.header_path.iter().flat_map(|h| keywords(h)).collect();
        let j = jaccard(&wanted, &headers);
        if j > 0.0 {
            let added = weight * j * scale;
            c.score += added;
            boosts.push(Boost { chunk_id: c.chunk.id.clone(), jaccard: j, added });
        }
    }
    if !boosts.is_empty() {
        sort_ranked(list, |c| (c.score, c.chunk.id.as_str()));
    }
    boosts
}

/// A retriever that adds the [header boost](header_boost) to another retriever's lists (after its fusion).
///
/// Each query is traced as a `header_boost` event with the weight and the boosted hits (chunk, Jaccard, what was
/// added), or `unchanged` with why not.
pub struct HeaderBoostRetriever {
    inner: Arc<dyn Retriever>,
    weight: f32,
}

impl std::fmt::Debug for HeaderBoostRetriever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderBoostRetriever").field("inner", &self.inner).field("weight", &self.weight).finish()
    }
}

impl HeaderBoostRetriever {
    /// Boosts `inner`'s lists by `weight`.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when `weight` is negative or not finite.
    pub fn new(inner: Arc<dyn Retriever>, weight: f32) -> Result<Self> {
        if !weight.is_finite() || weight < 0.0 {
            return Err(Error::invalid_input(format!("header_boost must be a finite number >= 0, got {weight}")));
        }
        Ok(Self { inner, weight })
    }
}

#[async_trait]
impl Retriever for HeaderBoostRetriever {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        let mut lists = self.inner.retrieve(ctx, queries).await?;
        for (q, list) in queries.iter().zip(lists.iter_mut()) {
            let started = Instant::now();
            let boosts = header_boost(&q.text, list, self.weight);
            let event = if boosts.is_empty() {
                let why = if list.iter().all(|c| c.chunk.header_path.is_empty()) {
                    "no hit has a header path"
                } else {
                    "no header shares a keyword with the query"
                };
                TraceEvent::new("header_boost", "unchanged").detail("reason", why)
            } else {
                TraceEvent::new("header_boost", "boost").detail("boosted", boosts_json(&boosts))
            };
            ctx.trace(event.detail("weight", f64::from(self.weight)).elapsed(started.elapsed()));
        }
        Ok(lists)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::{Chunk, TraceSink};
    use ragtune_testkit::fakes::StaticRetriever;

    fn hit(id: &str, score: f32, headers: &[&str]) -> Candidate {
        let mut chunk = Chunk::new(id, id, "text");
        chunk.header_path = headers.iter().map(|h| (*h).to_owned()).collect();
        Candidate { chunk, score, sources: Default::default() }
    }

    /// Boosts `list` for `query` with weight `w` and renders the ranking as `id score` lines.
    fn check(query: &str, w: f32, list: Vec<Candidate>, expect: &str) {
        let mut list = list;
        header_boost(query, &mut list, w);
        let got: String = list.iter().map(|c| format!("{} {:.3}\n", c.chunk.id, c.score)).collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn matching_headers_move_up_by_a_share_of_the_spread() {
        // Spread 0.5; "install linux" vs {guide, install, linux}: Jaccard 2/3, times 0.3 times 0.5 = 0.1.
        check(
            "how to install on linux",
            0.3,
            vec![hit("a", 1.0, &["Guide", "Use"]), hit("b", 0.95, &["Guide", "Install", "Linux"]), hit("c", 0.5, &[])],
            "b 1.050\na 1.000\nc 0.500\n",
        );
    }

    #[test]
    fn no_headers_no_keywords_or_zero_weight_change_nothing() {
        let plain = || vec![hit("a", 1.0, &[]), hit("b", 0.5, &[])];
        check("install linux", 0.5, plain(), "a 1.000\nb 0.500\n");
        let headed = || vec![hit("a", 1.0, &["Use"]), hit("b", 0.9, &["Install"])];
        check("install", 0.0, headed(), "a 1.000\nb 0.900\n");
        check("the how", 1.0, headed(), "a 1.000\nb 0.900\n");
        check("unrelated words", 1.0, headed(), "a 1.000\nb 0.900\n");
    }

    #[test]
    fn ties_after_the_boost_break_by_chunk_id() {
        // Spread 0.2; b gains 1 * 1 * 0.2 = 0.2 and ties a at 1.0: a comes first by id.
        check("install", 1.0, vec![hit("b", 0.8, &["Install"]), hit("a", 1.0, &[])], "a 1.000\nb 1.000\n");
    }

    #[tokio::test]
    async fn the_retriever_boosts_deterministically_and_traces() {
        let list = vec![hit("a", 1.0, &["Use"]), hit("b", 0.9, &["Install"]), hit("c", 0.8, &[])];
        let inner: Arc<dyn Retriever> = Arc::new(StaticRetriever::new("static").with_candidates("install it", list));
        // Spread 0.2; b's header is the query's one keyword: Jaccard 1, so b gains 1 * 1 * 0.2.
        let boosted = HeaderBoostRetriever::new(inner, 1.0).unwrap();
        let run = || async {
            let sink = TraceSink::new();
            let ctx = Ctx::new().with_trace(sink.clone());
            let out = boosted.retrieve(&ctx, &[Query::new("install it")]).await.unwrap();
            let ids: Vec<String> = out[0].iter().map(|c| format!("{} {:.2}", c.chunk.id, c.score)).collect();
            let events = sink.take();
            let e = events.iter().find(|e| e.stage == "header_boost").unwrap();
            (ids, e.action.clone(), e.detail["boosted"].clone())
        };
        let (ids, action, detail) = run().await;
        assert_eq!(ids, ["b 1.10", "a 1.00", "c 0.80"]);
        assert_eq!(action, "boost");
        assert_eq!(detail[0]["chunk"], "b");
        assert_eq!(run().await, (ids, action, detail));
        assert!(HeaderBoostRetriever::new(Arc::new(StaticRetriever::new("s")), -1.0).is_err());
    }
}
