//! The prefix index (design §8 "Store", "Eviction"): which blocks are
//! cached, their prefix tree, their leases, and the order in which the
//! three eviction policies give them up. It holds no bytes itself, only a
//! value per block: the block store keeps the bytes (or the disk entry)
//! there, the trace replay nothing. The replay and the store run this very
//! code, so a replay result is a result about the store.
//!
//! Capacity is counted in blocks. A block that is leased (a request is
//! using it, or the replay's current request holds it) is never a victim.
//! The candidates of each policy sit in ordered sets keyed by last use:
//! - `lru`: every unleased block, least recently used first;
//! - `lru-leaf`: unleased blocks without cached children (leaves of the
//!   prefix tree), least recently used first, as SGLang's radix cache;
//! - `utility`: the same leaves, split by class (see `utility`); the victim
//!   is the lowest `P(reuse) * prefill seconds avoided / bytes` among the
//!   oldest leaf of each class (within a class the estimate falls with
//!   age, so the oldest is its least valuable).
//!
//! Under `lru-leaf` and `utility` a parent is never evicted before its
//! children: only leaves are candidates, and a block is inserted only under
//! a cached parent, so a cached block's parent is always cached.

use super::utility::{self, UtilityModel};
use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

residency_core::named! {
    /// How the index chooses a victim.
    pub enum EvictionPolicy("KV policy") {
        Lru = "lru",
        LruLeaf = "lru-leaf",
        Utility = "utility",
    }
}

impl EvictionPolicy {
    /// Whether the policy keeps the prefix tree (evicts leaves only).
    pub fn keeps_tree(self) -> bool {
        self != EvictionPolicy::Lru
    }
}

/// A block's slot in the index; valid until the block is evicted or
/// removed.
pub type NodeId = u32;

const NO_PARENT: NodeId = NodeId::MAX;

/// Every cached block is leased (or protected): nothing can be evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// What the index needs besides its capacity.
#[derive(Debug, Clone, Copy)]
pub struct IndexConfig {
    pub capacity_blocks: usize,
    pub policy: EvictionPolicy,
    /// Tokens of a full block; a block with fewer is a partial last block.
    pub block_tokens: u32,
    /// The prefill model behind "seconds avoided" (`utility`).
    pub prefill_tokens_per_second: f64,
}

/// Counts since the index was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexCounters {
    pub inserted_blocks: u64,
    pub evicted_blocks: u64,
    pub hit_blocks: u64,
}

#[derive(Debug, Clone)]
struct Node<K, V> {
    key: K,
    value: V,
    parent: NodeId,
    /// Cached children (kept only by policies that keep the tree).
    children: u32,
    leases: u32,
    /// The clock at the block's last release (its last use).
    last_use: u64,
    hits: u32,
    tokens: u32,
    bytes: u64,
    /// The candidate set the block is in, when `candidate`.
    class: u8,
    candidate: bool,
}

/// Blocks keyed by `K` (a `BlockKey` in the store, a trace's block id in
/// the replay), each with a value `V`.
#[derive(Debug, Clone)]
pub struct PrefixIndex<K, V = ()> {
    config: IndexConfig,
    map: HashMap<K, NodeId>,
    nodes: Vec<Option<Node<K, V>>>,
    free: Vec<NodeId>,
    /// Advances at every release, so last uses are distinct and ordered.
    clock: u64,
    /// Candidates by class: `(last_use, node)`, oldest first.
    candidates: Vec<BTreeSet<(u64, NodeId)>>,
    utility: UtilityModel<K>,
    counters: IndexCounters,
}

impl<K: Hash + Eq + Clone, V> PrefixIndex<K, V> {
    pub fn new(config: IndexConfig) -> Self {
        let classes = match config.policy {
            EvictionPolicy::Utility => utility::CLASSES,
            _ => 1,
        };
        PrefixIndex {
            config,
            map: HashMap::new(),
            nodes: Vec::new(),
            free: Vec::new(),
            clock: 0,
            candidates: vec![BTreeSet::new(); classes],
            utility: UtilityModel::new(config.capacity_blocks),
            counters: IndexCounters::default(),
        }
    }

    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn counters(&self) -> IndexCounters {
        self.counters
    }

