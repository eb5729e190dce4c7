//! Sink mode's store: the keys of the items written (no values), and the answer to the
//! operations the sink does not serve.

use http::Response;
use serde::Serialize;

use super::batch::WriteReq;
use super::{Body, Inner, UNKNOWN_PK};
use crate::ddb;

/// One key held by the sink.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SinkKey {
    /// Table name.
    pub table: String,
    /// Partition key value.
    pub pk: String,
    /// Sort key value, when the item has the table's sort key attribute.
    pub sk: Option<String>,
}

impl Inner {
    pub(super) fn sink_unsupported(&self, op: &str) -> Response<Body> {
        ddb::validation_error(&format!(
            "capacity-proxy in sink mode answers only BatchWriteItem and PutItem; {op} is not supported"
        ))
    }

    /// Applies accepted writes to the sink's key set.
    pub(super) fn store_in_sink(&self, accepted: &[&WriteReq<'_>]) {
        let mut sink = self.sink.lock();
        for req in accepted {
            let key = SinkKey {
                table: req.table.to_owned(),
                pk: req.pk.clone().unwrap_or_else(|| UNKNOWN_PK.to_owned()),
                sk: req.sk.clone(),
            };
            if req.delete {
                sink.remove(&key);
            } else {
                sink.insert(key);
            }
        }
    }
}
