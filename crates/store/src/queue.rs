//! The queue port: the two things the handler asks of SQS besides the batch it got.
//!
//! - **Dead letters**: a permanent error is sent straight to the dead-letter queue with
//!   its reason rather than reported as a failure, so SQS does not redeliver it five
//!   times before the redrive does the same. Only a failed send is reported, so the
//!   message comes back and nothing is lost.
//! - **Redelivery delays**: a message reported for a transient reason (a throttle, the
//!   deadline) gets a visibility timeout that grows with its receive count
//!   (`ChangeMessageVisibilityBatch`), so a throttled burst does not use up the redrive
//!   policy's receives within a few fixed timeouts. A failed change loses nothing: the
//!   message comes back after the queue's own timeout.
//! - **Requeues**: a message still failing transiently at its last receive before the
//!   redrive is sent back to the source queue as a fresh copy (its receive count starts
//!   again), a bounded number of times, so a valid reading is never redriven to the DLQ
//!   without a reason just because its key was throttled for long.

//!
//! The port lives here with its types; the SQS adapter is `sqs::SqsQueue`
//! (feature `sqs`), the in-memory fake [`crate::memory::MemoryQueue`].

use std::collections::BTreeMap;
use std::future::Future;

/// A refused message on its way to the DLQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The source message's id.
    pub message_id: String,
    /// The body, unchanged, so it can be inspected and replayed.
    pub body: String,
    /// The refused field (`body` for the message as a whole).
    pub field: String,
    /// The rule it broke.
    pub rule: String,
}

impl DeadLetter {
    /// `field: rule`.
    pub fn reason(&self) -> String {
        format!("{}: {}", self.field, self.rule)
    }
}

/// A received message to keep invisible for a while before SQS delivers it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delay {
    /// The receipt handle of this receive.
    pub receipt_handle: String,
    /// How long, from now, in whole seconds.
    pub visibility_secs: u32,
}

/// SQS's longest `DelaySeconds`: 15 minutes.
pub const MAX_DELAY_SECS: u32 = 900;

/// A message sent back to the source queue as a fresh copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requeue {
    /// The body, unchanged.
    pub body: String,
    /// Message attributes to carry, name -> (data type, string value).
    pub attributes: BTreeMap<String, (String, String)>,
    /// How long before the copy can be received, in seconds (at most [`MAX_DELAY_SECS`]).
    pub delay_secs: u32,
}

/// The port: one result per letter, delay or copy, in order.
pub trait Queue: Send + Sync {
    /// Sends `letters` to the dead-letter queue; `Err(why)` for each one not accepted.
    fn dead_letter(
        &self,
        letters: &[DeadLetter],
    ) -> impl Future<Output = Vec<Result<(), String>>> + Send;

    /// Sets each message's visibility timeout on the source queue; `Err(why)` for each
    /// one not changed (it then comes back after the queue's own timeout).
    fn delay(&self, delays: &[Delay]) -> impl Future<Output = Vec<Result<(), String>>> + Send;

    /// Sends `copies` to the source queue; `Err(why)` for each one not accepted.
    fn requeue(&self, copies: &[Requeue]) -> impl Future<Output = Vec<Result<(), String>>> + Send;
}
