//! TODO(helper): PinnedLru.

use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

pub(crate) struct PinnedLru {
    capacity_bytes: u64,
}

impl PinnedLru {
    pub fn new(setup: &PolicySetup) -> Self {
        PinnedLru {
            capacity_bytes: setup.capacity_bytes,
        }
    }
}

impl Policy for PinnedLru {
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