    pub fn get(&self, key: &K) -> Option<NodeId> {
        self.map.get(key).copied()
    }

    /// How many of `keys`, from the first, are cached (the longest cached
    /// prefix).
    pub fn leading_run(&self, keys: &[K]) -> usize {
        keys.iter().take_while(|k| self.map.contains_key(k)).count()
    }

    fn node(&self, id: NodeId) -> &Node<K, V> {
        self.nodes[id as usize]
            .as_ref()
            .expect("a NodeId of a cached block")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node<K, V> {
        self.nodes[id as usize]
            .as_mut()
            .expect("a NodeId of a cached block")
    }

    pub fn key(&self, id: NodeId) -> &K {
        &self.node(id).key
    }

    pub fn value(&self, id: NodeId) -> &V {
        &self.node(id).value
    }

    pub fn value_mut(&mut self, id: NodeId) -> &mut V {
        &mut self.node_mut(id).value
    }

    pub fn leases(&self, id: NodeId) -> u32 {
        self.node(id).leases
    }

    /// The cached parent, under policies that keep the tree.
    pub fn parent(&self, id: NodeId) -> Option<NodeId> {
        Some(self.node(id).parent).filter(|&p| p != NO_PARENT)
    }

    pub fn children(&self, id: NodeId) -> u32 {
        self.node(id).children
    }

    /// Leases `id`: it is no victim until every lease is released.
    pub fn acquire(&mut self, id: NodeId) {
        self.leave_candidates(id);
        self.node_mut(id).leases += 1;
    }

    /// `id`, leased by the caller, was found by a lookup: a reuse, which
    /// teaches `utility` and counts as a hit.
    pub fn record_hit(&mut self, id: NodeId) {
        let now = self.clock;
        let node = self.node(id);
        debug_assert!(node.leases > 0, "record_hit on an unleased block");
        let (class, age) = (
            utility::class(node.hits, self.partial(node)),
            now - node.last_use,
        );
        if self.config.policy == EvictionPolicy::Utility {
            self.utility.observe_reuse(class, age);
        }
        self.node_mut(id).hits += 1;
        self.counters.hit_blocks += 1;
    }

    /// Ends one lease of `id`; the release is its latest use.
    pub fn release(&mut self, id: NodeId) {
        self.clock += 1;
        let now = self.clock;
        let node = self.node_mut(id);
        assert!(node.leases > 0, "release of a block that is not leased");
        node.leases -= 1;
        node.last_use = now;
        self.join_candidates(id);
    }

    /// Makes room for one block: `Ok(None)` when there is room already,
    /// `Ok(Some(victim))` after evicting one, `Err(Full)` when every
    /// cached block is leased (or the capacity is 0).
    pub fn make_room(&mut self) -> Result<Option<(K, V)>, Full> {
        if self.len() < self.config.capacity_blocks {
            return Ok(None);
        }
        let victim = self.victim().ok_or(Full)?;
        let node = self.node(victim);
        if self.config.policy == EvictionPolicy::Utility {
            let (key, class, last_use) = (node.key.clone(), node.class, node.last_use);
            self.utility.evicted(key, class, last_use, self.clock);
        }
        self.counters.evicted_blocks += 1;
        Ok(Some(self.unlink(victim)))
    }

    /// Inserts `key` below `parent` (a cached block; ignored by `lru`),
    /// leased once by the caller. Call [`PrefixIndex::make_room`] first.
    ///
    /// # Panics
    /// When the index is full or `key` is cached already (bugs).
    pub fn insert(
        &mut self,
        key: K,
        value: V,
        parent: Option<NodeId>,
        tokens: u32,
        bytes: u64,
    ) -> NodeId {
        assert!(
            self.len() < self.config.capacity_blocks,
            "insert without room"
        );
        let parent = match parent {
            Some(p) if self.config.policy.keeps_tree() => {
                self.leave_candidates(p);
                self.node_mut(p).children += 1;
                p
            }
            _ => NO_PARENT,
        };
        let node = Node {
            key: key.clone(),
            value,
            parent,
            children: 0,
            leases: 1,
            last_use: self.clock,
            hits: 0,
            tokens,
            bytes,
            class: 0,
            candidate: false,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                (self.nodes.len() - 1) as NodeId
            }
        };
        if self.config.policy == EvictionPolicy::Utility {
            self.utility.inserted(&key, self.clock);
        }
        let previous = self.map.insert(key, id);
        assert!(previous.is_none(), "insert of a cached key");
        self.counters.inserted_blocks += 1;
        id
    }

