//! A replayable request stream over dense objects: what every trace (a
//! libCacheSim `oracleGeneral` file, a per-token MoE routing trace) becomes
//! before a policy sees it. MoE objects are numbered layer by layer, so the
//! experts of MoE ordinal `l` are `layer_start[l]..layer_start[l + 1]`.

use rayon::prelude::*;
use residency_formats::heat::TokenRoutes;
use residency_policy::{ObjectIndex, NEVER};
use std::sync::OnceLock;

/// Not `PartialEq`: two equal streams may differ in whether their
/// next-access index has been built yet.
#[derive(Debug, Clone)]
pub struct Stream {
    /// Size of each object in the cached tier's format.
    pub sizes_bytes: Vec<u64>,
    /// First object of each layer, plus the object count at the end.
    pub layer_start: Vec<u32>,
    /// Layer of each object (derived from `layer_start`; kept for speed).
    pub layer_of: Vec<u32>,
    pub requests: Vec<ObjectIndex>,
    /// See [`Stream::next_access`]: built on first use, from `requests`.
    next_access: OnceLock<Vec<u64>>,
    /// See [`Stream::counts`]: given by a reader that counted as it parsed
    /// ([`Stream::with_counts`]), else counted on each call.
    counts: Option<Vec<u64>>,
    /// Tokens the requests came from (generic traces: one per request).
    pub tokens: u64,
    /// Where each token's requests end, for tokens that ask for different
    /// numbers of objects (the CPU's share of tokens whose other experts a
    /// VRAM tier computes); `None`: every token asks for as many, and its
    /// bounds are computed (see [`Stream::token_end`]).
    token_ends: Option<Vec<usize>>,
}

impl Stream {
    /// A stream over objects grouped in layers (`layer_start`, see above).
    pub fn new(
        sizes_bytes: Vec<u64>,
        layer_start: Vec<u32>,
        requests: Vec<ObjectIndex>,
        tokens: u64,
    ) -> Stream {
        debug_assert_eq!(*layer_start.last().unwrap() as usize, sizes_bytes.len());
        let mut layer_of = vec![0u32; sizes_bytes.len()];
        for (l, w) in layer_start.windows(2).enumerate() {
            layer_of[w[0] as usize..w[1] as usize].fill(l as u32);
        }
        Stream {
            sizes_bytes,
            layer_start,
            layer_of,
            requests,
            next_access: OnceLock::new(),
            counts: None,
            tokens,
            token_ends: None,
        }
    }

    /// The stream with its requests per object already counted: `counts[o]`
    /// must be the requests for `o`.
    pub fn with_counts(self, counts: Vec<u64>) -> Stream {
        debug_assert_eq!(counts.len(), self.objects());
        Stream {
            counts: Some(counts),
            ..self
        }
    }

    /// For each request, the index of the next request for the same object,
    /// or [`NEVER`]. Only the offline bound reads it (see
    /// `Policy::reads_next_access`), and it is 8 bytes a request, twice the
    /// requests themselves, so it is built on the first call rather than
    /// with the stream. It is kept: `requests` must not change afterwards
    /// (nothing changes a stream's requests once it is built).
    pub fn next_access(&self) -> &[u64] {
        self.next_access
            .get_or_init(|| next_accesses(&self.requests, self.sizes_bytes.len()))
    }

