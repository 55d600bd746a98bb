//! Local search on the true objective: the incremental state of a placement
//! (stage loads, stage times, free bytes), capacity repair, single moves and
//! capacity trades between stages (one object into a full place, another out
//! of it). Every step is evaluated with the cost model's `StageLoads`, so the
//! search optimises exactly what the plan reports. When re-planning from a
//! current placement (design §4.5), each object away from where it is now
//! also costs its move seconds times the hysteresis over the horizon, and
//! under a move budget no step may carry more bytes in all than it allows.

use residency_core::cost::{Instance, Place, StageLoads};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Smallest objective change (seconds) counted as an improvement.
const EPSILON_SECONDS: f64 = 1e-12;

pub struct SearchState<'a> {
    inst: &'a Instance,
    pub placement: Vec<usize>,
    loads: Vec<StageLoads>,
    stage_seconds: Vec<f64>,
    /// Free bytes per place index; negative while over capacity. Disk: unbounded.
    free: Vec<i128>,
    migration: Option<Migration>,
    /// Bytes the placement carries away from `migration.current`.
    moved_bytes: u64,
    /// Per object, its group of `inst.constraints.groups` (keep-whole,
    /// at-most-K), if any; per group, its objects at each place index.
    group_of: Vec<Option<usize>>,
    group_counts: Vec<Vec<u32>>,
}

/// What moving away from a current placement costs (design §4.5): per
/// object and place index, its move seconds from where it is now times
/// `hysteresis / horizon_tokens`, in seconds per token.
#[derive(Debug, Clone)]
pub struct Migration {
    pub current: Vec<usize>,
    pub horizon_tokens: f64,
    pub hysteresis: f64,
    /// Most bytes the placement may carry over links away from `current`
    /// (`diff::carried_bytes`); `None`: no limit.
    pub budget_bytes: Option<u64>,
}

impl<'a> SearchState<'a> {
    pub fn new(inst: &'a Instance, placement: Vec<usize>) -> Self {
        let r = &inst.resources;
        let mut free: Vec<i128> = super::greedy::capacities(inst)
            .into_iter()
            .map(i128::from)
            .collect();
        let mut loads: Vec<StageLoads> = inst.stages.iter().map(|_| StageLoads::new(r)).collect();
        for (o, &q) in placement.iter().enumerate() {
            let object = &inst.objects[o];
            loads[object.stage].apply(r, object, inst.places[q], 1.0);
            free[q] -= object.bytes_at(inst.places[q]) as i128;
        }
        let stage_seconds = loads.iter().map(|l| l.seconds(r).0).collect();
        let groups = &inst.constraints.groups;
        let mut group_of = vec![
            None;
            if groups.is_empty() {
                0
            } else {
                placement.len()
            }
        ];
        let mut group_counts = vec![vec![0u32; inst.places.len()]; groups.len()];
        for (g, group) in groups.iter().enumerate() {
            for &o in &group.objects {
                group_of[o] = Some(g);
                group_counts[g][placement[o]] += 1;
            }
        }
        SearchState {
            inst,
            placement,
            loads,
            stage_seconds,
            free,
            migration: None,
            moved_bytes: 0,
            group_of,
            group_counts,
        }
    }

    /// Whether the moves (objects distinct) keep every pin and leave no
    /// constrained layer on more places than it may use (or on no more
    /// than before, for a placement not yet within them).
    fn honours_constraints(&self, moves: &[(usize, usize)]) -> bool {
        if self.inst.constraints.is_empty() {
            return true;
        }
        if moves
            .iter()
            .any(|&(o, q)| !self.inst.allowed(o, self.inst.places[q]))
        {
            return false;
        }
        let mut changed: Vec<(usize, Vec<u32>)> = Vec::new();
        for &(o, q) in moves {
            let Some(g) = self.group_of.get(o).copied().flatten() else {
                continue;
            };
            let at = match changed.iter().position(|(h, _)| *h == g) {
                Some(i) => i,
                None => {
                    changed.push((g, self.group_counts[g].clone()));
                    changed.len() - 1
                }
            };
            changed[at].1[self.placement[o]] -= 1;
            changed[at].1[q] += 1;
        }
        changed.iter().all(|(g, counts)| {
            let used = |c: &[u32]| c.iter().filter(|&&n| n > 0).count();
            let limit = self.inst.constraints.groups[*g].max_places;
            used(counts) <= limit.max(used(&self.group_counts[*g]))
        })
    }

