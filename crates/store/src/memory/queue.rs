//! [`MemoryQueue`]: the queue port ([`crate::queue::Queue`]) in memory.

use std::sync::{Arc, Mutex};

use crate::queue::{DeadLetter, Delay, Queue, Requeue};

#[derive(Debug, Default)]
struct MemoryState {
    letters: Vec<DeadLetter>,
    delays: Vec<Delay>,
    copies: Vec<Requeue>,
    failing: bool,
}

/// An in-memory queue port for tests; clones share the state.
#[derive(Debug, Clone, Default)]
pub struct MemoryQueue {
    state: Arc<Mutex<MemoryState>>,
}

impl MemoryQueue {
    /// An empty queue that accepts every letter and delay.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    async fn dead_letter(&self, letters: &[DeadLetter]) -> Vec<Result<(), String>> {
        let mut state = self.state();
        if state.failing {
            return vec![Err("injected DLQ failure".to_owned()); letters.len()];
        }
        state.letters.extend_from_slice(letters);
        vec![Ok(()); letters.len()]
    }

    async fn delay(&self, delays: &[Delay]) -> Vec<Result<(), String>> {
        let mut state = self.state();
        if state.failing {
            return vec![Err("injected SQS failure".to_owned()); delays.len()];
        }
        state.delays.extend_from_slice(delays);
        vec![Ok(()); delays.len()]
    }

    async fn requeue(&self, copies: &[Requeue]) -> Vec<Result<(), String>> {
        let mut state = self.state();
        if state.failing {
            return vec![Err("injected SQS failure".to_owned()); copies.len()];
        }
        state.copies.extend_from_slice(copies);
        vec![Ok(()); copies.len()]
    }
}
