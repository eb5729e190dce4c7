//! Error classification for DynamoDB calls.
//!
//! Every failure falls in exactly one class, and each class has one handling:
//! validation errors are the item's fault (permanent, dead-letter it), throttles and
//! transient errors are retried within the budget, and a configuration error (no
//! such table, access denied) is nobody's item's fault, so it is neither retried in
//! the loop nor dead-lettered: the message goes back to the queue.

use std::fmt;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::ThrottlingReason;

/// Who is being throttled, which decides the remedy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThrottleKind {
    /// One partition key value is over its per-partition limit: spreading the entity
    /// over more shards helps.
    KeyRange,
    /// The table (or the account) is over its limit: more shards would not help;
    /// only backing off does.
    Table,
    /// A throttle without a reason DynamoDB names.
    Other,
}

impl ThrottleKind {
    /// Classifies one of DynamoDB's `ThrottlingReasons` strings,
    /// `ResourceType + OperationType + LimitType`.
    pub fn from_reason(reason: &str) -> Self {
        if reason.ends_with("KeyRangeThroughputExceeded") {
            Self::KeyRange
        } else if reason.ends_with("ProvisionedThroughputExceeded")
            || reason.ends_with("AccountLimitExceeded")
            || reason.ends_with("MaxOnDemandThroughputExceeded")
        {
            Self::Table
        } else {
            Self::Other
        }
    }

    /// Metric-friendly name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::KeyRange => "key-range",
            Self::Table => "table",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for ThrottleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified failure of one DynamoDB call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The request itself is invalid (an oversize item, an empty key, ...).
    #[error("validation: {0}")]
    Validation(String),
    /// DynamoDB throttled the call; `reason` is its `ThrottlingReasons` entry (or the
    /// error code when it gave none).
    #[error("throttled ({kind}): {reason}")]
    Throttled { kind: ThrottleKind, reason: String },
    /// 5xx, timeouts, dispatch failures: worth another attempt.
    #[error("transient: {0}")]
    Transient(String),
    /// The call did not finish before the invocation's deadline.
    #[error("deadline reached before the call finished")]
    Deadline,
    /// A conditional write found the item changed.
    #[error("condition check failed")]
    ConditionFailed,
    /// Setup problem (missing table, access denied, bad credentials): retrying in the
    /// loop will not fix it, and the item is not to blame.
    #[error("configuration: {0}")]
    Configuration(String),
    /// Stored data does not have the shape this code expects.
    #[error("malformed stored item: {0}")]
    Malformed(String),
}