    /// Moves what breaks a constraint to where it may be, ignoring room
    /// (`repair` then makes room): each pinned object to its pin, then each
    /// constrained layer's experts from its least used places (by use
    /// rate; a place with a pin first kept) into its most used ones.
    pub fn enforce_constraints(&mut self) {
        let inst = self.inst;
        for (o, pin) in inst.constraints.pins.iter().enumerate() {
            if let Some(place) = *pin {
                let q = inst.place_index(place);
                if self.placement[o] != q {
                    self.apply(o, q);
                }
            }
        }
        for (g, group) in inst.constraints.groups.iter().enumerate() {
            let mut mass = vec![0.0f64; inst.places.len()];
            let mut pinned = vec![false; inst.places.len()];
            for &o in &group.objects {
                mass[self.placement[o]] += inst.objects[o].use_rate + 1e-300;
                pinned[self.placement[o]] |=
                    inst.constraints.pins.get(o).is_some_and(Option::is_some);
            }
            let mut used: Vec<usize> = (0..inst.places.len()).filter(|&q| mass[q] > 0.0).collect();
            if used.len() <= group.max_places {
                continue;
            }
            used.sort_by(|&a, &b| {
                (pinned[b], mass[b])
                    .partial_cmp(&(pinned[a], mass[a]))
                    .unwrap_or(Ordering::Equal)
                    .then(a.cmp(&b))
            });
            let kept = used[..group.max_places].to_vec();
            for &o in &group.objects {
                if kept.contains(&self.placement[o]) {
                    continue;
                }
                // To the kept place where it costs least (room is repaired after).
                let to = (kept.iter().copied())
                    .filter(|&q| inst.allowed(o, inst.places[q]))
                    .map(|q| (self.delta(&[(o, q)]), q))
                    .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
                    .map_or(kept[0], |(_, q)| q);
                self.apply(o, to);
            }
            debug_assert!(
                self.group_counts[g].iter().filter(|&&n| n > 0).count() <= group.max_places
            );
        }
    }

    /// Charges moves away from `migration.current` in every step's delta,
    /// and refuses steps beyond its budget (a placement already beyond it
    /// may only come back towards `current`).
    pub fn with_migration(mut self, migration: Migration) -> Self {
        self.moved_bytes = (0..self.placement.len())
            .map(|o| {
                residency_core::diff::carried_bytes(
                    self.inst,
                    o,
                    migration.current[o],
                    self.placement[o],
                )
            })
            .sum();
        self.migration = Some(migration);
        self
    }

    /// Bytes the placement carries away from the current placement (0
    /// without a migration).
    pub fn moved_bytes(&self) -> u64 {
        self.moved_bytes
    }

    /// Bytes carried from `current` by `o` at `q`.
    fn carried(&self, o: usize, q: usize) -> u64 {
        self.migration.as_ref().map_or(0, |m| {
            residency_core::diff::carried_bytes(self.inst, o, m.current[o], q)
        })
    }

    /// Whether the moves (objects distinct) keep the carried bytes within
    /// the budget, or at least do not raise them.
    fn within_budget(&self, moves: &[(usize, usize)]) -> bool {
        let Some(budget) = self.migration.as_ref().and_then(|m| m.budget_bytes) else {
            return true;
        };
        let change: i128 = moves
            .iter()
            .map(|&(o, q)| self.carried(o, q) as i128 - self.carried(o, self.placement[o]) as i128)
            .sum();
        change <= 0 || self.moved_bytes as i128 + change <= budget as i128
    }

    pub fn token_seconds(&self) -> f64 {
        self.stage_seconds.iter().sum::<f64>() + self.inst.resources.fixed_token_seconds
    }

