//! The injected faults' effect on one data-plane call: the latency it waits, and the
//! drop, error or throttle that answers it instead of the operation.

use std::time::{Duration, Instant};

use http::Response;
use serde_json::Value;

use super::request::{self, Call};
use super::{Body, Inner};
use crate::capacity::ThrottleReason;
use crate::ddb;
use crate::error::ProxyError;
use crate::faults::CallFault;

impl Inner {
    /// Waits out `latency` counted from `arrived` (counted as an injected latency when
    /// there is one); returns the time slept.
    pub(super) async fn wait_latency(&self, latency: Duration, arrived: Instant) -> Duration {
        let mut slept = Duration::ZERO;
        if !latency.is_zero() {
            self.stats.lock().faults_mut().latency += 1;
            slept = crate::faults::wait_latency(latency.saturating_sub(arrived.elapsed())).await;
        }
        slept
    }

    /// The answer `fault` gives `call` in place of the operation's; `None` for no fault.
    pub(super) fn inject(
        &self,
        fault: CallFault,
        call: &Call,
        json: Option<&Value>,
    ) -> Option<Result<Response<Body>, ProxyError>> {
        match fault {
            CallFault::None => None,
            CallFault::Drop => {
                self.stats.lock().faults_mut().drop += 1;
                // An error from the service makes hyper close the connection unanswered.
                Some(Err(ProxyError::Dropped))
            }
            CallFault::Error => {
                self.stats.lock().faults_mut().error += 1;
                Some(Ok(ddb::internal_error(
                    "Internal server error (capacity-proxy injected fault)",
                )))
            }
            CallFault::Throttle => {
                self.stats.lock().faults_mut().throttle += 1;
                let table = json.and_then(request::table_of).unwrap_or_default();
                let reason = if request::is_read(call.op()) {
                    ThrottleReason::TableReadKeyRangeThroughputExceeded
                } else {
                    ThrottleReason::TableWriteKeyRangeThroughputExceeded
                };
                Some(Ok(self.throttled(&[reason], &table)))
            }
        }
    }
}
