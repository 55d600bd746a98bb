//! Medians of measured samples, each named by the quantile it takes for an
//! even count, so that two callers never mean different things by "the
//! median".

/// The median of `values`, the mean of the middle pair for an even count;
/// `None` of nothing. Values sort by `f64::total_cmp`.
pub fn median_mean_of_middle(values: &[f64]) -> Option<f64> {
    let sorted = sorted(values);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The upper median of `values`, the larger of the middle pair for an even
/// count (always one of the values); `None` of nothing. Values sort by
/// `f64::total_cmp`.
pub fn upper_median(values: &[f64]) -> Option<f64> {
    sorted(values).get(values.len() / 2).copied()
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_medians_differ_only_for_an_even_count() {
        assert_eq!(median_mean_of_middle(&[]), None);
        assert_eq!(upper_median(&[]), None);
        assert_eq!(median_mean_of_middle(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(upper_median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_mean_of_middle(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(upper_median(&[4.0, 1.0, 2.0, 3.0]), Some(3.0));
    }
}
