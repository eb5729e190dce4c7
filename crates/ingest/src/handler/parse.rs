//! Stage 1: each message's body parsed and validated, guarded against panics; the
//! IoT front door's envelope only from the IoT rule's role; each reading given its
//! message's write order (`record::write_order`).

use aws_lambda_events::event::sqs::SqsMessage;
use store::batch::BatchTable;
use store::directory::ShardStore;
use store::queue::Queue;

use super::record::{sender, write_order};
use super::stages::ParsedMessage;
use super::{BatchContext, Ingest, guarded};
use crate::fate::Stopped;
use crate::front_door::parse_message;
use crate::message::{Limits, Refusal};

impl<T: BatchTable, S: ShardStore, Q: Queue, L> Ingest<T, S, Q, L> {
    /// Stage 1: parses and validates each message, guarded against panics.
    pub(super) fn parse_stage(&self, cx: &BatchContext<'_>) -> Vec<ParsedMessage> {
        let limits = Limits {
            now: cx.now,
            max_future: self.config.shards.max_future,
            retention: self.config.retention,
            max_readings: self.config.max_readings_per_message,
        };
        cx.records
            .iter()
            .zip(&cx.spans)
            .zip(&cx.ids)
            .map(|((record, span), id)| span.in_scope(|| self.parse(record, id, &limits)))
            .collect()
    }

    fn parse(&self, record: &SqsMessage, id: &str, limits: &Limits) -> ParsedMessage {
        guarded(|| {
            if let Some(hook) = &self.hook {
                hook(id);
            }
            let Some(body) = record.body.as_deref() else {
                return Err(Stopped::Refused(Refusal {
                    field: "body".to_owned(),
                    rule: "is missing".to_owned(),
                }));
            };
            let from = sender(
                record,
                self.config.sender_id.as_deref(),
                self.config.iot_sender_id.as_deref(),
                self.config.front_door_key.keys(),
            );
            let mut readings = parse_message(body, from, limits, self.config.iot_principals)
                .map_err(Stopped::Refused)?;
            // Each copy carries when its message reached the queue, which every read
            // orders copies of one identity by.
            let written = write_order(record, self.config.sender_id.as_deref());
            for r in &mut readings {
                r.written = written;
            }
            Ok(readings)
        })
    }
}
