//! The replay simulator (DESIGN 6).
