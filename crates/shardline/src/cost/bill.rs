//! A month's bill from what was used: each use (a quantity a month of one line item,
//! and whether it was modelled or measured) priced by one [`PriceTable`]. The model of
//! a fleet (`cost::model`) and the demo's and the bench's counts both end here, so a
//! modelled and a measured bill have the same lines at the same prices.

use serde::Serialize;

use super::prices::{Key, PriceTable};

/// The AWS services a bill names, in the order it prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Service {
    #[serde(rename = "IoT Core")]
    IotCore,
    #[serde(rename = "SQS")]
    Sqs,
    #[serde(rename = "Lambda")]
    Lambda,
    #[serde(rename = "DynamoDB")]
    DynamoDb,
    #[serde(rename = "API Gateway")]
    ApiGateway,
    #[serde(rename = "CloudWatch Logs")]
    CloudWatchLogs,
    #[serde(rename = "EventBridge")]
    EventBridge,
}

impl Service {
    /// Every service, in the order a bill prints them.
    pub const ALL: [Service; 7] = [
        Service::IotCore,
        Service::Sqs,
        Service::Lambda,
        Service::DynamoDb,
        Service::ApiGateway,
        Service::CloudWatchLogs,
        Service::EventBridge,
    ];

    /// The service's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Service::IotCore => "IoT Core",
            Service::Sqs => "SQS",
            Service::Lambda => "Lambda",
            Service::DynamoDb => "DynamoDB",
            Service::ApiGateway => "API Gateway",
            Service::CloudWatchLogs => "CloudWatch Logs",
            Service::EventBridge => "EventBridge",
        }
    }
}

/// Where a quantity comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", content = "from", rename_all = "snake_case")]
pub enum Basis {
    /// Computed from the fleet's shape; says how (and which bench item it rests on).
    Modelled(String),
    /// Counted in a run; says where it was counted.
    Measured(String),
}

impl Basis {
    /// `modelled: ...` or `measured: ...`.
    #[must_use]
    pub fn text(&self) -> String {
        match self {
            Basis::Modelled(how) if how.starts_with("from ") => format!("modelled {how}"),
            Basis::Modelled(how) => format!("modelled: {how}"),
            Basis::Measured(how) => format!("measured: {how}"),
        }
    }
}

/// One line item's quantity a month.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Use {
    /// The service billed.
    pub service: Service,
    /// The line item, in words (`SendMessage`, `ingest: GB-seconds`).
    pub item: String,
    /// Units a month (negative for a credit such as a free tier).
    pub quantity: f64,
    /// The price it is billed at.
    pub price: Key,
    /// Where the quantity comes from.
    pub basis: Basis,
}

impl Use {
    /// A use of `quantity` units of `price`.
    #[must_use]
    pub fn new(service: Service, item: &str, quantity: f64, price: Key, basis: Basis) -> Self {
        Self {
            service,
            item: item.to_owned(),
            quantity,
            price,
            basis,
        }
    }
}

/// A priced line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Line {
    #[serde(flatten)]
    pub used: Use,
    /// What a unit is.
    pub unit: String,
    /// US dollars a month.
    pub usd: f64,
}

/// A service's total.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceTotal {
    pub service: Service,
    pub usd: f64,
}

/// A month's bill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bill {
    /// The price table's region and date.
    pub region: String,
    pub prices_taken: String,
    pub prices_note: String,
    /// Every line, in the order of its use.
    pub lines: Vec<Line>,
    /// Each service's total, services with no line left out.
    pub by_service: Vec<ServiceTotal>,
    /// The whole month.
    pub total_usd: f64,
}

impl Bill {
    /// The total of `service` (0 when it has no line).
    #[must_use]
    pub fn service(&self, service: Service) -> f64 {
        self.by_service
            .iter()
            .find(|t| t.service == service)
            .map_or(0.0, |t| t.usd)
    }
}

