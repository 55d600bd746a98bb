//! What the report examples print beside their plans: the thread's CPU
//! time and a median with its range.

/// CPU seconds this thread has used (the solver runs on one thread).
pub fn thread_cpu_seconds() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// The upper median and range of `xs` times `scale`, with `digits`
/// decimals; the median alone for one run.
pub fn spread(xs: &[f64], scale: f64, digits: usize) -> String {
    let median = residency_core::stats::upper_median(xs).expect("at least one run");
    let median = format!("{:.digits$}", median * scale);
    if xs.len() == 1 {
        return median;
    }
    let (low, high) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
            (l.min(x), h.max(x))
        });
    format!(
        "{median} ({:.digits$}-{:.digits$})",
        low * scale,
        high * scale
    )
}
