//! Percentiles for latency and cost summaries.

/// The `p`-th percentile (`p` in percent, 0 to 100) of values sorted ascending, by linear interpolation between
/// the closest ranks.
///
/// This is the "linear" method of numpy's `percentile` (type 7 of Hyndman and Fan, Excel's `PERCENTILE.INC`):
/// with `n` values, `h = (n - 1) * p / 100`, and the result is `x[floor(h)] + (h - floor(h)) * (x[ceil(h)] -
/// x[floor(h)])` (0-based). So `p = 0` is the minimum, `p = 100` the maximum and `p = 50` the usual median, and
/// the result moves continuously with `p` instead of jumping between samples as nearest-rank does.
///
/// `p` outside `0..=100` is clamped. An empty slice or a NaN `p` gives NaN, which says "no data" rather than
/// inventing a latency. `sorted_values` must be sorted ascending; unsorted input gives a meaningless (but finite
/// for finite input) number, not a panic.
#[must_use]
pub fn percentile(sorted_values: &[f64], p: f64) -> f64 {
    let (Some(first), Some(last)) = (sorted_values.first(), sorted_values.last()) else {
        return f64::NAN;
    };
    if p.is_nan() {
        return f64::NAN;
    }
    let p = p.clamp(0.0, 100.0);
    if p == 0.0 {
        return *first;
    }
    if p == 100.0 {
        return *last;
    }
    let h = (sorted_values.len() - 1) as f64 * p / 100.0;
    // `h` lies in [0, n - 1], so both indices are in bounds; `get` keeps that an arithmetic fact, not a panic.
    let lower = h.floor();
    let (Some(below), Some(above)) = (sorted_values.get(lower as usize), sorted_values.get(h.ceil() as usize)) else {
        return *last;
    };
    below + (h - lower) * (above - below)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks `percentile(values, p)` for each `(p, expected)` pair.
    fn check(values: &[f64], expect: &[(f64, f64)]) {
        for (p, want) in expect {
            let got = percentile(values, *p);
            assert!((got - want).abs() < 1e-9 || (got.is_nan() && want.is_nan()), "p{p}: got {got}, want {want}");
        }
    }

    #[test]
    fn interpolates_between_closest_ranks() {
        // n = 4, h = 3 * p / 100. p50: h = 1.5, 2 + 0.5 * (3 - 2) = 2.5. p25: h = 0.75, 1 + 0.75 * 1 = 1.75.
        check(&[1.0, 2.0, 3.0, 4.0], &[(0.0, 1.0), (25.0, 1.75), (50.0, 2.5), (100.0, 4.0)]);
    }

    #[test]
    fn tail_percentiles_of_a_hundred_samples() {
        // 1..=100: h = 99 * p / 100. p95: h = 94.05, x[94] = 95, 95 + 0.05 * 1 = 95.05. p99: h = 98.01, 99.01.
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        check(&values, &[(50.0, 50.5), (95.0, 95.05), (99.0, 99.01)]);
    }

    #[test]
    fn exact_rank_returns_the_sample() {
        // n = 5, p75: h = 3, exactly x[3].
        check(&[10.0, 20.0, 30.0, 40.0, 50.0], &[(75.0, 40.0), (50.0, 30.0)]);
    }

    #[test]
    fn single_value_is_every_percentile() {
        check(&[7.0], &[(0.0, 7.0), (50.0, 7.0), (99.9, 7.0), (100.0, 7.0)]);
    }

    #[test]
    fn out_of_range_p_is_clamped() {
        check(&[1.0, 2.0], &[(-5.0, 1.0), (250.0, 2.0), (f64::INFINITY, 2.0)]);
    }

    #[test]
    fn no_data_is_nan() {
        check(&[], &[(50.0, f64::NAN)]);
        check(&[1.0], &[(f64::NAN, f64::NAN)]);
    }
}
