//! [`MemoryQueue`]: the queue port ([`crate::queue::Queue`]) in memory.
//!
//! It refuses what SQS refuses ([`check_message`]): a body or attribute value holding a
//! character outside SQS's set, more than 10 attributes, or more than a queue's
//! maximum message size (256 KiB unless set otherwise), each message on its own.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::queue::{
    DeadLetter, Delay, MAX_MESSAGE_BYTES, Queue, QueueError, Requeue, check_message,
};

#[derive(Debug, Default)]
struct MemoryState {
    letters: Vec<DeadLetter>,
    delays: Vec<Delay>,
    copies: Vec<Requeue>,
    failing: bool,
    /// The queues' maximum message size; 0 until set: [`MAX_MESSAGE_BYTES`].
    max_message_bytes: usize,
    refused: Vec<String>,
}

impl MemoryState {
    fn max_bytes(&self) -> usize {
        match self.max_message_bytes {
            0 => MAX_MESSAGE_BYTES,
            n => n,
        }
    }
}

/// An in-memory queue port for tests; clones share the state.
#[derive(Debug, Clone, Default)]
pub struct MemoryQueue {
    state: Arc<Mutex<MemoryState>>,
}

impl MemoryQueue {
    /// An empty queue that accepts every letter, delay and copy SQS would accept.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets both queues' maximum message size (SQS allows 1 KiB to 1 MiB).
    pub fn set_max_message_bytes(&self, bytes: usize) {
        self.state().max_message_bytes = bytes.max(1);
    }

    /// Why each message refused so far was refused, in order.
    pub fn refused(&self) -> Vec<String> {
        self.state().refused.clone()
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, MemoryState> {
        self.state.lock()
    }

    /// Makes every call fail (`true`) or succeed again.
    pub fn set_failing(&self, failing: bool) {
        self.state().failing = failing;
    }

    /// The letters accepted so far.
    pub fn letters(&self) -> Vec<DeadLetter> {
        self.state().letters.clone()
    }

    /// The delays accepted so far.
    pub fn delays(&self) -> Vec<Delay> {
        self.state().delays.clone()
    }

    /// The copies requeued so far.
    pub fn copies(&self) -> Vec<Requeue> {
        self.state().copies.clone()
    }

    /// Takes the delays and copies accepted so far, leaving none: what a simulated
    /// source queue applies after each poll.
    pub fn take_redeliveries(&self) -> (Vec<Delay>, Vec<Requeue>) {
        let mut state = self.state();
        (
            std::mem::take(&mut state.delays),
            std::mem::take(&mut state.copies),
        )
    }
}

impl Queue for MemoryQueue {
    async fn dead_letter(&self, letters: &[DeadLetter]) -> Vec<Result<(), QueueError>> {
        let mut state = self.state();
        if state.failing {
            return vec![Err(QueueError::Injected("DLQ")); letters.len()];
        }
        let max = state.max_bytes();
        let mut results = Vec::with_capacity(letters.len());
        for letter in letters {
            let result = check_message(&letter.body, &letter.attributes, max);
            match &result {
                Ok(()) => state.letters.push(letter.clone()),
                Err(why) => state.refused.push(why.to_string()),
            }
            results.push(result);
        }
        results
    }

    async fn delay(&self, delays: &[Delay]) -> Vec<Result<(), QueueError>> {
        let mut state = self.state();
        if state.failing {
            return vec![Err(QueueError::Injected("SQS")); delays.len()];
        }
        state.delays.extend_from_slice(delays);
        vec![Ok(()); delays.len()]
    }

    async fn requeue(&self, copies: &[Requeue]) -> Vec<Result<(), QueueError>> {
        let mut state = self.state();
        if state.failing {
            return vec![Err(QueueError::Injected("SQS")); copies.len()];
        }
        let max = state.max_bytes();
        let mut results = Vec::with_capacity(copies.len());
        for copy in copies {
            let result = if copy.delay_secs > crate::queue::MAX_DELAY_SECS {
                Err(QueueError::Invalid(format!(
                    "DelaySeconds {} above 900",
                    copy.delay_secs
                )))
            } else {
                check_message(&copy.body, &copy.attributes, max)
            };
            match &result {
                Ok(()) => state.copies.push(copy.clone()),
                Err(why) => state.refused.push(why.to_string()),
            }
            results.push(result);
        }
        results
    }
}
