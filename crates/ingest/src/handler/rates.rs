//! Stage 3, its pure part: each entity's arrival rate in the batch, measured by when its
//! messages reached the queue ([`entity_rates`]); `super::observe` brings it to the
//! shard directory.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsMessage;
use sharding::fanout;
use store::Reading;

use super::record::sent_at;
use super::stages::{Carried, Message, Packed, Shared, UnkeyedSlab, UnkeyedWrite};
use crate::config::Intake;

/// The largest batch payload Lambda delivers (6 MB), less one message: a batch this
/// large was cut by its size, not by its window.
const FULL_PAYLOAD_BYTES: usize = 6 * 1024 * 1024 - store::queue::MAX_MESSAGE_BYTES;

/// How `records` arrived: the batching window, and the batch's span by SQS's clock when
/// it was cut by its size (as many messages as the mapping's batch size, or a payload
/// near Lambda's limit) rather than by its window.
fn batch_arrival(records: &[SqsMessage], intake: &Intake) -> fanout::BatchArrival {
    let sent = records.iter().filter_map(sent_at);
    let span = sent
        .clone()
        .min()
        .zip(sent.max())
        .map(|(lo, hi)| Duration::from_millis(hi.saturating_sub(lo).unsigned_abs()));
    let bytes: usize = records
        .iter()
        .map(|r| r.body.as_ref().map_or(0, String::len))
        .sum();
    let full = records.len() >= intake.batch_size || bytes >= FULL_PAYLOAD_BYTES;
    fanout::BatchArrival {
        window: intake.window,
        full_span: span.filter(|_| full),
    }
}

/// Each entity's arrival rate in this batch, in write units per second, where a sample
/// shows one (`sharding::fanout::arrival_rate`): the write units of its readings'
/// items (bounded from above, before they are keyed: `store::Reading::item_size_bound`,
/// or, where the pack stage packed a message, the size of each write it encoded under
/// its placeholder key, `store::pack::encode_unkeyed`) over the span of the `SentTimestamp`s of the messages that carry them, floored at
/// the batching window.
/// The readings' own timestamps play no part: a sender chooses them. Every entity of
/// the batch is present.
///
/// A slab group (`slabs`) is an entity too, measured the same way: its slabs' write
/// units over the span of the messages whose readings they hold.
pub(super) fn entity_rates(
    packed: &Packed,
    slabs: &[Shared<UnkeyedSlab>],
    records: &[SqsMessage],
    intake: &Intake,
) -> BTreeMap<String, Option<f64>> {
    let mut rates = match packed {
        Packed::Unpacked(messages) => rates_of(messages, records, intake),
        Packed::Packed(messages) => rates_of(messages, records, intake),
    };
    rates.extend(slab_rates(slabs, records, intake));
    rates
}

/// Each slab group's arrival rate, as [`entity_rates`] measures a device's: its slabs'
/// write units, its readings and the distinct messages they came from.
fn slab_rates(
    slabs: &[Shared<UnkeyedSlab>],
    records: &[SqsMessage],
    intake: &Intake,
) -> BTreeMap<String, Option<f64>> {
    let batch = batch_arrival(records, intake);
    let mut groups: BTreeMap<&str, (u64, u64, BTreeSet<u32>)> = BTreeMap::new();
    for slab in slabs {
        let (readings, units, messages) = groups.entry(&slab.write.place.entity).or_default();
        *readings += slab.write.readings.len() as u64;
        *units += slab
            .write
            .item
            .as_ref()
            .map_or(1, |item| store::size::write_units(item.size) as u64);
        messages.extend(slab.member_messages.iter().copied());
    }
    groups
        .into_iter()
        .map(|(entity, (readings, write_units, messages))| {
            let sent = messages
                .iter()
                .filter_map(|&m| records.get(m as usize).and_then(sent_at));
            let span = sent
                .clone()
                .min()
                .zip(sent.max())
                .map_or(Duration::ZERO, |(lo, hi)| {
                    Duration::from_millis(hi.saturating_sub(lo).unsigned_abs())
                });
            let arrived = fanout::Arrived {
                readings,
                write_units,
                messages: messages.len() as u64,
                span,
            };
            (entity.to_owned(), fanout::arrival_rate(arrived, &batch))
        })
        .collect()
}

