//! Source credibility: a domain's tier and the weight it puts on a result's relevance.
//!
//! The default table is the web search protocol's (tier 1 authoritative, weight 1.0; tier 2 secondary, 0.8; tier 3,
//! everything else, 0.6); a configuration can replace the domain lists and the weights.

use serde::{Deserialize, Serialize};

/// Which domains belong to tiers 1 and 2, and each tier's weight. Every other domain is tier 3.
///
/// A listed domain covers its subdomains (`nature.com` covers `www.nature.com` and `go.nature.com`); when two
/// entries match, the longer (more specific) one wins, so `docs.tavily.com` can be tier 2 while `tavily.com` is not
/// listed at all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Credibility {
    /// Authoritative sources: primary research, standards bodies, the code itself.
    pub tier1: Vec<String>,
    /// Secondary sources: vendors' and projects' own documentation and blogs.
    pub tier2: Vec<String>,
    /// The weights of tiers 1, 2 and 3, multiplied into a result's relevance.
    pub weights: [f32; 3],
}

impl Default for Credibility {
    fn default() -> Self {
        let list = |xs: &[&str]| xs.iter().map(|s| (*s).to_owned()).collect();
        Self {
            tier1: list(&[
                "arxiv.org",
                "github.com",
                "semanticscholar.org",
                "huggingface.co",
                "nature.com",
                "science.org",
                "acm.org",
                "ieee.org",
                "openreview.net",
            ]),
            tier2: list(&[
                "nvidia.com",
                "google.ai",
                "anthropic.com",
                "openai.com",
                "langchain.com",
                "llamaindex.ai",
                "docs.tavily.com",
            ]),
            weights: [1.0, 0.8, 0.6],
        }
    }
}

impl Credibility {
    /// The tier (1, 2 or 3) of a domain such as `www.nature.com`.
    #[must_use]
    pub fn tier(&self, domain: &str) -> u8 {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        let matches = |entry: &String| {
            let entry = entry.trim().trim_end_matches('.').to_ascii_lowercase();
            !entry.is_empty()
                && (domain == entry || domain.strip_suffix(entry.as_str()).is_some_and(|rest| rest.ends_with('.')))
        };
        let best = |list: &[String]| list.iter().filter(|e| matches(e)).map(|e| e.trim().len()).max();
        match (best(&self.tier1), best(&self.tier2)) {
            (Some(a), Some(b)) => {
                if b > a {
                    2
                } else {
                    1
                }
            }
            (Some(_), None) => 1,
            (None, Some(_)) => 2,
            (None, None) => 3,
        }
    }

    /// The weight of a tier; tiers outside 1..=3 get tier 3's.
    #[must_use]
    pub fn weight(&self, tier: u8) -> f32 {
        match tier {
            1 => self.weights[0],
            2 => self.weights[1],
            _ => self.weights[2],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(domain: &str, tier: u8) {
        assert_eq!(Credibility::default().tier(domain), tier, "{domain}");
    }

    #[test]
    fn the_seed_table() {
        check("arxiv.org", 1);
        check("export.arxiv.org", 1);
        check("www.nature.com", 1);
        check("notnature.com", 3);
        check("docs.tavily.com", 2);
        check("tavily.com", 3);
        check("openai.com", 2);
        check("en.wikipedia.org", 3);
        check("", 3);
        let c = Credibility::default();
        assert_eq!([c.weight(1), c.weight(2), c.weight(3), c.weight(9)], [1.0, 0.8, 0.6, 0.6]);
    }

    #[test]
    fn overrides_and_the_more_specific_entry_wins() {
        let c = Credibility {
            tier1: vec!["example.org".into()],
            tier2: vec!["blog.example.org".into()],
            ..Credibility::default()
        };
        assert_eq!(c.tier("example.org"), 1);
        assert_eq!(c.tier("www.example.org"), 1);
        assert_eq!(c.tier("blog.example.org"), 2);
        assert_eq!(c.tier("arxiv.org"), 3);
        let parsed: Credibility = serde_json::from_str(r#"{"tier1": ["gov.uk"]}"#).unwrap();
        assert_eq!(parsed.tier("www.nhs.gov.uk"), 1);
        assert_eq!(parsed.weights, [1.0, 0.8, 0.6]);
    }
}