    /// What the search minimises: `token_seconds`, plus every object's
    /// migration seconds per token when re-planning.
    pub fn objective(&self) -> f64 {
        self.token_seconds()
            + (0..self.placement.len())
                .map(|o| self.migration_seconds(o, self.placement[o]))
                .sum::<f64>()
    }

    /// Seconds per token that `o` at place `q` costs in migration.
    fn migration_seconds(&self, o: usize, q: usize) -> f64 {
        self.migration.as_ref().map_or(0.0, |m| {
            residency_core::diff::move_seconds(self.inst, o, m.current[o], q) * m.hysteresis
                / m.horizon_tokens
        })
    }

    fn bytes(&self, o: usize, q: usize) -> i128 {
        self.inst.objects[o].bytes_at(self.inst.places[q]) as i128
    }

    /// Change of the objective (`token_seconds`, plus migration seconds when
    /// re-planning) if the given objects (at most two) moved to the given
    /// places; evaluated without copying any stage's loads. Infinite when
    /// the moves would pass the move budget or break a constraint: no step
    /// takes them.
    pub fn delta(&self, moves: &[(usize, usize)]) -> f64 {
        if !self.within_budget(moves) || !self.honours_constraints(moves) {
            return f64::INFINITY;
        }
        let migration: f64 = moves
            .iter()
            .map(|&(o, q)| {
                self.migration_seconds(o, q) - self.migration_seconds(o, self.placement[o])
            })
            .sum();
        self.token_delta(moves) + migration
    }

    /// The change of `token_seconds` alone.
    fn token_delta(&self, moves: &[(usize, usize)]) -> f64 {
        debug_assert!(moves.len() <= 2);
        let r = &self.inst.resources;
        let change = |&(o, q): &(usize, usize)| {
            let object = &self.inst.objects[o];
            (
                object.stage,
                r.move_changes(
                    object,
                    self.inst.places[self.placement[o]],
                    self.inst.places[q],
                ),
            )
        };
        match moves {
            [a, b] if self.inst.objects[a.0].stage == self.inst.objects[b.0].stage => {
                let ((s, first), (_, second)) = (change(a), change(b));
                let mut both = [first[0]; 8];
                both[..4].copy_from_slice(&first);
                both[4..].copy_from_slice(&second);
                self.loads[s].seconds_with(r, &both).0 - self.stage_seconds[s]
            }
            _ => moves
                .iter()
                .map(|m| {
                    let (s, changes) = change(m);
                    self.loads[s].seconds_with(r, &changes).0 - self.stage_seconds[s]
                })
                .sum(),
        }
    }

    fn apply(&mut self, o: usize, q: usize) {
        let r = &self.inst.resources;
        let object = &self.inst.objects[o];
        let from = self.placement[o];
        let s = object.stage;
        self.loads[s].apply(r, object, self.inst.places[from], -1.0);
        self.loads[s].apply(r, object, self.inst.places[q], 1.0);
        self.stage_seconds[s] = self.loads[s].seconds(r).0;
        self.free[from] += self.bytes(o, from);
        self.free[q] -= self.bytes(o, q);
        self.moved_bytes = self.moved_bytes + self.carried(o, q) - self.carried(o, from);
        if let Some(g) = self.group_of.get(o).copied().flatten() {
            self.group_counts[g][from] -= 1;
            self.group_counts[g][q] += 1;
        }
        self.placement[o] = q;
    }