    /// The requests of MoE tokens: each token asks, layer by layer, for the
    /// experts it chose (in the source's order); `expert_bytes[l]` is the
    /// size of an expert of layer `l`, `experts[l]` their number.
    pub fn from_tokens<'a>(
        tokens: impl IntoIterator<Item = &'a TokenRoutes>,
        experts: &[usize],
        expert_bytes: &[u64],
    ) -> Stream {
        let mut layer_start = vec![0u32];
        let mut sizes_bytes = Vec::new();
        for (&n, &bytes) in experts.iter().zip(expert_bytes) {
            sizes_bytes.resize(sizes_bytes.len() + n, bytes);
            layer_start.push(sizes_bytes.len() as u32);
        }
        let mut requests = Vec::new();
        let mut token_ends = Vec::new();
        for token in tokens {
            for (l, ids) in token.routes.iter().enumerate() {
                requests.extend(ids.iter().map(|&e| layer_start[l] + e));
            }
            token_ends.push(requests.len());
        }
        let count = token_ends.len() as u64;
        let stream = Stream::new(sizes_bytes, layer_start, requests, count);
        stream.with_token_ends(token_ends)
    }

    /// The stream with its tokens' ends given: `ends[t]` is one past token
    /// `t`'s last request. Kept only where the tokens differ in length:
    /// equal ones are computed faster than searched.
    fn with_token_ends(self, ends: Vec<usize>) -> Stream {
        debug_assert_eq!(ends.len() as u64, self.tokens);
        debug_assert_eq!(ends.last().copied().unwrap_or(0), self.requests.len());
        let first = ends.first().copied().unwrap_or(0);
        let equal = ends
            .iter()
            .enumerate()
            .all(|(t, &end)| end == (t + 1) * first);
        Stream {
            token_ends: (!equal).then_some(ends),
            ..self
        }
    }

    pub fn objects(&self) -> usize {
        self.sizes_bytes.len()
    }

    pub fn layers(&self) -> usize {
        self.layer_start.len() - 1
    }

    /// The objects of layer `l`.
    pub fn layer_objects(&self, l: usize) -> std::ops::Range<usize> {
        self.layer_start[l] as usize..self.layer_start[l + 1] as usize
    }

    /// The requests of each layer as a stream of its own (objects
    /// renumbered from 0, one layer), for per-layer caches; one pass.
    pub fn split_layers(&self) -> Vec<Stream> {
        let layers = self.layers();
        let mut requests: Vec<Vec<ObjectIndex>> = vec![Vec::new(); layers];
        // Tokens of different lengths keep their bounds in every layer.
        let whole = [self.requests.len()];
        let token_ends = self.token_ends.as_deref().unwrap_or(&whole);
        let mut layer_ends = vec![Vec::new(); layers];
        let mut start = 0;
        for &end in token_ends {
            for &o in &self.requests[start..end] {
                let l = self.layer_of[o as usize] as usize;
                requests[l].push(o - self.layer_start[l]);
            }
            for (ends, r) in layer_ends.iter_mut().zip(&requests) {
                ends.push(r.len());
            }
            start = end;
        }
        requests
            .into_iter()
            .zip(layer_ends)
            .enumerate()
            .map(|(l, (r, ends))| {
                let range = self.layer_objects(l);
                let stream = Stream::new(
                    self.sizes_bytes[range.clone()].to_vec(),
                    vec![0, range.len() as u32],
                    r,
                    self.tokens,
                );
                match self.token_ends {
                    Some(_) => stream.with_token_ends(ends),
                    None => stream,
                }
            })
            .collect()
    }

    /// Experts a token asks of each layer at once (its top-k), which a
    /// serving store leases together: each layer's requests per token,
    /// rounded up (exact for MoE traces, whose tokens route the same k in
    /// every layer; 1 for a generic trace, one request a token; 0 for a
    /// layer without requests).
    pub fn leased_at_once(&self) -> Vec<usize> {
        let mut per_layer = vec![0u64; self.layers()];
        for &o in &self.requests {
            per_layer[self.layer_of[o as usize] as usize] += 1;
        }
        per_layer
            .into_iter()
            .map(|n| n.div_ceil(self.tokens.max(1)) as usize)
            .collect()
    }

    /// End (exclusive) of the requests from `start` that one token asks of
    /// one layer at once: a serving store looks all of them up before it
    /// loads any (`Store::try_acquire`, then the misses), so the replay
    /// serves them in that order too (`sim::replay`). Inlined by force:
    /// the replay asks once a request, and left to itself the compiler
    /// kept it out of line.
    #[inline(always)]
    pub fn leased_group_end(&self, start: usize) -> usize {
        let token_end = self.token_end(start);
        let mut end = start + 1;
        if end < token_end {
            let layer_of = |i: usize| self.layer_of[self.requests[i] as usize];
            let layer = layer_of(start);
            while end < token_end && layer_of(end) == layer {
                end += 1;
            }
        }
        end
    }

    /// End (exclusive) of the token of request `i`: where its tokens' ends
    /// are kept, searched; else request `i` belongs to token
    /// `i * tokens / requests`, exact for MoE tokens (the same number of
    /// requests each), so token `t` holds requests
    /// `ceil(t * requests / tokens)..ceil((t + 1) * requests / tokens)`.
    /// One division a group rather than one a request, and none where
    /// every request is a token of its own (a generic trace: the replay
    /// asks this once a request).
    #[inline]
    pub fn token_end(&self, i: usize) -> usize {
        if let Some(ends) = &self.token_ends {
            return ends[self.token_of(i) as usize];
        }
        let n = self.requests.len();
        if self.tokens >= n as u64 {
            return i + 1;
        }
        if self.tokens == 0 {
            return n;
        }
        let (n, tokens) = (n as u128, self.tokens as u128);
        let token = i as u128 * tokens / n;
        ((token + 1) * n).div_ceil(tokens) as usize
    }

    /// Whether every request is a token of its own (a generic trace).
    pub fn one_request_a_token(&self) -> bool {
        self.token_ends.is_none() && self.tokens >= self.requests.len() as u64
    }

    /// The token of request `i`: `i * tokens / requests` where every token
    /// asks for as many (exact for MoE tokens), else found among the ends.
    #[inline]
    pub fn token_of(&self, i: usize) -> u64 {
        match &self.token_ends {
            Some(ends) => ends.partition_point(|&end| end <= i) as u64,
            None => {
                let n = self.requests.len().max(1) as u128;
                (i as u128 * self.tokens as u128 / n) as u64
            }
        }
    }

    /// The largest object.
    pub fn max_object_bytes(&self) -> u64 {
        self.sizes_bytes.iter().copied().max().unwrap_or(0)
    }

    /// Requests per object: as the reader counted them, or counted over
    /// runs of the stream side by side.
    pub fn counts(&self) -> Vec<u64> {
        if let Some(counts) = &self.counts {
            return counts.clone();
        }
        let objects = self.objects();
        let zero = || vec![0u64; objects];
        self.requests
            .par_chunks(1 << 20)
            .fold(zero, |mut counts, run| {
                for &o in run {
                    counts[o as usize] += 1;
                }
                counts
            })
            .reduce(zero, |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            })
    }
}

