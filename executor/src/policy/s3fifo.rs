//! TODO(helper): S3Fifo.

use super::{ObjectIndex, Outcome, Policy, PolicySetup, Request};

pub(crate) struct S3Fifo {
    capacity_bytes: u64,
}

impl S3Fifo {
    pub fn new(setup: &PolicySetup) -> Self {
        S3Fifo {
            capacity_bytes: setup.capacity_bytes,
        }
    }
}

impl Policy for S3Fifo {
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