    /// The change of the objective if every object of `objects` moved to
    /// `q` (infinite when that breaks the move budget); their stages'
    /// loads copied once.
    fn delta_all(&self, objects: &[usize], q: usize) -> f64 {
        let moves: Vec<(usize, usize)> = objects.iter().map(|&o| (o, q)).collect();
        if !self.within_budget(&moves) {
            return f64::INFINITY;
        }
        let r = &self.inst.resources;
        let mut stages: Vec<(usize, StageLoads)> = Vec::new();
        let mut migration = 0.0;
        for &o in objects {
            let object = &self.inst.objects[o];
            let s = object.stage;
            let at = match stages.iter().position(|(t, _)| *t == s) {
                Some(i) => i,
                None => {
                    stages.push((s, self.loads[s].clone()));
                    stages.len() - 1
                }
            };
            let loads = &mut stages[at].1;
            loads.apply(r, object, self.inst.places[self.placement[o]], -1.0);
            loads.apply(r, object, self.inst.places[q], 1.0);
            migration +=
                self.migration_seconds(o, q) - self.migration_seconds(o, self.placement[o]);
        }
        stages
            .iter()
            .map(|(s, loads)| loads.seconds(r).0 - self.stage_seconds[*s])
            .sum::<f64>()
            + migration
    }

    /// Moves of a constrained layer's experts at one place, all together,
    /// to another place they may all use and that holds them: what changes
    /// where a layer kept whole lives. Best first, per layer and place;
    /// `exit_from` limits them to those leaving that place (capacity
    /// repair), taken even when they cost.
    fn group_moves(&mut self, deadline: Instant, exit_from: Option<usize>) -> bool {
        let inst = self.inst;
        let mut improved = false;
        for (g, group) in inst.constraints.groups.iter().enumerate() {
            if Instant::now() >= deadline && exit_from.is_none() {
                break;
            }
            let froms: Vec<usize> = match exit_from {
                Some(q) => vec![q],
                None => (0..inst.places.len()).collect(),
            };
            for from in froms {
                if self.group_counts[g][from] == 0 {
                    continue;
                }
                let objects: Vec<usize> = (group.objects.iter().copied())
                    .filter(|&o| self.placement[o] == from)
                    .collect();
                let best = (0..inst.places.len())
                    .filter(|&to| {
                        to != from
                            && (objects.iter()).all(|&o| inst.allowed(o, inst.places[to]))
                            && objects.iter().map(|&o| self.bytes(o, to)).sum::<i128>()
                                <= self.free[to]
                    })
                    .map(|to| (self.delta_all(&objects, to), to))
                    .filter(|(d, _)| d.is_finite())
                    .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                if let Some((d, to)) = best {
                    if exit_from.is_some() || d < -EPSILON_SECONDS {
                        for &o in &objects {
                            self.apply(o, to);
                        }
                        improved = true;
                    }
                }
                if exit_from.is_some_and(|q| self.free[q] >= 0) {
                    return true;
                }
            }
        }
        improved
    }

    /// Moves what the placement reads from a drive into memory (a GPU or a
    /// RAM node with room) wherever that costs nothing: when reads hide
    /// behind compute the model prices both alike, and memory serves the
    /// same token time without the I/O. Hottest objects first; a move is
    /// taken only when it does not raise the objective.
    pub fn settle_in_memory(&mut self) {
        let mut on_drive: Vec<usize> = (0..self.placement.len())
            .filter(|&o| matches!(self.inst.places[self.placement[o]], Place::Disk(_)))
            .collect();
        on_drive.sort_by(|&a, &b| {
            let rate = |o: usize| self.inst.objects[o].use_rate;
            rate(b).total_cmp(&rate(a)).then(a.cmp(&b))
        });
        let tolerance = self.objective() * 1e-12;
        for o in on_drive {
            let best = (0..self.inst.places.len())
                .filter(|&q| {
                    let place = self.inst.places[q];
                    matches!(place, Place::Gpu(_) | Place::Ram(_))
                        && self.inst.allowed(o, place)
                        && self.fits(o, q)
                })
                .map(|q| (self.delta(&[(o, q)]), q))
                .filter(|&(delta, _)| delta <= tolerance)
                .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            if let Some((_, q)) = best {
                self.apply(o, q);
            }
        }
    }

    /// Whether place `q` has room for object `o`.
    pub fn fits(&self, o: usize, q: usize) -> bool {
        self.free[q] >= self.bytes(o, q)
    }

    /// Moves objects out of over-full places, cheapest loss per freed byte
    /// first (lazy greedy). Returns false when some place stays over-full.
    pub fn repair(&mut self) -> bool {
        self.repair_until(None)
    }