/// [`entity_rates`] over the messages of one stage's writes.
fn rates_of<'a, W: Units>(
    packed: &'a [Message<W>],
    records: &[SqsMessage],
    intake: &Intake,
) -> BTreeMap<String, Option<f64>> {
    /// One entity: readings, their write units, messages, the last message it was seen
    /// in, and the first and last `SentTimestamp` of its messages.
    struct Seen {
        readings: u64,
        units: u64,
        messages: u64,
        message: usize,
        sent: Option<(i64, i64)>,
    }
    impl Seen {
        fn sent_in(&mut self, sent: Option<i64>) {
            if let Some(t) = sent {
                self.sent = Some(self.sent.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))));
            }
        }
    }
    let batch = batch_arrival(records, intake);
    // One lookup per reading, borrowed ids: one allocation per entity, at the end.
    let mut seen: HashMap<&'a str, Seen> = HashMap::new();
    // A reading of `entity` from the message at `message`, with the write units it adds
    // (its write's when it is a write's first member; none for a member packed with
    // a group's carrier, whose readings the group's writes count).
    let mut see = |entity: &'a str, readings: u64, units: u64, message: usize| {
        let entity = seen.entry(entity).or_insert(Seen {
            readings: 0,
            units: 0,
            messages: 0,
            message: usize::MAX,
            sent: None,
        });
        entity.readings += readings;
        entity.units += units;
        if entity.message != message {
            entity.message = message;
            entity.messages += 1;
            entity.sent_in(records.get(message).and_then(sent_at));
        }
    };
    for (message, packed_message) in packed.iter().enumerate() {
        // Its readings are counted with the writes of the group that carries them; its
        // arrival counts as its own message's.
        if let Message::PackedWith { carrier } = packed_message {
            if let Some(carrying) = packed.get(*carrier)
                && let Some(first) = carrying.parts().1.first()
                && let Some(first) = first.write.readings().first()
            {
                see(&first.device_id, 0, 0, message);
            }
            continue;
        }
        // Each write counts its item's units on its first reading.
        for write in packed_message.writes() {
            let units = write.units();
            for (i, r) in write.readings().iter().enumerate() {
                see(&r.device_id, 1, if i == 0 { units } else { 0 }, message);
            }
        }
    }
    let mut rates: Vec<(&str, Option<f64>)> = seen
        .into_iter()
        .map(|(entity, s)| {
            let span = s.sent.map_or(Duration::ZERO, |(lo, hi)| {
                Duration::from_millis(hi.saturating_sub(lo).unsigned_abs())
            });
            let arrived = fanout::Arrived {
                readings: s.readings,
                write_units: s.units,
                messages: s.messages,
                span,
            };
            (entity, fanout::arrival_rate(arrived, &batch))
        })
        .collect();
    // Sorted, the map is built in one pass.
    rates.sort_unstable_by(|a, b| a.0.cmp(b.0));
    rates
        .into_iter()
        .map(|(entity, rate)| (entity.to_owned(), rate))
        .collect()
}

/// The write units of `r`'s own item, bounded before it is keyed.
fn item_units(r: &Reading) -> u64 {
    store::size::write_units(r.item_size_bound()) as u64
}

/// A write before it is keyed, counted by the write units of its item.
trait Units: Carried {
    /// Its item's write units: its size where the pack stage encoded it, else the sum
    /// of its readings' bounds.
    fn units(&self) -> u64;
}

/// A reading not yet cut into writes is its own item.
impl Units for Reading {
    fn units(&self) -> u64 {
        item_units(self)
    }
}

impl Units for UnkeyedWrite {
    fn units(&self) -> u64 {
        self.item.as_ref().map_or_else(
            || self.readings.iter().map(item_units).sum(),
            |item| store::size::write_units(item.size) as u64,
        )
    }
}

#[cfg(test)]
mod tests {
    use sharding::time::Timestamp;
    use store::Reading;

    use crate::fate::{Retry, Stopped};
    use proptest::prelude::*;

    use super::super::stages::{Group, Shared};
    use super::*;

    /// The rates read literally: per entity, its readings, its messages and the span
    /// of their `SentTimestamp`s, against the batch's arrival.
    fn rates_by_definition(
        messages: &[(i64, Vec<(u8, i64)>)],
        batch: &fanout::BatchArrival,
    ) -> BTreeMap<String, Option<f64>> {
        let entities: BTreeSet<u8> = messages
            .iter()
            .flat_map(|(_, m)| m.iter().map(|(e, _)| *e))
            .collect();
        entities
            .into_iter()
            .map(|e| {
                let carrying: Vec<&(i64, Vec<(u8, i64)>)> = messages
                    .iter()
                    .filter(|(_, m)| m.iter().any(|(x, _)| *x == e))
                    .collect();
                let readings = carrying
                    .iter()
                    .map(|(_, m)| m.iter().filter(|(x, _)| *x == e).count() as u64)
                    .sum();
                let sent: Vec<i64> = carrying.iter().map(|(t, _)| *t).collect();
                let span = sent
                    .iter()
                    .max()
                    .zip(sent.iter().min())
                    .map_or(0, |(hi, lo)| hi - lo);
                let span = Duration::from_millis(span.unsigned_abs());
                (
                    format!("dev-{e}"),
                    fanout::arrival_rate(
                        fanout::Arrived::small(readings, carrying.len() as u64, span),
                        batch,
                    ),
                )
            })
            .collect()
    }

