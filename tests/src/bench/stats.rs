//! Order statistics for benchmark samples: medians over repeated runs with
//! their spread, and percentiles of latency distributions.

/// Median and spread of repeated measurements of one figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The median of the runs.
    pub median: f64,
    /// The smallest run.
    pub min: f64,
    /// The largest run.
    pub max: f64,
    /// How many runs.
    pub runs: usize,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none.
    #[must_use]
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        Some(Self {
            median: percentile_sorted(&v, 50.0),
            min: v[0],
            max: v[v.len() - 1],
            runs: v.len(),
        })
    }

    /// `median (min–max)` with the given number of decimals.
    #[must_use]
    pub fn cell(&self, decimals: usize) -> String {
        if self.runs == 1 {
            return format!("{:.*}", decimals, self.median);
        }
        format!(
            "{:.*} ({:.*}–{:.*})",
            decimals, self.median, decimals, self.min, decimals, self.max
        )
    }
}

/// The `p`-th percentile (0..=100) of already sorted samples, by linear
/// interpolation between closest ranks; `NaN` for no samples.
#[must_use]
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let rank = (p.clamp(0.0, 100.0) / 100.0) * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            let frac = rank - lo as f64;
            sorted[lo] + (sorted[hi] - sorted[lo]) * frac
        }
    }
}

/// The `p`-th percentile of unsorted samples.
#[must_use]
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    percentile_sorted(&v, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        let s = Summary::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.runs), (3.0, 1.0, 5.0, 3));
        assert_eq!(s.cell(1), "3.0 (1.0–5.0)");
        let even = Summary::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(even.median, 2.5);
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn percentiles_interpolate() {
        let v: Vec<f64> = (0..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[10.0, 20.0], 50.0), 15.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
