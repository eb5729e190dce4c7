//! What became of each message the publisher had accepted: the publisher's manifest
//! (every message id SQS returned) crossed with run-local's received log, the table
//! and the dead-letter queue. Each message is received and stored, received and
//! dead-lettered, received and neither, or never received. A message SQS accepted and
//! never handed to run-local was lost by the stand-in's SQS, not by Shardline, and the
//! demo and the soaks say so (docs/reliability.md scenario 45).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::publish::{Manifest, ReadingId};

/// How many examples of each unsettled kind a report names.
const EXAMPLES: usize = 3;

/// What became of each message the publisher had accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Accounting {
    /// Messages SQS accepted (valid and malformed).
    pub accepted: u64,
    /// Received, and every reading they hold is in the table.
    pub stored: u64,
    /// Received, and the dead-letter queue holds a copy naming them.
    pub dead_lettered: u64,
    /// Received, and neither all their readings stored nor a copy dead-lettered: still
    /// in the queue (a throttled backlog), or lost by us.
    pub unsettled: Vec<String>,
    /// Never handed to run-local: still in the queue, or lost by the stand-in's SQS.
    pub never_received: Vec<String>,
    /// Stored or dead-lettered, yet not in the received log: the log missed them.
    pub unlogged: Vec<String>,
}

impl Accounting {
    /// Each message of `manifest` placed by what happened to it: `received` (the ids
    /// run-local's received log holds), `stored` (the distinct readings of the table)
    /// and `dead_lettered` (the `source_message_id` of each DLQ copy).
    pub fn of(
        manifest: &Manifest,
        received: &BTreeSet<String>,
        stored: &BTreeSet<ReadingId>,
        dead_lettered: &BTreeSet<String>,
    ) -> Self {
        let mut out = Self::default();
        let valid = manifest
            .valid
            .iter()
            .map(|(id, readings)| (id, Some(readings)));
        let malformed = manifest.malformed.keys().map(|id| (id, None));
        for (id, readings) in valid.chain(malformed) {
            out.accepted += 1;
            let settled = if dead_lettered.contains(id) {
                out.dead_lettered += 1;
                true
            } else if readings.is_some_and(|r| r.is_subset(stored)) {
                out.stored += 1;
                true
            } else {
                false
            };
            match (settled, received.contains(id)) {
                (true, true) => {}
                (true, false) => out.unlogged.push(id.clone()),
                (false, true) => out.unsettled.push(id.clone()),
                (false, false) => out.never_received.push(id.clone()),
            }
        }
        out
    }

    /// The counts in words, one line.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} messages SQS accepted: {} received and stored, {} received and dead-lettered, {} received and neither, {} never received",
            self.accepted,
            self.stored,
            self.dead_lettered,
            self.unsettled.len(),
            self.never_received.len()
        );
        if !self.unlogged.is_empty() {
            s.push_str(&format!(
                "; {} stored or dead-lettered but not in the received log",
                self.unlogged.len()
            ));
        }
        s
    }

    /// What a drained queue makes of the messages not settled: those received are lost
    /// by us, the others by the stand-in's SQS; and a received log that misses a
    /// settled message. Empty when every message is accounted for.
    pub fn losses(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.unsettled.is_empty() {
            out.push(format!(
                "{} messages received by run-local were neither stored nor dead-lettered (lost by Shardline), e.g. {:?}",
                self.unsettled.len(),
                examples(&self.unsettled)
            ));
        }
        if !self.never_received.is_empty() {
            out.push(format!(
                "{} messages SQS accepted were never received by run-local (lost by the stand-in's SQS, not by Shardline), e.g. {:?}",
                self.never_received.len(),
                examples(&self.never_received)
            ));
        }
        if !self.unlogged.is_empty() {
            out.push(format!(
                "the received log misses {} messages that were stored or dead-lettered, e.g. {:?}",
                self.unlogged.len(),
                examples(&self.unlogged)
            ));
        }
        out
    }
}

fn examples(ids: &[String]) -> &[String] {
    &ids[..ids.len().min(EXAMPLES)]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn reading(event: &str) -> ReadingId {
        ReadingId {
            device_id: "dev-1".to_owned(),
            event_id: event.to_owned(),
            ts_ms: 1,
        }
    }

    fn set<T: Ord + Clone>(items: &[T]) -> BTreeSet<T> {
        items.iter().cloned().collect()
    }

    fn ids(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    /// Messages: `stored` (two readings, both in the table), `half` (one of its two
    /// readings stored), `bad` (malformed, dead-lettered), `lost-bad` (malformed, not in
    /// the DLQ), `gone` (never received), `quiet` (stored, but the log misses it).
    fn manifest() -> Manifest {
        let valid = BTreeMap::from([
            ("stored".to_owned(), set(&[reading("a"), reading("b")])),
            ("half".to_owned(), set(&[reading("c"), reading("d")])),
            ("gone".to_owned(), set(&[reading("e")])),
            ("quiet".to_owned(), set(&[reading("f")])),
        ]);
        Manifest {
            readings: valid.values().flatten().cloned().collect(),
            valid,
            malformed: BTreeMap::from([
                ("bad".to_owned(), "not_json".to_owned()),
                ("lost-bad".to_owned(), "not_json".to_owned()),
            ]),
            failed: BTreeSet::new(),
        }
    }

    #[test]
    fn each_accepted_message_is_placed_by_what_happened_to_it() {
        let got = Accounting::of(
            &manifest(),
            &ids(&["stored", "half", "bad", "lost-bad"]),
            &set(&[reading("a"), reading("b"), reading("c"), reading("f")]),
            &ids(&["bad"]),
        );
        assert_eq!(
            got,
            Accounting {
                accepted: 6,
                stored: 2,
                dead_lettered: 1,
                unsettled: vec!["half".to_owned(), "lost-bad".to_owned()],
                never_received: vec!["gone".to_owned()],
                unlogged: vec!["quiet".to_owned()],
            }
        );
        let losses = got.losses().join("\n");
        assert!(
            losses.contains("2 messages received by run-local"),
            "{losses}"
        );
        assert!(
            losses.contains("1 messages SQS accepted were never received by run-local (lost by the stand-in's SQS"),
            "{losses}"
        );
        assert!(losses.contains("misses 1 messages"), "{losses}");
        assert!(got.text().contains("6 messages SQS accepted: 2 received and stored, 1 received and dead-lettered, 2 received and neither, 1 never received"), "{}", got.text());
    }

    #[test]
    fn a_run_where_everything_arrived_has_no_losses() {
        let m = manifest();
        let all: BTreeSet<String> = m.valid.keys().chain(m.malformed.keys()).cloned().collect();
        let got = Accounting::of(&m, &all, &m.readings, &ids(&["bad", "lost-bad"]));
        assert_eq!((got.stored, got.dead_lettered), (4, 2));
        assert!(got.losses().is_empty(), "{:?}", got.losses());
    }
}
