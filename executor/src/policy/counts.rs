//! TODO(helper): decayed counters shared by lfu, lfru, frequency and cost.
