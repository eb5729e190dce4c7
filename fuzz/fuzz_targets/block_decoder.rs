//! The block decoder (`store::block::BlockItem::readings`) on arbitrary stored blocks:
//! it refuses a block that breaks a rule of the format or returns its members in
//! order, one per entry of every column, and never panics.

#![no_main]

use libfuzzer_sys::fuzz_target;
use store::block::BlockItem;

fuzz_target!(|data: &[u8]| {
    let Ok(block) = serde_json::from_slice::<BlockItem>(data) else {
        return;
    };
    if let Ok(readings) = block.readings() {
        assert_eq!(readings.len(), block.ids.len());
        assert!(
            readings
                .windows(2)
                .all(|w| (w[0].ts_ms, &w[0].event_id) < (w[1].ts_ms, &w[1].event_id))
        );
        assert!(readings.iter().all(|r| r.device_id == block.device_id));
    }
});
