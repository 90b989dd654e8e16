//! How sure a difference in accuracy is, when two systems answered the same questions.
//!
//! Two experiments scored on the same questions are paired: only the questions that one got right and the other
//! wrong (the discordant pairs) say anything about which is better. [`compare`] gives the difference in accuracy
//! with a 95 % confidence interval (Agresti and Min's adjusted Wald interval for matched proportions: half a
//! question added to each of the four cells, which keeps its coverage near 95 % even with few discordant pairs) and
//! the exact two-sided McNemar p-value (a binomial test of the discordant pairs against an even split).
//!
//! ```
//! use ragtune_eval::paired::compare;
//!
//! // 100 questions: 4 right only with the new pipeline, none right only with the old one.
//! let c = compare(100, 0, 4);
//! assert!((c.difference - 0.04).abs() < 1e-12);
//! assert!((c.mcnemar_p - 0.125).abs() < 1e-12); // 2 × 0.5⁴: four wins in four could be luck
//! assert!(c.ci95[0] < 0.0 && c.ci95[1] > 0.04);
//! ```

/// The paired comparison of an experiment with a base on the same questions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairedComparison {
    /// Questions both were scored on.
    pub questions: usize,
    /// Questions only the base got right.
    pub only_base: usize,
    /// Questions only the other experiment got right.
    pub only_other: usize,
    /// The other's accuracy minus the base's: `(only_other - only_base) / questions`.
    pub difference: f64,
    /// The 95 % confidence interval of the difference (Agresti–Min), clamped to [-1, 1].
    pub ci95: [f64; 2],
    /// The exact two-sided McNemar p-value: the chance of a split of the discordant pairs at least this uneven if
    /// neither experiment were better (1.0 when there is no discordant pair).
    pub mcnemar_p: f64,
}

/// Compares an experiment with a base from the counts of a paired evaluation: `questions` scored by both,
/// `only_base` right only in the base, `only_other` right only in the other.
///
/// With no question the difference is 0 and the interval the whole range [-1, 1].
#[must_use]
pub fn compare(questions: usize, only_base: usize, only_other: usize) -> PairedComparison {
    let (b, c) = (only_base as f64, only_other as f64);
    let difference = if questions == 0 { 0.0 } else { (c - b) / questions as f64 };
    // Agresti & Min (2005): add 0.5 to each of the four cells, then the Wald interval of the difference.
    let n = questions as f64 + 2.0;
    let (b, c) = (b + 0.5, c + 0.5);
    let centre = (c - b) / n;
    let se = ((b + c) - (c - b).powi(2) / n).max(0.0).sqrt() / n;
    let ci95 =
        if questions == 0 { [-1.0, 1.0] } else { [(centre - 1.96 * se).max(-1.0), (centre + 1.96 * se).min(1.0)] };
    PairedComparison {
        questions,
        only_base,
        only_other,
        difference,
        ci95,
        mcnemar_p: mcnemar_exact(only_base, only_other),
    }
}

/// The exact two-sided McNemar p-value: twice the binomial(b + c, 1/2) tail at the smaller count, at most 1.
fn mcnemar_exact(b: usize, c: usize) -> f64 {
    let m = b + c;
    if m == 0 {
        return 1.0;
    }
    let k = b.min(c);
    // ln C(m, i) + m ln(1/2), summed from i = 0 to k in log space so that no term underflows for large m.
    let mut ln_term = -(m as f64) * std::f64::consts::LN_2;
    let mut ln_terms = Vec::with_capacity(k + 1);
    for i in 0..=k {
        ln_terms.push(ln_term);
        ln_term += ((m - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    let top = ln_terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let tail = top.exp() * ln_terms.iter().map(|t| (t - top).exp()).sum::<f64>();
    (2.0 * tail).min(1.0)
}

impl PairedComparison {
    /// One line: the difference, its interval and the p-value (`+0.040, 95 % CI -0.003 to +0.082, McNemar p 0.125`).
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "{:+.3}, 95 % CI {:+.3} to {:+.3}, McNemar p {:.3}",
            self.difference, self.ci95[0], self.ci95[1], self.mcnemar_p
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_test_matches_the_binomial_tail() {
        // 1 vs 6 discordant: 2 × (1 + 7) / 2^7 = 0.125.
        assert!((mcnemar_exact(1, 6) - 16.0 / 128.0).abs() < 1e-12);
        assert!((mcnemar_exact(6, 1) - 16.0 / 128.0).abs() < 1e-12, "symmetric");
        // An even split is as likely as it gets.
        assert!((mcnemar_exact(5, 5) - 1.0).abs() < 1e-12);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // 0 vs 12: 2 / 4096.
        assert!((mcnemar_exact(0, 12) - 2.0 / 4096.0).abs() < 1e-15);
        // Large counts do not underflow: 0 vs 2000 is tiny but finite, 1000 vs 1000 is 1.
        let p = mcnemar_exact(0, 2000);
        assert!((0.0..1e-300).contains(&p));
        assert!((mcnemar_exact(1000, 1000) - 1.0).abs() < 1e-9);
        // Against a value computed independently: Bin(30, 0.5) P(X <= 9) = 0.02138697...
        assert!((mcnemar_exact(9, 21) - 2.0 * 0.021_386_972_6).abs() < 1e-9);
    }

    #[test]
    fn the_interval_is_agresti_and_mins() {
        // 100 questions, 0 vs 4: centre 4/102, se sqrt(5 - 16/102)/102.
        let c = compare(100, 0, 4);
        let centre = 4.0 / 102.0;
        let se = (5.0_f64 - 16.0 / 102.0).sqrt() / 102.0;
        assert!((c.ci95[0] - (centre - 1.96 * se)).abs() < 1e-12);
        assert!((c.ci95[1] - (centre + 1.96 * se)).abs() < 1e-12);
        assert_eq!(c.summary(), "+0.040, 95 % CI -0.003 to +0.082, McNemar p 0.125");
        // No discordant pair: a difference of 0 with a narrow interval around it.
        let tie = compare(100, 0, 0);
        assert_eq!(tie.difference, 0.0);
        assert!(tie.ci95[0] < 0.0 && tie.ci95[1] > 0.0 && tie.ci95[1] < 0.02);
        assert_eq!(tie.mcnemar_p, 1.0);
        // Every question won: clamped to the range.
        let all = compare(3, 0, 3);
        assert!(all.ci95[1] <= 1.0 && all.ci95[0] >= -1.0);
        // Nothing scored.
        let none = compare(0, 0, 0);
        assert_eq!((none.difference, none.ci95), (0.0, [-1.0, 1.0]));
        // Losing is negative and mirrors winning.
        let lose = compare(100, 4, 0);
        assert!((lose.ci95[0] + c.ci95[1]).abs() < 1e-12 && (lose.ci95[1] + c.ci95[0]).abs() < 1e-12);
    }
}
