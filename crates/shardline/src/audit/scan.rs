//! A table's items as a sample, read through `store`'s scan port
//! ([`store::scan::TableScan`]): DynamoDB in the command, the in-memory fake in tests.

use store::error::StoreError;
use store::scan::{ScanAttributes, ScanRequest, TableScan};

use super::analysis::{Sampled, Write};

/// Scans a table into writes, page by page, so a sample stops reading at its `limit`
/// (items): each item's partition key, sort key, time and size, by the attribute
/// names given. Items without a string partition key are left out.
pub async fn scan_table(
    table: &impl TableScan,
    attributes: &ScanAttributes,
    limit: Option<u64>,
) -> Result<Vec<Sampled>, StoreError> {
    let mut out = Vec::new();
    let mut request = ScanRequest {
        attributes: attributes.clone(),
        start_after: None,
    };
    loop {
        let page = table.scan_page(&request).await?;
        for item in page.items {
            let Some(pk) = item.pk else {
                continue;
            };
            out.push(Sampled {
                write: Write {
                    pk,
                    ts_ms: item.ts_ms,
                    bytes: item.bytes,
                },
                sk: item.sk,
                members: item.members,
                tier: item.tier,
            });
            if limit.is_some_and(|l| out.len() as u64 >= l) {
                return Ok(out);
            }
        }
        match page.last_key {
            Some(next) => request.start_after = Some(next),
            None => return Ok(out),
        }
    }
}
