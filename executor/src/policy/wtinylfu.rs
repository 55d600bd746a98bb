//! TODO(helper): WTinyLfu.

use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

pub(crate) struct WTinyLfu {
    capacity_bytes: u64,
}

impl WTinyLfu {
    pub fn new(setup: &PolicySetup) -> Self {
        WTinyLfu {
            capacity_bytes: setup.capacity_bytes,
        }
    }
}

impl Policy for WTinyLfu {
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