    /// `repair`, given up (false) once `deadline` passes: a relaxed
    /// placement with every expert on the GPUs took a short limit's
    /// whole time to repair at Kimi scale.
    pub fn repair_until(&mut self, deadline: Option<Instant>) -> bool {
        for q in 0..self.inst.places.len() {
            if self.free[q] >= 0 {
                continue;
            }
            let mut heap = BinaryHeap::new();
            for o in (0..self.placement.len()).filter(|&o| self.placement[o] == q) {
                if let Some(c) = self.best_exit(o, -self.free[q]) {
                    heap.push(c);
                }
            }
            while self.free[q] < 0 {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return false;
                }
                let Some(candidate) = heap.pop() else {
                    // Constrained layers leave whole, or not at all.
                    if self.group_moves(Instant::now(), Some(q)) && self.free[q] >= 0 {
                        break;
                    }
                    return false;
                };
                // Re-evaluate: earlier moves may have changed this stage or
                // filled the target, and less may be left to free.
                let Some(fresh) = self.best_exit(candidate.object, -self.free[q]) else {
                    continue;
                };
                if heap
                    .peek()
                    .is_some_and(|next| fresh.cost_per_byte > next.cost_per_byte + 1e-18)
                {
                    heap.push(fresh);
                    continue;
                }
                self.apply(fresh.object, fresh.target);
            }
        }
        true
    }

    /// The cheapest move of `o` to another place with room, per byte of
    /// the `excess` it frees (bytes beyond the excess are worth nothing: a
    /// large object is not the cheapest way to free a few bytes).
    fn best_exit(&self, o: usize, excess: i128) -> Option<Exit> {
        let from = self.placement[o];
        let freed = self.bytes(o, from).min(excess).max(1) as f64;
        (0..self.inst.places.len())
            .filter(|&q| q != from && self.inst.allowed(o, self.inst.places[q]) && self.fits(o, q))
            .map(|q| Exit {
                object: o,
                target: q,
                cost_per_byte: self.delta(&[(o, q)]) / freed,
            })
            .filter(|exit| exit.cost_per_byte.is_finite())
            .min_by(|a, b| a.cost_per_byte.total_cmp(&b.cost_per_byte))
    }

    /// Improves the placement until no move helps, the deadline passes or
    /// the objective is at most `target_seconds`.
    pub fn improve(&mut self, deadline: Instant, target_seconds: f64) {
        loop {
            let moved = self.single_moves(deadline)
                | self.swaps(deadline)
                | self.trades(deadline)
                | self.trunk_swaps(deadline)
                | self.group_moves(deadline, None);
            if !moved || Instant::now() >= deadline || self.objective() <= target_seconds {
                return;
            }
        }
    }

    /// Exchanges of places between two trunk components of unequal sizes,
    /// any two: what packs the cards when both are full.
    fn trunk_swaps(&mut self, deadline: Instant) -> bool {
        let trunk = &self.inst.trunk_ids;
        let mut improved = false;
        for (i, &a) in trunk.iter().enumerate() {
            if Instant::now() >= deadline {
                break;
            }
            for &b in &trunk[i + 1..] {
                let (qa, qb) = (self.placement[a], self.placement[b]);
                if qa == qb {
                    continue;
                }
                let fits = |q: usize, enters: usize, leaves: usize| {
                    self.free[q] + self.bytes(leaves, q) - self.bytes(enters, q) >= 0
                };
                if fits(qb, a, b)
                    && fits(qa, b, a)
                    && self.delta(&[(a, qb), (b, qa)]) < -EPSILON_SECONDS
                {
                    self.apply(a, qb);
                    self.apply(b, qa);
                    improved = true;
                }
            }
        }
        improved
    }

    /// Exchanges within a stage: for each ordered pair of places, the
    /// hottest expert of one with the coldest of the other. Neither move may
    /// help alone (the stage waits for its slowest resource) while both do.
    fn swaps(&mut self, deadline: Instant) -> bool {
        let places = self.inst.places.len();
        let mut improved = false;
        for s in 0..self.inst.stages.len() {
            if Instant::now() >= deadline {
                break;
            }
            // One scan of the stage per change, not one per pair of places:
            // at Kimi scale (1,280 experts, 18 places) that scan was most
            // of a pass.
            let mut extremes = self.extremes(s);
            for from in 0..places {
                if Instant::now() >= deadline {
                    break;
                }
                for to in (0..places).filter(|&to| to != from) {
                    let (Some((hot, _)), Some((_, cold))) = (extremes[from], extremes[to]) else {
                        continue;
                    };
                    if self.swap_pays(hot, cold, from, to) {
                        self.apply(hot, to);
                        self.apply(cold, from);
                        improved = true;
                        extremes = self.extremes(s);
                    }
                }
            }
        }
        improved
    }

    /// Per place index, the hottest and the coldest expert of stage `s`
    /// there (ties: the last hottest and the first coldest in the stage's
    /// order).
    fn extremes(&self, s: usize) -> Vec<Option<(usize, usize)>> {
        let rate = |o: usize| self.inst.objects[o].use_rate;
        let mut extremes: Vec<Option<(usize, usize)>> = vec![None; self.inst.places.len()];
        for &o in &self.inst.stages[s].objects {
            if !self.inst.objects[o].is_expert() {
                continue;
            }
            let cell = &mut extremes[self.placement[o]];
            *cell = Some(match *cell {
                None => (o, o),
                Some((hot, cold)) => (
                    if rate(o).total_cmp(&rate(hot)).is_ge() {
                        o
                    } else {
                        hot
                    },
                    if rate(o).total_cmp(&rate(cold)).is_lt() {
                        o
                    } else {
                        cold
                    },
                ),
            });
        }
        extremes
    }

    /// Whether exchanging `hot` (at `from`) with `cold` (at `to`) fits and
    /// lowers the objective.
    fn swap_pays(&self, hot: usize, cold: usize, from: usize, to: usize) -> bool {
        let rate = |o: usize| self.inst.objects[o].use_rate;
        let room = |q: usize, enters: usize, leaves: usize| {
            self.free[q] + self.bytes(leaves, q) - self.bytes(enters, q) >= 0
        };
        rate(hot) > rate(cold)
            && room(to, hot, cold)
            && room(from, cold, hot)
            && self.delta(&[(hot, to), (cold, from)]) < -EPSILON_SECONDS
    }

    /// Every object to every place with room, first improvement.
    fn single_moves(&mut self, deadline: Instant) -> bool {
        let mut improved = false;
        for s in 0..self.inst.stages.len() {
            if Instant::now() >= deadline {
                break;
            }
            for &o in &self.inst.stages[s].objects {
                let from = self.placement[o];
                let best = (0..self.inst.places.len())
                    .filter(|&q| {
                        q != from && self.inst.allowed(o, self.inst.places[q]) && self.fits(o, q)
                    })
                    .map(|q| (self.delta(&[(o, q)]), q))
                    .min_by(|a, b| a.0.total_cmp(&b.0));
                if let Some((d, q)) = best {
                    if d < -EPSILON_SECONDS {
                        self.apply(o, q);
                        improved = true;
                    }
                }
            }
        }
        improved
    }

    /// Capacity trades: into each capacitated place the stage that gains most
    /// from one more object there, out of it the stage that loses least.
    fn trades(&mut self, deadline: Instant) -> bool {
        let mut improved = false;
        let capacitated: Vec<usize> = (0..self.inst.places.len())
            .filter(|&q| {
                self.inst
                    .resources
                    .capacity_bytes(self.inst.places[q])
                    .is_some()
            })
            .collect();
        for &q in &capacitated {
            let stages = self.inst.stages.len();
            // A scan of every stage, deadline checked per stage: at Kimi
            // scale the whole scan takes tens of milliseconds.
            let mut gains: Vec<Option<(f64, usize)>> = Vec::with_capacity(stages);
            let mut losses: Vec<Vec<Option<(f64, usize)>>> = Vec::with_capacity(stages);
            for s in 0..stages {
                if Instant::now() >= deadline {
                    return improved;
                }
                gains.push(self.best_into(s, q));
                losses.push(self.best_out_of(s, q));
            }
            loop {
                if Instant::now() >= deadline {
                    return improved;
                }
                let mut order: Vec<usize> = (0..stages)
                    .filter(|&s| gains[s].is_some_and(|g| g.0 < -EPSILON_SECONDS))
                    .collect();
                order.sort_by(|&a, &b| gains[a].unwrap().0.total_cmp(&gains[b].unwrap().0));
                let mut applied = None;
                'gains: for s_in in order {
                    // Each stage tried scans every stage's losses.
                    if Instant::now() >= deadline {
                        return improved;
                    }
                    let (gain, o_in) = gains[s_in].unwrap();
                    let vacated = self.placement[o_in];
                    let mut best: Option<(f64, usize, usize)> = None;
                    for (s_out, row) in losses.iter().enumerate() {
                        for (target, cell) in row.iter().enumerate() {
                            let Some((loss, o_out)) = *cell else { continue };
                            if o_out == o_in
                                || best.is_some_and(|b| loss >= b.0)
                                || gain + loss >= -EPSILON_SECONDS
                            {
                                continue;
                            }
                            // q must hold o_in once o_out leaves; target must hold o_out
                            // (with what o_in vacates, when that is the target).
                            let room_q = self.free[q] + self.bytes(o_out, q) - self.bytes(o_in, q);
                            let room_target = self.free[target] - self.bytes(o_out, target)
                                + if target == vacated {
                                    self.bytes(o_in, vacated)
                                } else {
                                    0
                                };
                            if room_q < 0 || room_target < 0 {
                                continue;
                            }
                            let total = if s_out == s_in {
                                self.delta(&[(o_in, q), (o_out, target)])
                            } else if self.within_budget(&[(o_in, q), (o_out, target)]) {
                                gain + loss
                            } else {
                                continue;
                            };
                            if total < -EPSILON_SECONDS {
                                best = Some((loss, o_out, target));
                            }
                        }
                    }
                    if let Some((_, o_out, target)) = best {
                        self.apply(o_out, target);
                        self.apply(o_in, q);
                        applied = Some((s_in, self.inst.objects[o_out].stage));
                        break 'gains;
                    }
                }
                let Some((a, b)) = applied else { break };
                improved = true;
                for s in [a, b] {
                    gains[s] = self.best_into(s, q);
                    losses[s] = self.best_out_of(s, q);
                }
            }
        }
        improved
    }

    /// Best move of an object of stage `s` into place `q` (ignoring q's room).
    fn best_into(&self, s: usize, q: usize) -> Option<(f64, usize)> {
        self.inst.stages[s]
            .objects
            .iter()
            .filter(|&&o| self.placement[o] != q && self.inst.allowed(o, self.inst.places[q]))
            .map(|&o| (self.delta(&[(o, q)]), o))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// Per target place, the cheapest move of an object of stage `s` out of `q`.
    fn best_out_of(&self, s: usize, q: usize) -> Vec<Option<(f64, usize)>> {
        let mut best = vec![None; self.inst.places.len()];
        for &o in self.inst.stages[s]
            .objects
            .iter()
            .filter(|&&o| self.placement[o] == q)
        {
            for target in (0..self.inst.places.len())
                .filter(|&t| t != q && self.inst.allowed(o, self.inst.places[t]))
            {
                let d = self.delta(&[(o, target)]);
                if best[target].is_none_or(|(b, _): (f64, usize)| d < b) {
                    best[target] = Some((d, o));
                }
            }
        }
        best
    }
}

#[derive(Debug, Clone, Copy)]
struct Exit {
    object: usize,
    target: usize,
    cost_per_byte: f64,
}

impl PartialEq for Exit {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Exit {}
impl PartialOrd for Exit {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Exit {
    /// Reversed: the max-heap pops the cheapest exit first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .cost_per_byte
            .total_cmp(&self.cost_per_byte)
            .then(other.object.cmp(&self.object))
    }
}
