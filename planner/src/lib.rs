//! residency-planner: inputs -> plan, pure. Reads hardware profiles, model
//! descriptions and heat; evaluates placements with the one reference cost
//! model (design §4); solves for a placement with a lower bound; reads and
//! writes plan files. No I/O beyond reading and writing files.

pub mod cost;
pub mod diff;
pub mod error;
pub mod explain;
pub mod export;
pub mod heat;
pub mod inputs;
pub mod kv;
pub mod model;
pub mod names;
pub mod plan;
pub mod profile;
pub mod schema;
pub mod solve;
pub mod units;

pub use error::{PlannerError, Result};
