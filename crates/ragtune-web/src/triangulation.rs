//! Triangulation: how many independent sources support each claim.
//!
//! A source is a registered domain (`en.wikipedia.org` and `de.wikipedia.org` are one source); the local corpus
//! counts as one source however many passages support a claim. A claim is **VERIFIED** with at least 3 independent
//! supporting sources, **LIKELY** with 2, **UNVERIFIED** with at most 1 (the web search protocol's ProofGuard
//! statuses). Whether a piece of evidence supports a claim is decided by a support function: an LLM judge when one is
//! configured, core's LLM-free [`supports`](ragtune_core::text::supports) otherwise (the table says which), the
//! check the faithfulness judge scores statements with, so that the judge and the table agree on one answer.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::canon::{domain_of, registered_domain};

/// How well a claim is corroborated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Consensus {
    /// At least three independent sources agree.
    Verified,
    /// Two independent sources agree.
    Likely,
    /// One source or none.
    Unverified,
}

impl Consensus {
    /// The status for a number of independent supporting sources.
    #[must_use]
    pub fn from_sources(n: usize) -> Self {
        match n {
            0 | 1 => Self::Unverified,
            2 => Self::Likely,
            _ => Self::Verified,
        }
    }
}

/// One piece of evidence: a web result or a corpus passage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The page URL, or `None` for a corpus passage.
    pub url: Option<String>,
    /// The text to check claims against.
    pub text: String,
    /// The credibility tier (corpus passages: whatever the caller trusts its corpus as, usually 1).
    pub tier: u8,
}

impl Evidence {
    /// The independent source this evidence belongs to: its registered domain, or `corpus`.
    #[must_use]
    pub fn source(&self) -> String {
        self.url.as_deref().and_then(domain_of).map_or_else(|| "corpus".to_owned(), |d| registered_domain(&d))
    }
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClaimRow {
    /// The claim.
    pub claim: String,
    /// The independent sources that support it, sorted.
    pub sources: Vec<String>,
    /// Its status.
    pub status: Consensus,
}

/// The triangulation table and the protocol's two measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Triangulation {
    /// One row per claim, in the claims' order.
    pub rows: Vec<ClaimRow>,
    /// Claims with at least three sources, in percent of all claims (0 when there are none).
    pub coverage_pct: f64,
    /// Tier-1 sources over all distinct supporting sources (0 when there are none).
    pub tier1_ratio: f64,
    /// Which support check decided (`llm` or `lexical`).
    pub support_check: String,
}

/// Checks every claim against every piece of evidence with `supports(claim, evidence)` and counts independent
/// sources.
pub fn triangulate(
    claims: &[String],
    evidence: &[Evidence],
    support_check: &str,
    mut supports: impl FnMut(&str, &Evidence) -> bool,
) -> Triangulation {
    let mut rows = Vec::with_capacity(claims.len());
    // Each distinct supporting source with its best (lowest) tier.
    let mut all_sources: std::collections::BTreeMap<String, u8> = std::collections::BTreeMap::new();
    for claim in claims {
        let mut sources = BTreeSet::new();
        for e in evidence {
            if supports(claim, e) {
                let s = e.source();
                let tier = all_sources.entry(s.clone()).or_insert(e.tier);
                *tier = (*tier).min(e.tier);
                sources.insert(s);
            }
        }
        let status = Consensus::from_sources(sources.len());
        rows.push(ClaimRow { claim: claim.clone(), sources: sources.into_iter().collect(), status });
    }
    #[allow(clippy::cast_precision_loss)]
    let ratio = |num: usize, den: usize| if den == 0 { 0.0 } else { num as f64 / den as f64 };
    let verified = rows.iter().filter(|r| r.status == Consensus::Verified).count();
    let tier1 = all_sources.values().filter(|t| **t == 1).count();
    Triangulation {
        coverage_pct: 100.0 * ratio(verified, rows.len()),
        tier1_ratio: ratio(tier1, all_sources.len()),
        rows,
        support_check: support_check.to_owned(),
    }
}

/// The distinct sources of `evidence`, sorted, each with its passages' texts: what an LLM judge is asked about,
/// one call per source.
#[must_use]
pub fn texts_by_source(evidence: &[Evidence]) -> Vec<(String, Vec<String>)> {
    let mut grouped: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
    for e in evidence {
        grouped.entry(e.source()).or_default().push(e.text.clone());
    }
    grouped.into_iter().collect()
}

