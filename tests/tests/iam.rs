//! Every AWS call the Lambda code makes is allowed by its function's role in
//! `template.yaml`, and every grant of a role is used (docs/reliability.md scenario 21).
//!
//! moto can enforce IAM, but it authorizes every DynamoDB call against resource `*`
//! (its DynamoDB handlers name no table; only SQS's name their queue), which cannot tell
//! a grant on one table from a grant on another. So each function runs against a
//! private stand-in, configured with its environment from the template, over SDK
//! clients that record every request: the IAM action that authorizes it and the
//! resource it names. The record is checked
//! against the role's grants in both directions: a call no grant allows fails, and so
//! does a grant no call and no AWS-side use needs. What AWS itself does with a
//! function's role is read from the function's properties, as AWS documents it: the
//! SQS event source mapping polls with `sqs:ReceiveMessage`, `sqs:DeleteMessage` and
//! `sqs:GetQueueAttributes`; logging writes streams and events to the function's log
//! group; active tracing sends segments and telemetry to X-Ray; a schedule (an
//! EventBridge rule) invokes the function through a permission on the function, never
//! with its role.
//!
//! The IoT front door's rule role (`IotFrontDoor` enabled) is used by AWS IoT alone:
//! every call it makes is the `sqs:SendMessage` of one of the rule's SQS actions (each
//! publish, and the error action), so its needs are read from the rule and checked
//! against its grants the same way, both directions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use aws_config::SdkConfig;
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sharding::epoch::{Epoch, TableHistory};
use sharding::slab::SlabLayout;
use sharding::time::Timestamp;
use stand_in::TestStack;
use store::rollup::compaction::{Compacted, advance_compacted};
use store::rollup::dynamo::DynamoRollups;
use store::rollup::{HOUR_MS, RollupItem, RollupTable};
use tokio::time::Instant;
use yaml_serde::Value;

use crate::template::{
    ROUTES, Template, path, role_grants, role_grants_trusting, role_statements, scalar, strings,
};

/// A resource as a request names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Named {
    Table { name: String, index: Option<String> },
    Queue(String),
    Secret(String),
}

/// One request: the IAM action that authorizes it, and what it names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Call {
    action: String,
    resource: Named,
}

/// What a function's clients sent: each call, and the partition keys of the items each
/// call names (`Item` or `Key`, or a batch write's), which a `dynamodb:LeadingKeys`
/// condition reads.
#[derive(Debug, Clone, Default)]
struct Recorded {
    calls: BTreeSet<Call>,
    keys: BTreeSet<(Call, String)>,
}

/// Records every request of the clients it is installed on.
#[derive(Debug, Clone, Default)]
struct Recorder {
    recorded: Arc<Mutex<Recorded>>,
}

impl Recorder {
    fn recorded(&self) -> Recorded {
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A DynamoDB client whose requests this recorder records.
    fn dynamodb(&self, sdk: &SdkConfig) -> aws_sdk_dynamodb::Client {
        let config = aws_sdk_dynamodb::config::Builder::from(sdk).interceptor(self.clone());
        aws_sdk_dynamodb::Client::from_conf(config.build())
    }

    /// An SQS client whose requests this recorder records.
    fn sqs(&self, sdk: &SdkConfig) -> aws_sdk_sqs::Client {
        let config = aws_sdk_sqs::config::Builder::from(sdk).interceptor(self.clone());
        aws_sdk_sqs::Client::from_conf(config.build())
    }

    /// A Secrets Manager client whose requests this recorder records.
    fn secrets(&self, sdk: &SdkConfig) -> aws_sdk_secretsmanager::Client {
        let config = aws_sdk_secretsmanager::config::Builder::from(sdk).interceptor(self.clone());
        aws_sdk_secretsmanager::Client::from_conf(config.build())
    }
}

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "IamRecorder"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let target = request
            .headers()
            .get("x-amz-target")
            .ok_or("a request without X-Amz-Target: not a JSON-protocol call")?;
        let body: serde_json::Value =
            serde_json::from_slice(request.body().bytes().ok_or("a streaming request body")?)?;
        let calls = calls_of(target, &body)?;
        let keys = keys_of(&body);
        let mut recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        for call in &calls {
            let table = match &call.resource {
                Named::Table { name, .. } => Some(name.as_str()),
                Named::Queue(_) | Named::Secret(_) => None,
            };
            for (of, key) in &keys {
                if of.is_none() || of.as_deref() == table {
                    recorded.keys.insert((call.clone(), key.clone()));
                }
            }
        }
        recorded.calls.extend(calls);
        Ok(())
    }
}

