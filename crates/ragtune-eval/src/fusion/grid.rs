//! The settings of a fusion fit's grid ([`FusionGrid`]): enumerated in grid order and checked, scored on every
//! core, and the best of each method and strength.

use ragtune::HybridSettings;
use ragtune::core::{Error, Result};
use ragtune::retrieve::{FusionConfig, FusionMethod, ListLevel};

use super::{FusionGrid, FusionPoint, Levels};

/// One setting of a fit's grid: method, strength, BM25 and dense weights, the level weights (with the two lists'
/// `ListLevel`s) and the fusion configuration.
pub(super) type Setting = (FusionMethod, f32, f32, f32, Option<(Levels, [ListLevel; 2])>, FusionConfig);

/// Every setting of the grid, in grid order (method, strength, dense weight ascending; then each grid level with
/// convex fusion), its configuration checked.
pub(super) fn grid_settings(grid: &FusionGrid, base: &HybridSettings) -> Result<Vec<Setting>> {
    let mut settings = Vec::new();
    for &method in &grid.methods {
        for &adaptive in &grid.adaptive {
            let config = HybridSettings { fusion: method, adaptive, ..*base }.fusion_config();
            config.validate()?;
            for step in 0..=grid.steps {
                // Both weights from integers, so they print as written (0.35, not 0.35000002).
                let dense_weight = step as f32 / grid.steps as f32;
                let bm25_weight = (grid.steps - step) as f32 / grid.steps as f32;
                settings.push((method, adaptive, bm25_weight, dense_weight, None, config));
            }
        }
    }
    // Each grid level becomes the two lists' `ListLevel`s as the engine makes them (`HybridSettings::list_level`),
    // checked once; a grid level must level both lists.
    let mut level_pairs: Vec<(Levels, [ListLevel; 2])> = Vec::with_capacity(grid.levels.len());
    for &levels in &grid.levels {
        let h =
            HybridSettings { bm25_level: levels.bm25, dense_level: levels.dense, level_slope: levels.slope, ..*base };
        h.validate()?;
        match (h.list_level(h.bm25_level, true), h.list_level(h.dense_level, false)) {
            (Some(b), Some(d)) => {
                b.validate()?;
                d.validate()?;
                level_pairs.push((levels, [b, d]));
            }
            _ => {
                return Err(Error::invalid_input(format!(
                    "a grid level needs both centres and the slope above 0, got {levels:?}"
                )));
            }
        }
    }
    for &(levels, pair) in &level_pairs {
        let config = HybridSettings { fusion: FusionMethod::Convex, adaptive: 0.0, ..*base }.fusion_config();
        for step in 0..=grid.steps {
            let dense_weight = step as f32 / grid.steps as f32;
            let bm25_weight = (grid.steps - step) as f32 / grid.steps as f32;
            settings.push((FusionMethod::Convex, 0.0, bm25_weight, dense_weight, Some((levels, pair)), config));
        }
    }
    Ok(settings)
}

/// Every setting's `score`, in the order of `settings`: they are independent, so scored on every core, each thread
/// taking every n-th, then put back in order.
pub(super) fn score_in_parallel(settings: &[Setting], score: &(dyn Fn(&Setting) -> f64 + Sync)) -> Vec<f64> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from).clamp(1, settings.len().max(1));
    let mut scores = vec![0.0; settings.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    settings.iter().enumerate().skip(t).step_by(threads).map(|(i, s)| (i, score(s))).collect::<Vec<_>>()
                })
            })
            .collect();
        for handle in handles {
            // A panic in a scoring thread is a bug of the metric code: re-raised here as it would have been inline.
            for (i, v) in handle.join().unwrap_or_else(|e| std::panic::resume_unwind(e)) {
                scores[i] = v;
            }
        }
    });
    scores
}

/// The scored settings as points, in grid order, and the best point of each method and strength (the first among
/// equals).
pub(super) fn best_per_method(settings: &[Setting], scores: Vec<f64>) -> (Vec<FusionPoint>, Vec<FusionPoint>) {
    let mut points = Vec::with_capacity(settings.len());
    let mut per_method: Vec<FusionPoint> = Vec::new();
    for (&(method, adaptive, bm25_weight, dense_weight, levels, _), ndcg_at_10) in settings.iter().zip(scores) {
        let levels = levels.map(|(l, _)| l);
        let point = FusionPoint { method, adaptive, bm25_weight, dense_weight, levels, ndcg_at_10 };
        match per_method.last_mut() {
            Some(best)
                if best.method == method && best.adaptive.to_bits() == adaptive.to_bits() && best.levels == levels =>
            {
                if point.ndcg_at_10 > best.ndcg_at_10 {
                    *best = point;
                }
            }
            _ => per_method.push(point),
        }
        points.push(point);
    }
    (points, per_method)
}