/// [`triangulate`] with an LLM judge's verdicts where it gave them and core's lexical
/// [`supports`](ragtune_core::text::supports) for every other source: `verdicts[source][i]` says whether that
/// source supports `claims[i]`. The table's `support_check` is `lexical` without verdicts, `llm` with a verdict for
/// every source, and `llm (n of m sources; lexical for the rest)` in between.
#[must_use]
pub fn triangulate_with_verdicts(
    claims: &[String],
    evidence: &[Evidence],
    verdicts: &std::collections::BTreeMap<String, Vec<bool>>,
) -> Triangulation {
    let sources: BTreeSet<String> = evidence.iter().map(Evidence::source).collect();
    let judged = sources.iter().filter(|s| verdicts.contains_key(*s)).count();
    let label = match judged {
        0 => "lexical".to_owned(),
        n if n == sources.len() => "llm".to_owned(),
        n => format!("llm ({n} of {} sources; lexical for the rest)", sources.len()),
    };
    let index: std::collections::HashMap<&str, usize> =
        claims.iter().enumerate().map(|(i, c)| (c.as_str(), i)).collect();
    triangulate(claims, evidence, &label, |claim, e| match (verdicts.get(&e.source()), index.get(claim)) {
        (Some(row), Some(&i)) => row.get(i).copied().unwrap_or(false),
        _ => ragtune_core::text::supports(claim, &e.text),
    })
}

#[cfg(test)]
mod tests {
    use ragtune_core::text::supports;

    use super::*;

    fn web(url: &str, text: &str, tier: u8) -> Evidence {
        Evidence { url: Some(url.into()), text: text.into(), tier }
    }

    #[test]
    fn statuses_count_independent_registered_domains() {
        let claims = vec![
            "Osteomalacia softens the bones of adults".to_owned(),
            "Vitamin D deficiency causes osteomalacia".to_owned(),
            "The moon is made of cheese".to_owned(),
        ];
        let evidence = vec![
            web(
                "https://en.wikipedia.org/wiki/Osteomalacia",
                "Osteomalacia is the softening of the bones in adults.",
                3,
            ),
            web("https://de.wikipedia.org/wiki/Osteomalazie", "Osteomalacia softens bones of adults", 3),
            web(
                "https://www.nature.com/x",
                "In adults, osteomalacia softens the bones; vitamin D deficiency causes osteomalacia.",
                1,
            ),
            web(
                "https://www.nhs.uk/conditions/osteomalacia",
                "Osteomalacia softens the bones of adults. Vitamin D deficiency causes it: deficiency osteomalacia.",
                3,
            ),
            Evidence { url: None, text: "vitamin D deficiency causes osteomalacia".into(), tier: 1 },
            Evidence { url: None, text: "vitamin D deficiency causes osteomalacia in adults".into(), tier: 1 },
        ];
        let table = triangulate(&claims, &evidence, "lexical", |c, e| supports(c, &e.text));
        let rows: Vec<String> = table.rows.iter().map(|r| format!("{:?} {}", r.status, r.sources.join(","))).collect();
        assert_eq!(
            rows,
            ["Verified nature.com,nhs.uk,wikipedia.org", "Verified corpus,nature.com,nhs.uk", "Unverified ",]
        );
        assert!((table.coverage_pct - 200.0 / 3.0).abs() < 1e-9);
        // Sources: wikipedia.org (3), nature.com (1), nhs.uk (3), corpus (1).
        assert!((table.tier1_ratio - 0.5).abs() < 1e-9);
        assert_eq!(Consensus::from_sources(2), Consensus::Likely);
        assert_eq!(serde_json::to_string(&Consensus::Verified).unwrap(), "\"VERIFIED\"");
    }

    #[test]
    fn verdicts_decide_for_their_sources_and_the_lexical_check_for_the_rest() {
        let claims = vec!["Osteomalacia softens the bones of adults".to_owned(), "The moon is cheese".to_owned()];
        let evidence = vec![
            web("https://nature.com/a", "Osteomalacia softens the bones of adults.", 1),
            web("https://nhs.uk/b", "Nothing about it here.", 3),
            Evidence { url: None, text: "Osteomalacia softens the bones of adults.".into(), tier: 1 },
        ];
        let grouped = texts_by_source(&evidence);
        let names: Vec<&str> = grouped.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(names, ["corpus", "nature.com", "nhs.uk"]);
        let lexical = triangulate_with_verdicts(&claims, &evidence, &std::collections::BTreeMap::new());
        assert_eq!((lexical.support_check.as_str(), lexical.rows[0].sources.len()), ("lexical", 2));
        // The judge says nhs.uk supports the moon claim and nature.com nothing: its verdicts win for those two.
        let verdicts = [("nhs.uk".to_owned(), vec![false, true]), ("nature.com".to_owned(), vec![false, false])];
        let mixed = triangulate_with_verdicts(&claims, &evidence, &verdicts.into_iter().collect());
        assert_eq!(mixed.support_check, "llm (2 of 3 sources; lexical for the rest)");
        assert_eq!(mixed.rows[0].sources, ["corpus"]);
        assert_eq!(mixed.rows[1].sources, ["nhs.uk"]);
    }

    #[test]
    fn empty_inputs() {
        let table = triangulate(&[], &[], "lexical", |c, e| supports(c, &e.text));
        assert_eq!((table.coverage_pct, table.tier1_ratio), (0.0, 0.0));
        assert!(!supports("the of", "anything"));
    }
}
