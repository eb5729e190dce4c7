//! Stage 2, where the layout packs blocks: each parsed message's readings packed into
//! writes (`store::pack`), and each write's item encoded once, under a placeholder key
//! as long as any key it can get (`store::pack::encode_unkeyed`). The observe stage
//! measures a device's rate by those items' sizes, and the keying then sets each item's
//! key (`store::pack::with_key`): an item is encoded once, not once for the rate and
//! again for the write. A reading that cannot be keyed refuses its message here, as the
//! keying would.

use sharding::epoch::TableHistory;
use store::Reading;
use store::batch::BatchTable;
use store::directory::ShardStore;
use store::pack;
use store::queue::Queue;
use tracing::Span;

use super::keying::pack_message;
use super::{Ingest, guarded};
use crate::fate::Stage;

impl<T: BatchTable, S: ShardStore, Q: Queue> Ingest<T, S, Q> {
    /// Packs and encodes every parsed message of `stages` (whose spans are `spans`),
    /// where `table` packs blocks; elsewhere a reading is its own item, sized by its
    /// bound, and nothing is encoded before the keying.
    pub(super) fn pack_stage(&self, stages: &mut [Stage], spans: &[Span], table: &TableHistory) {
        if !pack::packs_blocks(table) {
            return;
        }
        for (stage, span) in stages.iter_mut().zip(spans) {
            if let Stage::Parsed(readings) = stage {
                let readings = std::mem::take(readings);
                *stage = span.in_scope(|| guarded(|| self.pack_message(readings, table)));
            }
        }
    }

    /// One message packed into writes, each encoded before it is keyed; a write whose
    /// item cannot be made is left to the keying to refuse, with its reason.
    fn pack_message(&self, readings: Vec<Reading>, table: &TableHistory) -> Stage {
        let mut writes = match pack_message(readings, table) {
            Ok(writes) => writes,
            Err(refusal) => return Stage::Refused(refusal),
        };
        for write in &mut writes {
            write.item = pack::encode_unkeyed(&write.readings, self.config.retention).ok();
        }
        Stage::Packed(writes)
    }
}
