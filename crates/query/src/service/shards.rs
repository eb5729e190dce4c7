//! The shards route, `GET /devices/{device_id}/shards`: the table's layout history and
//! the device's fan-out history, as the shard directory holds them.

use serde_json::json;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::time::Timestamp;
use store::directory::ShardReader;
use store::read::ReadingSource;

use super::answer::store_error;
use super::{Answer, QueryService, ReadStats};

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    /// The histories `device`'s keys follow, as of `now`.
    pub(super) async fn shards(&self, device: &str, now: Timestamp) -> Answer {
        let table = self.stored_layout(now).await?;
        let fanout = self
            .directory
            .fanout(device, now)
            .await
            .map_err(store_error)?;
        Ok((
            shards_json(device, table.as_ref(), &fanout).to_string(),
            ReadStats::default(),
        ))
    }
}

fn shards_json(
    device: &str,
    table: Option<&TableHistory>,
    fanout: &FanoutHistory,
) -> serde_json::Value {
    let layout: Vec<serde_json::Value> = table
        .map(|t| {
            t.epochs()
                .iter()
                .map(|e| {
                    json!({
                        "effective_from": e.effective_from.to_rfc3339(),
                        "strategy": e.value.strategy.to_string(),
                        "shards": e.value.shards.get(),
                        "default_fanout": e.value.default_fanout(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let fanout: Vec<serde_json::Value> = fanout
        .epochs()
        .iter()
        .map(|e| json!({"effective_from": e.effective_from.to_rfc3339(), "k": e.value}))
        .collect();
    json!({"device_id": device, "fanout": fanout, "layout": layout})
}
