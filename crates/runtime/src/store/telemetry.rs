//! Telemetry (design §7): counters the store bumps lock-free, and a snapshot
//! as a struct, as JSON and as Prometheus text (prefix `residency_`).

use residency_policy::ObjectIndex;
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counters bumped on every hit are split in stripes, one cache line each,
/// and a thread bumps its own: otherwise threads leasing different objects
/// would still fight over one line.
const STRIPES: usize = 8;

#[repr(align(64))]
#[derive(Default)]
struct Stripe(AtomicU64);

#[derive(Default)]
pub(crate) struct Striped([Stripe; STRIPES]);

impl Striped {
    pub fn add(&self, value: u64) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        thread_local! {
            static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed) as usize % STRIPES;
        }
        MINE.with(|&i| self.0[i].0.fetch_add(value, Ordering::Relaxed));
    }

    pub fn get(&self) -> u64 {
        self.0.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
    }
}

/// Buckets of the reuse-distance histogram: bucket `b` counts distances in
/// `[2^(b-1), 2^b)` requests (bucket 0: distance 0).
const REUSE_BUCKETS: usize = 65;
const NEVER_SEEN: u64 = u64::MAX;

pub(crate) struct Counters {
    pub tier_hits: Vec<Striped>,
    pub physical_misses: AtomicU64,
    pub logical_bytes: Striped,
    pub physical_bytes: AtomicU64,
    pub felt_wait_nanos: AtomicU64,
    pub read_service_nanos: AtomicU64,
    pub admissions: AtomicU64,
    pub rejections: AtomicU64,
    pub bypasses: AtomicU64,
    pub evictions: AtomicU64,
    pub migrations: AtomicU64,
    pub migration_bytes: AtomicU64,
    pub single_flight_joins: AtomicU64,
    pub lease_waits: AtomicU64,
    last_access: Vec<AtomicU64>,
    reuse: Vec<Striped>,
}

impl Counters {
    pub fn new(places: usize, objects: usize) -> Counters {
        let striped = |n: usize| (0..n).map(|_| Striped::default()).collect();
        Counters {
            tier_hits: striped(places),
            physical_misses: AtomicU64::new(0),
            logical_bytes: Striped::default(),
            physical_bytes: AtomicU64::new(0),
            felt_wait_nanos: AtomicU64::new(0),
            read_service_nanos: AtomicU64::new(0),
            admissions: AtomicU64::new(0),
            rejections: AtomicU64::new(0),
            bypasses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            migrations: AtomicU64::new(0),
            migration_bytes: AtomicU64::new(0),
            single_flight_joins: AtomicU64::new(0),
            lease_waits: AtomicU64::new(0),
            last_access: (0..objects).map(|_| AtomicU64::new(NEVER_SEEN)).collect(),
            reuse: striped(REUSE_BUCKETS),
        }
    }

