//! The assembler: the final context from the active items, in final order, deduplicated, under a token budget.

use std::collections::HashSet;

use ragtune_core::Chunk;
use serde::Serialize;

use crate::pool::{CandidatePool, FinalScore, PoolItem, cmp_final};

/// A rough token count: whitespace-separated words times 4/3, rounded up (English prose averages about three
/// quarters of a word per model token). The default of [`AssemblerConfig::count_tokens`]; replace it with a real
/// tokenizer's count where one is at hand.
#[must_use]
pub fn approx_tokens(text: &str) -> usize {
    (text.split_whitespace().count() * 4).div_ceil(3)
}

/// What happens when the next item does not fit the remaining token budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cut {
    /// Stop at the first item that does not fit: the context is a prefix of the final order.
    #[default]
    Prefix,
    /// Skip items that do not fit and keep filling with shorter ones further down.
    Fill,
}

/// Settings of the [`Assembler`].
#[derive(Debug, Clone, Copy)]
pub struct AssemblerConfig {
    /// The whole context window the assembled context shares with the prompt, in tokens.
    pub max_tokens: usize,
    /// Tokens kept free for the prompt (instructions, question, answer); the context gets
    /// `max_tokens - reserve_tokens`.
    pub reserve_tokens: usize,
    /// The most items, whatever their size; no limit when `None`.
    pub max_items: Option<usize>,
    /// How an item that does not fit is handled.
    pub cut: Cut,
    /// Counts the tokens of an item's text ([`approx_tokens`] unless replaced).
    pub count_tokens: fn(&str) -> usize,
}

impl Default for AssemblerConfig {
    fn default() -> Self {
        Self { max_tokens: 4096, reserve_tokens: 1024, max_items: None, cut: Cut::Prefix, count_tokens: approx_tokens }
    }
}

/// One item of the assembled context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssembledItem {
    /// The chunk.
    pub chunk: Chunk,
    /// Its final score, source and scale.
    pub score: FinalScore,
    /// The reranker that scored it, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reranker: Option<String>,
    /// Its 1-based initial rank (provenance).
    pub initial_rank: u32,
    /// Its token count.
    pub tokens: usize,
}

/// Why an active item is not in the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// An item with the same id came earlier.
    DuplicateId,
    /// An item with the same text (up to whitespace) came earlier.
    DuplicateText,
    /// It did not fit the token budget (or came after the cut).
    OverBudget,
    /// The item limit was reached.
    ItemLimit,
}

/// The assembled context and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Assembly {
    /// The items, in final order.
    pub items: Vec<AssembledItem>,
    /// Their total token count.
    pub tokens: usize,
    /// The token budget for the context (`max_tokens - reserve_tokens`).
    pub budget: usize,
    /// Active items left out, by id, with the reason.
    pub skipped: Vec<(String, SkipReason)>,
}

/// Builds the final context: the active items (`CANDIDATE` or `RERANKED`, invariant 5) in final order
/// ([`cmp_final`]: scale tier, score, initial rank, id), without repeated ids or texts, cut to the token budget
/// that is left after the prompt's reserve. Deterministic: the same pool gives the same assembly.
#[derive(Debug, Clone, Copy, Default)]
pub struct Assembler {
    /// Settings.
    pub config: AssemblerConfig,
}

impl Assembler {
    /// An assembler with `config`.
    #[must_use]
    pub fn new(config: AssemblerConfig) -> Self {
        Self { config }
    }

    /// Assembles the context from the pool's active items.
    #[must_use]
    pub fn assemble(&self, pool: &CandidatePool) -> Assembly {
        self.assemble_items(pool.active_items())
    }

