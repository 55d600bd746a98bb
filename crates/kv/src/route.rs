//! Prefix-aware routing over an engine's N slots (design §8 "Store"): each
//! slot (a llama.cpp server slot, a sequence of a batch) keeps the KV of
//! the last request it ran; a new request goes to the idle slot that
//! already holds its longest prefix, so that prefix is reused in place.
//! Copying KV is the fallback: when a busy slot or the host store holds a
//! longer prefix than any idle slot, the difference is copied into the
//! chosen slot instead of being prefilled again.
//!
//! Keys carry the identity (model, template, adapter, tenant, ...), so a
//! common key prefix is a compatible prefix: nothing else is checked.

use super::key::BlockKey;

/// Where the copied blocks come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopySource {
    /// Another slot's KV (busy, so the request could not go there).
    Slot(usize),
    /// The host block store (`BlockStore::lookup`).
    Store,
}

/// Where a request runs and what it starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub slot: usize,
    /// Leading blocks the slot holds already.
    pub reused_blocks: usize,
    /// Blocks after those to copy in, and from where (`None`: no copy).
    pub copy: Option<(CopySource, usize)>,
}

impl Route {
    /// Leading blocks the request need not prefill.
    pub fn cached_blocks(&self) -> usize {
        self.reused_blocks + self.copy.map_or(0, |(_, n)| n)
    }
}

#[derive(Debug, Clone, Default)]
struct Slot {
    keys: Vec<BlockKey>,
    busy: bool,
    last_used: u64,
}

/// The slots of one engine and the prefixes they hold.
#[derive(Debug, Clone)]
pub struct SlotRouter {
    slots: Vec<Slot>,
    clock: u64,
}

fn common_prefix(a: &[BlockKey], b: &[BlockKey]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl SlotRouter {
    pub fn new(slots: usize) -> SlotRouter {
        SlotRouter {
            slots: vec![Slot::default(); slots],
            clock: 0,
        }
    }

    /// The blocks slot `slot` holds.
    pub fn keys(&self, slot: usize) -> &[BlockKey] {
        &self.slots[slot].keys
    }

    pub fn is_busy(&self, slot: usize) -> bool {
        self.slots[slot].busy
    }

    /// Routes a request with block keys `keys`, when the host store holds
    /// its first `store_blocks`: the idle slot with the longest common
    /// prefix (the least recently used, then the lowest, on a tie), plus a copy from a busy
    /// slot or the store when either holds more (a slot first on a tie: a
    /// device-to-device copy is the cheaper). The slot becomes busy until
    /// [`SlotRouter::finish`]. `None` when every slot is busy.
    pub fn route(&mut self, keys: &[BlockKey], store_blocks: usize) -> Option<Route> {
        let (slot, reused_blocks) = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.busy)
            .map(|(i, s)| (i, common_prefix(&s.keys, keys), s.last_used))
            .min_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)))
            .map(|(i, common, _)| (i, common))?;
        let from_slot = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.busy)
            .map(|(i, s)| (CopySource::Slot(i), common_prefix(&s.keys, keys)))
            .max_by_key(|&(_, n)| n);
        let from_store = (CopySource::Store, store_blocks.min(keys.len()));
        let best = match from_slot {
            Some(s) if s.1 >= from_store.1 => s,
            _ => from_store,
        };
        let copy = (best.1 > reused_blocks).then(|| (best.0, best.1 - reused_blocks));
        let route = Route {
            slot,
            reused_blocks,
            copy,
        };
        self.clock += 1;
        let s = &mut self.slots[slot];
        s.busy = true;
        s.last_used = self.clock;
        s.keys = keys[..route.cached_blocks()].to_vec();
        Some(route)
    }

    /// The request on `slot` is done; the slot holds the KV of `keys`.
    pub fn finish(&mut self, slot: usize, keys: Vec<BlockKey>) {
        self.clock += 1;
        let s = &mut self.slots[slot];
        s.busy = false;
        s.keys = keys;
        s.last_used = self.clock;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ids: &[u8]) -> Vec<BlockKey> {
        ids.iter().map(|&i| BlockKey([i; 16])).collect()
    }

    #[test]
    fn a_request_goes_to_the_slot_with_its_longest_prefix() {
        let mut router = SlotRouter::new(3);
        // Cold: slot 0 (all tie at 0 and never used: the lowest index).
        let r = router.route(&keys(&[1, 2, 3]), 0).unwrap();
        assert_eq!((r.slot, r.reused_blocks, r.copy), (0, 0, None));
        router.finish(0, keys(&[1, 2, 3, 4]));
        let r = router.route(&keys(&[7, 8]), 0).unwrap();
        assert_eq!(r.slot, 1, "slot 0 holds a prefix worth keeping");
        router.finish(1, keys(&[7, 8]));
        // Shares 3 blocks with slot 0, none with 1 or 2: slot 0, in place.
        let r = router.route(&keys(&[1, 2, 3, 9]), 0).unwrap();
        assert_eq!((r.slot, r.reused_blocks, r.copy), (0, 3, None));
        assert_eq!(router.keys(0), &keys(&[1, 2, 3])[..]);
        assert!(router.is_busy(0));
    }

    #[test]
    fn copying_is_the_fallback_when_the_owner_is_busy() {
        let mut router = SlotRouter::new(2);
        router.route(&keys(&[1, 2]), 0).unwrap();
        router.finish(0, keys(&[1, 2, 3]));
        // Slot 0 owns [1, 2, 3] and is busy now with this request.
        let r = router.route(&keys(&[1, 2, 3, 4]), 0).unwrap();
        assert_eq!((r.slot, r.reused_blocks), (0, 3));
        // The next request with the same prefix: slot 1, copying 3 blocks
        // from slot 0, though the store has 2 of them.
        let r = router.route(&keys(&[1, 2, 3, 5]), 2).unwrap();
        assert_eq!(r.slot, 1);
        assert_eq!(r.copy, Some((CopySource::Slot(0), 3)));
        assert_eq!(r.cached_blocks(), 3);
        // Every slot busy: nowhere to go.
        assert_eq!(router.route(&keys(&[1]), 0), None);
        // The store holds more than any slot: copy from it.
        router.finish(1, keys(&[6]));
        let r = router.route(&keys(&[8, 9, 10]), 2).unwrap();
        assert_eq!((r.slot, r.reused_blocks), (1, 0));
        assert_eq!(r.copy, Some((CopySource::Store, 2)));
    }
}
