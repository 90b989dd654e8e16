//! The web in the answer pipeline: the search of a Corrective-RAG correction (routed by the question's complexity,
//! its query rewritten for the web), web results as candidates, their credibility tiers, and the triangulation of
//! an answer's claims across independent sources.

use ragtune_core::{Candidate, Chunk, Cost, SourceScore, WebQuery};
use ragtune_llm::prompts;

use super::note::{Note, NoteKind};
use super::run::{Env, Report};
use super::stages::query_from_llm;
use super::{ContextPassage, CragMetadata, Faithfulness, fuse_lists};
use ragtune_core::Error;

impl Env<'_> {
    /// Web search for the question, fused into `candidates`; whether results were added. Records in `crag` the
    /// providers that answered and those skipped (and why); a failure is a `WebSearch` note, never an error.
    pub(super) async fn web_search(
        &self,
        k: usize,
        candidates: &mut Vec<Candidate>,
        crag: &mut CragMetadata,
        notes: &mut Vec<Note>,
        cost: &mut Cost,
    ) -> bool {
        let Some(web) = self.engine.web() else {
            self.ctx.trace(
                ragtune_core::TraceEvent::new("correct", "web_search_skipped")
                    .detail("reason", "no web search provider is configured"),
            );
            return false;
        };
        // The question's complexity chooses the route (its providers and result count, `[web.routing]`); a simple
        // question has no providers by default.
        let (route, _) = ragtune_retrieve::transform::classify_heuristic(&self.question);
        let n = self.engine.config().web.settings.routing.plan(route).max_results;
        self.ctx.trace(
            ragtune_core::TraceEvent::new("correct", "web_route")
                .detail("route", route.as_str())
                .detail("max_results", n),
        );
        if n == 0 {
            self.ctx.trace(
                ragtune_core::TraceEvent::new("correct", "web_search_skipped")
                    .detail("route", route.as_str())
                    .detail("reason", "the route of this question's complexity searches no provider"),
            );
            return false;
        }
        let (query, spent) = self.web_query(notes).await;
        *cost += spent;
        if query != self.question {
            crag.web_query = Some(query.clone());
        }
        let q = WebQuery { text: query, max_results: n };
        let searched = match web.search_routed(&self.ctx, &q, route).await {
            Ok(outcome) => {
                crag.web_skipped.extend(outcome.skipped.iter().map(|s| format!("{}: {}", s.provider, s.reason)));
                if outcome.answered.is_empty() && !outcome.skipped.is_empty() {
                    let why: Vec<&str> = outcome.skipped.iter().map(|s| s.reason.as_str()).collect();
                    Err(Error::unavailable(format!("every provider failed ({})", why.join("; "))))
                } else {
                    Ok(outcome.results)
                }
            }
            Err(e) => Err(e),
        };
        match searched {
            Ok(mut results) if !results.is_empty() => {
                // `[web.fetch]`: results whose snippets are too short to answer from get their page's text
                // (address guards, size and time limits in the fetcher; a page that fails leaves its snippet).
                if let Some(fetcher) = self.engine.page_fetcher() {
                    fetcher.enrich(&self.ctx, &mut results).await;
                }
                let found = web_candidates(results);
                for c in &found {
                    for key in c.sources.keys() {
                        if let Some(p) = key.strip_prefix("web:")
                            && !crag.web_providers.iter().any(|have| have == p)
                        {
                            crag.web_providers.push(p.to_owned());
                        }
                    }
                }
                *candidates = fuse_lists(candidates, &found, k * 2 + n);
                crag.web_search_used = true;
                true
            }
            Ok(_) => {
                notes.push(Note::new(NoteKind::WebSearch, format!("web search ({}) returned nothing", web.name())));
                false
            }
            Err(e) => {
                notes.push(Note::new(NoteKind::WebSearch, format!("web search ({}) failed: {e}", web.name())));
                false
            }
        }
    }

    /// The query sent to the web: the question rewritten for a web search engine when an LLM is configured
    /// (`web_query@1`), else the question; a failed rewrite falls back to the question with a note.
    async fn web_query(&self, notes: &mut Vec<Note>) -> (String, Cost) {
        let Some(llm) = self.engine.llm() else { return (self.question.clone(), Cost::default()) };
        match query_from_llm(llm.as_ref(), &self.ctx, &prompts::WEB_QUERY, &[("query", self.question.as_str())]).await {
            Ok((Some(text), cost)) => (text, cost),
            Ok((None, cost)) => {
                notes.push(Note::new(
                    NoteKind::WebSearch,
                    "the web query rewrite returned nothing: the question was searched",
                ));
                (self.question.clone(), cost)
            }
            Err(e) => {
                notes.push(Note::new(
                    NoteKind::WebSearch,
                    format!("the web query rewrite failed ({e}): the question was searched"),
                ));
                (self.question.clone(), Cost::default())
            }
        }
    }

    /// The answer's claims checked against the context's independent sources (registered domains; the corpus is
    /// one source). Claims are the judge's statements, else the answer's sentences. The support check is the LLM's
    /// (the judge prompt, one call per source) when the judge is configured to use the LLM and one is there, and the
    /// LLM-free lexical one otherwise (`ragtune_core::text::supports`: at least 70 % of a claim's content words and
    /// numbers in a passage) or for any source the LLM could not judge, with a note.
    pub(super) async fn triangulate_claims(
        &self,
        context: &[ContextPassage],
        answer: Option<&str>,
        faithfulness: Option<&Faithfulness>,
    ) -> (Option<ragtune_web::triangulation::Triangulation>, Report) {
        use ragtune_web::triangulation::{Evidence, texts_by_source, triangulate_with_verdicts};
        let claims: Vec<String> = match (faithfulness.filter(|f| !f.statements.is_empty()), answer) {
            (Some(f), _) => f.statements.iter().map(|s| s.text.clone()).collect(),
            (None, Some(a)) => ragtune_evaluators::text::sentences(a).into_iter().map(str::to_owned).collect(),
            (None, None) => return (None, Report::new("no_answer")),
        };
        // The corpus counts as one source, trusted like a tier-1 one.
        let evidence: Vec<Evidence> = context
            .iter()
            .map(|p| Evidence {
                url: p.tier.map(|_| p.doc_id.clone()),
                text: p.text.clone(),
                tier: p.tier.unwrap_or(1),
            })
            .collect();
        let groups = texts_by_source(&evidence);
        let (mut cost, mut notes) = (Cost::default(), Vec::new());
        let mut verdicts = std::collections::BTreeMap::new();
        let use_llm = self.engine.config().pipeline.judge_with_llm && self.engine.llm().is_some() && !claims.is_empty();
        if use_llm && self.ctx.check().is_ok() {
            match self.engine.judge().support_by_source(&self.ctx, &claims, &groups).await {
                Ok(Some(found)) => {
                    cost = found.cost;
                    notes.extend(found.notes.into_iter().map(|n| format!("triangulation: {n}")));
                    for ((source, _), row) in groups.iter().zip(found.supported) {
                        if let Some(row) = row {
                            verdicts.insert(source.clone(), row);
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    notes.push(format!("triangulation: the LLM support check stopped ({e}); the lexical check is used"))
                }
            }
        }
        let mut report = Report::new(if verdicts.is_empty() { "lexical" } else { "llm" }).cost(cost);
        for note in notes {
            report = report.note(NoteKind::Triangulation, note);
        }
        let table = triangulate_with_verdicts(&claims, &evidence, &verdicts);
        let report = report
            .detail("claims", table.rows.len())
            .detail("sources", groups.len())
            .detail("coverage_pct", table.coverage_pct);
        (Some(table), report)
    }
}

/// Gives every web passage of `context` its credibility tier; whether there is any (then the answer is triangulated).
pub(super) fn tier_web_passages(engine: &crate::Engine, context: &mut [ContextPassage]) -> bool {
    let credibility = &engine.config().web.settings.credibility;
    for p in context.iter_mut().filter(|p| p.chunk_id.starts_with("web:")) {
        p.tier = Some(ragtune_web::domain_of(&p.doc_id).map_or(3, |d| credibility.tier(&d)));
    }
    context.iter().any(|p| p.tier.is_some())
}

/// Web results as candidates, ranked as the provider returned them.
fn web_candidates(results: Vec<ragtune_core::WebResult>) -> Vec<Candidate> {
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let id = format!("web:{}", r.url);
            let mut chunk = Chunk::new(&id, &r.url, r.content);
            chunk.title = Some(r.title);
            let score = r.score.unwrap_or(0.0);
            let rank = u32::try_from(i + 1).unwrap_or(u32::MAX);
            let mut sources = std::collections::BTreeMap::new();
            sources.insert(format!("web:{}", r.provider), SourceScore { score, rank });
            Candidate { chunk, score, sources }
        })
        .collect()
}