    /// Removes `id` now (a block found corrupt), if it is neither leased
    /// nor a parent; otherwise `None` and nothing changes.
    pub fn remove(&mut self, id: NodeId) -> Option<(K, V)> {
        let node = self.node(id);
        (node.leases == 0 && node.children == 0).then(|| self.unlink(id))
    }

    /// Takes `id` out of the index and its parent's children.
    fn unlink(&mut self, id: NodeId) -> (K, V) {
        self.leave_candidates(id);
        let node = self.nodes[id as usize].take().expect("a cached block");
        debug_assert!(node.leases == 0 && node.children == 0);
        self.map.remove(&node.key);
        self.free.push(id);
        if node.parent != NO_PARENT {
            self.node_mut(node.parent).children -= 1;
            self.join_candidates(node.parent);
        }
        (node.key, node.value)
    }

    fn partial(&self, node: &Node<K, V>) -> bool {
        node.tokens < self.config.block_tokens
    }

    /// Puts `id` in its candidate set if the policy may evict it now.
    fn join_candidates(&mut self, id: NodeId) {
        let keeps_tree = self.config.policy.keeps_tree();
        let utility = self.config.policy == EvictionPolicy::Utility;
        let node = self.node(id);
        if node.candidate || node.leases > 0 || (keeps_tree && node.children > 0) {
            return;
        }
        let class = if utility {
            utility::class(node.hits, self.partial(node))
        } else {
            0
        };
        let last_use = node.last_use;
        self.candidates[class as usize].insert((last_use, id));
        let node = self.node_mut(id);
        node.class = class;
        node.candidate = true;
    }

    fn leave_candidates(&mut self, id: NodeId) {
        let node = self.node(id);
        if node.candidate {
            let (class, last_use) = (node.class, node.last_use);
            self.candidates[class as usize].remove(&(last_use, id));
            self.node_mut(id).candidate = false;
        }
    }

    fn victim(&self) -> Option<NodeId> {
        if self.config.policy != EvictionPolicy::Utility {
            return self.candidates[0].first().map(|&(_, id)| id);
        }
        // The oldest candidate of each class, scored; the lowest wins, the
        // older on a tie.
        self.candidates
            .iter()
            .filter_map(|set| set.first())
            .map(|&(last_use, id)| (self.utility_score(id), last_use, id))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map(|(_, _, id)| id)
    }

    /// `P(reuse) * prefill seconds avoided / bytes` of a candidate.
    fn utility_score(&self, id: NodeId) -> f64 {
        let node = self.node(id);
        let p = self.utility.p_reuse(node.class, self.clock - node.last_use);
        let seconds = f64::from(node.tokens) / self.config.prefill_tokens_per_second;
        p * seconds / node.bytes.max(1) as f64
    }

    /// Checks every structural invariant (tests).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let keeps_tree = self.config.policy.keeps_tree();
        let mut children = vec![0u32; self.nodes.len()];
        let mut candidates = 0;
        for (id, node) in self.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            assert_eq!(self.map.get(&node.key), Some(&(id as NodeId)));
            if node.parent != NO_PARENT {
                assert!(keeps_tree);
                assert!(self.nodes[node.parent as usize].is_some(), "orphan");
                children[node.parent as usize] += 1;
            }
            let eligible = node.leases == 0 && (!keeps_tree || node.children == 0);
            assert_eq!(node.candidate, eligible, "candidate flag of {id}");
            if node.candidate {
                candidates += 1;
                assert!(
                    self.candidates[node.class as usize].contains(&(node.last_use, id as NodeId))
                );
            }
        }
        for (id, node) in self.nodes.iter().enumerate() {
            if let Some(node) = node {
                assert_eq!(node.children, children[id], "children of {id}");
            }
        }
        assert_eq!(
            self.candidates.iter().map(BTreeSet::len).sum::<usize>(),
            candidates
        );
        assert!(self.len() <= self.config.capacity_blocks);
    }
}

#[cfg(test)]
mod tests;
