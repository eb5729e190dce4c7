//! The ingest Lambda: SQS batches of device readings into the sharded readings table.
//!
//! - [`config::Config`]: the typed configuration, parsed once from the environment;
//! - [`message`]: parsing and validation of a message body (every refusal names the
//!   field and the rule);
//! - [`front_door`]: the AWS IoT Core front door's envelope, read only from the IoT
//!   rule's role, whose readings must be of the thing that published them;
//! - [`seal`]: the HMAC a dead letter of the rule's message carries, so that redriven
//!   it is read as the rule's again;
//! - [`handler::Ingest`]: the service, callable in-process (`Ingest::handle`), over the
//!   ports of `store`, the queue port (`store::queue::Queue`: dead letters,
//!   redelivery delays and requeues) among them;
//! - [`fate`]: the pure core of the last stages: a message's fate from its readings'
//!   outcomes and its receive history, with typed reasons;
//! - [`attribution`]: which entities a key-range throttle is about, and which items a
//!   raise made stale (pure);
//! - [`emf`]: CloudWatch Embedded Metric Format lines.
//!
//! The binary `ingest` only builds the configuration, tracing and clients, then runs
//! the handler under `lambda_runtime`.

pub mod attribution;
mod body;
pub mod config;
pub use store::emf;
pub mod fate;
pub mod front_door;
pub mod handler;
pub mod invocation;
pub mod message;
pub mod seal;

pub use config::{Config, ConfigError};
pub use fate::{Fate, Retry};
pub use front_door::{Principals, Sender, parse_message};
pub use handler::{Ingest, IngestError, MessageReport, Report};
pub use invocation::Invocation;
pub use message::{Limits, Refusal, parse_body, to_body};

/// The global allocator of the ingest binary (and of the cost bench that measures its
/// hot path): the per-reading path allocates once per attribute of the SDK's item, and
/// mimalloc serves those small, short-lived allocations faster than the system
/// allocator (bench/REPORT.md item 5 has both, measured in the same run).
pub use mimalloc::MiMalloc as Allocator;
pub use store::memory::MemoryQueue;
pub use store::queue::{DeadLetter, Delay, Queue, Requeue};
pub use store::sqs::SqsQueue;
