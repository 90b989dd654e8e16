//! LLM-free query expansion from a synonym table.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::text::{word_set, words};
use ragtune_core::{Candidate, Ctx, Error, Query, Result, Retriever, TraceEvent};

use super::relabel;
use crate::{rrf_fuse, validate_all};

/// The synonym groups of the default table: general English and the scientific vocabulary of typical corpora.
/// Every word of a group expands to the others.
const DEFAULT_GROUPS: &str = "\
# One group per line: words that mean the same for search.
cause, causes, reason, origin, etiology
effect, effects, impact, outcome, consequence
increase, increases, rise, elevation, growth
decrease, decreases, reduction, decline, drop
treatment, therapy, cure, intervention
disease, illness, disorder, condition
risk, likelihood, probability, susceptibility
method, approach, technique, procedure
result, results, finding, findings, outcome
error, failure, fault, bug
fast, quick, rapid
big, large, huge
small, little, tiny
car, automobile, vehicle
buy, purchase
begin, start, initiate
show, demonstrate, indicate
use, utilize, employ
";

/// A table of synonym groups: each word of a group expands to the other words of its groups.
///
/// Text format (see [`SynonymTable::parse`]): one group per line, words (or short phrases) separated by commas;
/// `#` starts a comment. Matching is on lower-case words; phrases are added as they are written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SynonymTable {
    map: BTreeMap<String, Vec<String>>,
}

impl SynonymTable {
    /// Parses the text format.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming the line of a group with fewer than two
    /// entries.
    pub fn parse(text: &str) -> Result<Self> {
        let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let group: Vec<String> =
                line.split(',').map(|w| w.trim().to_lowercase()).filter(|w| !w.is_empty()).collect();
            if group.len() < 2 {
                return Err(Error::invalid_input(format!(
                    "synonym table line {}: a group needs at least two entries separated by commas: {line:?}",
                    i + 1
                )));
            }
            for w in &group {
                let entry = map.entry(w.clone()).or_default();
                for other in group.iter().filter(|o| *o != w) {
                    if !entry.contains(other) {
                        entry.push(other.clone());
                    }
                }
            }
        }
        Ok(Self { map })
    }

    /// Reads a table from a file.
    ///
    /// # Errors
    /// A missing or unreadable file (naming it); parse errors (naming file and line).
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::not_found(format!("cannot read the synonym table {}", path.display())).with_source(e)
        })?;
        Self::parse(&text).map_err(|e| e.context(path.display()))
    }

    /// The synonyms of one lower-case word.
    #[must_use]
    pub fn synonyms(&self, word: &str) -> &[String] {
        self.map.get(word).map(Vec::as_slice).unwrap_or_default()
    }

    /// The words the table knows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The query with the synonyms of its words appended (each once, none already in the query), or `None` when
    /// no word has a synonym.
    #[must_use]
    pub fn expand(&self, text: &str) -> Option<(String, Vec<String>)> {
        let present = word_set(text);
        let mut added: Vec<String> = Vec::new();
        for w in words(text) {
            for s in self.synonyms(&w) {
                if !present.contains(s) && !added.contains(s) {
                    added.push(s.clone());
                }
            }
        }
        (!added.is_empty()).then(|| (format!("{} {}", text.trim(), added.join(" ")), added))
    }
}

impl SynonymTable {
    /// The small built-in table.
    #[must_use]
    pub fn builtin() -> Self {
        Self::parse(DEFAULT_GROUPS).expect("invariant: the built-in synonym table parses")
    }
}

/// Synonym expansion (LLM-free; Corrective RAG's correction of an AMBIGUOUS retrieval, docs/pipeline.md "Correct"): the
/// inner retriever answers the original query and the expanded one in one batch, and the two lists are merged with RRF
/// (the original weighs more, so expansion adds recall without pushing exact matches down). Provenance keys are
/// prefixed `orig:` and `expanded:`. A query without known words is retrieved as is.
#[derive(Debug, Clone)]
pub struct SynonymExpansionRetriever {
    name: String,
    inner: Arc<dyn Retriever>,
    table: Arc<SynonymTable>,
    rrf_k: f32,
    expanded_weight: f32,
}

impl SynonymExpansionRetriever {
    /// Expansion around `inner` with `table`; the expanded list weighs 0.5 against the original's 1, RRF k = 60.
    pub fn new(name: impl Into<String>, inner: Arc<dyn Retriever>, table: Arc<SynonymTable>) -> Self {
        Self { name: name.into(), inner, table, rrf_k: 60.0, expanded_weight: 0.5 }
    }

    /// Sets the weight of the expanded query's list (the original's is 1).
    #[must_use]
    pub fn with_expanded_weight(mut self, weight: f32) -> Self {
        self.expanded_weight = weight.max(0.0);
        self
    }
}

#[async_trait]
impl Retriever for SynonymExpansionRetriever {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        validate_all(queries)?;
        let started = Instant::now();
        let mut batch: Vec<Query> = Vec::with_capacity(queries.len() * 2);
        let mut expanded_at: Vec<Option<usize>> = Vec::with_capacity(queries.len());
        for q in queries {
            batch.push(q.clone());
            match self.table.expand(&q.text).filter(|(t, _)| t.len() <= Query::MAX_BYTES) {
                Some((text, added)) => {
                    ctx.trace(
                        TraceEvent::new("transform", self.name.clone())
                            .detail("query", q.text.clone())
                            .detail("expanded", text.clone())
                            .detail("added", added),
                    );
                    expanded_at.push(Some(batch.len()));
                    batch.push(q.with_text(text));
                }
                None => {
                    ctx.trace(
                        TraceEvent::new("transform", self.name.clone())
                            .detail("query", q.text.clone())
                            .detail("added", serde_json::Value::Array(Vec::new()))
                            .detail("note", "no word of the query is in the synonym table"),
                    );
                    expanded_at.push(None);
                }
            }
        }
        let mut lists = self.inner.retrieve(ctx, &batch).await?.into_iter().map(Some).collect::<Vec<_>>();
        let mut out = Vec::with_capacity(queries.len());
        let mut at = 0;
        for (q, exp) in queries.iter().zip(expanded_at) {
            let original = lists[at].take().unwrap_or_default();
            at += 1;
            match exp {
                Some(i) => {
                    let expanded = lists[i].take().unwrap_or_default();
                    at += 1;
                    let fused = rrf_fuse(
                        &[(1.0, relabel(original, "orig")), (self.expanded_weight, relabel(expanded, "expanded"))],
                        self.rrf_k,
                        q.top_k,
                    );
                    out.push(fused);
                }
                None => out.push(original),
            }
        }
        ctx.trace(
            TraceEvent::new("retrieve", self.name.clone()).detail("queries", queries.len()).elapsed(started.elapsed()),
        );
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_parse_and_expand_symmetrically() {
        let t = SynonymTable::parse("# comment\ncar, automobile\n\nfast, quick, rapid # trailing\n").unwrap();
        assert_eq!(t.synonyms("car"), ["automobile"]);
        assert_eq!(t.synonyms("automobile"), ["car"]);
        assert_eq!(t.synonyms("quick"), ["fast", "rapid"]);
        let (text, added) = t.expand("a fast Car").unwrap();
        assert_eq!(text, "a fast Car quick rapid automobile");
        assert_eq!(added, ["quick", "rapid", "automobile"]);
        assert!(t.expand("nothing known").is_none());
        // Synonyms already in the query are not added again.
        assert_eq!(t.expand("fast quick").unwrap().1, ["rapid"]);
        let err = SynonymTable::parse("ok, fine\nlonely\n").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert!(SynonymTable::builtin().len() > 40);
    }
}