/// `uses` priced by `prices`.
#[must_use]
pub fn bill(uses: &[Use], prices: &PriceTable) -> Bill {
    let lines: Vec<Line> = uses
        .iter()
        .map(|u| {
            let price = prices.get(u.price);
            Line {
                used: u.clone(),
                unit: price.unit.clone(),
                usd: price.of(u.quantity),
            }
        })
        .collect();
    let by_service: Vec<ServiceTotal> = Service::ALL
        .iter()
        .filter(|s| lines.iter().any(|l| l.used.service == **s))
        .map(|&service| ServiceTotal {
            service,
            usd: lines
                .iter()
                .filter(|l| l.used.service == service)
                .map(|l| l.usd)
                .sum(),
        })
        .collect();
    Bill {
        region: prices.region.clone(),
        prices_taken: prices.taken.clone(),
        prices_note: prices.note.clone(),
        total_usd: by_service.iter().map(|t| t.usd).sum(),
        lines,
        by_service,
    }
}

/// `usd` as dollars: cents above a dollar, four significant digits below.
#[must_use]
pub fn dollars(usd: f64) -> String {
    if usd.abs() >= 1.0 || usd == 0.0 {
        let cents = format!("{:.2}", usd.abs());
        let (whole, frac) = cents.split_once('.').unwrap_or((&cents, "00"));
        let mut grouped = String::new();
        for (i, c) in whole.chars().enumerate() {
            if i > 0 && (whole.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        let sign = if usd < 0.0 { "-" } else { "" };
        format!("{sign}${grouped}.{frac}")
    } else {
        format!("${usd:.4}")
    }
}

/// `x` with thousands separated, to `decimals` places.
#[must_use]
pub fn grouped(x: f64, decimals: usize) -> String {
    let text = format!("{:.*}", decimals, x.abs());
    let (whole, frac) = match text.split_once('.') {
        Some((w, f)) => (w.to_owned(), format!(".{f}")),
        None => (text.clone(), String::new()),
    };
    let mut out = String::new();
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    let sign = if x < 0.0 { "-" } else { "" };
    format!("{sign}{out}{frac}")
}

/// The bill as a table: each service's lines, then its total, then the month's.
#[must_use]
pub fn table(bill: &Bill) -> String {
    let mut s = String::new();
    for total in &bill.by_service {
        s.push_str(&format!(
            "{:<52} {:>14}\n",
            total.service.name(),
            dollars(total.usd)
        ));
        for line in bill
            .lines
            .iter()
            .filter(|l| l.used.service == total.service)
        {
            s.push_str(&format!(
                "  {:<50} {:>14}  {} {}; {}\n",
                line.used.item,
                dollars(line.usd),
                grouped(line.used.quantity, quantity_decimals(line.used.quantity)),
                line.unit,
                line.used.basis.text(),
            ));
        }
    }
    s.push_str(&format!(
        "{:<52} {:>14}\n",
        "Total a month",
        dollars(bill.total_usd)
    ));
    s
}

/// Decimals a quantity is printed with: none from 100 up.
fn quantity_decimals(q: f64) -> usize {
    if q.abs() >= 100.0 { 0 } else { 3 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_is_its_quantity_at_its_price_and_services_sum_their_lines() {
        let prices = PriceTable::built_in().expect("built in");
        let m = |s: &str| Basis::Modelled(s.to_owned());
        let uses = [
            Use::new(Service::Sqs, "a", 2e6, Key::SqsStandardRequests, m("x")),
            Use::new(Service::Sqs, "b", 3e6, Key::SqsStandardRequests, m("x")),
            Use::new(
                Service::DynamoDb,
                "c",
                4e6,
                Key::DynamodbWriteRequestUnits,
                m("x"),
            ),
        ];
        let b = bill(&uses, &prices);
        // 5 M requests at $0.40 a million; 4 M write units at $0.625 a million.
        assert!((b.service(Service::Sqs) - 2.0).abs() < 1e-12);
        assert!((b.service(Service::DynamoDb) - 2.5).abs() < 1e-12);
        assert!((b.total_usd - 4.5).abs() < 1e-12);
        assert_eq!(b.service(Service::Lambda), 0.0);
        assert_eq!(dollars(1234.5), "$1,234.50");
        assert_eq!(dollars(0.01234), "$0.0123");
    }
}