impl StoreError {
    /// Worth another attempt within this invocation.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Throttled { .. } | Self::Transient(_))
    }

    /// The item is to blame: retrying it anywhere would fail again.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Validation(_))
    }

    /// A per-partition throttle: the signal to raise an entity's fan-out.
    pub fn is_key_range_throttle(&self) -> bool {
        self.throttle_kind() == Some(ThrottleKind::KeyRange)
    }

    /// The throttle kind, when this is a throttle.
    pub fn throttle_kind(&self) -> Option<ThrottleKind> {
        match self {
            Self::Throttled { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// Classifies any SDK error by its error code, `ThrottlingReasons` and HTTP status.
    pub fn from_sdk<E>(err: &SdkError<E>, reasons: &[ThrottlingReason]) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        match err {
            SdkError::ServiceError(service) => {
                let status = service.raw().status().as_u16();
                classify_service(service.err(), reasons, Some(status))
            }
            SdkError::TimeoutError(_) => Self::Transient("timeout".to_owned()),
            SdkError::DispatchFailure(e) => Self::Transient(format!("dispatch failure: {e:?}")),
            SdkError::ResponseError(e) => Self::Transient(format!("response error: {e:?}")),
            SdkError::ConstructionFailure(e) => {
                Self::Configuration(format!("request construction: {e:?}"))
            }
            other => Self::Transient(format!("{other:?}")),
        }
    }
}

/// Classifies a service error by code, reasons and HTTP status.
pub(crate) fn classify_service<E: ProvideErrorMetadata + fmt::Display>(
    err: &E,
    reasons: &[ThrottlingReason],
    status: Option<u16>,
) -> StoreError {
    let code = err.code().unwrap_or("");
    let message = err.message().unwrap_or("").to_owned();
    let described = if message.is_empty() {
        code.to_owned()
    } else {
        format!("{code}: {message}")
    };
    match code {
        "ProvisionedThroughputExceededException"
        | "ThrottlingException"
        | "RequestLimitExceeded" => {
            let named = reasons
                .iter()
                .filter_map(ThrottlingReason::reason)
                .collect::<Vec<_>>();
            // With several reasons, the key-range one decides: it is the one a raise fixes.
            let kind = named
                .iter()
                .map(|r| ThrottleKind::from_reason(r))
                .min()
                .unwrap_or(if code == "RequestLimitExceeded" {
                    ThrottleKind::Table
                } else {
                    ThrottleKind::Other
                });
            let reason = if named.is_empty() {
                code.to_owned()
            } else {
                named.join(",")
            };
            StoreError::Throttled { kind, reason }
        }
        "ValidationException" => StoreError::Validation(described),
        // An item collection (one partition key value's items where the table has a
        // local index) reached 10 GB: a full key, not a bad item. Like a hot key, it is
        // relieved by spreading the entity over more keys, so it is classified as a
        // key-range throttle: the writer retries, and the ingest raises the fan-out.
        "ItemCollectionSizeLimitExceededException" => StoreError::Throttled {
            kind: ThrottleKind::KeyRange,
            reason: "ItemCollectionSizeLimitExceeded".to_owned(),
        },
        "ConditionalCheckFailedException" => StoreError::ConditionFailed,
        "ResourceNotFoundException"
        | "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "MissingAuthenticationTokenException" => StoreError::Configuration(described),
        _ => match status {
            Some(s) if s >= 500 => StoreError::Transient(format!("HTTP {s}: {described}")),
            Some(s) if (400..500).contains(&s) && !code.is_empty() => {
                StoreError::Configuration(format!("HTTP {s}: {described}"))
            }
            _ if code.is_empty() => StoreError::Transient(format!("unclassified error: {err}")),
            _ => StoreError::Transient(described),
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use aws_sdk_dynamodb::types::ThrottlingReason;
    use aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException;

    use super::*;

    /// DynamoDB's answer to a read over a key's limit, as the adapters' mocked clients
    /// give it.
    pub(crate) fn read_key_range_exceeded() -> ProvisionedThroughputExceededException {
        ProvisionedThroughputExceededException::builder()
            .message("slow down")
            .meta(
                aws_sdk_dynamodb::error::ErrorMetadata::builder()
                    .code("ProvisionedThroughputExceededException")
                    .message("slow down")
                    .build(),
            )
            .throttling_reasons(
                ThrottlingReason::builder()
                    .reason("TableReadKeyRangeThroughputExceeded")
                    .build(),
            )
            .build()
    }

    #[test]
    fn reasons_classify_by_limit_type() {
        let check =
            |reason: &str, expected| assert_eq!(ThrottleKind::from_reason(reason), expected);
        check(
            "TableWriteKeyRangeThroughputExceeded",
            ThrottleKind::KeyRange,
        );
        check(
            "IndexWriteKeyRangeThroughputExceeded",
            ThrottleKind::KeyRange,
        );
        check(
            "TableWriteProvisionedThroughputExceeded",
            ThrottleKind::Table,
        );
        check("TableWriteAccountLimitExceeded", ThrottleKind::Table);
        check(
            "IndexWriteMaxOnDemandThroughputExceeded",
            ThrottleKind::Table,
        );
        check("SomethingNew", ThrottleKind::Other);
    }
}
