//! The price table `shardline cost` bills by: one JSON file, `prices/us-east-1.json`,
//! built into the binary; `--prices FILE` replaces it whole. Every price names the AWS
//! page it is documented on, and the table its region and the date the project took it.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

/// The table built in: us-east-1, on demand, as the project recorded it on 2026-11-29.
pub const BUILT_IN: &str = include_str!("../../prices/us-east-1.json");

/// One price: `usd` for every `per` units of `unit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// US dollars for `per` units.
    pub usd: f64,
    /// How many units `usd` buys.
    pub per: f64,
    /// What is counted.
    pub unit: String,
    /// Where the price is documented.
    pub source: String,
}

impl Price {
    /// Dollars for `quantity` units.
    #[must_use]
    pub fn of(&self, quantity: f64) -> f64 {
        quantity * self.usd / self.per
    }
}

/// A region's prices, with when they were taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceTable {
    /// The AWS region.
    pub region: String,
    /// The date the prices were taken (YYYY-MM-DD).
    pub taken: String,
    /// What the table is, and that it must be checked.
    pub note: String,
    /// The prices by key ([`Key`]'s names).
    pub prices: BTreeMap<String, Price>,
}

/// The prices a bill needs, by their key in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Key {
    DynamodbWriteRequestUnits,
    DynamodbReadRequestUnits,
    DynamodbStorageGbMonth,
    SqsStandardRequests,
    SqsFreeRequestsAMonth,
    LambdaRequests,
    LambdaGbSecondX86_64,
    LambdaGbSecondArm64,
    IotMessages,
    IotRulesTriggered,
    IotActionsApplied,
    IotConnectionMinutes,
    ApiGatewayHttpRequests,
    CloudwatchLogsIngestedGb,
    EventbridgeScheduledInvocations,
}

impl Key {
    /// Every key a table must hold.
    pub const ALL: [Key; 15] = [
        Key::DynamodbWriteRequestUnits,
        Key::DynamodbReadRequestUnits,
        Key::DynamodbStorageGbMonth,
        Key::SqsStandardRequests,
        Key::SqsFreeRequestsAMonth,
        Key::LambdaRequests,
        Key::LambdaGbSecondX86_64,
        Key::LambdaGbSecondArm64,
        Key::IotMessages,
        Key::IotRulesTriggered,
        Key::IotActionsApplied,
        Key::IotConnectionMinutes,
        Key::ApiGatewayHttpRequests,
        Key::CloudwatchLogsIngestedGb,
        Key::EventbridgeScheduledInvocations,
    ];

    /// The key's name in the table.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Key::DynamodbWriteRequestUnits => "dynamodb_write_request_units",
            Key::DynamodbReadRequestUnits => "dynamodb_read_request_units",
            Key::DynamodbStorageGbMonth => "dynamodb_storage_gb_month",
            Key::SqsStandardRequests => "sqs_standard_requests",
            Key::SqsFreeRequestsAMonth => "sqs_free_requests_a_month",
            Key::LambdaRequests => "lambda_requests",
            Key::LambdaGbSecondX86_64 => "lambda_gb_second_x86_64",
            Key::LambdaGbSecondArm64 => "lambda_gb_second_arm64",
            Key::IotMessages => "iot_messages",
            Key::IotRulesTriggered => "iot_rules_triggered",
            Key::IotActionsApplied => "iot_actions_applied",
            Key::IotConnectionMinutes => "iot_connection_minutes",
            Key::ApiGatewayHttpRequests => "api_gateway_http_requests",
            Key::CloudwatchLogsIngestedGb => "cloudwatch_logs_ingested_gb",
            Key::EventbridgeScheduledInvocations => "eventbridge_scheduled_invocations",
        }
    }
}

impl PriceTable {
    /// The table built into the binary.
    pub fn built_in() -> anyhow::Result<Self> {
        Self::parse(BUILT_IN).context("the built-in price table")
    }

    /// The table in `path`.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the price table {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("the price table {}", path.display()))
    }

    /// A table from its JSON, refused when a price is missing or not a price.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let table: PriceTable = serde_json::from_str(text).context("not a price table")?;
        for key in Key::ALL {
            let Some(price) = table.prices.get(key.name()) else {
                bail!("no price \"{}\"", key.name());
            };
            if !(price.usd.is_finite() && price.usd >= 0.0 && price.per > 0.0) {
                bail!(
                    "price \"{}\" must be a dollar amount of at least 0 for a positive `per`",
                    key.name()
                );
            }
        }
        Ok(table)
    }

    /// The price of `key` (present: [`PriceTable::parse`] checked it).
    #[must_use]
    pub fn get(&self, key: Key) -> &Price {
        &self.prices[key.name()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_table_holds_every_price_with_its_page() {
        let table = PriceTable::built_in().expect("it parses");
        assert_eq!(table.region, "us-east-1");
        assert_eq!(table.taken, "2026-11-29");
        for key in Key::ALL {
            assert!(
                table.get(key).source.starts_with("https://aws.amazon.com/"),
                "{}",
                key.name()
            );
        }
        assert_eq!(table.prices.len(), Key::ALL.len(), "no price unused");
    }

    #[test]
    fn a_table_missing_a_price_is_refused_naming_it() {
        let mut table = PriceTable::built_in().expect("it parses");
        table.prices.remove("sqs_standard_requests");
        let text = serde_json::to_string(&table).expect("encodes");
        let err = PriceTable::parse(&text).expect_err("refused");
        assert!(err.to_string().contains("sqs_standard_requests"), "{err}");
    }
}