    pub fn add_seconds(&self, counter: &AtomicU64, elapsed: Duration) {
        counter.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Records a request for `o` at clock `now`: its distance (requests
    /// since its previous request) goes to the histogram.
    pub fn record_reuse(&self, o: ObjectIndex, now: u64) {
        let last = self.last_access[o as usize].swap(now, Ordering::Relaxed);
        if last != NEVER_SEEN {
            let distance = now.saturating_sub(last);
            let bucket = (u64::BITS - distance.leading_zeros()) as usize;
            self.reuse[bucket].add(1);
        }
    }

    pub fn snapshot<'a>(
        &self,
        places: impl Iterator<Item = &'a str>,
        budgets: impl Iterator<Item = (&'a str, u64, u64)>,
    ) -> Telemetry {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let seconds = |c: &AtomicU64| get(c) as f64 * 1e-9;
        Telemetry {
            tier_hits: places
                .zip(&self.tier_hits)
                .map(|(p, c)| (p.to_string(), c.get()))
                .collect(),
            physical_misses: get(&self.physical_misses),
            logical_bytes: self.logical_bytes.get(),
            physical_bytes: get(&self.physical_bytes),
            felt_wait_seconds: seconds(&self.felt_wait_nanos),
            read_service_seconds: seconds(&self.read_service_nanos),
            admissions: get(&self.admissions),
            rejections: get(&self.rejections),
            bypasses: get(&self.bypasses),
            evictions: get(&self.evictions),
            migrations: get(&self.migrations),
            migration_bytes: get(&self.migration_bytes),
            single_flight_joins: get(&self.single_flight_joins),
            lease_waits: get(&self.lease_waits),
            reuse_distance: self
                .reuse
                .iter()
                .enumerate()
                .map(|(b, c)| (b, c.get()))
                .filter(|&(_, n)| n > 0)
                .map(|(b, n)| (if b == 0 { 0 } else { 1u64 << (b - 1) }, n))
                .collect(),
            budgets: budgets
                .map(|(place, budget_bytes, used_bytes)| BudgetUse {
                    place: place.to_string(),
                    budget_bytes,
                    used_bytes,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct BudgetUse {
    pub place: String,
    pub budget_bytes: u64,
    pub used_bytes: u64,
}

/// One snapshot of the store's counters.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Telemetry {
    /// Hits per place (requests that found the object published).
    pub tier_hits: Vec<(String, u64)>,
    pub physical_misses: u64,
    /// Bytes handed out under leases.
    pub logical_bytes: u64,
    /// Bytes read by loads.
    pub physical_bytes: u64,
    /// Seconds requests waited for loads (their own or joined).
    pub felt_wait_seconds: f64,
    /// Seconds spent inside the loader.
    pub read_service_seconds: f64,
    pub admissions: u64,
    /// Misses the policy declined (they ran from a transient slot).
    pub rejections: u64,
    /// Misses the policy admitted that still ran from a transient slot:
    /// their place stayed full of leased objects until the policy evicted
    /// them again (a place with fewer slots than the experts leased at once).
    pub bypasses: u64,
    pub evictions: u64,
    pub migrations: u64,
    pub migration_bytes: u64,
    pub single_flight_joins: u64,
    pub lease_waits: u64,
    /// (lower bound of the bucket in requests, count); buckets double.
    pub reuse_distance: Vec<(u64, u64)>,
    pub budgets: Vec<BudgetUse>,
}

impl Telemetry {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("telemetry is plain data")
    }

    /// Prometheus text exposition format, metric names `residency_*`.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        metric(
            &mut out,
            "tier_hits",
            "counter",
            "Requests that found the object published, per place.",
            by_place(
                self.tier_hits
                    .iter()
                    .map(|(p, c)| (p.as_str(), *c))
                    .collect(),
            ),
        );
        write_counters(&mut out, self.counts());
        write_counters(&mut out, self.seconds());
        metric(
            &mut out,
            "reuse_distance",
            "histogram",
            "Requests between two requests of one object.",
            self.reuse_buckets(),
        );
        let budgets = |f: fn(&BudgetUse) -> u64| {
            by_place(
                self.budgets
                    .iter()
                    .map(|b| (b.place.as_str(), f(b)))
                    .collect(),
            )
        };
        metric(
            &mut out,
            "budget_bytes",
            "gauge",
            "Capacity of each budget.",
            budgets(|b| b.budget_bytes),
        );
        metric(
            &mut out,
            "used_bytes",
            "gauge",
            "Bytes reserved in each budget.",
            budgets(|b| b.used_bytes),
        );
        out
    }

    /// The counters counting events or bytes, as (name, help, value).
    fn counts(&self) -> [(&'static str, &'static str, u64); 11] {
        [
            (
                "physical_misses",
                "Loads started by a miss.",
                self.physical_misses,
            ),
            (
                "logical_bytes",
                "Bytes handed out under leases.",
                self.logical_bytes,
            ),
            (
                "physical_bytes",
                "Bytes read by loads.",
                self.physical_bytes,
            ),
            (
                "admissions",
                "Misses admitted to their place.",
                self.admissions,
            ),
            (
                "rejections",
                "Misses the policy declined, served from a transient slot.",
                self.rejections,
            ),
            (
                "bypasses",
                "Admitted misses served from a transient slot: their place was full of leased objects.",
                self.bypasses,
            ),
            ("evictions", "Objects dropped from a place.", self.evictions),
            (
                "migrations",
                "Objects moved between places.",
                self.migrations,
            ),
            (
                "migration_bytes",
                "Bytes moved between places.",
                self.migration_bytes,
            ),
            (
                "single_flight_joins",
                "Requests that joined a load in flight.",
                self.single_flight_joins,
            ),
            (
                "lease_waits",
                "Loads that waited for budget held by leases.",
                self.lease_waits,
            ),
        ]
    }

    /// The counters summing seconds, as (name, help, value).
    fn seconds(&self) -> [(&'static str, &'static str, f64); 2] {
        [
            (
                "felt_wait_seconds",
                "Seconds requests waited for loads.",
                self.felt_wait_seconds,
            ),
            (
                "read_service_seconds",
                "Seconds spent reading and preparing objects.",
                self.read_service_seconds,
            ),
        ]
    }

    /// The reuse-distance histogram's samples: cumulative buckets by upper
    /// bound, then `+Inf` and the count.
    fn reuse_buckets(&self) -> Vec<(String, String)> {
        let mut cumulative = 0;
        let mut buckets: Vec<(String, String)> = self
            .reuse_distance
            .iter()
            .map(|&(lower, count)| {
                cumulative += count;
                // Bucket `[lower, 2 lower)` holds distances <= 2 lower - 1.
                let le = if lower == 0 { 0 } else { 2 * lower - 1 };
                (format!("_bucket{{le=\"{le}\"}}"), cumulative.to_string())
            })
            .collect();
        buckets.push(("_bucket{le=\"+Inf\"}".into(), cumulative.to_string()));
        buckets.push(("_count".into(), cumulative.to_string()));
        buckets
    }
}

/// Writes metric `residency_{name}` to `out`: its help and type lines, then
/// each sample as (labels, value).
fn metric(out: &mut String, name: &str, kind: &str, help: &str, samples: Vec<(String, String)>) {
    let _ = writeln!(out, "# HELP residency_{name} {help}");
    let _ = writeln!(out, "# TYPE residency_{name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "residency_{name}{labels} {value}");
    }
}

/// Writes each (name, help, value) as a counter of one sample.
fn write_counters<T: ToString>(
    out: &mut String,
    counters: impl IntoIterator<Item = (&'static str, &'static str, T)>,
) {
    for (name, help, value) in counters {
        metric(out, name, "counter", help, plain(value.to_string()));
    }
}

/// One sample without labels.
fn plain(v: String) -> Vec<(String, String)> {
    vec![(String::new(), v)]
}

/// One sample per place, labelled `place`.
fn by_place(pairs: Vec<(&str, u64)>) -> Vec<(String, String)> {
    pairs
        .into_iter()
        .map(|(p, v)| (format!("{{place=\"{p}\"}}"), v.to_string()))
        .collect::<Vec<_>>()
}
