//! Properties of blocks (docs/design-blocks.md): grouping cuts any set of readings into
//! blocks that cover it exactly, each within the layout's window, bytes and count, cut
//! greedily (so the cut follows from the members alone); a block's key follows from
//! its members alone and tells any two member sets apart.

use std::collections::BTreeSet;

use proptest::prelude::*;
use sharding::block::{BlockLayout, block_sk, group};

const OVERHEAD: usize = 120;

/// Members as grouping sees them: (ts_ms, event id, bytes), sorted by (ts, id), each
/// identity once.
fn members() -> impl Strategy<Value = Vec<(i64, String, usize)>> {
    prop::collection::vec((0i64..600_000, 0u32..50, 1usize..3_000), 0..300).prop_map(|raw| {
        let mut seen = BTreeSet::new();
        let mut out: Vec<(i64, String, usize)> = raw
            .into_iter()
            .map(|(ts, id, bytes)| (ts, format!("e{id}"), bytes))
            .filter(|(ts, id, _)| seen.insert((*ts, id.clone())))
            .collect();
        out.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        out
    })
}

fn layout() -> impl Strategy<Value = BlockLayout> {
    (1u32..120_000, 1_024u32..20_000, 2u32..200).prop_map(|(window_ms, max_bytes, max_readings)| {
        BlockLayout {
            window_ms,
            max_bytes,
            max_readings,
        }
    })
}

proptest! {
    #[test]
    fn grouping_covers_the_members_exactly_within_the_layout_greedily(
        members in members(),
        layout in layout(),
    ) {
        let blocks = group(&members, &layout, OVERHEAD, |m| m.0, |m| m.2);
        // Contiguous, in order, every member once.
        let mut next = 0;
        for block in &blocks {
            prop_assert_eq!(block.start, next);
            prop_assert!(block.end > block.start);
            next = block.end;
        }
        prop_assert_eq!(next, members.len());
        for (i, block) in blocks.iter().enumerate() {
            let part = &members[block.clone()];
            let first = part[0].0;
            let size: usize = OVERHEAD + part.iter().map(|m| m.2).sum::<usize>();
            prop_assert!(part.len() <= layout.max_readings as usize);
            if part.len() > 1 {
                prop_assert!(part.iter().all(|m| m.0 - first < i64::from(layout.window_ms)));
                prop_assert!(size <= layout.max_bytes as usize);
            }
            // Greedy: the member after the block could not join it.
            if let Some(after) = blocks.get(i + 1).map(|b| &members[b.start]) {
                let full = part.len() == layout.max_readings as usize;
                let late = after.0 - first >= i64::from(layout.window_ms);
                let heavy = size + after.2 > layout.max_bytes as usize;
                prop_assert!(full || late || heavy, "block {i} could take the next member");
            }
        }
        // The same members, given again, are cut the same way.
        prop_assert_eq!(blocks, group(&members, &layout, OVERHEAD, |m| m.0, |m| m.2));
    }

    #[test]
    fn a_block_key_tells_member_sets_apart(
        a in members(),
        b in members(),
    ) {
        prop_assume!(!a.is_empty() && !b.is_empty());
        let sk = "dev#2026-06-22T00:00:00.000Z#e0";
        let ids = |m: &[(i64, String, usize)]| {
            block_sk(sk, m.iter().map(|(ts, id, _)| (*ts, id.as_str())).collect::<Vec<_>>())
        };
        let same = a.iter().map(|m| (m.0, &m.1)).eq(b.iter().map(|m| (m.0, &m.1)));
        prop_assert_eq!(ids(&a) == ids(&b), same);
        // Sizes are not part of a member's identity.
        let resized: Vec<_> = a.iter().map(|(ts, id, _)| (*ts, id.clone(), 1)).collect();
        prop_assert_eq!(ids(&a), ids(&resized));
    }
}
