//! Writes a synthetic MoE trace as a libCacheSim oracleGeneral file, for
//! timing `residency simulate` as a whole process (docs/simulator.md section 4):
//! 60 layers x 256 experts, top-8, 4 categories, Zipf 0.9 (the benchmark's
//! shape, `sim::synthetic`), object id `layer * 256 + expert`, every expert
//! 4 MiB, cut to exactly the number of requests asked.
//!
//! `cargo run --release -p residency-sim --example oracle_trace -- OUT [REQUESTS]`
//! (REQUESTS: 10,000,000 by default; 24 bytes each).

use residency_sim::oracle::write_oracle_general;
use residency_sim::stream::Stream;
use residency_sim::synthetic::{zipf_trace, SyntheticShape};
use std::path::PathBuf;

const LAYERS: usize = 60;
const EXPERTS: usize = 256;
const TOP_K: usize = 8;
const CATEGORIES: usize = 4;
const EXPERT_BYTES: u64 = 4 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let out = PathBuf::from(args.next().ok_or("usage: oracle_trace OUT [REQUESTS]")?);
    let requests: usize = match args.next() {
        Some(n) => n.to_str().ok_or("REQUESTS: a number")?.parse()?,
        None => 10_000_000,
    };
    let per_token = LAYERS * TOP_K;
    let shape = SyntheticShape {
        layers: LAYERS,
        experts: EXPERTS,
        top_k: TOP_K,
        tokens_per_category: requests.div_ceil(per_token * CATEGORIES),
        categories: CATEGORIES,
        zipf_s: 0.9,
        seed: 42,
    };
    let trace = zipf_trace(&shape);
    let all = Stream::from_tokens(&trace.tokens, &trace.experts, &vec![EXPERT_BYTES; LAYERS]);
    // Whole tokens of every category overshoot by fewer than 4 x 480
    // requests; the cut is a stream of its own, so that its next accesses
    // end where it ends.
    let mut cut_requests = all.requests;
    cut_requests.truncate(requests);
    let cut = Stream::new(
        all.sizes_bytes,
        all.layer_start,
        cut_requests,
        requests.div_ceil(per_token) as u64,
    );
    write_oracle_general(&out, &cut)?;
    println!(
        "wrote {} ({} requests, {} objects)",
        out.display(),
        cut.requests.len(),
        cut.objects()
    );
    Ok(())
}
