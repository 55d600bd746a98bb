//! residency-executor: everything that touches bytes, devices and time
//! (DESIGN 7). Today: the cache policies shared by the replay simulator and
//! the serving loop (`policy`), and the simulator itself (`sim`, DESIGN 6).
//! It uses the planner (readers, plans); the planner never uses it.

pub mod checkpoint;
pub mod identity;
pub mod policy;
pub mod sim;
pub mod storage;
pub mod store;
