//! residency-core: the plain data every other crate speaks, and the one
//! reference cost model (design §4). Units, the hardware profile and the
//! model description, the heat table, KV prefix groups, the cost model's
//! instance and evaluation, the solver's answer, the plan file, plan
//! diffs and the schemas of the files; the one pseudo-random generator
//! (`rng`) and the medians of measured samples (`stats`). No I/O beyond
//! reading and writing files; nothing here solves (`residency-solver`) or
//! reads engine formats (`residency-formats`).

pub mod constraints;
pub mod context;
pub mod cost;
pub mod diff;
pub mod error;
pub mod heat;
pub mod kv;
pub mod limits;
pub mod model;
pub mod names;
pub mod plan;
pub mod profile;
pub mod rng;
pub mod schema;
pub mod solution;
pub mod stats;
pub mod units;

pub use error::{PlannerError, Result};