/// `next[i]` = index of the next request for the object of request `i`.
fn next_accesses(requests: &[ObjectIndex], objects: usize) -> Vec<u64> {
    let mut upcoming = vec![NEVER; objects];
    let mut next = vec![NEVER; requests.len()];
    for (i, &o) in requests.iter().enumerate().rev() {
        next[i] = upcoming[o as usize];
        upcoming[o as usize] = i as u64;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(routes: Vec<Vec<u32>>) -> TokenRoutes {
        TokenRoutes {
            seq: "s".into(),
            pos: 0,
            category: None,
            routes,
        }
    }

    #[test]
    fn tokens_become_layered_requests_with_next_accesses() {
        // Two layers: 3 experts of 10 bytes, then 2 of 20 bytes. Objects:
        // layer 0 -> 0,1,2; layer 1 -> 3,4. Token 1: L0 {2,0}, L1 {1};
        // token 2: L0 {2}, L1 {1,0} -> requests 2 0 4 2 4 3.
        let tokens = [
            token(vec![vec![2, 0], vec![1]]),
            token(vec![vec![2], vec![1, 0]]),
        ];
        let s = Stream::from_tokens(&tokens, &[3, 2], &[10, 20]);
        assert_eq!(s.requests, vec![2, 0, 4, 2, 4, 3]);
        assert_eq!(s.sizes_bytes, vec![10, 10, 10, 20, 20]);
        assert_eq!(s.layer_of, vec![0, 0, 0, 1, 1]);
        // Object 2 again at index 3, object 4 again at 4, the rest never.
        assert_eq!(s.next_access(), vec![3, NEVER, 4, NEVER, NEVER, NEVER]);
        assert_eq!(s.tokens, 2);
        let l1 = &s.split_layers()[1];
        assert_eq!(l1.requests, vec![1, 1, 0]);
        assert_eq!(l1.sizes_bytes, vec![20, 20]);
        assert_eq!(l1.next_access(), vec![1, NEVER, NEVER]);
        // 3 requests of layer 0 and 3 of layer 1 over 2 tokens: 1.5 a
        // token, rounded up to 2 each.
        assert_eq!(s.leased_at_once(), vec![2, 2]);
    }

    #[test]
    fn token_ends_follow_the_token_of_each_request() {
        // Independent method: request i belongs to token i * tokens / n
        // (floor); a token ends at the first request of a later token.
        for n in 1..=13usize {
            for tokens in 0..=2 * n as u64 {
                let s = Stream::new(vec![1], vec![0, 1], vec![0; n], tokens);
                let token_of = |i: usize| i as u64 * tokens / n as u64;
                for i in 0..n {
                    let end = (i + 1..n)
                        .find(|&j| token_of(j) != token_of(i))
                        .unwrap_or(n);
                    assert_eq!(s.token_end(i), end, "n {n} tokens {tokens} i {i}");
                }
            }
        }
    }

    #[test]
    fn a_leased_group_ends_with_its_token_or_its_layer() {
        // The stream of the first test: tokens 2 0 | 4 and 2 | 4 3 (3
        // requests each); groups by hand: [2 0] [4] [2] [4 3].
        let tokens = [
            token(vec![vec![2, 0], vec![1]]),
            token(vec![vec![2], vec![1, 0]]),
        ];
        let s = Stream::from_tokens(&tokens, &[3, 2], &[10, 20]);
        let ends: Vec<usize> = [0, 2, 3, 4]
            .iter()
            .map(|&i| s.leased_group_end(i))
            .collect();
        assert_eq!(ends, vec![2, 3, 4, 6]);
    }

    #[test]
    fn tokens_of_different_lengths_keep_their_bounds_in_every_layer() {
        // Three tokens over layers of 3 and 2 experts (objects 0-2, 3-4):
        // token 0 L0 {1} L1 {0} -> 1 3; token 1 asks nothing; token 2 L0
        // {0, 2} L1 {1} -> 0 2 4. Requests 1 3 | | 0 2 4: token ends 2, 2,
        // 5 (by hand), where a uniform split of 5 requests into 3 tokens
        // would end them at 2, 4 and 5.
        let tokens = [
            token(vec![vec![1], vec![0]]),
            token(vec![vec![], vec![]]),
            token(vec![vec![0, 2], vec![1]]),
        ];
        let s = Stream::from_tokens(&tokens, &[3, 2], &[10, 20]);
        assert_eq!(s.requests, vec![1, 3, 0, 2, 4]);
        let token_of: Vec<u64> = (0..5).map(|i| s.token_of(i)).collect();
        assert_eq!(token_of, vec![0, 0, 2, 2, 2]);
        let token_end: Vec<usize> = (0..5).map(|i| s.token_end(i)).collect();
        assert_eq!(token_end, vec![2, 2, 5, 5, 5]);
        // Groups: [1] [3] [0 2] [4].
        let group_end: Vec<usize> = [0, 1, 2, 4]
            .iter()
            .map(|&i| s.leased_group_end(i))
            .collect();
        assert_eq!(group_end, vec![1, 2, 4, 5]);
        // Layer 0 alone: 1 | | 0 2, tokens ending at 1, 1, 3; layer 1:
        // 0 | | 1, ending at 1, 1, 2.
        let layers = s.split_layers();
        assert_eq!(layers[0].requests, vec![1, 0, 2]);
        let ends =
            |l: &Stream| -> Vec<usize> { (0..l.requests.len()).map(|i| l.token_end(i)).collect() };
        assert_eq!(ends(&layers[0]), vec![1, 3, 3]);
        assert_eq!(ends(&layers[1]), vec![1, 2]);
        assert_eq!(layers[1].token_of(1), 2);
    }
}