/// The partition keys a request names: its one item's (`Item` or `Key`), or each of a
/// batch write's (`RequestItems`), with the table it names them of. Every table of the
/// stack has the partition key `PK`.
fn keys_of(body: &serde_json::Value) -> Vec<(Option<String>, String)> {
    let pk = |item: &serde_json::Value| {
        item.get(store::item::PK)
            .and_then(|pk| pk.get("S"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    if let Some(key) = ["Item", "Key"]
        .iter()
        .find_map(|f| body.get(f))
        .and_then(pk)
    {
        return vec![(None, key)];
    }
    let Some(tables) = body.get("RequestItems").and_then(|r| r.as_object()) else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    for (table, requests) in tables {
        for request in requests.as_array().into_iter().flatten() {
            let item = request
                .get("PutRequest")
                .and_then(|put| put.get("Item"))
                .or_else(|| request.get("DeleteRequest").and_then(|d| d.get("Key")));
            if let Some(key) = item.and_then(pk) {
                keys.push((Some(table.clone()), key));
            }
        }
    }
    keys
}

/// The calls one JSON-protocol request makes, from its `X-Amz-Target` and body.
fn calls_of(target: &str, body: &serde_json::Value) -> Result<Vec<Call>, BoxError> {
    let (prefix, operation) = target
        .split_once('.')
        .ok_or_else(|| format!("X-Amz-Target {target:?}"))?;
    let text = |field: &str| {
        body.get(field)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("{operation} without {field}"))
    };
    let (action, resources) = if prefix.starts_with("DynamoDB_") {
        let resources = match body.get("RequestItems").and_then(|r| r.as_object()) {
            Some(items) => items
                .keys()
                .map(|name| Named::Table {
                    name: name.clone(),
                    index: None,
                })
                .collect(),
            None => vec![Named::Table {
                name: text("TableName")?,
                index: body
                    .get("IndexName")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned),
            }],
        };
        (format!("dynamodb:{operation}"), resources)
    } else if prefix == "AmazonSQS" {
        // IAM authorizes SQS's batch actions as their single counterparts.
        let action = operation.strip_suffix("Batch").unwrap_or(operation);
        (
            format!("sqs:{action}"),
            vec![Named::Queue(text("QueueUrl")?)],
        )
    } else if prefix == "secretsmanager" {
        (
            format!("secretsmanager:{operation}"),
            vec![Named::Secret(text("SecretId")?)],
        )
    } else {
        return Err(format!("a call to an unexpected service: {target}").into());
    };
    Ok(resources
        .into_iter()
        .map(|resource| Call {
            action: action.clone(),
            resource,
        })
        .collect())
}

/// The stack's physical names, and the template's symbol of each (`getatt:X.Arn` for a
/// table or queue, `ref:X` for a secret, as the role policies name them).
struct Names {
    tables: BTreeMap<String, String>,
    queues: BTreeMap<String, String>,
    secrets: BTreeMap<String, String>,
}

impl Names {
    fn symbol(&self, resource: &Named) -> Result<String> {
        Ok(match resource {
            Named::Table { name, index } => {
                let id = self
                    .tables
                    .get(name)
                    .with_context(|| format!("table {name} is not the stack's"))?;
                match index {
                    None => format!("getatt:{id}.Arn"),
                    Some(index) => format!("sub:${{{id}.Arn}}/index/{index}"),
                }
            }
            Named::Queue(url) => {
                let id = self
                    .queues
                    .get(url)
                    .with_context(|| format!("queue {url} is not the stack's"))?;
                format!("getatt:{id}.Arn")
            }
            Named::Secret(arn) => self
                .secrets
                .get(arn)
                .with_context(|| format!("secret {arn} is not the stack's"))?
                .clone(),
        })
    }
}

/// A function's environment from the template, each `ref:X` replaced by the stack's
/// value of X (a table's name, a queue's URL, a secret's ARN).
fn environment(
    template: &Template,
    function: &str,
    refs: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>> {
    let props = template.props(function)?;
    let variables = path(&props, &["Environment", "Variables"])
        .and_then(Value::as_mapping)
        .with_context(|| format!("{function} has no environment"))?;
    let mut env = BTreeMap::new();
    for (name, value) in variables {
        let name = name.as_str().context("variable name")?.to_owned();
        let value = scalar(value).with_context(|| format!("{function}: {name}"))?;
        let value = match value.strip_prefix("ref:") {
            Some(id) => refs
                .get(id)
                .with_context(|| format!("{function}: {name} refers to {id}, not provisioned"))?
                .clone(),
            None => value,
        };
        env.insert(name, value);
    }
    Ok(env)
}

/// What AWS does with a function's role on its own, from the function's properties.
fn aws_side_uses(template: &Template, function: &str) -> Result<BTreeSet<(String, String)>> {
    let props = template.props(function)?;
    let mut uses = BTreeSet::new();
    let mut add = |actions: &[&str], resource: &str| {
        for action in actions {
            uses.insert(((*action).to_owned(), resource.to_owned()));
        }
    };
    if let Some(Value::Mapping(events)) = props.get("Events") {
        for (name, event) in events {
            match event.get("Type").and_then(Value::as_str) {
                Some("SQS") => {}
                // EventBridge invokes through the function's resource policy.
                Some("Schedule") => continue,
                _ => bail!("{function}: event {name:?} is not SQS; extend aws_side_uses"),
            }
            let queue = path(event, &["Properties", "Queue"])
                .and_then(scalar)
                .with_context(|| format!("{function}: event {name:?} has no queue"))?;
            add(
                &[
                    "sqs:ReceiveMessage",
                    "sqs:DeleteMessage",
                    "sqs:GetQueueAttributes",
                ],
                &queue,
            );
        }
    }
    if let Some(group) = path(&props, &["LoggingConfig", "LogGroup"]).and_then(scalar) {
        let id = group
            .strip_prefix("ref:")
            .with_context(|| format!("{function}: log group {group}"))?;
        add(
            &["logs:CreateLogStream", "logs:PutLogEvents"],
            &format!("getatt:{id}.Arn"),
        );
    }
    if props.get("Tracing").and_then(scalar).as_deref() == Some("Active") {
        add(&["xray:PutTraceSegments", "xray:PutTelemetryRecords"], "*");
    }
    Ok(uses)
}

/// The role of a function (`Role: !GetAtt X.Arn`).
fn role_of(template: &Template, function: &str) -> Result<String> {
    let role = template
        .props(function)?
        .get("Role")
        .and_then(scalar)
        .with_context(|| format!("{function} has no Role"))?;
    role.strip_prefix("getatt:")
        .and_then(|r| r.strip_suffix(".Arn"))
        .map(str::to_owned)
        .with_context(|| format!("{function}: Role {role}"))
}

/// The (action, resource) pairs a role grants only under a `dynamodb:LeadingKeys`
/// condition (`ForAllValues:StringLike`), with the patterns it allows; any other
/// condition is refused, as this check would not evaluate it.
fn leading_key_grants(
    template: &Template,
    role: &str,
) -> Result<BTreeMap<(String, String), Vec<String>>> {
    let mut conditioned: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut open = BTreeSet::new();
    for statement in role_statements(template, role)? {
        let mut pairs = Vec::new();
        for action in strings(statement.get("Action")) {
            for resource in strings(statement.get("Resource")) {
                pairs.push((action.clone(), resource));
            }
        }
        let Some(condition) = statement.get("Condition") else {
            open.extend(pairs);
            continue;
        };
        let like = condition.get("ForAllValues:StringLike");
        let patterns = strings(like.and_then(|l| l.get("dynamodb:LeadingKeys")));
        ensure!(
            condition.as_mapping().map(|c| c.len()) == Some(1)
                && like.and_then(Value::as_mapping).map(|l| l.len()) == Some(1)
                && !patterns.is_empty(),
            "{role}: a condition this check does not evaluate ({condition:?}); extend \
             leading_key_grants"
        );
        for pair in pairs {
            conditioned
                .entry(pair)
                .or_default()
                .extend(patterns.iter().cloned());
        }
    }
    conditioned.retain(|pair, _| !open.contains(pair));
    Ok(conditioned)
}

/// IAM's `StringLike`: `*` matches any run of characters, `?` any one.
fn like(pattern: &str, text: &str) -> bool {
    match pattern.chars().next() {
        None => text.is_empty(),
        Some('*') => {
            let rest = &pattern[1..];
            text.char_indices()
                .map(|(i, _)| i)
                .chain([text.len()])
                .any(|i| like(rest, &text[i..]))
        }
        Some(p) => text.chars().next().is_some_and(|t| {
            (p == '?' || p == t) && like(&pattern[p.len_utf8()..], &text[t.len_utf8()..])
        }),
    }
}

/// The recorded calls a role's `dynamodb:LeadingKeys` conditions refuse: (action,
/// resource, partition key). A conditioned call whose key the record does not hold is
/// an error.
fn outside_leading_keys(
    template: &Template,
    role: &str,
    recorded: &Recorded,
    names: &Names,
) -> Result<Vec<(String, String, String)>> {
    let conditioned = leading_key_grants(template, role)?;
    let mut outside = Vec::new();
    for call in &recorded.calls {
        let symbol = names.symbol(&call.resource)?;
        let Some(patterns) = conditioned.get(&(call.action.clone(), symbol.clone())) else {
            continue;
        };
        let keys: Vec<&String> = recorded
            .keys
            .iter()
            .filter(|(c, _)| c == call)
            .map(|(_, k)| k)
            .collect();
        ensure!(
            !keys.is_empty(),
            "{role}: {} on {symbol} is granted for some partition keys only, and no call \
             of it names its key",
            call.action
        );
        for key in keys {
            if !patterns.iter().any(|p| like(p, key)) {
                outside.push((call.action.clone(), symbol.clone(), key.clone()));
            }
        }
    }
    Ok(outside)
}

/// Checks a function's recorded calls against its role, both ways, and each call of a
/// grant held to some partition keys against them.
fn check(template: &Template, function: &str, recorded: &Recorded, names: &Names) -> Result<()> {
    let role = role_of(template, function)?;
    let grants = role_grants(template, &role)?;
    let mut needed = aws_side_uses(template, function)?;
    for call in &recorded.calls {
        needed.insert((call.action.clone(), names.symbol(&call.resource)?));
    }
    let missing: Vec<_> = needed.difference(&grants).collect();
    let unused: Vec<_> = grants.difference(&needed).collect();
    let outside = outside_leading_keys(template, &role, recorded, names)?;
    ensure!(
        missing.is_empty() && unused.is_empty() && outside.is_empty(),
        "{role} (of {function}): calls no grant allows {missing:?}; grants nothing uses \
         {unused:?}; calls on partition keys its dynamodb:LeadingKeys conditions refuse \
         {outside:?}"
    );
    Ok(())
}

fn event(name: &str) -> Result<SqsEvent> {
    let path = stand_in::repo_root()?.join("events").join(name);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    serde_json::from_str(&text).with_context(|| path.display().to_string())
}

/// The stand-in with the template's tables and queues, and a cursor secret.
struct Stand {
    stack: TestStack,
    refs: BTreeMap<String, String>,
    names: Names,
}

async fn stand() -> Result<Stand> {
    let stack = TestStack::start().await?;
    let sdk = stack.sdk_config().await;
    let secrets = aws_sdk_secretsmanager::Client::new(&sdk);
    let secret = secrets
        .create_secret()
        .name(format!("{}-cursor", stack.stack.table_name))
        .secret_string("k".repeat(32))
        .send()
        .await?;
    let arn = secret.arn().context("a secret ARN")?.to_owned();
    let s = &stack.stack;
    let mut refs: BTreeMap<String, String> = s.tables.clone();
    refs.extend(s.queues.clone());
    refs.insert("CursorSecret".to_owned(), arn.clone());
    let invert =
        |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| (v.clone(), k.clone())).collect();
    let names = Names {
        tables: invert(&s.tables),
        queues: invert(&s.queues),
        secrets: BTreeMap::from([(arn, "ref:CursorSecret".to_owned())]),
    };
    Ok(Stand { stack, refs, names })
}

/// The ingest over recording clients: written readings, created and raised fan-outs,
/// refused messages to the DLQ, transient failures delayed and, at the last receive,
/// requeued.
async fn ingest_calls(template: &Template, stand: &Stand) -> Result<Recorded> {
    let recorder = Recorder::default();
    let sdk = stand.stack.sdk_config().await;
    let (dynamo, sqs) = (recorder.dynamodb(&sdk), recorder.sqs(&sdk));
    let env = environment(template, "IngestFunction", &stand.refs)?;
    let config = ingest::Config::from_lookup(|name| env.get(name).cloned())?;
    let service = ingest::Ingest::from_clients(config, &dynamo, &sqs);
    let mut rng = StdRng::seed_from_u64(21);
    let now = Timestamp::parse("2026-06-22T04:00:00Z")?;
    let later = || Instant::now() + Duration::from_secs(30);
    for name in [
        "sqs-single.json",
        "sqs-batch.json",
        "sqs-hot-burst.json",
        "sqs-mixed-bad.json",
    ] {
        service
            .handle(&event(name)?, now, later(), &mut rng)
            .await?;
    }
    // A device whose one message brings 200 readings of 1 KB (four tags of 250
    // characters): packed into blocks of 16 KiB, about 200 write units over the
    // template's 1-s batching window, a rate that raises its fan-out.
    let mut dense = event("sqs-single.json")?;
    let readings: Vec<serde_json::Value> = (0..200)
        .map(|i| {
            serde_json::json!({
                "device_id": "dense-1",
                "event_id": format!("dense-{i:03}"),
                "ts": format!("2026-06-22T03:59:00.{i:03}Z"),
                "metrics": { "temperature": 20 },
                "tags": (0..4)
                    .map(|t| (format!("note{t}"), format!("{i:03}{}", "x".repeat(247)).into()))
                    .collect::<serde_json::Map<String, serde_json::Value>>(),
            })
        })
        .collect();
    dense.records[0].message_id = Some("dense-message".to_owned());
    dense.records[0].body = Some(serde_json::json!({ "readings": readings }).to_string());
    let report = service.process(&dense, now, later(), &mut rng).await;
    ensure!(
        report.fanout_raises == 1,
        "the dense device was not raised: {report:?}"
    );
    // Time for the queue but none for work (the deadline falls inside the margin kept
    // for the queue): both messages fail for a transient reason. The first is at its
    // first receive (a redelivery wait), the second at its last (a requeue).
    let mut failing = event("sqs-batch.json")?;
    failing.records.truncate(2);
    let receives = env.get("MAX_RECEIVES").context("MAX_RECEIVES")?.clone();
    let margin = Duration::from_millis(1000);
    ensure!(
        !env.contains_key("DEADLINE_MARGIN_MS"),
        "the template sets DEADLINE_MARGIN_MS; take the margin from it"
    );
    failing.records[1]
        .attributes
        .insert("ApproximateReceiveCount".to_owned(), receives);
    let report = service
        .process(&failing, now, Instant::now() + margin / 2, &mut rng)
        .await;
    let fates: Vec<&ingest::Fate> = report.messages.iter().map(|m| &m.fate).collect();
    ensure!(
        matches!(
            fates[..],
            [ingest::Fate::Reported { .. }, ingest::Fate::Requeued { .. }]
        ),
        "one message reported, one requeued: {fates:?}"
    );
    Ok(recorder.recorded())
}

/// The query over recording clients, built as its binary builds it (the rollups table
/// read where `ROLLUP_TABLE` names one): the cursor key from its secret, then every
/// shared API Gateway event, which together ask every route the template declares
/// (`GET /devices` and `GET /stats` over the sealer's items).
async fn query_calls(template: &Template, stand: &Stand) -> Result<Recorded> {
    let recorder = Recorder::default();
    let sdk = stand.stack.sdk_config().await;
    let (dynamo, secrets) = (recorder.dynamodb(&sdk), recorder.secrets(&sdk));
    let env = environment(template, "QueryFunction", &stand.refs)?;
    let config = query::config::Config::from_lookup(|name| env.get(name).cloned())?;
    let (current, previous) =
        query::config::resolve_cursor_keys(&config.cursor_key, &secrets).await?;
    let service = query::QueryService::new(
        store::read::DynamoReadings::new(&dynamo, &config.table_name),
        store::dynamo::DynamoShards::new(&dynamo, &config.shard_table_name),
        config.service.with_keys(current, previous),
    );
    // Without the table, GET /devices and GET /stats answer 501, which fails below.
    let service = match &config.rollup_table {
        Some(table) => service.with_rollups(DynamoRollups::new(dynamo.clone(), table)),
        None => service,
    };
    let events = stand_in::repo_root()?.join("events");
    let mut answered = BTreeSet::new();
    for entry in std::fs::read_dir(&events)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !(name.starts_with("apigw-") && name.ends_with(".json")) {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        let route = serde_json::from_str::<serde_json::Value>(&text)?["routeKey"]
            .as_str()
            .with_context(|| format!("{name}: no routeKey"))?
            .to_owned();
        let request = lambda_http::request::from_str(&text)
            .with_context(|| format!("{name}: not an API Gateway event"))?;
        let response = query::lambda::handle_apigw(&service, request)
            .await
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        ensure!(
            response.status().as_u16() < 500,
            "{name}: answered {}",
            response.status()
        );
        answered.insert(route);
    }
    let unasked: Vec<&str> = ROUTES
        .iter()
        .copied()
        .filter(|r| !answered.contains(*r))
        .collect();
    ensure!(
        unasked.is_empty(),
        "routes of the template no event in events/ asks, whose calls go unrecorded: \
         {unasked:?}"
    );
    Ok(recorder.recorded())
}

/// Gives the stand's table slabs from `from` on (as `shardline slabs on` schedules them,
/// here in the past), beside the recording: the sealer then compacts that hour's slab
/// windows into runs before it seals it.
async fn slabs_from(sdk: &SdkConfig, shard_table: &str, from: Timestamp) -> Result<()> {
    use store::directory::{ShardReader as _, ShardStore as _};
    let shards = store::dynamo::DynamoShards::new(&aws_sdk_dynamodb::Client::new(sdk), shard_table);
    let history = shards
        .get_layout()
        .await?
        .context("the ingest stored a layout")?;
    let mut epochs = history.epochs().to_vec();
    let slabs = history.latest().clone().with_slabs(SlabLayout::default());
    epochs.push(Epoch {
        effective_from: from,
        value: slabs,
    });
    let written = shards
        .replace_layout(history.epochs().len(), &TableHistory::from_epochs(epochs)?)
        .await?;
    ensure!(
        written == store::Written::Applied,
        "the layout changed under the test"
    );
    Ok(())
}

/// The sealer over recording clients, after the ingest wrote its readings, and with
/// slabs from the hour they are in: a first run compacts the hour's slab windows into
/// runs and seals the hour; then, with a late mark left in that hour (as the ingest
/// leaves one), a second run seals the device-hour again and deletes the mark.
async fn sealer_calls(template: &Template, stand: &Stand) -> Result<Recorded> {
    let recorder = Recorder::default();
    let sdk = stand.stack.sdk_config().await;
    let dynamo = recorder.dynamodb(&sdk);
    let env = environment(template, "SealerFunction", &stand.refs)?;
    let config = sealer::Config::from_lookup(|name| env.get(name).cloned())?;
    // The ingest wrote at 04:00 readings of the hour before; it is due at 04:00 and
    // the horizon.
    let hour = Timestamp::parse("2026-06-22T03:00:00Z")?.as_millis();
    slabs_from(
        &sdk,
        &config.shard_table_name,
        Timestamp::from_millis(hour)?,
    )
    .await?;
    // A compaction progress from that hour on, as a first run sets it when the slabs
    // start: the ingest writes slabs only once one exists.
    let start = Compacted {
        from_ms: hour,
        to_ms: hour,
    };
    let unrecorded = DynamoRollups::new(aws_sdk_dynamodb::Client::new(&sdk), &config.rollup_table);
    advance_compacted(&unrecorded, &start).await?;
    let sealer = sealer::Sealer::new(
        store::read::DynamoReadings::new(&dynamo, &config.table_name),
        store::dynamo::DynamoShards::new(&dynamo, &config.shard_table_name),
        DynamoRollups::new(dynamo.clone(), &config.rollup_table),
        config.settings,
    );
    let due = Timestamp::from_millis(hour + HOUR_MS)?;
    let now = Timestamp::from_millis(
        due.as_millis() + i64::try_from(config.settings.horizon.as_millis())? + 60_000,
    )?;
    let first = sealer.run(now, None).await?;
    ensure!(
        first.hours_sealed == 1 && first.device_hours_written > 0,
        "the first run sealed nothing: {first:?}"
    );
    ensure!(
        first.compacted_to_ms >= Some(hour + HOUR_MS),
        "the first run compacted nothing: {first:?}"
    );
    // Written beside the recording, as the ingest writes it.
    let marks = DynamoRollups::new(aws_sdk_dynamodb::Client::new(&sdk), &config.rollup_table);
    let store::rollup::RollupKey { pk, sk, .. } = store::rollup::keys::late_mark("dense-1", hour);
    marks
        .put(&RollupItem {
            pk,
            sk,
            version: 7,
            body: String::new(),
            ttl: None,
        })
        .await?;
    let second = sealer
        .run(Timestamp::from_millis(now.as_millis() + 60_000)?, None)
        .await?;
    ensure!(
        second.marks_sealed >= 1,
        "the second run sealed no late mark: {second:?}"
    );
    Ok(recorder.recorded())
}

/// Every function on one stand-in (the ingest first, then the sealer, so the query
/// reads the readings the one wrote and the derived items the other made), each
/// checked against its role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_granted_and_every_grant_is_used() -> Result<()> {
    let template = Template::load(&[])?;
    let stand = stand().await?;
    let ingest = ingest_calls(&template, &stand).await?;
    let sealer = sealer_calls(&template, &stand).await?;
    let query = query_calls(&template, &stand).await?;
    let failures: Vec<String> = [
        check(&template, "IngestFunction", &ingest, &stand.names),
        check(&template, "QueryFunction", &query, &stand.names),
        check(&template, "SealerFunction", &sealer, &stand.names),
    ]
    .into_iter()
    .filter_map(|result| result.err().map(|e| format!("{e:#}")))
    .collect();
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// The check itself fails on a template that misses a grant a call needs, or holds
/// one nothing uses.
#[test]
fn a_missing_or_unused_grant_fails_the_check() -> Result<()> {
    let text = std::fs::read_to_string(crate::harness::template_path()?)?;
    let names = Names {
        tables: BTreeMap::from([("t".to_owned(), "ReadingsTable".to_owned())]),
        queues: BTreeMap::new(),
        secrets: BTreeMap::new(),
    };
    let write = |action: &str| Call {
        action: action.to_owned(),
        resource: Named::Table {
            name: "t".to_owned(),
            index: None,
        },
    };
    let template = Template::parse(&text, &[])?;
    let recorded = Recorded {
        calls: BTreeSet::from([write("dynamodb:DeleteItem")]),
        keys: BTreeSet::new(),
    };
    let err =
        check(&template, "IngestFunction", &recorded, &names).expect_err("a call without a grant");
    ensure!(format!("{err}").contains("dynamodb:DeleteItem"), "{err}");
    let err = check(&template, "IngestFunction", &Recorded::default(), &names)
        .expect_err("grants nothing uses");
    ensure!(format!("{err}").contains("BatchWriteItem"), "{err}");
    Ok(())
}

/// A call of a grant held to some partition keys (the ingest's late marks, `late#*`)
/// on another key fails the check; one on a key the condition allows does not.
#[test]
fn a_call_outside_a_grants_leading_keys_fails_the_check() -> Result<()> {
    let template = Template::load(&[])?;
    let names = Names {
        tables: BTreeMap::from([("r".to_owned(), "RollupTable".to_owned())]),
        queues: BTreeMap::new(),
        secrets: BTreeMap::new(),
    };
    let put = Call {
        action: "dynamodb:PutItem".to_owned(),
        resource: Named::Table {
            name: "r".to_owned(),
            index: None,
        },
    };
    let recorded = |keys: &[&str]| Recorded {
        calls: BTreeSet::from([put.clone()]),
        keys: keys
            .iter()
            .map(|k| (put.clone(), (*k).to_owned()))
            .collect(),
    };
    let outside =
        |keys: &[&str]| outside_leading_keys(&template, "IngestRole", &recorded(keys), &names);
    ensure!(outside(&["late#03", "late#15"])?.is_empty());
    let refused = outside(&["late#03", "dir", "seal"])?;
    ensure!(
        refused
            .iter()
            .map(|(_, _, k)| k.as_str())
            .collect::<Vec<_>>()
            == ["dir", "seal"],
        "{refused:?}"
    );
    ensure!(
        outside(&[]).is_err(),
        "a conditioned call whose key was not recorded"
    );
    ensure!(like("late#*", "late#") && !like("late#*", "late") && like("a?c", "abc"));
    Ok(())
}

/// The sealer's batch writes are held to the run partitions (`r#*`): one that names a
/// reading's own key, as the batch body records it, fails the check.
#[test]
fn a_sealer_batch_write_outside_the_run_partitions_fails_the_check() -> Result<()> {
    let template = Template::load(&[])?;
    let names = Names {
        tables: BTreeMap::from([("t".to_owned(), "ReadingsTable".to_owned())]),
        queues: BTreeMap::new(),
        secrets: BTreeMap::new(),
    };
    let batch = |pks: &[&str]| {
        let puts: Vec<serde_json::Value> = pks
            .iter()
            .map(|pk| serde_json::json!({ "PutRequest": { "Item": { "PK": { "S": pk } } } }))
            .collect();
        let body = serde_json::json!({ "RequestItems": { "t": puts } });
        let calls = calls_of("DynamoDB_20120810.BatchWriteItem", &body).expect("a call");
        let keys = keys_of(&body);
        Recorded {
            keys: calls
                .iter()
                .flat_map(|c| keys.iter().map(|(_, k)| (c.clone(), k.clone())))
                .collect(),
            calls: calls.into_iter().collect(),
        }
    };
    let outside = |pks: &[&str]| outside_leading_keys(&template, "SealerRole", &batch(pks), &names);
    ensure!(outside(&["r#0#2026-06-22T03", "r#7#2026-06-22T03"])?.is_empty());
    let refused = outside(&["r#0#2026-06-22T03", "3#2026-06-22T03"])?;
    ensure!(
        refused
            .iter()
            .map(|(_, _, k)| k.as_str())
            .collect::<Vec<_>>()
            == ["3#2026-06-22T03"],
        "{refused:?}"
    );
    Ok(())
}

/// What AWS IoT does with the rule's role: `sqs:SendMessage` to the queue of each SQS
/// action of the rule, and of its error action (`QueueUrl: !Ref X`, granted on
/// `X.Arn`). Any other kind of action is not understood here.
fn rule_uses(template: &Template, rule: &str, role: &str) -> Result<BTreeSet<(String, String)>> {
    let payload = template
        .props(rule)?
        .get("TopicRulePayload")
        .cloned()
        .with_context(|| format!("{rule} has no TopicRulePayload"))?;
    let mut actions: Vec<Value> = payload
        .get("Actions")
        .and_then(Value::as_sequence)
        .cloned()
        .unwrap_or_default();
    actions.extend(payload.get("ErrorAction").cloned());
    let mut uses = BTreeSet::new();
    for action in &actions {
        let sqs = action
            .get("Sqs")
            .with_context(|| format!("{rule}: an action that is not Sqs; extend rule_uses"))?;
        ensure!(
            sqs.get("RoleArn").and_then(scalar) == Some(format!("getatt:{role}.Arn")),
            "{rule}: an action that does not send with {role}"
        );
        let queue = sqs
            .get("QueueUrl")
            .and_then(scalar)
            .and_then(|q| q.strip_prefix("ref:").map(str::to_owned))
            .with_context(|| format!("{rule}: an Sqs action without !Ref to a queue"))?;
        uses.insert(("sqs:SendMessage".to_owned(), format!("getatt:{queue}.Arn")));
    }
    Ok(uses)
}

/// The rule role's grants against the rule's actions, both ways.
fn check_rule_role(template: &Template) -> Result<()> {
    let (rule, role) = ("IotReadingsRule", "IotRuleRole");
    let grants = role_grants_trusting(template, role, "iot.amazonaws.com")?;
    let needed = rule_uses(template, rule, role)?;
    let missing: Vec<_> = needed.difference(&grants).collect();
    let unused: Vec<_> = grants.difference(&needed).collect();
    ensure!(
        missing.is_empty() && unused.is_empty(),
        "{role} (of {rule}): sends no grant allows {missing:?}; grants nothing uses {unused:?}"
    );
    Ok(())
}

#[test]
fn the_iot_rule_role_grants_exactly_what_the_rule_sends() -> Result<()> {
    check_rule_role(&Template::load(&[("IotFrontDoor", "enabled")])?)
}

/// The rule role's check fails on a grant the rule does not use, and on an action
/// whose queue the role may not send to.
#[test]
fn a_rule_role_grant_too_many_or_too_few_fails_the_check() -> Result<()> {
    let text = std::fs::read_to_string(crate::harness::template_path()?)?;
    let on = [("IotFrontDoor", "enabled")];
    let error_action = "        ErrorAction:\n          Sqs:\n            QueueUrl: !Ref IngestDLQ";
    ensure!(text.matches(error_action).count() == 1, "{error_action:?}");
    let unused = text.replacen(
        error_action,
        "        ErrorAction:\n          Sqs:\n            QueueUrl: !Ref IngestQueue",
        1,
    );
    let err = check_rule_role(&Template::parse(&unused, &on)?).expect_err("an unused grant");
    ensure!(format!("{err}").contains("IngestDLQ"), "{err}");
    let grant = "                Resource: !GetAtt IngestDLQ.Arn\n\n";
    ensure!(text.matches(grant).count() == 1, "{grant:?}");
    let missing = text.replacen(
        grant,
        "                Resource: !GetAtt ShardsTable.Arn\n\n",
        1,
    );
    let err = check_rule_role(&Template::parse(&missing, &on)?).expect_err("a missing grant");
    ensure!(format!("{err}").contains("IngestDLQ"), "{err}");
    Ok(())
}
