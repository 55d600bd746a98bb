//! A placement priced: `token_seconds` with its per-stage, per-resource
//! breakdown, on the heat's rates or on routed tokens, and checked for
//! feasibility against the capacities.

use super::StageLoads;
use super::{Evaluation, Instance, Object, Place};
use crate::{PlannerError, Result};
use std::path::Path;

impl Instance {
    /// Index of a place in `places`.
    pub fn place_index(&self, place: Place) -> usize {
        self.places
            .iter()
            .position(|&p| p == place)
            .expect("place of this instance")
    }

    /// Whether object `o` may live at `place`: where its kind may
    /// (`allowed_kind`) and, when pinned, only at its pin.
    pub fn allowed(&self, o: usize, place: Place) -> bool {
        self.allowed_kind(o, place)
            && (self.constraints.pins.get(o)).is_none_or(|pin| pin.is_none_or(|p| p == place))
    }

    /// Whether an object of `o`'s kind may live at `place`: experts
    /// anywhere but recompute, trunk on GPUs and RAM, KV groups anywhere
    /// but disk.
    pub fn allowed_kind(&self, o: usize, place: Place) -> bool {
        match place {
            Place::Gpu(_) | Place::Ram(_) => true,
            Place::Disk(_) => self.objects[o].is_expert(),
            Place::Recompute => self.objects[o].is_kv(),
        }
    }

    /// The places a plan file lists: the profile's (without `recompute`).
    pub fn profile_places(&self) -> impl Iterator<Item = Place> + '_ {
        self.places
            .iter()
            .copied()
            .filter(|&q| q != Place::Recompute)
    }

    /// The cost model's value of a placement (`placement[o]` = index into `places`).
    pub fn evaluate(&self, placement: &[usize]) -> Evaluation {
        let r = &self.resources;
        let mut gpu_used = vec![0u64; r.gpus()];
        let mut ram_used = vec![0u64; r.numa_nodes()];
        let mut loads = Vec::with_capacity(self.stages.len());
        let mut stage_seconds = Vec::with_capacity(self.stages.len());
        let mut bottlenecks = Vec::with_capacity(self.stages.len());
        for stage in &self.stages {
            let mut l = StageLoads::new(r);
            for &o in &stage.objects {
                let place = self.places[placement[o]];
                l.apply(r, &self.objects[o], place, 1.0);
                match place {
                    Place::Gpu(g) => gpu_used[g] += self.objects[o].gpu_bytes,
                    Place::Ram(n) => ram_used[n] += self.objects[o].ram_bytes,
                    Place::Disk(_) | Place::Recompute => {}
                }
            }
            let (t, b) = l.seconds(r);
            stage_seconds.push(t);
            bottlenecks.push(b);
            loads.push(l);
        }
        Evaluation {
            token_seconds: stage_seconds.iter().sum::<f64>() + r.fixed_token_seconds,
            stage_seconds,
            bottlenecks,
            loads,
            gpu_used_bytes: gpu_used,
            ram_used_bytes: ram_used,
        }
    }

    /// `T` of one token that routes to the experts `routed[s]` in stage `s`
    /// (object ids): those experts used once, the stage's other experts not
    /// at all, everything else at its use rate. Its mean over tokens is the
    /// expectation of each stage's max over resources, which `evaluate`
    /// (the max of the expected loads) undercounts where a stage's
    /// resources balance and routing moves work between them.
    pub fn routed_token_seconds(&self, placement: &[usize], routed: &[Vec<usize>]) -> f64 {
        let r = &self.resources;
        let mut total = r.fixed_token_seconds;
        for (stage, experts) in self.stages.iter().zip(routed) {
            let mut l = StageLoads::new(r);
            let others = stage
                .objects
                .iter()
                .filter(|&&o| !self.objects[o].is_expert());
            for &o in others {
                l.apply(r, &self.objects[o], self.places[placement[o]], 1.0);
            }
            for &o in experts {
                let once = Object {
                    use_rate: 1.0,
                    ..self.objects[o].clone()
                };
                l.apply(r, &once, self.places[placement[o]], 1.0);
            }
            total += l.seconds(r).0;
        }
        total
    }

    /// Checks that a placement is complete, allowed (pins included), within
    /// capacities (budgets included) and spreads no constrained layer over
    /// more places than allowed.
    pub fn check_feasible(&self, placement: &[usize]) -> std::result::Result<(), String> {
        if placement.len() != self.objects.len() {
            return Err(format!(
                "{} objects placed, {} expected",
                placement.len(),
                self.objects.len()
            ));
        }
        for (o, &q) in placement.iter().enumerate() {
            if q >= self.places.len() || !self.allowed_kind(o, self.places[q]) {
                return Err(format!("object {o} has an invalid place index {q}"));
            }
            if !self.allowed(o, self.places[q]) {
                return Err(format!(
                    "{} is at {}, against a pin",
                    crate::solution::describe(self, o),
                    self.places[q]
                ));
            }
        }
        if let Some((group, n)) = self.constraints.broken_group(placement) {
            return Err(format!(
                "{} is broken: the experts use {n} places",
                group.reason
            ));
        }
        let over = self.evaluate(placement).overfull(&self.resources);
        match over.first() {
            Some((place, excess)) => Err(format!("{place} is over its capacity by {excess} bytes")),
            None => Ok(()),
        }
    }

    /// Fails unless every object can be held somewhere (design §4, Capacities).
    pub fn check_holdable(&self, file: &Path) -> Result<()> {
        let r = &self.resources;
        let room: u64 = r
            .gpu_capacity_bytes
            .iter()
            .chain(&r.ram_capacity_bytes)
            .sum();
        let must_hold: u64 = self
            .objects
            .iter()
            .filter(|o| o.is_trunk() || (o.is_expert() && r.drives() == 0))
            .map(|o| o.gpu_bytes.min(o.ram_bytes))
            .sum();
        if must_hold > room {
            let what = if r.drives() == 0 {
                "the model (no drive to stream from)"
            } else {
                "the trunk"
            };
            return Err(PlannerError::Infeasible(format!(
                "{}: {what} needs at least {} bytes in GPU and RAM, which hold {room}: {} bytes are missing",
                file.display(),
                must_hold,
                must_hold - room
            )));
        }
        Ok(())
    }
}
