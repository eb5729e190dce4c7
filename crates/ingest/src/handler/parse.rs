//! Stage 1: each message's body parsed and validated, guarded against panics; the
//! IoT front door's envelope only from the IoT rule's role; each reading given its
//! message's write order (`record::write_order`). No I/O: the records and the
//! configuration in, each message's readings or why it stopped out.

use aws_lambda_events::event::sqs::SqsMessage;

use super::record::{sender, write_order};
use super::stages::ParsedMessage;
use super::{BatchContext, MessageHook, guarded};
use crate::config::Config;
use crate::fate::Stopped;
use crate::front_door::parse_message;
use crate::message::{Limits, Refusal};

/// Stage 1: parses and validates each message of `cx` under `config`, guarded against
/// panics, running `hook` first in each message's guarded section.
pub(super) fn parse_batch(
    cx: &BatchContext<'_>,
    config: &Config,
    hook: Option<&MessageHook>,
) -> Vec<ParsedMessage> {
    let limits = Limits {
        now: cx.now,
        max_future: config.shards.max_future,
        retention: config.retention,
        max_readings: config.max_readings_per_message,
    };
    cx.records
        .iter()
        .zip(&cx.spans)
        .zip(&cx.ids)
        .map(|((record, span), id)| span.in_scope(|| parse(record, id, &limits, config, hook)))
        .collect()
}

fn parse(
    record: &SqsMessage,
    id: &str,
    limits: &Limits,
    config: &Config,
    hook: Option<&MessageHook>,
) -> ParsedMessage {
    guarded(|| {
        if let Some(hook) = hook {
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
            config.sender_id.as_deref(),
            config.iot_sender_id.as_deref(),
            config.front_door_key.keys(),
        );
        let mut readings =
            parse_message(body, from, limits, config.iot_principals).map_err(Stopped::Refused)?;
        // Each copy carries when its message reached the queue, which every read
        // orders copies of one identity by.
        let written = write_order(record, config.sender_id.as_deref());
        for r in &mut readings {
            r.written = written;
        }
        Ok(readings)
    })
}
