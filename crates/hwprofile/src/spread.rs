//! The spread of repeated trials (median, fastest, slowest), and its
//! comment: `median 31.2 GB/s over 5 trials [30.1..32.0]`.

use super::doc::{figures_in_unit, Quantity};
use residency_core::stats::median_mean_of_middle;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub count: usize,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        Some(Spread {
            median: median_mean_of_middle(&sorted)?,
            min: sorted[0],
            max: sorted[n - 1],
            count: n,
        })
    }

    /// `max / min`: 1 for identical trials.
    pub fn ratio(&self) -> f64 {
        self.max / self.min
    }

    /// `median 31.2 GB/s over 5 trials [30.1..32.0]` in the unit of
    /// `quantity`; `what` names the samples (`trials`, `runs`).
    pub fn describe(&self, quantity: Quantity, what: &str) -> String {
        let (median, range, unit) = figures_in_unit(self.median, &[self.min, self.max], quantity);
        let median = if unit.is_empty() {
            median
        } else {
            format!("{median} {unit}")
        };
        format!(
            "median {median} over {} {what} [{}..{}]",
            self.count, range[0], range[1]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range_in_one_unit() {
        let s = Spread::of(&[32.0e9, 30.1e9, 31.2e9, 31.5e9, 30.9e9]).unwrap();
        assert_eq!(s.median, 31.2e9);
        assert_eq!(
            s.describe(Quantity::BytesPerSecond, "trials"),
            "median 31.2 GB/s over 5 trials [30.1..32.0]"
        );
        let t = Spread::of(&[34.25e-6, 40.75e-6]).unwrap();
        // Even count: the mean of the middle two.
        assert_eq!(
            t.describe(Quantity::Seconds, "runs"),
            "median 37.5 us over 2 runs [34.2..40.8]"
        );
        assert!(Spread::of(&[]).is_none());
    }
}
