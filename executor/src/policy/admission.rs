//! TODO(helper): frequency and cost admission.

use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

pub(crate) struct Admission {
    capacity_bytes: u64,
}

impl Admission {
    pub fn frequency(setup: &PolicySetup) -> Self {
        Admission {
            capacity_bytes: setup.capacity_bytes,
        }
    }

    pub fn cost(setup: &PolicySetup) -> Self {
        Admission {
            capacity_bytes: setup.capacity_bytes,
        }
    }
}

impl Policy for Admission {
    fn access(&mut self, _request: &Request, _evicted: &mut Vec<ObjectIndex>) -> Outcome {
        todo!()
    }

    fn contains(&self, _object: ObjectIndex) -> bool {
        todo!()
    }

    fn used_bytes(&self) -> u64 {
        todo!()
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }
}
