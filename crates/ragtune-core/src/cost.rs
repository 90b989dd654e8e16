//! Costs, cost models and budgets: what every seam call is charged.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// What a call consumed: LLM or model tokens, documents processed, and calls made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cost {
    /// Tokens processed (prompt plus completion for an LLM; input tokens for a model).
    pub tokens: u64,
    /// Documents (or passages) processed.
    pub docs: u64,
    /// Calls made to a model, provider or server.
    pub calls: u64,
}

impl Cost {
    /// Nothing spent.
    pub const ZERO: Self = Self { tokens: 0, docs: 0, calls: 0 };

    /// A cost of `tokens`, `docs` and `calls`.
    #[must_use]
    pub const fn new(tokens: u64, docs: u64, calls: u64) -> Self {
        Self { tokens, docs, calls }
    }

    /// Whether every component of `self` is at most the matching component of `other`.
    #[must_use]
    pub fn fits_within(&self, other: &Self) -> bool {
        self.tokens <= other.tokens && self.docs <= other.docs && self.calls <= other.calls
    }

    /// Component-wise subtraction, stopping at zero.
    #[must_use]
    pub fn saturating_sub(&self, other: &Self) -> Self {
        Self {
            tokens: self.tokens.saturating_sub(other.tokens),
            docs: self.docs.saturating_sub(other.docs),
            calls: self.calls.saturating_sub(other.calls),
        }
    }
}

impl Add for Cost {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            tokens: self.tokens.saturating_add(o.tokens),
            docs: self.docs.saturating_add(o.docs),
            calls: self.calls.saturating_add(o.calls),
        }
    }
}

impl AddAssign for Cost {
    fn add_assign(&mut self, o: Self) {
        *self = *self + o;
    }
}

/// How a component prices one call: a fixed part plus a part per document and per input token.
///
/// The reranking controller budgets against these estimates before it calls; the actual [`Cost`] reported
/// afterwards is what is charged.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CostModel {
    /// Charged once per call.
    pub per_call: Cost,
    /// Charged per document in the batch.
    pub per_doc: Cost,
    /// Expected wall time per document in milliseconds on the reference machine (informational, for scheduling).
    pub ms_per_doc: f64,
}

impl CostModel {
    /// A model that charges nothing (in-process lexical work).
    pub const FREE: Self = Self { per_call: Cost::ZERO, per_doc: Cost::ZERO, ms_per_doc: 0.0 };

    /// The estimated cost of one call over `docs` documents.
    #[must_use]
    pub fn estimate(&self, docs: usize) -> Cost {
        let n = docs as u64;
        self.per_call
            + Cost {
                tokens: self.per_doc.tokens.saturating_mul(n),
                docs: self.per_doc.docs.saturating_mul(n),
                calls: self.per_doc.calls.saturating_mul(n),
            }
    }
}

/// A spending limit. Running out of budget is never an error: components stop and report why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// The most that may be spent; `u64::MAX` in a component means unlimited.
    pub limit: Cost,
}

impl Budget {
    /// No limit on anything.
    pub const UNLIMITED: Self = Self { limit: Cost { tokens: u64::MAX, docs: u64::MAX, calls: u64::MAX } };

    /// A budget of `limit`.
    #[must_use]
    pub const fn new(limit: Cost) -> Self {
        Self { limit }
    }

    /// Whether spending `extra` on top of `spent` stays within the limit.
    #[must_use]
    pub fn allows(&self, spent: Cost, extra: Cost) -> bool {
        (spent + extra).fits_within(&self.limit)
    }

    /// What is left after `spent`.
    #[must_use]
    pub fn remaining(&self, spent: Cost) -> Cost {
        self.limit.saturating_sub(&spent)
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self::UNLIMITED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_allows_up_to_the_limit() {
        let b = Budget::new(Cost::new(100, 10, 2));
        assert!(b.allows(Cost::new(50, 5, 1), Cost::new(50, 5, 1)));
        assert!(!b.allows(Cost::new(50, 5, 1), Cost::new(51, 0, 0)));
        assert_eq!(b.remaining(Cost::new(150, 1, 0)), Cost::new(0, 9, 2));
        assert!(Budget::UNLIMITED.allows(Cost::new(u64::MAX, 0, 0), Cost::new(1, 1, 1)));
    }

    #[test]
    fn cost_model_estimates() {
        let m = CostModel { per_call: Cost::new(10, 0, 1), per_doc: Cost::new(100, 1, 0), ms_per_doc: 5.0 };
        assert_eq!(m.estimate(3), Cost::new(310, 3, 1));
    }
}