    /// Assembles the context from `items`; items that are not active (`IN_FLIGHT`, `DROPPED`) are ignored.
    #[must_use]
    pub fn assemble_items<'a>(&self, items: impl IntoIterator<Item = &'a PoolItem>) -> Assembly {
        let mut ordered: Vec<&PoolItem> = items.into_iter().filter(|it| it.state().is_active()).collect();
        ordered.sort_by(|a, b| cmp_final(a, b));
        let budget = self.config.max_tokens.saturating_sub(self.config.reserve_tokens);
        let mut out = Assembly { budget, ..Assembly::default() };
        let mut ids: HashSet<&str> = HashSet::with_capacity(ordered.len());
        let mut texts: HashSet<String> = HashSet::with_capacity(ordered.len());
        let mut cut = false;
        for item in ordered {
            if !ids.insert(item.id()) {
                out.skipped.push((item.id().to_owned(), SkipReason::DuplicateId));
                continue;
            }
            let normalized = item.chunk().text.split_whitespace().collect::<Vec<_>>().join(" ");
            if texts.contains(&normalized) {
                out.skipped.push((item.id().to_owned(), SkipReason::DuplicateText));
                continue;
            }
            if cut {
                out.skipped.push((item.id().to_owned(), SkipReason::OverBudget));
                continue;
            }
            if self.config.max_items.is_some_and(|m| out.items.len() >= m) {
                out.skipped.push((item.id().to_owned(), SkipReason::ItemLimit));
                continue;
            }
            let tokens = (self.config.count_tokens)(&item.chunk().text);
            if out.tokens + tokens > budget {
                out.skipped.push((item.id().to_owned(), SkipReason::OverBudget));
                cut = self.config.cut == Cut::Prefix;
                continue;
            }
            texts.insert(normalized);
            out.tokens += tokens;
            out.items.push(AssembledItem {
                chunk: item.chunk().clone(),
                score: item.final_rank_score(),
                reranker: item.reranker_strategy().map(str::to_owned),
                initial_rank: item.initial_rank(),
                tokens,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;
    use crate::pool::ItemState;
    use ragtune_core::{Candidate, ScoredHit};

    /// A pool of `(id, text, retrieval score)`; `reranked` get the `ce` scores, `dropped` are dropped.
    fn pool(items: &[(&str, &str, f32)], reranked: &[(&str, f32)], dropped: &[&str]) -> CandidatePool {
        let candidates = items
            .iter()
            .map(|&(id, text, score)| {
                Candidate::from_hit(ScoredHit { chunk: Chunk::new(id, id, text), score }, "bm25", 1)
            })
            .collect();
        let mut p = CandidatePool::new(candidates).unwrap();
        let ids: Vec<&str> = reranked.iter().map(|r| r.0).collect();
        p.transition(&ids, ItemState::InFlight).unwrap();
        p.update_scores("ce", reranked).unwrap();
        p.transition(dropped, ItemState::Dropped).unwrap();
        p
    }

    fn check(assembler: Assembler, pool: &CandidatePool, expect: &str) {
        let a = assembler.assemble(pool);
        let mut got = String::new();
        for (i, it) in a.items.iter().enumerate() {
            let _ = writeln!(got, "{}. {}  {:.4}  {} tokens", i + 1, it.chunk.id, it.score.value, it.tokens);
        }
        for (id, why) in &a.skipped {
            let _ = writeln!(got, "skipped {id}: {why:?}");
        }
        let _ = write!(got, "{}/{} tokens", a.tokens, a.budget);
        assert_eq!(got, expect.trim());
    }

    #[test]
    fn approx_tokens_counts_words() {
        assert_eq!(approx_tokens(""), 0);
        assert_eq!(approx_tokens("one"), 2);
        assert_eq!(approx_tokens("one two  three\n"), 4);
    }

    #[test]
    fn sorts_dedups_and_cuts_at_the_budget() {
        let p = pool(
            &[
                ("a", "alpha beta gamma", 0.9),
                ("b", "alpha  beta gamma", 0.8),
                ("c", "one two three four five six", 0.7),
                ("d", "x y", 0.6),
                ("e", "dropped text", 0.5),
            ],
            &[("d", 5.0)],
            &["e"],
        );
        let config = AssemblerConfig { max_tokens: 12, reserve_tokens: 4, ..AssemblerConfig::default() };
        check(
            Assembler::new(config),
            &p,
            "1. d  5.0000  3 tokens\n2. a  0.9000  4 tokens\nskipped b: DuplicateText\nskipped c: OverBudget\n7/8 tokens",
        );
        let fill = AssemblerConfig { max_tokens: 20, reserve_tokens: 4, cut: Cut::Fill, max_items: Some(2), ..config };
        check(
            Assembler::new(fill),
            &p,
            "1. d  5.0000  3 tokens\n2. a  0.9000  4 tokens\nskipped b: DuplicateText\nskipped c: ItemLimit\n7/16 tokens",
        );
    }

    #[test]
    fn fill_keeps_going_after_an_item_that_does_not_fit() {
        let p = pool(&[("a", "a b c d e f g h i j", 0.9), ("b", "short", 0.8)], &[], &[]);
        let words = |t: &str| t.split_whitespace().count();
        let config =
            AssemblerConfig { max_tokens: 5, reserve_tokens: 0, count_tokens: words, ..AssemblerConfig::default() };
        check(Assembler::new(config), &p, "skipped a: OverBudget\nskipped b: OverBudget\n0/5 tokens");
        check(
            Assembler::new(AssemblerConfig { cut: Cut::Fill, ..config }),
            &p,
            "1. b  0.8000  1 tokens\nskipped a: OverBudget\n1/5 tokens",
        );
    }

    #[test]
    fn repeated_ids_in_a_hand_made_list_are_skipped() {
        let p = pool(&[("a", "text one", 0.9), ("b", "text two", 0.8)], &[], &[]);
        let a = p.get("a").unwrap();
        let assembly = Assembler::default().assemble_items([a, a, p.get("b").unwrap()]);
        assert_eq!(assembly.items.len(), 2);
        assert_eq!(assembly.skipped, vec![("a".to_owned(), SkipReason::DuplicateId)]);
    }
}