    fn stage(message: &[(u8, i64)]) -> Message<Reading> {
        Message::Alone(
            message
                .iter()
                .map(|(e, t)| Reading {
                    device_id: format!("dev-{e}"),
                    event_id: format!("evt-{t}"),
                    ts: Timestamp::from_millis(*t).expect("in range"),
                    metrics: BTreeMap::new(),
                    tags: BTreeMap::new(),
                    written: store::WriteOrder::OLDEST,
                })
                .collect(),
        )
    }

    fn record(sent: i64) -> SqsMessage {
        let mut record = SqsMessage::default();
        record
            .attributes
            .insert("SentTimestamp".to_owned(), sent.to_string());
        record
    }

    proptest! {
        #[test]
        fn entity_rates_follow_arrival_by_the_queues_clock(
            // Messages sent over up to 3 s, their readings stamped anywhere (a sender's
            // timestamps must not matter), some refused.
            spread in prop::collection::vec(
                (
                    0i64..3_000,
                    prop::collection::vec((0u8..3, 0i64..3_600_000), 0..70),
                ),
                0..8,
            ),
            refused in prop::collection::vec(prop::bool::weighted(0.2), 8),
            batch_size in 1usize..10,
        ) {
            let sent0 = 1_782_090_000_000i64;
            let messages: Vec<(i64, Vec<(u8, i64)>)> = spread
                .iter()
                .map(|(sent, m)| {
                    (
                        sent0 + sent,
                        m.iter().map(|(e, ts)| (*e, 1_700_000_000_000 + ts)).collect(),
                    )
                })
                .collect();
            let records: Vec<SqsMessage> = messages.iter().map(|(t, _)| record(*t)).collect();
            let intake = Intake { batch_size, window: Duration::from_secs(1) };
            let batch = batch_arrival(&records, &intake);
            // A message that is not parsed (refused, say) counts for nothing.
            let kept: Vec<(i64, Vec<(u8, i64)>)> = messages
                .iter()
                .zip(&refused)
                .filter(|(_, r)| !**r)
                .map(|(m, _)| m.clone())
                .collect();
            let stages: Vec<Message<Reading>> = messages
                .iter()
                .zip(&refused)
                .map(|((_, m), r)| {
                    if *r {
                        Message::Stopped(Stopped::Retry(Retry::Failed("refused".to_owned())))
                    } else {
                        stage(m)
                    }
                })
                .collect();
            prop_assert_eq!(
                entity_rates(&Packed::Unpacked(stages), &[], &records, &intake),
                rates_by_definition(&kept, &batch)
            );
        }
    }

    #[test]
    fn messages_packed_together_count_as_the_messages_they_arrived_in() {
        // 25 messages of one reading of dev-0 over 2 s, a full batch: packed together,
        // the first carrying their group of one write of all 25 and the others packed
        // with it, they show
        // the rate they show parsed one by one.
        let intake = Intake {
            batch_size: 25,
            window: Duration::from_secs(1),
        };
        let sent0 = 1_782_090_000_000i64;
        let records: Vec<SqsMessage> = (0..25).map(|i| record(sent0 + i * 80)).collect();
        let parsed: Vec<Message<Reading>> = (0..25).map(|i| stage(&[(0, sent0 + i)])).collect();
        let readings: Vec<Reading> = parsed
            .iter()
            .flat_map(|s| s.readings().cloned().collect::<Vec<_>>())
            .collect();
        let mut grouped = vec![Message::Carries(Group {
            members: (0..25).collect(),
            writes: Ok(vec![Shared {
                write: UnkeyedWrite {
                    readings,
                    index: None,
                    item: None,
                },
                member_messages: (0..25).collect(),
            }]),
        })];
        grouped.extend((1..25).map(|_| Message::PackedWith { carrier: 0 }));
        let rates = entity_rates(&Packed::Packed(grouped), &[], &records, &intake);
        assert_eq!(
            rates,
            entity_rates(&Packed::Unpacked(parsed), &[], &records, &intake)
        );
        assert!(rates["dev-0"].is_some_and(|r| r > 10.0), "{rates:?}");
    }

    #[test]
    fn readings_stamped_with_one_instant_count_at_most_a_windows_worth() {
        let intake = Intake {
            batch_size: 100,
            window: Duration::from_secs(1),
        };
        for n in [20u8, 200] {
            let readings: Vec<(u8, i64)> = (0..n).map(|_| (0, 1_700_000_000_000)).collect();
            let packed = Packed::Unpacked(vec![stage(&readings)]);
            let rates = entity_rates(&packed, &[], &[record(1_782_090_000_000)], &intake);
            assert_eq!(rates["dev-0"], Some(f64::from(n)));
        }
    }
}
