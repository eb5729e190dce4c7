//! The promises of `template.yaml` (docs/reliability.md scenario 20), read from the
//! file itself: partial batch responses, redrive, the visibility-timeout rule, DLQ
//! retention, queue encryption, each role's exact permissions, API auth and throttling,
//! the alarms, the sealer's schedule and role, the IoT front door's doors (scenarios 29
//! and 49 to 51: the queues' senders evaluated through their policy, the rule role's
//! trust, the principals taken) and who may invoke each function (52). Parameters take
//! their defaults unless a check overrides them.
//!
//! Every check is a function returning an error that names the broken promise;
//! `each_broken_promise_is_caught` edits the template text and proves the checks fail.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result, bail, ensure};
use yaml_serde::{Mapping, Value};

use crate::harness::template_path;

/// The template with intrinsic functions evaluated for one set of parameter values.
/// References to resources stay symbolic: `!Ref X` becomes `ref:X`, `!GetAtt X.Arn`
/// becomes `getatt:X.Arn`, `!Sub` text becomes `sub:...`.
pub(crate) struct Template {
    doc: Value,
    params: BTreeMap<String, String>,
    /// Pseudo parameters given a value (`AWS::StackName`); the others stay symbolic.
    pseudo: BTreeMap<String, String>,
}

impl Template {
    pub(crate) fn parse(text: &str, overrides: &[(&str, &str)]) -> Result<Self> {
        let doc: Value = yaml_serde::from_str(text).context("template.yaml is not YAML")?;
        let mut params = BTreeMap::new();
        if let Some(Value::Mapping(section)) = doc.get("Parameters") {
            for (name, body) in section {
                let name = name.as_str().context("parameter name")?.to_owned();
                if let Some(default) = body.get("Default").and_then(scalar) {
                    params.insert(name, default);
                }
            }
        }
        for (name, value) in overrides {
            ensure!(
                params.contains_key(*name),
                "no parameter {name} to override"
            );
            params.insert((*name).to_owned(), (*value).to_owned());
        }
        Ok(Self {
            doc,
            params,
            pseudo: BTreeMap::new(),
        })
    }

    /// This template deployed as the stack `name`: `!Ref AWS::StackName` and
    /// `${AWS::StackName}` in `!Sub` evaluate to it.
    fn with_stack_name(mut self, name: &str) -> Self {
        self.pseudo
            .insert("AWS::StackName".to_owned(), name.to_owned());
        self
    }

    pub(crate) fn load(overrides: &[(&str, &str)]) -> Result<Self> {
        let path = template_path()?;
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text, overrides)
    }

    /// `Resources.<id>` with its properties evaluated.
    pub(crate) fn resource(&self, id: &str) -> Result<Value> {
        let raw = self
            .doc
            .get("Resources")
            .and_then(|r| r.get(id))
            .with_context(|| format!("template has no resource {id}"))?;
        self.eval(raw)
    }

    pub(crate) fn props(&self, id: &str) -> Result<Value> {
        self.resource(id)?
            .get("Properties")
            .cloned()
            .with_context(|| format!("{id} has no Properties"))
    }

    /// Logical ids of every resource of one type whose condition holds.
    fn ids_of(&self, kind: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        if let Some(Value::Mapping(resources)) = self.doc.get("Resources") {
            for (id, body) in resources {
                let included = match body.get("Condition").and_then(Value::as_str) {
                    Some(name) => self.condition(name)?,
                    None => true,
                };
                if included && body.get("Type").and_then(Value::as_str) == Some(kind) {
                    out.push(id.as_str().context("resource id")?.to_owned());
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn condition(&self, name: &str) -> Result<bool> {
        let body = self
            .doc
            .get("Conditions")
            .and_then(|c| c.get(name))
            .with_context(|| format!("no condition {name}"))?;
        self.eval(body)?
            .as_bool()
            .with_context(|| format!("condition {name} is not boolean"))
    }

    fn eval(&self, value: &Value) -> Result<Value> {
        match value {
            Value::Tagged(tagged) => {
                let name = tagged.tag.to_string();
                let name = name.trim_start_matches('!');
                let function = match name {
                    "Ref" | "Condition" => name.to_owned(),
                    other => format!("Fn::{other}"),
                };
                self.call(&function, &tagged.value)
            }
            Value::Mapping(map) => {
                if map.len() == 1
                    && let Some((Value::String(key), arg)) = map.iter().next()
                    && (key == "Ref" || key == "Condition" || key.starts_with("Fn::"))
                {
                    return self.call(key, arg);
                }
                let mut out = Mapping::new();
                for (k, v) in map {
                    let v = self.eval(v)?;
                    if !is_no_value(&v) {
                        out.insert(k.clone(), v);
                    }
                }
                Ok(Value::Mapping(out))
            }
            Value::Sequence(items) => {
                let mut out = Vec::new();
                for v in items {
                    let v = self.eval(v)?;
                    if !is_no_value(&v) {
                        out.push(v);
                    }
                }
                Ok(Value::Sequence(out))
            }
            other => Ok(other.clone()),
        }
    }

    fn call(&self, function: &str, arg: &Value) -> Result<Value> {
        let text = |v: &Value| scalar(v).with_context(|| format!("{function}: {v:?}"));
        Ok(match function {
            "Ref" => {
                let name = text(arg)?;
                if name == "AWS::NoValue" {
                    Value::String(NO_VALUE.to_owned())
                } else if let Some(value) = self.pseudo.get(&name) {
                    Value::String(value.clone())
                } else if let Some(value) = self.params.get(&name) {
                    Value::String(value.clone())
                } else {
                    Value::String(format!("ref:{name}"))
                }
            }
            "Fn::GetAtt" => {
                let key = match arg {
                    Value::Sequence(parts) => parts
                        .iter()
                        .map(text)
                        .collect::<Result<Vec<_>>>()?
                        .join("."),
                    other => text(other)?,
                };
                Value::String(format!("getatt:{key}"))
            }
            "Fn::Sub" => {
                // The variables of `!Sub [text, {name: value}]` and the pseudo parameters
                // given a value are substituted; every other `${...}` stays as written.
                let (body, variables) = match arg {
                    Value::Sequence(parts) => (
                        parts.first().context("!Sub text")?,
                        parts.get(1).and_then(Value::as_mapping),
                    ),
                    other => (other, None),
                };
                let mut out = text(body)?;
                for (name, value) in variables.into_iter().flatten() {
                    let name = text(name)?;
                    let value = text(&self.eval(value)?)?;
                    out = out.replace(&format!("${{{name}}}"), &value);
                }
                for (name, value) in &self.pseudo {
                    out = out.replace(&format!("${{{name}}}"), value);
                }
                Value::String(format!("sub:{out}"))
            }
            "Condition" => Value::Bool(self.condition(&text(arg)?)?),
            "Fn::Join" | "Fn::Split" => self.join_or_split(function, arg)?,
            "Fn::If" => {
                let parts = arg
                    .as_sequence()
                    .filter(|p| p.len() == 3)
                    .context("!If takes three items")?;
                let branch = if self.condition(&text(&parts[0])?)? {
                    &parts[1]
                } else {
                    &parts[2]
                };
                self.eval(branch)?
            }
            "Fn::Equals" => {
                let parts = arg
                    .as_sequence()
                    .filter(|p| p.len() == 2)
                    .context("!Equals takes two items")?;
                Value::Bool(scalar(&self.eval(&parts[0])?) == scalar(&self.eval(&parts[1])?))
            }
            "Fn::And" => {
                let parts = arg.as_sequence().context("!And takes a list")?;
                let mut all = true;
                for part in parts {
                    all &= self
                        .eval(part)?
                        .as_bool()
                        .context("!And of a non-boolean")?;
                }
                Value::Bool(all)
            }
            "Fn::Not" => {
                let inner = arg
                    .as_sequence()
                    .and_then(|p| p.first())
                    .context("!Not takes one item")?;
                Value::Bool(
                    !self
                        .eval(inner)?
                        .as_bool()
                        .context("!Not of a non-boolean")?,
                )
            }
            other => bail!("{other} is not understood by this test; extend Template::call"),
        })
    }

    /// `!Join` and `!Split`, as the queue policy's list of senders uses them.
    fn join_or_split(&self, function: &str, arg: &Value) -> Result<Value> {
        let text = |v: &Value| scalar(v).with_context(|| format!("{function}: {v:?}"));
        let parts = arg
            .as_sequence()
            .filter(|p| p.len() == 2)
            .with_context(|| format!("{function} takes a delimiter and a value"))?;
        let delimiter = text(&parts[0])?;
        let value = self.eval(&parts[1])?;
        if function == "Fn::Split" {
            return Ok(Value::Sequence(
                text(&value)?
                    .split(delimiter.as_str())
                    .map(|s| Value::String(s.to_owned()))
                    .collect(),
            ));
        }
        // A CommaDelimitedList parameter evaluates to its text, one item here.
        let items = match value {
            Value::Sequence(items) => items,
            other => vec![other],
        };
        let items = items.iter().map(text).collect::<Result<Vec<_>>>()?;
        Ok(Value::String(items.join(&delimiter)))
    }

    /// A numeric property, `!Ref Param` evaluated to the parameter's value.
    fn number(&self, value: Option<&Value>, what: &str) -> Result<u64> {
        let value = value.with_context(|| format!("{what} is not set"))?;
        scalar(&self.eval(value)?)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("{what} is not a whole number: {value:?}"))
    }
}

const NO_VALUE: &str = "\0AWS::NoValue";

fn is_no_value(value: &Value) -> bool {
    value.as_str() == Some(NO_VALUE)
}

pub(crate) fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub(crate) fn strings(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::Sequence(items)) => items.iter().filter_map(scalar).collect(),
        Some(other) => scalar(other).into_iter().collect(),
        None => Vec::new(),
    }
}

pub(crate) fn path<'a>(value: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(value, |v, k| v.get(*k))
}

/// Every (action, resource) pair a function role's inline policies allow. Denies and
/// wildcard resources other than X-Ray's are refused outright.
pub(crate) fn role_grants(t: &Template, role: &str) -> Result<BTreeSet<(String, String)>> {
    role_grants_trusting(t, role, "lambda.amazonaws.com")
}

/// [`role_grants`] of a role only `service` may assume.
pub(crate) fn role_grants_trusting(
    t: &Template,
    role: &str,
    service: &str,
) -> Result<BTreeSet<(String, String)>> {
    let props = t.props(role)?;
    ensure!(
        props.get("ManagedPolicyArns").is_none(),
        "{role}: managed policies grant more than the template shows"
    );
    let trust = path(&props, &["AssumeRolePolicyDocument", "Statement"])
        .and_then(Value::as_sequence)
        .with_context(|| format!("{role} has no trust policy"))?;
    ensure!(
        trust.len() == 1
            && strings(path(&trust[0], &["Principal", "Service"])) == [service]
            && path(&trust[0], &["Principal", "AWS"]).is_none(),
        "{role}: only {service} may assume it"
    );
    let mut grants = BTreeSet::new();
    let policies = props
        .get("Policies")
        .and_then(Value::as_sequence)
        .with_context(|| format!("{role} has no inline Policies"))?;
    for policy in policies {
        let statements = path(policy, &["PolicyDocument", "Statement"])
            .and_then(Value::as_sequence)
            .with_context(|| format!("{role}: policy without statements"))?;
        for statement in statements {
            ensure!(
                statement.get("Effect").and_then(Value::as_str) == Some("Allow"),
                "{role}: only Allow statements are expected"
            );
            ensure!(
                statement.get("NotAction").is_none() && statement.get("NotResource").is_none(),
                "{role}: NotAction/NotResource widen a grant"
            );
            for action in strings(statement.get("Action")) {
                ensure!(!action.contains('*'), "{role}: wildcard action {action}");
                for resource in strings(statement.get("Resource")) {
                    ensure!(
                        resource != "*" || action.starts_with("xray:"),
                        "{role}: {action} on every resource"
                    );
                    grants.insert((action.clone(), resource));
                }
            }
        }
    }
    Ok(grants)
}

/// The statements of a role's inline policies, evaluated (conditions and all).
pub(crate) fn role_statements(t: &Template, role: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for policy in t
        .props(role)?
        .get("Policies")
        .and_then(Value::as_sequence)
        .with_context(|| format!("{role} has no inline Policies"))?
    {
        out.extend(
            path(policy, &["PolicyDocument", "Statement"])
                .and_then(Value::as_sequence)
                .with_context(|| format!("{role}: policy without statements"))?
                .iter()
                .cloned(),
        );
    }
    Ok(out)
}

/// The actions that write or delete a DynamoDB item.
const DYNAMODB_WRITES: [&str; 5] = [
    "dynamodb:PutItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:TransactWriteItems",
];

fn check_function(t: &Template, id: &str, binary: &str, role: &str) -> Result<Value> {
    let resource = t.resource(id)?;
    let props = t.props(id)?;
    ensure!(
        resource.get("Type").and_then(Value::as_str) == Some("AWS::Serverless::Function"),
        "{id} is not a SAM function"
    );
    ensure!(
        path(&resource, &["Metadata", "BuildMethod"]).and_then(Value::as_str)
            == Some("rust-cargolambda"),
        "{id}: BuildMethod must be rust-cargolambda"
    );
    ensure!(
        path(&resource, &["Metadata", "BuildProperties", "Binary"]).and_then(Value::as_str)
            == Some(binary),
        "{id}: BuildProperties.Binary must be {binary}"
    );
    ensure!(
        props.get("Runtime").and_then(Value::as_str) == Some("provided.al2023"),
        "{id}: Runtime must be provided.al2023"
    );
    ensure!(
        strings(props.get("Architectures")) == ["arm64"],
        "{id}: Architectures must follow the Architecture parameter (default arm64)"
    );
    ensure!(
        scalar(props.get("Role").context("Role")?) == Some(format!("getatt:{role}.Arn")),
        "{id}: must use {role}, not a role SAM generates"
    );
    ensure!(
        props.get("Policies").is_none(),
        "{id}: Policies would make SAM generate a broader role"
    );
    // Logs go to a log group of the template that has a retention.
    let group = scalar(path(&props, &["LoggingConfig", "LogGroup"]).context("LogGroup")?)
        .and_then(|g| g.strip_prefix("ref:").map(str::to_owned))
        .with_context(|| format!("{id}: LoggingConfig.LogGroup must name a template log group"))?;
    t.number(
        t.props(&group)?.get("RetentionInDays"),
        &format!("{group}.RetentionInDays"),
    )?;
    Ok(props)
}

fn check_ingest_event(t: &Template) -> Result<()> {
    let props = check_function(t, "IngestFunction", "ingest", "IngestRole")?;
    let events = props
        .get("Events")
        .and_then(Value::as_mapping)
        .context("IngestFunction has no Events")?;
    let sqs: Vec<&Value> = events
        .values()
        .filter(|e| e.get("Type").and_then(Value::as_str) == Some("SQS"))
        .collect();
    ensure!(sqs.len() == 1, "IngestFunction needs exactly one SQS event");
    let event = sqs[0].get("Properties").context("SQS event Properties")?;
    ensure!(
        strings(event.get("Queue")) == ["getatt:IngestQueue.Arn"],
        "the SQS event must read IngestQueue"
    );
    ensure!(
        strings(event.get("FunctionResponseTypes")) == ["ReportBatchItemFailures"],
        "FunctionResponseTypes must be [ReportBatchItemFailures] (partial batch responses)"
    );
    let batch = t.number(event.get("BatchSize"), "BatchSize")?;
    let window = t.number(
        event.get("MaximumBatchingWindowInSeconds"),
        "MaximumBatchingWindowInSeconds",
    )?;
    ensure!(
        batch <= 10 || window >= 1,
        "a BatchSize above 10 needs a batching window of at least 1 s"
    );
    let concurrency = t.number(
        path(event, &["ScalingConfig", "MaximumConcurrency"]),
        "ScalingConfig.MaximumConcurrency",
    )?;
    ensure!(
        (2..=1000).contains(&concurrency),
        "MaximumConcurrency {concurrency} outside 2..=1000"
    );
    // The ingest measures arrival rates by the batch the mapping gathers: its settings
    // are the mapping's.
    let env = path(&props, &["Environment", "Variables"]).context("ingest environment")?;
    ensure!(
        t.number(env.get("BATCH_SIZE"), "BATCH_SIZE")? == batch
            && t.number(env.get("BATCHING_WINDOW_SECS"), "BATCHING_WINDOW_SECS")? == window,
        "the ingest's BATCH_SIZE and BATCHING_WINDOW_SECS must be the event source's"
    );
    // The three knobs are parameters, not constants (the slab parameters' with
    // Slabs=on).
    let raw_event = path(
        &t.doc,
        &["Resources", "IngestFunction", "Properties", "Events"],
    )
    .and_then(Value::as_mapping)
    .and_then(|m| m.values().next())
    .and_then(|e| e.get("Properties"))
    .context("raw SQS event")?;
    for key in [
        &["BatchSize"][..],
        &["MaximumBatchingWindowInSeconds"],
        &["ScalingConfig", "MaximumConcurrency"],
    ] {
        let raw = path(raw_event, key).context("raw event key")?;
        let is_ref = |v: &Value| matches!(v, Value::Tagged(tagged) if tagged.tag == "Ref");
        let by_slabs = match raw {
            Value::Tagged(tagged) if tagged.tag == "If" => {
                tagged.value.as_sequence().is_some_and(|p| {
                    p.len() == 3
                        && p[0].as_str() == Some("SlabsOn")
                        && is_ref(&p[1])
                        && is_ref(&p[2])
                })
            }
            _ => false,
        };
        ensure!(
            is_ref(raw) || by_slabs,
            "{} must be a parameter, or with Slabs=on another",
            key.join(".")
        );
    }
    Ok(())
}

/// The ingest keeps its share of the account's concurrency whatever the query API is
/// asked: its reserved concurrency covers the event source mapping's most invocations
/// at once, and the query function's reservation caps it.
fn check_reserved_concurrency(t: &Template) -> Result<()> {
    let ingest = t.props("IngestFunction")?;
    let reserved = t.number(
        ingest.get("ReservedConcurrentExecutions"),
        "IngestFunction.ReservedConcurrentExecutions",
    )?;
    let event = ingest
        .get("Events")
        .and_then(Value::as_mapping)
        .and_then(|m| m.values().next())
        .and_then(|e| e.get("Properties"))
        .context("the ingest's SQS event")?;
    let most = t.number(
        path(event, &["ScalingConfig", "MaximumConcurrency"]),
        "ScalingConfig.MaximumConcurrency",
    )?;
    ensure!(
        reserved >= most,
        "the ingest reserves {reserved} executions, fewer than the {most} its queue may run at once"
    );
    let query = t.props("QueryFunction")?;
    let capped = t.number(
        query.get("ReservedConcurrentExecutions"),
        "QueryFunction.ReservedConcurrentExecutions",
    )?;
    ensure!(
        capped >= 1,
        "the query function reserves no execution at all"
    );
    Ok(())
}

fn check_redrive(t: &Template) -> Result<()> {
    let queue = t.props("IngestQueue")?;
    let policy = queue
        .get("RedrivePolicy")
        .context("IngestQueue has no RedrivePolicy")?;
    ensure!(
        strings(policy.get("deadLetterTargetArn")) == ["getatt:IngestDLQ.Arn"],
        "IngestQueue must redrive to IngestDLQ"
    );
    let count = t.number(policy.get("maxReceiveCount"), "maxReceiveCount")?;
    ensure!(count == 5, "maxReceiveCount is {count}, promised 5");
    Ok(())
}

fn check_visibility_timeout(t: &Template) -> Result<()> {
    let visibility = t.number(
        t.props("IngestQueue")?.get("VisibilityTimeout"),
        "IngestQueue.VisibilityTimeout",
    )?;
    let timeout = t.number(
        t.props("IngestFunction")?.get("Timeout"),
        "IngestFunction.Timeout",
    )?;
    let window = t.number(
        path(
            &t.props("IngestFunction")?,
            &[
                "Events",
                "Queue",
                "Properties",
                "MaximumBatchingWindowInSeconds",
            ],
        ),
        "MaximumBatchingWindowInSeconds",
    )?;
    ensure!(
        visibility >= 6 * timeout + window,
        "visibility timeout {visibility} < 6 x {timeout} + {window}"
    );
    Ok(())
}

/// SQS's default retention when a queue does not state one.
const SQS_DEFAULT_RETENTION: u64 = 345_600;

fn check_dlq_retention(t: &Template) -> Result<()> {
    let retention = |id: &str| -> Result<u64> {
        let props = t.props(id)?;
        match props.get("MessageRetentionPeriod") {
            None => Ok(SQS_DEFAULT_RETENTION),
            some => t.number(some, &format!("{id}.MessageRetentionPeriod")),
        }
    };
    let (source, dlq) = (retention("IngestQueue")?, retention("IngestDLQ")?);
    ensure!(
        dlq > source,
        "DLQ retention {dlq} s must exceed the source's {source} s"
    );
    Ok(())
}

fn check_queue_encryption(t: &Template) -> Result<()> {
    let queues = t.ids_of("AWS::SQS::Queue")?;
    ensure!(queues.len() >= 2, "expected the queue and its DLQ");
    for id in queues {
        let props = t.props(&id)?;
        let managed = props.get("SqsManagedSseEnabled").and_then(scalar) == Some("true".into());
        ensure!(
            managed || props.get("KmsMasterKeyId").is_some(),
            "{id} is not encrypted at rest"
        );
    }
    Ok(())
}

/// The ingest's role never reads or deletes readings. That each grant is needed, and
/// each call allowed, is proven by running the code (`iam.rs`).
fn check_ingest_role(t: &Template) -> Result<()> {
    let grants = role_grants(t, "IngestRole")?;
    for (action, resource) in &grants {
        let reads_or_deletes = [
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",
            "dynamodb:Query",
            "dynamodb:Scan",
            "dynamodb:DeleteItem",
        ]
        .contains(&action.as_str());
        ensure!(
            !(reads_or_deletes && resource == "getatt:ReadingsTable.Arn"),
            "IngestRole may {action} the readings table"
        );
    }
    // Of the derived items, the ingest may only put late marks (`late#{part}`,
    // store::rollup::keys::late_mark) and read the watermark's partition (`seal`),
    // held to them by the partition keys IAM sees.
    for statement in role_statements(t, "IngestRole")? {
        if !strings(statement.get("Resource"))
            .iter()
            .any(|r| r.contains("RollupTable"))
        {
            continue;
        }
        let condition = statement.get("Condition").and_then(Value::as_mapping);
        let leading = strings(path(
            &statement,
            &[
                "Condition",
                "ForAllValues:StringLike",
                "dynamodb:LeadingKeys",
            ],
        ));
        let action = strings(statement.get("Action"));
        let held = strings(statement.get("Resource")) == ["getatt:RollupTable.Arn"]
            && condition.is_some_and(|c| c.len() == 1);
        // Late marks put, and the sealer's horizon read from the `seal` partition
        // (store::rollup::horizon), nothing else.
        ensure!(
            held && ((action == ["dynamodb:PutItem"] && leading == ["late#*"])
                || (action == ["dynamodb:GetItem"] && leading == ["seal"])),
            "IngestRole may only put late marks on RollupTable (dynamodb:PutItem under \
             ForAllValues:StringLike dynamodb:LeadingKeys [late#*]) and read the sealer's \
             watermark (dynamodb:GetItem under [seal]): {statement:?}"
        );
    }
    Ok(())
}

/// The query role under both settings of `TimeIndex`.
fn check_query_role(t: &Template) -> Result<()> {
    for setting in ["enabled", "disabled"] {
        let t = Template::parse(&yaml_serde::to_string(&t.doc)?, &[("TimeIndex", setting)])?;
        check_query_role_with(&t).with_context(|| format!("with TimeIndex={setting}"))?;
    }
    Ok(())
}

fn check_query_role_with(t: &Template) -> Result<()> {
    check_function(t, "QueryFunction", "query", "QueryRole")?;
    let grants = role_grants(t, "QueryRole")?;
    // Reads of the time index are scoped to that index, and only when it exists.
    let index = format!("sub:${{ReadingsTable.Arn}}/index/{TIME_INDEX}");
    let index_grants: Vec<&(String, String)> = grants
        .iter()
        .filter(|(_, r)| r.contains("/index/"))
        .collect();
    if t.condition("HasTimeIndex")? {
        ensure!(
            index_grants == [&("dynamodb:Query".to_owned(), index)],
            "QueryRole must Query the time index alone: {index_grants:?}"
        );
    } else {
        ensure!(
            index_grants.is_empty(),
            "QueryRole reads an index that does not exist: {index_grants:?}"
        );
    }
    for (action, _) in &grants {
        ensure!(
            !action.starts_with("sqs:") && !DYNAMODB_WRITES.contains(&action.as_str()),
            "QueryRole may {action}: the query API never writes"
        );
    }
    // The derived items are read, never written: the sealer alone writes them. The
    // function is given the stack's rollups table, and its role reads it: the watermark,
    // directory entries and device-hours by key, the directory, a device's hour
    // summaries and the fleet's hours by Query (GET /devices, GET /stats and GET /series
    // answer 501 without the table; a device's stats and series read its sealed cells).
    let rollups = "getatt:RollupTable.Arn";
    for (action, resource) in &grants {
        ensure!(
            resource != rollups
                || [
                    "dynamodb:GetItem",
                    "dynamodb:Query",
                    "dynamodb:BatchGetItem"
                ]
                .contains(&action.as_str()),
            "QueryRole may {action} RollupTable: the query reads derived items only"
        );
    }
    for action in ["dynamodb:GetItem", "dynamodb:Query"] {
        ensure!(
            grants.contains(&(action.to_owned(), rollups.to_owned())),
            "QueryRole may not {action} RollupTable: GET /devices, the stats and the series \
             read it"
        );
    }
    // The cursor key is the generated secret, read through its ARN.
    let env = path(&t.props("QueryFunction")?, &["Environment", "Variables"])
        .cloned()
        .context("QueryFunction environment")?;
    ensure!(
        env.get("CURSOR_SECRET_ARN").and_then(scalar) == Some("ref:CursorSecret".into()),
        "QueryFunction must read the cursor key from CursorSecret"
    );
    ensure!(
        env.get("CURSOR_KEY").is_none(),
        "no inline cursor key in the environment"
    );
    let table = env.get("ROLLUP_TABLE").and_then(scalar);
    ensure!(
        table.as_deref() == Some("ref:RollupTable"),
        "QueryFunction's ROLLUP_TABLE must be RollupTable (GET /devices, the stats and \
         the series read it; GET /devices, GET /stats and GET /series answer 501 without \
         it), is {table:?}"
    );
    ensure!(
        t.props("CursorSecret")?
            .get("GenerateSecretString")
            .is_some(),
        "CursorSecret must be generated"
    );
    Ok(())
}

/// Every endpoint of the query API.
pub(crate) const ROUTES: [&str; 10] = [
    "GET /devices/{device_id}/readings",
    "GET /devices/{device_id}/readings/{event_id}",
    "GET /readings",
    "GET /devices/{device_id}/stats",
    "GET /devices/{device_id}/shards",
    "GET /devices/{device_id}/latest",
    "GET /devices",
    "GET /stats",
    "GET /devices/{device_id}/series",
    "GET /series",
];

fn check_api(t: &Template) -> Result<()> {
    let jwt = t.params.get("ApiAuth").map(String::as_str) == Some("JWT");
    let mut keys = BTreeSet::new();
    for id in t.ids_of("AWS::ApiGatewayV2::Route")? {
        let route = t.props(&id)?;
        let key = route
            .get("RouteKey")
            .and_then(scalar)
            .with_context(|| format!("{id}: RouteKey"))?;
        let auth = route.get("AuthorizationType").and_then(scalar);
        if jwt {
            ensure!(
                auth.as_deref() == Some("JWT")
                    && route.get("AuthorizerId").and_then(scalar)
                        == Some("ref:JwtAuthorizer".into()),
                "{key}: must use the JWT authorizer when ApiAuth is JWT"
            );
        } else {
            ensure!(
                auth.as_deref() == Some("AWS_IAM"),
                "{key}: AuthorizationType must be AWS_IAM by default, is {auth:?}"
            );
        }
        ensure!(
            route.get("Target").and_then(scalar)
                == Some("sub:integrations/${QueryIntegration}".into()),
            "{key}: must target QueryIntegration"
        );
        let scopes = strings(route.get("AuthorizationScopes"));
        ensure!(
            scopes
                == if jwt {
                    vec!["shardline/read".to_owned()]
                } else {
                    vec![]
                },
            "{key}: a token must carry the read scope when ApiAuth is JWT, got {scopes:?}"
        );
        keys.insert(key);
    }
    // The function scopes each JWT caller's reads by the device claim; under IAM the
    // policy is the scope, and no claim is read.
    let query = t.props("QueryFunction")?;
    let claim = path(&query, &["Environment", "Variables", "READ_SCOPE_CLAIM"]).and_then(scalar);
    let expected = if jwt { "shardline_devices" } else { "" };
    ensure!(
        claim.as_deref() == Some(expected),
        "QueryFunction's READ_SCOPE_CLAIM must be {expected:?}, is {claim:?}"
    );
    let expected: BTreeSet<String> = ROUTES.iter().map(|r| (*r).to_owned()).collect();
    ensure!(
        keys == expected,
        "routes differ: extra {:?}, missing {:?}",
        keys.difference(&expected).collect::<Vec<_>>(),
        expected.difference(&keys).collect::<Vec<_>>()
    );
    ensure!(
        t.ids_of("AWS::ApiGatewayV2::Authorizer")?.is_empty() != jwt,
        "the JWT authorizer must exist exactly when ApiAuth is JWT"
    );
    let integration = t.props("QueryIntegration")?;
    ensure!(
        integration.get("IntegrationUri").and_then(scalar)
            == Some("getatt:QueryFunction.Arn".into()),
        "QueryIntegration must invoke QueryFunction"
    );
    let stages = t.ids_of("AWS::ApiGatewayV2::Stage")?;
    ensure!(stages.len() == 1, "expected one API stage");
    let stage = t.props(&stages[0])?;
    let settings = stage
        .get("DefaultRouteSettings")
        .context("stage has no DefaultRouteSettings")?;
    let burst = t.number(settings.get("ThrottlingBurstLimit"), "ThrottlingBurstLimit")?;
    let rate = t.number(settings.get("ThrottlingRateLimit"), "ThrottlingRateLimit")?;
    ensure!(burst > 0 && rate > 0, "stage throttling must be set");
    ensure!(
        stage.get("AccessLogSettings").is_some(),
        "the stage must write access logs"
    );
    Ok(())
}

/// One metric an alarm watches: namespace, name and dimension values.
type Watched = (String, String, Vec<String>);

/// The metrics an alarm watches: its own, or each `MetricStat` of its metric math.
fn watched_by(alarm: &Value) -> Vec<(Option<String>, Watched)> {
    let one = |metric: &Value| -> Watched {
        let dimensions = metric
            .get("Dimensions")
            .and_then(Value::as_sequence)
            .map(|ds| {
                ds.iter()
                    .filter_map(|d| d.get("Value").and_then(scalar))
                    .collect()
            })
            .unwrap_or_default();
        (
            metric.get("Namespace").and_then(scalar).unwrap_or_default(),
            metric
                .get("MetricName")
                .and_then(scalar)
                .unwrap_or_default(),
            dimensions,
        )
    };
    match alarm.get("Metrics").and_then(Value::as_sequence) {
        None => vec![(None, one(alarm))],
        Some(metrics) => metrics
            .iter()
            .filter_map(|m| {
                let id = m.get("Id").and_then(scalar);
                path(m, &["MetricStat", "Metric"]).map(|metric| (id, one(metric)))
            })
            .collect(),
    }
}

/// The value of a metric-math expression of the form `a - b + FILL(c, 0) ...` over
/// `values` (a missing id is no data, which `FILL(x, 0)` makes 0).
fn evaluate(expression: &str, values: &BTreeMap<&str, f64>) -> Result<f64> {
    let mut total = 0.0;
    let mut sign = 1.0;
    let text = expression.replace(['(', ')', ','], " ");
    let mut tokens = text.split_whitespace();
    while let Some(token) = tokens.next() {
        match token {
            "+" => sign = 1.0,
            "-" => sign = -1.0,
            "FILL" => {
                let id = tokens.next().context("FILL without a metric")?;
                let fill: f64 = tokens.next().context("FILL without a value")?.parse()?;
                total += sign * values.get(id).copied().unwrap_or(fill);
            }
            id => {
                total += sign
                    * values
                        .get(id)
                        .copied()
                        .with_context(|| format!("{id} has no data and no FILL"))?;
            }
        }
    }
    Ok(total)
}

/// The metrics the functions' embedded-metric lines carry, with their dimension values.
fn emitted_metrics() -> Result<BTreeSet<(String, Vec<String>)>> {
    // A throttle, so that the per-reason line is emitted too.
    let report = ingest::Report {
        writes: store::WriteStats {
            throttles: [("TableWriteKeyRangeThroughputExceeded".to_owned(), 1)].into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let now = sharding::time::Timestamp::from_millis(0)?;
    // A sealer run with a watermark and a compaction progress, so that both lags are
    // emitted too.
    let run = sealer::RunReport {
        watermark_ms: Some(0),
        compacted_to_ms: Some(0),
        ..Default::default()
    };
    let mut lines = report.emf_lines(now);
    lines.push(sealer::metrics_line(&run, now));
    // A sealer run refused for the table's layout.
    lines.push(sealer::layout::metrics_line(now));
    let mut emitted = BTreeSet::new();
    for line in lines {
        let line: serde_json::Value = serde_json::from_str(&line)?;
        for directive in line["_aws"]["CloudWatchMetrics"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for dimensions in directive["Dimensions"].as_array().into_iter().flatten() {
                let values: Vec<String> = dimensions
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|d| d.as_str())
                    .filter_map(|d| line[d].as_str().map(str::to_owned))
                    .collect();
                for metric in directive["Metrics"].as_array().into_iter().flatten() {
                    if let Some(name) = metric["Name"].as_str() {
                        emitted.insert((name.to_owned(), values.clone()));
                    }
                }
            }
        }
    }
    Ok(emitted)
}

fn check_alarms(t: &Template) -> Result<()> {
    let emitted = emitted_metrics()?;
    let mut watched = BTreeSet::new();
    let mut errors_alarm = None;
    for id in t.ids_of("AWS::CloudWatch::Alarm")? {
        let alarm = t.props(&id)?;
        for (metric_id, (namespace, metric, dimensions)) in watched_by(&alarm) {
            // A custom metric that nothing emits leaves its alarm silent forever.
            if namespace == "Shardline" {
                ensure!(
                    emitted.contains(&(metric.clone(), dimensions.clone())),
                    "{id} watches Shardline {metric} {dimensions:?}, which no function emits"
                );
            }
            for value in &dimensions {
                watched.insert(format!("{namespace} {metric} {value}"));
            }
            if namespace == "AWS/Lambda"
                && metric == "Errors"
                && dimensions == ["ref:IngestFunction"]
            {
                errors_alarm = Some((id.clone(), alarm.clone(), metric_id));
            }
        }
    }
    for want in [
        "AWS/SQS ApproximateNumberOfMessagesVisible getatt:IngestDLQ.QueueName",
        "AWS/SQS ApproximateAgeOfOldestMessage getatt:IngestQueue.QueueName",
        "AWS/Lambda Errors ref:IngestFunction",
        "AWS/DynamoDB WriteThrottleEvents ref:ReadingsTable",
        "AWS/ApiGateway 5xx ref:HttpApi",
        "AWS/Lambda Duration ref:QueryFunction",
        "Shardline DlqSendFailures ingest",
        "Shardline Panics ingest",
        "AWS/Lambda Errors ref:SealerFunction",
        "Shardline SealLagSeconds sealer",
        "Shardline CompactionLagSeconds sealer",
        "Shardline DeviceHoursIsolated sealer",
    ] {
        ensure!(watched.contains(want), "no alarm on {want}");
    }
    // The errors alarm fires on an invocation that failed by itself, and not on the
    // ones the handler fails on purpose so that Lambda backs off (BackoffInvocations).
    let (id, alarm, errors_id) = errors_alarm.context("no alarm on the ingest's Errors")?;
    let errors_id = errors_id.with_context(|| {
        format!("{id} counts Lambda Errors alone, which include deliberate back-offs")
    })?;
    let metrics = alarm
        .get("Metrics")
        .and_then(Value::as_sequence)
        .context("metric math")?;
    let backoffs_id = metrics
        .iter()
        .find(|m| {
            path(m, &["MetricStat", "Metric", "MetricName"])
                .and_then(scalar)
                .as_deref()
                == Some("BackoffInvocations")
        })
        .and_then(|m| m.get("Id").and_then(scalar))
        .with_context(|| format!("{id} does not read BackoffInvocations"))?;
    let expression = metrics
        .iter()
        .find(|m| m.get("ReturnData").and_then(Value::as_bool) == Some(true))
        .and_then(|m| m.get("Expression").and_then(scalar))
        .with_context(|| format!("{id} returns no expression"))?;
    let threshold = t.number(alarm.get("Threshold"), "Threshold")? as f64;
    ensure!(
        alarm.get("ComparisonOperator").and_then(scalar).as_deref()
            == Some("GreaterThanOrEqualToThreshold"),
        "{id}: compare with GreaterThanOrEqualToThreshold"
    );
    let fires = |errors: Option<f64>, backoffs: Option<f64>| -> Result<bool> {
        let mut values = BTreeMap::new();
        if let Some(e) = errors {
            values.insert(errors_id.as_str(), e);
        }
        if let Some(b) = backoffs {
            values.insert(backoffs_id.as_str(), b);
        }
        Ok(evaluate(&expression, &values)? >= threshold)
    };
    ensure!(
        !fires(Some(12.0), Some(12.0))?,
        "{id} fires on invocations failed on purpose"
    );
    ensure!(
        fires(Some(13.0), Some(12.0))?,
        "{id} misses a crash among back-offs"
    );
    ensure!(
        fires(Some(1.0), None)?,
        "{id} misses a crash when nothing backed off"
    );
    ensure!(!fires(None, None)?, "{id} fires without data");
    Ok(())
}

/// Every `Shardline` metric the dashboard graphs is one a function emits, with those
/// dimensions: a graph of a metric nothing emits stays empty.
fn check_dashboard(t: &Template) -> Result<()> {
    let emitted = emitted_metrics()?;
    let body = t
        .props("Dashboard")?
        .get("DashboardBody")
        .and_then(scalar)
        .context("Dashboard has no DashboardBody")?;
    let body = body
        .strip_prefix("sub:")
        .context("DashboardBody is a !Sub")?;
    // Every ${...} of the !Sub as a number: the JSON stays JSON, in a string or not.
    let mut json = String::new();
    let mut rest = body;
    while let Some(at) = rest.find("${") {
        json.push_str(&rest[..at]);
        let end = rest[at..]
            .find('}')
            .context("an unclosed ${ in DashboardBody")?;
        json.push('0');
        rest = &rest[at + end + 1..];
    }
    json.push_str(rest);
    let dashboard: serde_json::Value =
        serde_json::from_str(&json).context("DashboardBody is not JSON")?;
    let mut graphed = 0;
    for widget in dashboard["widgets"].as_array().into_iter().flatten() {
        for row in widget["properties"]["metrics"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let row: Vec<&str> = row
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_str)
                .collect();
            if row.first() != Some(&"Shardline") {
                continue;
            }
            let name = row.get(1).context("a Shardline row without a metric")?;
            let values: Vec<String> = row[2..]
                .iter()
                .skip(1)
                .step_by(2)
                .map(|v| (*v).to_owned())
                .collect();
            ensure!(
                emitted.contains(&((*name).to_owned(), values.clone())),
                "the dashboard graphs Shardline {name} {values:?}, which no function emits"
            );
            graphed += 1;
        }
    }
    ensure!(graphed > 0, "the dashboard graphs no Shardline metric");
    Ok(())
}

fn check_tables(t: &Template) -> Result<()> {
    for id in ["ReadingsTable", "ShardsTable", "RollupTable"] {
        let props = t.props(id)?;
        ensure!(
            props.get("BillingMode").and_then(scalar) == Some("PAY_PER_REQUEST".into())
                && props.get("ProvisionedThroughput").is_none(),
            "{id}: on-demand by default"
        );
        for (keys, what) in [
            (
                &[
                    "PointInTimeRecoverySpecification",
                    "PointInTimeRecoveryEnabled",
                ][..],
                "point-in-time recovery",
            ),
            (
                &["ContributorInsightsSpecification", "Enabled"],
                "Contributor Insights",
            ),
            (&["SSESpecification", "SSEEnabled"], "encryption"),
            (
                &["DeletionProtectionEnabled"],
                "deletion protection (default)",
            ),
        ] {
            ensure!(
                path(&props, keys).and_then(scalar) == Some("true".into()),
                "{id}: {what} must be on"
            );
        }
    }
    for id in ["ReadingsTable", "RollupTable"] {
        let props = t.props(id)?;
        ensure!(
            path(&props, &["TimeToLiveSpecification", "AttributeName"]).and_then(scalar)
                == Some("ttl".into())
                && path(&props, &["TimeToLiveSpecification", "Enabled"]).and_then(scalar)
                    == Some("true".into()),
            "{id}: TTL on `ttl`"
        );
    }
    // The derived items' keys (store::rollup): `PK` and `SK`, both strings.
    let rollups = t.props("RollupTable")?;
    let keys: Vec<(String, String)> = rollups
        .get("KeySchema")
        .and_then(Value::as_sequence)
        .context("RollupTable KeySchema")?
        .iter()
        .filter_map(|k| Some((scalar(k.get("AttributeName")?)?, scalar(k.get("KeyType")?)?)))
        .collect();
    let types: BTreeMap<String, String> = rollups
        .get("AttributeDefinitions")
        .and_then(Value::as_sequence)
        .context("RollupTable AttributeDefinitions")?
        .iter()
        .filter_map(|d| {
            Some((
                scalar(d.get("AttributeName")?)?,
                scalar(d.get("AttributeType")?)?,
            ))
        })
        .collect();
    ensure!(
        keys == [
            ("PK".to_owned(), "HASH".to_owned()),
            ("SK".to_owned(), "RANGE".to_owned())
        ] && types
            == BTreeMap::from([
                ("PK".to_owned(), "S".to_owned()),
                ("SK".to_owned(), "S".to_owned())
            ]),
        "RollupTable: PK (S, HASH) and SK (S, RANGE), nothing else declared: {keys:?} {types:?}"
    );
    // The provisioned alternative really switches the mode.
    let provisioned = Template::parse(
        &yaml_serde::to_string(&t.doc)?,
        &[("BillingMode", "PROVISIONED")],
    )?;
    let props = provisioned.props("ReadingsTable")?;
    ensure!(
        props.get("ProvisionedThroughput").is_some(),
        "PROVISIONED must set ProvisionedThroughput"
    );
    Ok(())
}

/// The readings table's local secondary index that orders a shard's bucket by time.
const TIME_INDEX: &str = "by-time";

/// With `TimeIndex` enabled (disabled by default): the LSI with sort key `ts_ms` (a Number,
/// declared), every attribute projected (a page answers without a fetch per item), and
/// its name handed to the query function; disabled: none of it, and an empty name (the
/// function then reads whole buckets).
fn check_time_index(t: &Template) -> Result<()> {
    for (setting, on) in [("enabled", true), ("disabled", false)] {
        let t = Template::parse(&yaml_serde::to_string(&t.doc)?, &[("TimeIndex", setting)])?;
        let readings = t.props("ReadingsTable")?;
        let defines_ts = readings
            .get("AttributeDefinitions")
            .and_then(Value::as_sequence)
            .context("ReadingsTable AttributeDefinitions")?
            .iter()
            .any(|d| {
                d.get("AttributeName").and_then(scalar) == Some("ts_ms".into())
                    && d.get("AttributeType").and_then(scalar) == Some("N".into())
            });
        let env = path(&t.props("QueryFunction")?, &["Environment", "Variables"])
            .and_then(|v| v.get("READINGS_TIME_INDEX"))
            .and_then(scalar);
        if !on {
            ensure!(
                readings.get("LocalSecondaryIndexes").is_none() && !defines_ts,
                "TimeIndex=disabled must create no index and declare no ts_ms attribute"
            );
            ensure!(
                env.as_deref() == Some(""),
                "TimeIndex=disabled: READINGS_TIME_INDEX must be empty, got {env:?}"
            );
            continue;
        }
        let lsis = readings
            .get("LocalSecondaryIndexes")
            .and_then(Value::as_sequence)
            .context("ReadingsTable has no LocalSecondaryIndexes")?;
        ensure!(lsis.len() == 1, "one local secondary index expected");
        let lsi = &lsis[0];
        ensure!(
            lsi.get("IndexName").and_then(scalar) == Some(TIME_INDEX.into()),
            "the time index is named {TIME_INDEX}"
        );
        let keys: Vec<(String, String)> = lsi
            .get("KeySchema")
            .and_then(Value::as_sequence)
            .context("time index KeySchema")?
            .iter()
            .filter_map(|k| Some((scalar(k.get("AttributeName")?)?, scalar(k.get("KeyType")?)?)))
            .collect();
        ensure!(
            keys == [
                ("PK".to_owned(), "HASH".to_owned()),
                ("ts_ms".to_owned(), "RANGE".to_owned())
            ],
            "time index keys must be PK (HASH), ts_ms (RANGE): {keys:?}"
        );
        ensure!(
            path(lsi, &["Projection", "ProjectionType"]).and_then(scalar) == Some("ALL".into()),
            "time index must project ALL attributes"
        );
        ensure!(defines_ts, "ts_ms must be declared as a Number attribute");
        ensure!(
            env.as_deref() == Some(TIME_INDEX),
            "QueryFunction must get READINGS_TIME_INDEX={TIME_INDEX}, got {env:?}"
        );
    }
    Ok(())
}

fn check_outputs(t: &Template) -> Result<()> {
    let outputs = t.doc.get("Outputs").context("no Outputs")?;
    for (name, want) in [
        ("IngestQueueUrl", "ref:IngestQueue"),
        ("ReadingsTableName", "ref:ReadingsTable"),
        ("ShardsTableName", "ref:ShardsTable"),
        ("RollupTableName", "ref:RollupTable"),
        ("SealerFunctionName", "ref:SealerFunction"),
    ] {
        let value = outputs
            .get(name)
            .and_then(|o| o.get("Value"))
            .with_context(|| format!("no output {name}"))?;
        ensure!(
            scalar(&t.eval(value)?) == Some(want.into()),
            "output {name} must be {want}"
        );
    }
    let api = outputs
        .get("ApiUrl")
        .and_then(|o| o.get("Value"))
        .context("no output ApiUrl")?;
    ensure!(
        scalar(&t.eval(api)?).is_some_and(|s| s.contains("${HttpApi}.execute-api")),
        "output ApiUrl must point at HttpApi"
    );
    Ok(())
}

/// The template with the IoT front door on (and `extra` parameters).
fn with_front_door(t: &Template, extra: &[(&str, &str)]) -> Result<Template> {
    let mut overrides = vec![("IotFrontDoor", "enabled")];
    overrides.extend_from_slice(extra);
    Template::parse(&yaml_serde::to_string(&t.doc)?, &overrides)
}

/// The statements of the ingest queue's policy.
fn queue_statements(t: &Template) -> Result<Vec<Value>> {
    let props = t.props("IngestQueuePolicy")?;
    Ok(path(&props, &["PolicyDocument", "Statement"])
        .and_then(Value::as_sequence)
        .context("IngestQueuePolicy has no statements")?
        .clone())
}

/// A request as a policy's conditions see it: the caller's ARN and whether it is an
/// AWS service principal, the resource a service acts for and its account (each absent
/// from a request that carries none), the action, the resource's ARN, and whether it
/// came over TLS.
#[derive(Debug, Clone, Copy)]
struct Request<'a> {
    principal_arn: Option<&'a str>,
    is_aws_service: Option<bool>,
    source_arn: Option<&'a str>,
    source_account: Option<&'a str>,
    action: &'a str,
    resource: &'a str,
    secure: bool,
}

impl<'a> Request<'a> {
    /// `sqs:SendMessage` over TLS by the IAM principal `arn`.
    fn send_by(arn: &'a str, queue: &'a str) -> Self {
        Self {
            principal_arn: Some(arn),
            is_aws_service: Some(false),
            source_arn: None,
            source_account: None,
            action: "sqs:SendMessage",
            resource: queue,
            secure: true,
        }
    }

    /// The value of a condition key, as text; `None` when the request has none.
    fn key(&self, key: &str) -> Result<Option<String>> {
        Ok(match key {
            "aws:PrincipalArn" => self.principal_arn.map(str::to_owned),
            "aws:PrincipalIsAWSService" => self.is_aws_service.map(|b| b.to_string()),
            "aws:SecureTransport" => Some(self.secure.to_string()),
            "aws:SourceArn" => self.source_arn.map(str::to_owned),
            "aws:SourceAccount" => self.source_account.map(str::to_owned),
            other => bail!("condition key {other} is not understood here; extend Request::key"),
        })
    }
}

/// `pattern` with `*` matching any run of characters (IAM's ARN and action matching).
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            text.starts_with(head)
                && (0..=text.len() - head.len())
                    .filter(|&i| text.is_char_boundary(head.len() + i))
                    .any(|i| glob(rest, &text[head.len() + i..]))
        }
    }
}

/// Whether one condition operator holds for `request`: a value list matches when any
/// value does; a negated operator holds when the key is absent, a positive one not.
fn condition_holds(
    operator: &str,
    key: &str,
    values: &[String],
    request: &Request,
) -> Result<bool> {
    let actual = request.key(key)?;
    let any = |matches: &dyn Fn(&str, &str) -> bool| {
        actual
            .as_deref()
            .is_some_and(|a| values.iter().any(|v| matches(v, a)))
    };
    Ok(match operator {
        "ArnEquals" | "ArnLike" => any(&glob),
        "ArnNotEquals" | "ArnNotLike" => actual.is_none() || !any(&glob),
        "StringEquals" => any(&|v, a| v == a),
        "StringNotEquals" => actual.is_none() || !any(&|v, a| v == a),
        "Bool" => any(&|v, a| v.eq_ignore_ascii_case(a)),
        other => bail!("condition operator {other} is not understood here; extend condition_holds"),
    })
}

/// Whether an explicit Deny of `statements` (a resource policy, evaluated) applies to
/// `request`: its principal, action and resource match, and every condition holds.
fn denied(statements: &[Value], request: &Request) -> Result<bool> {
    for statement in statements {
        if statement.get("Effect").and_then(scalar).as_deref() != Some("Deny") {
            continue;
        }
        ensure!(
            statement.get("Principal").and_then(scalar).as_deref() == Some("*"),
            "a Deny for some principals only is not understood here: {statement:?}"
        );
        ensure!(
            statement.get("NotAction").is_none() && statement.get("NotResource").is_none(),
            "NotAction/NotResource are not understood here"
        );
        let matches = |field: &str, what: &str| {
            strings(statement.get(field))
                .iter()
                .any(|pattern| glob(pattern, what))
        };
        if !matches("Action", request.action) || !matches("Resource", request.resource) {
            continue;
        }
        if conditions_hold(statement, request)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether every condition of `statement` holds for `request` (none: true).
fn conditions_hold(statement: &Value, request: &Request) -> Result<bool> {
    let mut holds = true;
    if let Some(conditions) = statement.get("Condition") {
        let conditions = conditions
            .as_mapping()
            .context("a Condition that is no map")?;
        for (operator, keys) in conditions {
            let operator = operator.as_str().context("condition operator")?;
            for (key, values) in keys.as_mapping().context("condition keys")? {
                let key = key.as_str().context("condition key")?;
                holds &= condition_holds(operator, key, &strings(Some(values)), request)?;
            }
        }
    }
    Ok(holds)
}

/// With the front door on (docs/reliability.md scenario 49), the DLQ takes
/// `sqs:SendMessage` from the ingest's role (its dead letters) and the rule's (its error
/// action) alone: a publisher named in QueuePublisherArns, or any other IAM principal,
/// is denied, over TLS or not. SQS's own dead-lettering, a move with no principal's
/// request or, were it one, a request of SQS's service principal, is not denied, and
/// the queue's redrive still names the DLQ. Without the front door the DLQ is as before
/// (TLS only).
fn check_dlq_senders(t: &Template) -> Result<()> {
    let dlq = "getatt:IngestDLQ.Arn";
    let publisher = "arn:aws:iam::123456789012:role/gateway";
    let on = with_front_door(t, &[("QueuePublisherArns", publisher)])?;
    let statements = queue_statements(&on)?;
    let stranger = "arn:aws:iam::123456789012:role/anyone";
    for (who, request, expected) in [
        (
            "the ingest's role",
            Request::send_by("getatt:IngestRole.Arn", dlq),
            false,
        ),
        (
            "the rule's role",
            Request::send_by("getatt:IotRuleRole.Arn", dlq),
            false,
        ),
        ("a named publisher", Request::send_by(publisher, dlq), true),
        (
            "another IAM principal",
            Request::send_by(stranger, dlq),
            true,
        ),
        (
            "the ingest's role without TLS",
            Request {
                secure: false,
                ..Request::send_by("getatt:IngestRole.Arn", dlq)
            },
            true,
        ),
        (
            "SQS's dead-lettering, no principal's request",
            Request {
                principal_arn: None,
                is_aws_service: None,
                ..Request::send_by("", dlq)
            },
            false,
        ),
        (
            "SQS's dead-lettering, as its service principal",
            Request {
                principal_arn: None,
                is_aws_service: Some(true),
                ..Request::send_by("", dlq)
            },
            false,
        ),
    ] {
        ensure!(
            denied(&statements, &request)? == expected,
            "with the front door on, SendMessage to the DLQ by {who} must {}be denied",
            if expected { "" } else { "not " }
        );
    }
    // The named publisher still sends to the ingest queue: the DLQ's door is its own.
    ensure!(
        !denied(
            &statements,
            &Request::send_by(publisher, "getatt:IngestQueue.Arn")
        )?,
        "the DLQ's statement must not close the ingest queue to its named publishers"
    );
    let redrive = path(
        &on.props("IngestQueue")?,
        &["RedrivePolicy", "deadLetterTargetArn"],
    )
    .and_then(scalar);
    ensure!(
        redrive.as_deref() == Some(dlq),
        "the ingest queue's redrive must still move messages to the DLQ: {redrive:?}"
    );
    let off = queue_statements(t)?;
    ensure!(
        !denied(&off, &Request::send_by(stranger, dlq))?,
        "without the front door the DLQ's senders are IAM's to say, as before"
    );
    Ok(())
}

/// The documented redrive (docs/operations.md, scenario 55) passes the queue policy: a
/// principal that assumes `DlqRedriveRole` (trusted by the account alone, so the
/// account's IAM says who) may run a message move task from the DLQ and send to the
/// ingest queue, and nothing else: it may not plant a message in the DLQ, and the role
/// exists only with the front door (without it the queue's senders are IAM's to say).
fn check_dlq_redrive(t: &Template) -> Result<()> {
    let on = with_front_door(t, &[])?;
    let role = "getatt:DlqRedriveRole.Arn";
    let statements = queue_statements(&on)?;
    ensure!(
        !denied(
            &statements,
            &Request::send_by(role, "getatt:IngestQueue.Arn")
        )?,
        "the queue policy must let DlqRedriveRole's move task send to the ingest queue"
    );
    ensure!(
        denied(&statements, &Request::send_by(role, "getatt:IngestDLQ.Arn"))?,
        "DlqRedriveRole must not send to the DLQ"
    );
    let props = on.props("DlqRedriveRole")?;
    let trust = path(&props, &["AssumeRolePolicyDocument", "Statement"])
        .and_then(Value::as_sequence)
        .context("DlqRedriveRole has no trust policy")?;
    let principal = strings(trust.first().and_then(|s| path(s, &["Principal", "AWS"])));
    ensure!(
        trust.len() == 1
            && principal.len() == 1
            && principal[0].ends_with(":iam::${AWS::AccountId}:root")
            && path(&trust[0], &["Principal", "Service"]).is_none(),
        "DlqRedriveRole is assumed by the account's principals alone: {trust:?}"
    );
    let mut grants = BTreeSet::new();
    for statement in role_statements(&on, "DlqRedriveRole")? {
        for action in strings(statement.get("Action")) {
            for resource in strings(statement.get("Resource")) {
                grants.insert((action.clone(), resource));
            }
        }
    }
    let dlq = "getatt:IngestDLQ.Arn";
    let queue = "getatt:IngestQueue.Arn";
    let expected: BTreeSet<(String, String)> = [
        ("sqs:StartMessageMoveTask", dlq),
        ("sqs:ListMessageMoveTasks", dlq),
        ("sqs:CancelMessageMoveTask", dlq),
        ("sqs:ReceiveMessage", dlq),
        ("sqs:DeleteMessage", dlq),
        ("sqs:GetQueueAttributes", dlq),
        ("sqs:SendMessage", queue),
        ("sqs:GetQueueAttributes", queue),
    ]
    .into_iter()
    .map(|(a, r)| (a.to_owned(), r.to_owned()))
    .collect();
    ensure!(
        grants == expected,
        "DlqRedriveRole may move the DLQ's messages to the ingest queue and no more: {grants:?}"
    );
    let output = path(&on.doc, &["Outputs", "DlqRedriveRoleArn", "Value"])
        .and_then(|v| scalar(&on.eval(v).ok()?));
    ensure!(
        output.as_deref() == Some(role),
        "the stack must output DlqRedriveRoleArn: {output:?}"
    );
    ensure!(
        !t.ids_of("AWS::IAM::Role")?
            .iter()
            .any(|r| r == "DlqRedriveRole"),
        "DlqRedriveRole exists with the front door off"
    );
    Ok(())
}

/// The key that seals the ingest's dead letters of the rule's messages (scenario 55)
/// is a secret of the stack with the front door, passed to the ingest as
/// `FRONT_DOOR_SECRET_ARN` and readable by the ingest's role alone.
fn check_front_door_key(t: &Template) -> Result<()> {
    let on = with_front_door(t, &[])?;
    let secret = "ref:FrontDoorSecret";
    ensure!(
        on.ids_of("AWS::SecretsManager::Secret")?
            .iter()
            .any(|s| s == "FrontDoorSecret"),
        "no FrontDoorSecret with the front door on"
    );
    let env_of = |t: &Template| -> Result<Option<String>> {
        Ok(
            path(&t.props("IngestFunction")?, &["Environment", "Variables"])
                .and_then(|v| v.get("FRONT_DOOR_SECRET_ARN"))
                .and_then(scalar),
        )
    };
    let env = env_of(&on)?;
    ensure!(
        env.as_deref() == Some(secret),
        "FRONT_DOOR_SECRET_ARN must name FrontDoorSecret, is {env:?}"
    );
    let readers: Vec<String> = on
        .ids_of("AWS::IAM::Role")?
        .into_iter()
        .filter(|role| {
            role_statements(&on, role).is_ok_and(|statements| {
                statements.iter().any(|s| {
                    strings(s.get("Action"))
                        .iter()
                        .any(|a| a == "secretsmanager:GetSecretValue")
                        && strings(s.get("Resource")).iter().any(|r| r == secret)
                })
            })
        })
        .collect();
    ensure!(
        readers == ["IngestRole"],
        "only IngestRole may read FrontDoorSecret: {readers:?}"
    );
    let off = env_of(t)?;
    ensure!(
        off.as_deref() == Some(""),
        "without the front door FRONT_DOOR_SECRET_ARN must be empty, is {off:?}"
    );
    Ok(())
}

/// The IoT front door is off unless asked for: no IoT resource, no envelope trusted
/// (an empty IOT_SENDER_ID), and the queue's policy as before it (TLS only).
fn check_front_door_off_by_default(t: &Template) -> Result<()> {
    ensure!(
        t.params.get("IotFrontDoor").map(String::as_str) == Some("disabled"),
        "IotFrontDoor must default to disabled, so SQS publishers keep working"
    );
    for kind in ["AWS::IoT::TopicRule", "AWS::IoT::Policy"] {
        ensure!(
            t.ids_of(kind)?.is_empty(),
            "{kind} exists with the front door off"
        );
    }
    ensure!(
        t.ids_of("AWS::IAM::Role")?
            .iter()
            .all(|r| r != "IotRuleRole"),
        "IotRuleRole exists with the front door off"
    );
    let env = path(&t.props("IngestFunction")?, &["Environment", "Variables"])
        .and_then(|v| v.get("IOT_SENDER_ID"))
        .and_then(scalar);
    ensure!(
        env.as_deref() == Some(""),
        "with the front door off IOT_SENDER_ID must be empty, is {env:?}"
    );
    let sids: Vec<String> = queue_statements(t)?
        .iter()
        .filter_map(|s| s.get("Sid").and_then(scalar))
        .collect();
    ensure!(
        sids == ["DenyInsecureTransport"],
        "with the front door off the queue policy is TLS only: {sids:?}"
    );
    Ok(())
}

/// With the front door on, SendMessage on the ingest queue is denied to every principal
/// but the rule's role, the ingest's (its copies), the redrive role's and
/// QueuePublisherArns; TLS is still
/// required; the ingest is told the rule's SenderId.
fn check_queue_senders(t: &Template) -> Result<()> {
    let publishers = "arn:aws:iam::123456789012:role/gateway,arn:aws:iam::123456789012:user/bridge";
    for (extra, named) in [(None, 0), (Some(("QueuePublisherArns", publishers)), 2)] {
        let t = with_front_door(t, &extra.into_iter().collect::<Vec<_>>())?;
        let statements = queue_statements(&t)?;
        ensure!(
            statements
                .iter()
                .any(|s| s.get("Sid").and_then(scalar).as_deref() == Some("DenyInsecureTransport")),
            "the queue policy lost DenyInsecureTransport"
        );
        let deny = statements
            .iter()
            .find(|s| {
                s.get("Effect").and_then(scalar).as_deref() == Some("Deny")
                    && strings(s.get("Action")) == ["sqs:SendMessage"]
                    && strings(s.get("Resource")) == ["getatt:IngestQueue.Arn"]
            })
            .context("no Deny of sqs:SendMessage on the ingest queue with the front door on")?;
        ensure!(
            deny.get("Principal").and_then(scalar).as_deref() == Some("*")
                && strings(deny.get("Resource")) == ["getatt:IngestQueue.Arn"],
            "the Deny must hold every principal sending to the ingest queue"
        );
        let allowed: BTreeSet<String> = strings(path(
            deny,
            &["Condition", "ArnNotEquals", "aws:PrincipalArn"],
        ))
        .into_iter()
        .collect();
        let mut expected: BTreeSet<String> = [
            "getatt:IotRuleRole.Arn",
            "getatt:IngestRole.Arn",
            "getatt:DlqRedriveRole.Arn",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        expected.extend(publishers.split(',').take(named).map(str::to_owned));
        ensure!(
            allowed == expected,
            "senders left to the queue: {allowed:?}, expected {expected:?}"
        );
        let env = path(&t.props("IngestFunction")?, &["Environment", "Variables"])
            .and_then(|v| v.get("IOT_SENDER_ID"))
            .and_then(scalar);
        ensure!(
            env.as_deref() == Some("getatt:IotRuleRole.RoleId"),
            "IOT_SENDER_ID must be the rule role's RoleId, is {env:?}"
        );
    }
    Ok(())
}

/// `QueuePublisherArns` (docs/reliability.md scenario 51) takes role and user ARNs
/// separated by commas alone, as the
/// queue policy compares them, and refuses at deploy what would silently match no one:
/// a space after a comma (CloudFormation trims nothing), any other whitespace, an
/// assumed-role session's ARN, a wildcard. Its `AllowedPattern` is matched against each
/// item of the list, whole, as CloudFormation does for a CommaDelimitedList, and its
/// `ConstraintDescription` says why.
fn check_publisher_arns(t: &Template) -> Result<()> {
    let parameter = path(&t.doc, &["Parameters", "QueuePublisherArns"])
        .context("no parameter QueuePublisherArns")?;
    ensure!(
        parameter.get("Type").and_then(scalar).as_deref() == Some("CommaDelimitedList"),
        "QueuePublisherArns is a CommaDelimitedList"
    );
    let pattern = parameter
        .get("AllowedPattern")
        .and_then(scalar)
        .context("QueuePublisherArns has no AllowedPattern: a space after a comma would deny")?;
    let whole = regex_lite::Regex::new(&format!("^(?:{pattern})$"))
        .with_context(|| format!("AllowedPattern {pattern:?} is no regular expression"))?;
    let accepted = |value: &str| value.split(',').all(|item| whole.is_match(item));
    let role = "arn:aws:iam::123456789012:role/gateway";
    let user = "arn:aws:iam::123456789012:user/bridge";
    for value in [
        String::new(),
        role.to_owned(),
        format!("{role},{user}"),
        "arn:aws:iam::123456789012:role/service-role/ops/gateway-2".to_owned(),
        "arn:aws-us-gov:iam::123456789012:role/gateway".to_owned(),
        "arn:aws-cn:iam::123456789012:user/a+b=c.d@e_f-g".to_owned(),
    ] {
        ensure!(accepted(&value), "QueuePublisherArns must take {value:?}");
    }
    for value in [
        format!("{role}, {user}"),
        format!("{role} ,{user}"),
        format!(" {role}"),
        format!("{role}\t"),
        format!("{role},\n{user}"),
        "arn:aws:iam::123456789012:role/two words".to_owned(),
        "arn:aws:sts::123456789012:assumed-role/gateway/session".to_owned(),
        "arn:aws:iam::123456789012:root".to_owned(),
        "*".to_owned(),
        "arn:aws:iam::*:role/gateway".to_owned(),
    ] {
        ensure!(
            !accepted(&value),
            "QueuePublisherArns must refuse {value:?} at deploy, not deny it silently"
        );
    }
    let why = parameter
        .get("ConstraintDescription")
        .and_then(scalar)
        .unwrap_or_default();
    ensure!(
        why.contains("space") && why.contains("commas"),
        "the ConstraintDescription must say why: no space around the commas ({why:?})"
    );
    Ok(())
}

/// The thing policy lets a thing connect only as its own thing name, attached to its
/// certificate, and publish only on its own topic, the one the rule reads the thing
/// name from; the rule puts the published bytes, base64-encoded, beside that name, the
/// client id and the connection's principal.
fn check_thing_policy(t: &Template) -> Result<()> {
    let t = with_front_door(t, &[])?;
    let thing = "${!iot:Connection.Thing.ThingName}";
    let props = t.props("IotThingPolicy")?;
    let statements = path(&props, &["PolicyDocument", "Statement"])
        .and_then(Value::as_sequence)
        .context("IotThingPolicy has no statements")?;
    let mut granted = BTreeMap::new();
    for statement in statements {
        ensure!(
            statement.get("Effect").and_then(scalar).as_deref() == Some("Allow"),
            "IotThingPolicy: only Allow statements are expected"
        );
        for action in strings(statement.get("Action")) {
            granted.insert(
                action,
                (strings(statement.get("Resource")), statement.clone()),
            );
        }
    }
    ensure!(
        granted.keys().map(String::as_str).collect::<Vec<_>>() == ["iot:Connect", "iot:Publish"],
        "a thing may connect and publish, nothing else: {:?}",
        granted.keys()
    );
    let (connect, statement) = &granted["iot:Connect"];
    ensure!(
        connect.len() == 1 && connect[0].ends_with(&format!(":client/{thing}")),
        "iot:Connect must be on client/{thing} alone: {connect:?}"
    );
    ensure!(
        path(
            statement,
            &["Condition", "Bool", "iot:Connection.Thing.IsAttached"]
        )
        .and_then(scalar)
        .as_deref()
            == Some("true"),
        "iot:Connect must require the certificate attached to the thing"
    );
    let publish: BTreeSet<String> = thing_topics(&t)?.into_iter().collect();
    let rule = rule_name(&t)?;
    let topics: BTreeSet<String> = [
        format!("shardline/devices/{thing}/readings"),
        format!("$aws/rules/{rule}/devices/{thing}/readings"),
    ]
    .into();
    ensure!(
        publish == topics,
        "by default iot:Publish must be on the broker's and the Basic Ingest topic of the \
         thing alone, {topics:?}: {publish:?}"
    );
    let sql = rule_sql(&t)?;
    let words: Vec<&str> = sql.split_whitespace().collect();
    let filter = "'shardline/devices/+/readings'";
    ensure!(
        words.join(" ")
            == format!(
                "SELECT encode(*, 'base64') AS payload, CASE topic(1) WHEN 'shardline' THEN \
                 topic(3) WHEN 'devices' THEN topic(2) END AS thing, clientid() AS client, \
                 principal() AS principal FROM {filter}"
            ),
        "the rule must put the published bytes, base64-encoded, beside the thing its topic \
         names (of {filter} or Basic Ingest's), the client id and the principal: {}",
        words.join(" ")
    );
    Ok(())
}

/// The thing policy variable a thing's topics hold, as the template writes it in `!Sub`.
const THING_VARIABLE: &str = "${!iot:Connection.Thing.ThingName}";

/// The rule's SQL.
fn rule_sql(t: &Template) -> Result<String> {
    path(&t.props("IotReadingsRule")?, &["TopicRulePayload", "Sql"])
        .and_then(scalar)
        .context("IotReadingsRule has no Sql")
}

/// The rule's name, as `!Ref IotReadingsRule` gives it (a topic rule's Ref is its name).
fn rule_name(t: &Template) -> Result<String> {
    t.props("IotReadingsRule")?
        .get("RuleName")
        .and_then(scalar)
        .context("IotReadingsRule has no fixed RuleName")
}

/// The topics the thing policy lets a thing publish on (each `iot:Publish` resource
/// after `:topic/`), the rule's Ref resolved to its name.
fn thing_topics(t: &Template) -> Result<Vec<String>> {
    let props = t.props("IotThingPolicy")?;
    let statements = path(&props, &["PolicyDocument", "Statement"])
        .and_then(Value::as_sequence)
        .context("IotThingPolicy has no statements")?;
    let rule = rule_name(t)?;
    let prefix = "sub:arn:${AWS::Partition}:iot:${AWS::Region}:${AWS::AccountId}:topic/";
    let mut topics = Vec::new();
    for statement in statements {
        if !strings(statement.get("Action")).contains(&"iot:Publish".to_owned()) {
            continue;
        }
        for resource in strings(statement.get("Resource")) {
            let topic = resource
                .strip_prefix(prefix)
                .with_context(|| format!("iot:Publish on {resource:?}, not a topic of ours"))?;
            topics.push(topic.replace("ref:IotReadingsRule", &rule));
        }
    }
    Ok(topics)
}

/// The thing the rule's SQL reads from `topic`, the topic as the rule sees it: the
/// SQL's `CASE topic(1) WHEN '<level>' THEN topic(<n>) ... END AS thing`, evaluated as
/// AWS IoT does (the first WHEN equal to the topic's first level; `topic(n)` of a level
/// the topic lacks, or no WHEN matching, is Undefined, and the SELECT leaves `thing`
/// out).
fn rule_thing(sql: &str, topic: &str) -> Result<Option<String>> {
    let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let case = regex_lite::Regex::new(
        r"CASE topic\(1\)((?: WHEN '[^']*' THEN topic\(\d+\))+) END AS thing,",
    )?;
    let arm = regex_lite::Regex::new(r"WHEN '([^']*)' THEN topic\((\d+)\)")?;
    let arms = case
        .captures(&sql)
        .with_context(|| format!("the rule reads no thing by CASE topic(1): {sql}"))?;
    let levels: Vec<&str> = topic.split('/').collect();
    for arm in arm.captures_iter(&arms[1]) {
        if levels.first() == Some(&&arm[1]) {
            let n: usize = arm[2].parse()?;
            return Ok(n
                .checked_sub(1)
                .and_then(|i| levels.get(i))
                .map(|s| (*s).to_owned()));
        }
    }
    Ok(None)
}

/// Basic Ingest at the front door (docs/access.md): `IotBasicIngest` (default
/// `alongside`, so a thing already on the broker's topic loses nothing) lets a thing
/// publish on exactly `$aws/rules/<the rule's name>/devices/<thing>/readings`, under the
/// rule's own name for any stack, beside its broker topic (`alongside`), instead of it
/// (`only`), or not at all (`disabled`). AWS IoT hands the rule the topic after
/// `$aws/rules/<rule name>/`, and does not filter a Basic Ingest publish by the rule's
/// FROM, so the rule's SQL must read the thing from that topic as from the broker's,
/// and the ingest's reading of an error-action message's topic agrees.
fn check_basic_ingest(t: &Template) -> Result<()> {
    let parameter =
        path(&t.doc, &["Parameters", "IotBasicIngest"]).context("no parameter IotBasicIngest")?;
    ensure!(
        parameter.get("Default").and_then(scalar).as_deref() == Some("alongside"),
        "IotBasicIngest must default to alongside: only would drop the broker topic things \
         already publish on"
    );
    ensure!(
        strings(parameter.get("AllowedValues")) == ["alongside", "only", "disabled"],
        "IotBasicIngest takes alongside, only or disabled: {:?}",
        parameter.get("AllowedValues")
    );
    let thing = "thermo-007";
    for (value, broker, basic) in [
        ("alongside", true, true),
        ("only", false, true),
        ("disabled", true, false),
    ] {
        for stack in ["shardline", "shard-line-prod", "Demo-2"] {
            let t = with_front_door(t, &[("IotBasicIngest", value)])?.with_stack_name(stack);
            let rule = rule_name(&t)?;
            let sql = rule_sql(&t)?;
            let prefix = format!("$aws/rules/{rule}/");
            let mut expected = BTreeSet::new();
            if broker {
                expected.insert(format!("shardline/devices/{THING_VARIABLE}/readings"));
            }
            if basic {
                expected.insert(format!("{prefix}devices/{THING_VARIABLE}/readings"));
            }
            let topics = thing_topics(&t)?;
            ensure!(
                topics.iter().cloned().collect::<BTreeSet<_>>() == expected
                    && topics.len() == expected.len(),
                "IotBasicIngest={value}, stack {stack}: a thing may publish on {expected:?} \
                 alone, not {topics:?}"
            );
            for topic in &topics {
                let published = topic.replace(THING_VARIABLE, thing);
                let seen = published.strip_prefix(&prefix).unwrap_or(&published);
                ensure!(
                    rule_thing(&sql, seen)?.as_deref() == Some(thing),
                    "the rule reads no thing {thing} from {seen:?}, the topic it sees of a \
                     publish on {published:?}: {sql}"
                );
                ensure!(
                    ingest::front_door::thing_of_topic(&published, &rule) == Some(thing)
                        && ingest::front_door::thing_of_topic(seen, &rule) == Some(thing),
                    "the ingest reads no thing {thing} from {published:?} or {seen:?}"
                );
            }
            let output = path(&t.doc, &["Outputs", "IotBasicIngestTopic"]);
            let shown = match output {
                Some(o)
                    if t.condition(o.get("Condition").and_then(Value::as_str).unwrap_or(""))? =>
                {
                    let value = o.get("Value").context("IotBasicIngestTopic has no Value")?;
                    scalar(&t.eval(value)?).map(|v| v.replace("ref:IotReadingsRule", &rule))
                }
                _ => None,
            };
            let want = basic.then(|| format!("sub:{prefix}devices/<thing name>/readings"));
            ensure!(
                shown == want,
                "IotBasicIngest={value}, stack {stack}: output IotBasicIngestTopic must be \
                 {want:?}, is {shown:?}"
            );
        }
    }
    for other in [
        format!("x/{thing}/readings"),
        format!("rules/{thing}/readings"),
        "devices".to_owned(),
        String::new(),
    ] {
        let sql = rule_sql(&with_front_door(t, &[])?)?;
        ensure!(
            rule_thing(&sql, &other)?.is_none(),
            "the rule reads a thing from {other:?}, a topic of neither form"
        );
    }
    Ok(())
}

/// The ingest takes only a certificate's publishes unless told otherwise
/// (docs/reliability.md scenario 29): the
/// parameter defaults to `certificate`, offers only `any` besides, and reaches the
/// ingest as `IOT_PRINCIPALS`, whose own default is `certificate` too.
fn check_principals(t: &Template) -> Result<()> {
    let parameter =
        path(&t.doc, &["Parameters", "IotPrincipals"]).context("no parameter IotPrincipals")?;
    ensure!(
        parameter.get("Default").and_then(scalar).as_deref() == Some("certificate"),
        "IotPrincipals must default to certificate, the one principal bound to its thing"
    );
    ensure!(
        strings(parameter.get("AllowedValues")) == ["certificate", "any"],
        "IotPrincipals takes certificate or any: {:?}",
        parameter.get("AllowedValues")
    );
    for value in ["certificate", "any"] {
        let t = with_front_door(t, &[("IotPrincipals", value)])?;
        let env = path(&t.props("IngestFunction")?, &["Environment", "Variables"])
            .and_then(|v| v.get("IOT_PRINCIPALS"))
            .and_then(scalar);
        ensure!(
            env.as_deref() == Some(value),
            "IOT_PRINCIPALS must be IotPrincipals ({value}), is {env:?}"
        );
        ensure!(
            value.parse::<ingest::Principals>().is_ok(),
            "the ingest does not take IOT_PRINCIPALS={value}"
        );
    }
    ensure!(
        ingest::Principals::default() == ingest::Principals::Certificate,
        "the ingest's own default must be certificate"
    );
    Ok(())
}

/// The rule sends to the ingest queue (its error action to the DLQ) with a role that
/// only AWS IoT may assume and that may send to those two queues alone.
fn check_rule_role(t: &Template) -> Result<()> {
    let t = with_front_door(t, &[])?;
    let grants = role_grants_trusting(&t, "IotRuleRole", "iot.amazonaws.com")?;
    let expected: BTreeSet<(String, String)> = ["getatt:IngestQueue.Arn", "getatt:IngestDLQ.Arn"]
        .into_iter()
        .map(|q| ("sqs:SendMessage".to_owned(), q.to_owned()))
        .collect();
    ensure!(
        grants == expected,
        "IotRuleRole may only send to the ingest queue and its DLQ: {grants:?}"
    );
    let payload = t
        .props("IotReadingsRule")?
        .get("TopicRulePayload")
        .cloned()
        .context("IotReadingsRule has no TopicRulePayload")?;
    let actions = payload
        .get("Actions")
        .and_then(Value::as_sequence)
        .context("the rule has no Actions")?;
    ensure!(actions.len() == 1, "the rule has one action, to the queue");
    for (action, queue) in [
        (&actions[0], "ref:IngestQueue"),
        (
            payload.get("ErrorAction").context("no ErrorAction")?,
            "ref:IngestDLQ",
        ),
    ] {
        let sqs = action.get("Sqs").context("a rule action that is not Sqs")?;
        ensure!(
            sqs.get("QueueUrl").and_then(scalar).as_deref() == Some(queue)
                && sqs.get("RoleArn").and_then(scalar).as_deref() == Some("getatt:IotRuleRole.Arn")
                && sqs.get("UseBase64").and_then(scalar).as_deref() == Some("false"),
            "the rule's action must send JSON to {queue} with IotRuleRole: {sqs:?}"
        );
    }
    Ok(())
}

/// The names a raw (unevaluated) template value refers to: `!Ref X`, `!GetAtt X.Attr`
/// and `${X}` or `${X.Attr}` in text (as `!Sub` reads it), `DependsOn` included.
fn references(value: &Value, out: &mut BTreeSet<String>) {
    let name = |s: &str| s.split('.').next().unwrap_or(s).to_owned();
    match value {
        Value::Tagged(tagged) if tagged.tag == "Ref" || tagged.tag == "GetAtt" => {
            match &tagged.value {
                Value::Sequence(parts) => {
                    out.extend(parts.first().and_then(Value::as_str).map(name));
                }
                other => out.extend(other.as_str().map(name)),
            }
        }
        Value::Tagged(tagged) => references(&tagged.value, out),
        Value::String(text) => {
            for piece in text.split("${").skip(1) {
                out.insert(name(piece.split('}').next().unwrap_or_default()));
            }
        }
        Value::Sequence(items) => items.iter().for_each(|v| references(v, out)),
        Value::Mapping(map) => {
            for (key, v) in map {
                if matches!(key.as_str(), Some("Ref" | "Fn::GetAtt" | "DependsOn")) {
                    strings(Some(v)).iter().for_each(|s| {
                        out.insert(name(s));
                    });
                }
                references(v, out);
            }
        }
        _ => {}
    }
}

/// The rule's role (docs/reliability.md scenario 50) may be assumed by AWS IoT of this
/// account for this stack's rule alone: its trust names the rule's ARN (`aws:SourceArn`), built from the rule's fixed
/// name, a name a rule may have (letters, digits, underscores, at most 128) for any
/// stack name of at most 119 characters; another rule of the account cannot assume it.
/// The role does not name the rule (which names the role): no dependency cycle.
fn check_rule_trust(t: &Template) -> Result<()> {
    let longest = format!("s{}b", "-a1".repeat(39));
    ensure!(longest.len() == 119, "{}", longest.len());
    for stack in ["shardline", "shard-line-prod", "Demo-2", &longest] {
        let t = with_front_door(t, &[])?.with_stack_name(stack);
        let rule = t
            .props("IotReadingsRule")?
            .get("RuleName")
            .and_then(scalar)
            .context("IotReadingsRule has no fixed RuleName")?;
        ensure!(
            !rule.is_empty()
                && rule.len() <= 128
                && rule.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "stack {stack}: {rule:?} is no rule name ([a-zA-Z0-9_], 1 to 128)"
        );
        let role = t.resource("IotRuleRole")?;
        let mut named = BTreeSet::new();
        references(
            path(&t.doc, &["Resources", "IotRuleRole"]).context("no IotRuleRole")?,
            &mut named,
        );
        ensure!(
            !named.contains("IotReadingsRule"),
            "IotRuleRole names IotReadingsRule, which names it: a dependency cycle"
        );
        let trust = path(
            &role,
            &["Properties", "AssumeRolePolicyDocument", "Statement"],
        )
        .and_then(Value::as_sequence)
        .context("IotRuleRole has no trust policy")?;
        let [statement] = trust.as_slice() else {
            bail!("IotRuleRole's trust has one statement, not {}", trust.len());
        };
        let arn = |name: &str| {
            format!(
                "sub:arn:${{AWS::Partition}}:iot:${{AWS::Region}}:${{AWS::AccountId}}:rule/{name}"
            )
        };
        let ours = arn(&rule);
        let assume = |source_arn: &str, account: &str| -> Result<bool> {
            let request = Request {
                principal_arn: None,
                is_aws_service: Some(true),
                source_arn: Some(source_arn),
                source_account: Some(account),
                action: "sts:AssumeRole",
                resource: "getatt:IotRuleRole.Arn",
                secure: true,
            };
            Ok(
                statement.get("Effect").and_then(scalar).as_deref() == Some("Allow")
                    && strings(path(statement, &["Principal", "Service"])) == ["iot.amazonaws.com"]
                    && strings(statement.get("Action")) == ["sts:AssumeRole"]
                    && conditions_hold(statement, &request)?,
            )
        };
        let account = "ref:AWS::AccountId";
        ensure!(
            assume(&ours, account)?,
            "stack {stack}: AWS IoT must be able to assume IotRuleRole for the rule {rule}"
        );
        for other in [
            format!("{rule}_2"),
            "other_rule".to_owned(),
            format!("x{rule}"),
        ] {
            ensure!(
                !assume(&arn(&other), account)?,
                "stack {stack}: the rule {other} of the account may assume IotRuleRole"
            );
        }
        ensure!(
            !assume(&ours, "111122223333")?,
            "stack {stack}: another account's rule of that name may assume IotRuleRole"
        );
    }
    Ok(())
}

/// Who may invoke each function (docs/reliability.md scenario 52): a direct
/// `lambda:InvokeFunction` hands a function an event of the caller's making, past the
/// queue's policy, the front door's SenderId and the API's authorization. So the ingest
/// is invoked only by its queue's event source mapping (which needs no permission on
/// the function), the query only by API Gateway for its own API's GET routes, the
/// sealer only by its schedule; no function has a URL, and no role of the stack may
/// invoke a function.
fn check_invokers(t: &Template) -> Result<()> {
    let t = with_front_door(t, &[])?;
    let mut functions = t.ids_of("AWS::Serverless::Function")?;
    functions.sort();
    ensure!(
        functions == ["IngestFunction", "QueryFunction", "SealerFunction"],
        "the functions are the ingest, the query and the sealer: {functions:?}"
    );
    for (id, sources) in [
        ("IngestFunction", &["SQS"][..]),
        ("QueryFunction", &[][..]),
        ("SealerFunction", &["Schedule"][..]),
    ] {
        let props = t.props(id)?;
        let events: Vec<String> = props
            .get("Events")
            .and_then(Value::as_mapping)
            .into_iter()
            .flatten()
            .filter_map(|(_, event)| event.get("Type").and_then(scalar))
            .collect();
        ensure!(
            events == sources,
            "{id} is invoked by {sources:?} alone, not {events:?}"
        );
        ensure!(
            props.get("FunctionUrlConfig").is_none(),
            "{id} has a function URL: anyone it allows invokes it"
        );
    }
    ensure!(
        t.ids_of("AWS::Lambda::Url")?.is_empty(),
        "a function URL exists: anyone it allows invokes a function"
    );
    let permissions = t.ids_of("AWS::Lambda::Permission")?;
    ensure!(
        permissions == ["QueryInvokePermission"],
        "the one permission on a function is API Gateway's on the query: {permissions:?}"
    );
    let permission = t.props("QueryInvokePermission")?;
    let field = |name: &str| permission.get(name).and_then(scalar).unwrap_or_default();
    let source = field("SourceArn");
    ensure!(
        field("Action") == "lambda:InvokeFunction"
            && field("FunctionName") == "ref:QueryFunction"
            && field("Principal") == "apigateway.amazonaws.com"
            && source
                == "sub:arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${HttpApi}/*/GET/*",
        "API Gateway may invoke the query for the GET routes of this stack's API alone: \
         {permission:?}"
    );
    for role in t.ids_of("AWS::IAM::Role")? {
        for statement in role_statements(&t, &role)? {
            for action in strings(statement.get("Action")) {
                ensure!(
                    !glob(&action.to_ascii_lowercase(), "lambda:invokefunction"),
                    "{role} may call lambda:InvokeFunction ({action})"
                );
            }
        }
    }
    Ok(())
}

/// A raw property of a resource, before evaluation, is `!Ref parameter`.
fn is_ref_to(t: &Template, keys: &[&str], parameter: &str) -> bool {
    matches!(
        path(&t.doc, keys),
        Some(Value::Tagged(tagged)) if tagged.tag == "Ref" && tagged.value.as_str() == Some(parameter)
    )
}

/// The sealer: its build, its log group, its role; one schedule, a parameter, whose
/// failed runs Lambda does not retry (the next run is the retry); the stack's three
/// tables, and the ingest's retention and the lateness horizon as their parameters set
/// them. The ingest leaves its late marks in the sealer's table, by the sealer's
/// horizon.
fn check_sealer(t: &Template) -> Result<()> {
    let props = check_function(t, "SealerFunction", "sealer", "SealerRole")?;
    let events = props
        .get("Events")
        .and_then(Value::as_mapping)
        .context("SealerFunction has no Events")?;
    ensure!(
        events.len() == 1,
        "SealerFunction has one event, its schedule"
    );
    let (name, event) = events.iter().next().context("the sealer's event")?;
    let name = name.as_str().context("event name")?;
    ensure!(
        event.get("Type").and_then(scalar).as_deref() == Some("Schedule"),
        "the sealer's event must be an EventBridge Schedule"
    );
    let schedule = [
        "Resources",
        "SealerFunction",
        "Properties",
        "Events",
        name,
        "Properties",
        "Schedule",
    ];
    ensure!(
        is_ref_to(t, &schedule, "SealerSchedule"),
        "the sealer's schedule must be the SealerSchedule parameter"
    );
    ensure!(
        path(event, &["Properties", "State"])
            .and_then(scalar)
            .is_none_or(|s| s == "ENABLED"),
        "the sealer's schedule must be enabled"
    );
    ensure!(
        t.number(
            path(&props, &["EventInvokeConfig", "MaximumRetryAttempts"]),
            "SealerFunction.EventInvokeConfig.MaximumRetryAttempts",
        )? == 0,
        "Lambda must not retry a failed sealer run: the next scheduled run does"
    );
    for (key, parameter) in [
        ("Timeout", "SealerTimeout"),
        ("MemorySize", "SealerMemorySize"),
    ] {
        ensure!(
            is_ref_to(
                t,
                &["Resources", "SealerFunction", "Properties", key],
                parameter
            ),
            "SealerFunction.{key} must be the {parameter} parameter"
        );
    }
    // Under values other than the defaults, so a constant equal to a default fails.
    let t = Template::parse(
        &yaml_serde::to_string(&t.doc)?,
        &[
            ("RetentionDays", "7"),
            ("LatenessHorizonSecs", "1234"),
            ("TimeIndex", "enabled"),
        ],
    )?;
    let env = |function: &str, name: &str| -> Result<Option<String>> {
        Ok(path(&t.props(function)?, &["Environment", "Variables", name]).and_then(scalar))
    };
    // The ingest marks a reading late by the sealer's horizon, in the sealer's table.
    for (function, name, want) in [
        ("SealerFunction", "TABLE_NAME", "ref:ReadingsTable"),
        ("SealerFunction", "SHARD_TABLE_NAME", "ref:ShardsTable"),
        ("SealerFunction", "ROLLUP_TABLE", "ref:RollupTable"),
        ("SealerFunction", "LATENESS_HORIZON_SECS", "1234"),
        ("IngestFunction", "ROLLUP_TABLE", "ref:RollupTable"),
        ("IngestFunction", "LATENESS_HORIZON_SECS", "1234"),
    ] {
        let got = env(function, name)?;
        ensure!(
            got.as_deref() == Some(want),
            "{function}'s {name} must be {want}, is {got:?}"
        );
    }
    let (got, want) = (
        env("SealerFunction", "RETENTION_DAYS")?,
        env("IngestFunction", "RETENTION_DAYS")?,
    );
    ensure!(
        got.is_some() && got == want,
        "SealerFunction's RETENTION_DAYS must be the ingest's ({want:?}), is {got:?}"
    );
    Ok(())
}

/// The sealer's role under both settings of `TimeIndex`.
fn check_sealer_role(t: &Template) -> Result<()> {
    for setting in ["enabled", "disabled"] {
        let t = Template::parse(&yaml_serde::to_string(&t.doc)?, &[("TimeIndex", setting)])?;
        check_sealer_role_with(&t).with_context(|| format!("with TimeIndex={setting}"))?;
    }
    Ok(())
}

/// The sealer Queries readings (the table: it reads no index, whether or not one
/// exists), writes runs (`BatchWriteItem` of run partitions alone), reads the shard
/// directory exactly as the query's role does, and reads, writes and deletes derived
/// items: nothing else. That each grant is used, and each call allowed, is `iam.rs`'s,
/// which runs the sealer.
fn check_sealer_role_with(t: &Template) -> Result<()> {
    let grants = role_grants(t, "SealerRole")?;
    let runs = ("dynamodb:BatchWriteItem", "getatt:ReadingsTable.Arn");
    for (action, resource) in &grants {
        ensure!(
            (action.as_str(), resource.as_str()) == runs
                || !(DYNAMODB_WRITES.contains(&action.as_str())
                    && (resource.contains("ReadingsTable") || resource.contains("ShardsTable"))),
            "SealerRole may {action} {resource}: the sealer writes no readings or shard \
             metadata, only runs"
        );
    }
    let compact = role_statements(t, "SealerRole")?
        .into_iter()
        .find(|s| s.get("Sid").and_then(scalar).as_deref() == Some("CompactRuns"))
        .context("SealerRole has no CompactRuns statement")?;
    let leading = compact
        .get("Condition")
        .and_then(|c| c.get("ForAllValues:StringLike"))
        .and_then(|l| l.get("dynamodb:LeadingKeys"));
    ensure!(
        strings(leading) == ["r#*"],
        "SealerRole writes readings beyond the run partitions: {leading:?}"
    );
    let on = |actions: &[&str], resource: &str| -> Vec<(String, String)> {
        actions
            .iter()
            .map(|a| ((*a).to_owned(), resource.to_owned()))
            .collect()
    };
    let mut expected: BTreeSet<(String, String)> = BTreeSet::new();
    expected.extend(on(
        &["dynamodb:Query", "dynamodb:BatchWriteItem"],
        "getatt:ReadingsTable.Arn",
    ));
    let shards = "getatt:ShardsTable.Arn";
    let query_reads: Vec<(String, String)> = role_grants(t, "QueryRole")?
        .into_iter()
        .filter(|(_, r)| r == shards)
        .collect();
    ensure!(!query_reads.is_empty(), "QueryRole reads no shard metadata");
    expected.extend(query_reads);
    expected.extend(on(
        &[
            "dynamodb:GetItem",
            "dynamodb:Query",
            "dynamodb:PutItem",
            "dynamodb:DeleteItem",
        ],
        "getatt:RollupTable.Arn",
    ));
    expected.extend(on(
        &["logs:CreateLogStream", "logs:PutLogEvents"],
        "getatt:SealerLogGroup.Arn",
    ));
    expected.extend(on(
        &["xray:PutTraceSegments", "xray:PutTelemetryRecords"],
        "*",
    ));
    ensure!(
        grants == expected,
        "SealerRole grants more than the sealer needs {:?}, or less {:?}",
        grants.difference(&expected).collect::<Vec<_>>(),
        expected.difference(&grants).collect::<Vec<_>>()
    );
    Ok(())
}

/// Seconds between two runs of a `rate(...)` schedule expression.
fn rate_secs(expression: &str) -> Result<u64> {
    let inner = expression
        .strip_prefix("rate(")
        .and_then(|e| e.strip_suffix(')'))
        .with_context(|| format!("{expression:?} is not rate(...); extend rate_secs"))?;
    let (value, unit) = inner
        .split_once(' ')
        .with_context(|| format!("{expression:?}: rate(VALUE UNIT)"))?;
    let unit = match unit {
        "minute" | "minutes" => 60,
        "hour" | "hours" => 3_600,
        "day" | "days" => 86_400,
        other => bail!("{expression:?}: unit {other}"),
    };
    Ok(value.parse::<u64>()? * unit)
}

/// The lag alarm stays quiet at steady state: whole hours are sealed, each once the
/// lateness horizon has passed after its end, so the watermark trails now by at most
/// an hour, the horizon and one schedule interval; and a sealer that stops reporting
/// its lag (that does not run) breaches.
fn check_seal_lag(t: &Template) -> Result<()> {
    let mut found = None;
    for id in t.ids_of("AWS::CloudWatch::Alarm")? {
        let alarm = t.props(&id)?;
        if watched_by(&alarm)
            .iter()
            .any(|(_, (namespace, metric, dimensions))| {
                namespace == "Shardline" && metric == "SealLagSeconds" && dimensions == &["sealer"]
            })
        {
            found = Some((id, alarm));
        }
    }
    let (id, alarm) = found.context("no alarm on the sealer's SealLagSeconds")?;
    let param = |name: &str| -> Result<String> {
        t.params
            .get(name)
            .cloned()
            .with_context(|| format!("no parameter {name}"))
    };
    let horizon: u64 = param("LatenessHorizonSecs")?.parse()?;
    let interval = rate_secs(&param("SealerSchedule")?)?;
    let threshold = t.number(alarm.get("Threshold"), &format!("{id}.Threshold"))?;
    let steady = 3_600 + horizon + interval;
    ensure!(
        threshold > steady,
        "{id} fires at steady state: threshold {threshold} s <= 1 h + {horizon} s + {interval} s"
    );
    for (key, want) in [
        ("Statistic", "Maximum"),
        ("ComparisonOperator", "GreaterThanThreshold"),
        ("TreatMissingData", "breaching"),
    ] {
        ensure!(
            alarm.get(key).and_then(scalar).as_deref() == Some(want),
            "{id}: {key} must be {want}"
        );
    }
    Ok(())
}

/// The descriptions of the template's rules that refuse a deploy with `params` over
/// the defaults.
fn refused_by_rules(t: &Template, params: &[(&str, &str)]) -> Result<Vec<String>> {
    let mut with = Template {
        doc: t.doc.clone(),
        params: t.params.clone(),
        pseudo: t.pseudo.clone(),
    };
    for (name, value) in params {
        with.params.insert((*name).to_owned(), (*value).to_owned());
    }
    let mut refused = Vec::new();
    let Some(Value::Mapping(rules)) = t.doc.get("Rules") else {
        return Ok(refused);
    };
    for (name, rule) in rules {
        let applies = match rule.get("RuleCondition") {
            Some(c) => with.eval(c)?.as_bool().context("a RuleCondition")?,
            None => true,
        };
        let assertions = rule.get("Assertions").and_then(Value::as_sequence);
        for assertion in assertions.into_iter().flatten().filter(|_| applies) {
            let assert = assertion.get("Assert").context("an assertion")?;
            if !with.eval(assert)?.as_bool().context("an Assert")? {
                let said = assertion.get("AssertDescription").and_then(scalar);
                refused.push(format!(
                    "{}: {}",
                    scalar(name).unwrap_or_default(),
                    said.unwrap_or_default()
                ));
            }
        }
    }
    Ok(refused)
}

/// The sealer reads only time-bucket layouts (`sealer::layout`): a deploy with any other
/// `ShardStrategy` is refused by a rule naming the sealer, and a run refused for its
/// layout (the `UnsealableLayout` metric) raises an alarm at once.
fn check_sealer_layout(t: &Template) -> Result<()> {
    let allowed = t
        .doc
        .get("Parameters")
        .and_then(|p| p.get("ShardStrategy"))
        .and_then(|p| p.get("AllowedValues"))
        .and_then(Value::as_sequence)
        .context("ShardStrategy has no AllowedValues")?;
    for value in allowed.iter().filter_map(scalar) {
        let refused = refused_by_rules(t, &[("ShardStrategy", &value)])?;
        if value == "time-bucket" {
            ensure!(
                refused.is_empty(),
                "ShardStrategy=time-bucket is refused: {refused:?}"
            );
        } else {
            ensure!(
                refused.iter().any(|r| r.contains("sealer")),
                "ShardStrategy={value} deploys a sealer that cannot read its layout \
                 (no rule naming the sealer refuses it: {refused:?})"
            );
        }
    }
    let metric = sealer::layout::METRIC;
    let mut found = None;
    for id in t.ids_of("AWS::CloudWatch::Alarm")? {
        let alarm = t.props(&id)?;
        if watched_by(&alarm)
            .iter()
            .any(|(_, (namespace, name, dimensions))| {
                namespace == "Shardline" && name == metric && dimensions == &["sealer"]
            })
        {
            found = Some((id, alarm));
        }
    }
    let (id, alarm) = found.with_context(|| format!("no alarm on the sealer's {metric}"))?;
    let threshold = t.number(alarm.get("Threshold"), &format!("{id}.Threshold"))?;
    ensure!(threshold <= 1, "{id} waits for {threshold} refused runs");
    for (key, want) in [
        ("Statistic", "Sum"),
        ("ComparisonOperator", "GreaterThanOrEqualToThreshold"),
    ] {
        ensure!(
            alarm.get(key).and_then(scalar).as_deref() == Some(want),
            "{id}: {key} must be {want}"
        );
    }
    Ok(())
}

type Check = fn(&Template) -> Result<()>;

/// Every promise, by name.
static CHECKS: [(&str, Check); 31] = [
    ("partial batch response", check_ingest_event),
    ("redrive", check_redrive),
    ("visibility timeout", check_visibility_timeout),
    ("dlq retention", check_dlq_retention),
    ("queue encryption", check_queue_encryption),
    ("ingest role", check_ingest_role),
    ("query role", check_query_role),
    ("api", check_api),
    ("alarms", check_alarms),
    ("tables", check_tables),
    ("time index", check_time_index),
    ("outputs", check_outputs),
    ("reserved concurrency", check_reserved_concurrency),
    ("front door off by default", check_front_door_off_by_default),
    ("queue senders", check_queue_senders),
    ("thing policy", check_thing_policy),
    ("basic ingest", check_basic_ingest),
    ("rule role", check_rule_role),
    ("principals", check_principals),
    ("dlq senders", check_dlq_senders),
    ("dlq redrive", check_dlq_redrive),
    ("front door key", check_front_door_key),
    ("rule trust", check_rule_trust),
    ("publisher arns", check_publisher_arns),
    ("invokers", check_invokers),
    ("sealer", check_sealer),
    ("sealer role", check_sealer_role),
    ("seal lag", check_seal_lag),
    ("sealer layout", check_sealer_layout),
    ("slabs", check_slabs),
    ("dashboard", check_dashboard),
];

fn run(name: &str) -> Result<()> {
    let (_, check) = CHECKS
        .iter()
        .find(|(n, _)| *n == name)
        .with_context(|| format!("no check {name}"))?;
    check(&Template::load(&[])?)
}

#[test]
fn ingest_reports_batch_item_failures() -> Result<()> {
    run("partial batch response")?;
    check_ingest_event(&Template::load(&[("Slabs", "on")])?)
}

/// With slabs, a batch is what fills a slab: the event source gathers 5 s and up to
/// 1,000 messages (the slab parameters' defaults, docs/design-slabs.md), today's layout
/// 1 s and 100; the ingest is told the same.
#[test]
fn the_event_source_gathers_what_the_layout_wants() -> Result<()> {
    for (slabs, want) in [("off", (100, 1)), ("on", (1_000, 5))] {
        let t = Template::load(&[("Slabs", slabs)])?;
        let event = path(
            &t.props("IngestFunction")?,
            &["Events", "Queue", "Properties"],
        )
        .cloned()
        .context("the SQS event")?;
        let got = (
            t.number(event.get("BatchSize"), "BatchSize")?,
            t.number(
                event.get("MaximumBatchingWindowInSeconds"),
                "MaximumBatchingWindowInSeconds",
            )?,
        );
        ensure!(got == want, "Slabs={slabs}: {got:?}, want {want:?}");
        check_visibility_timeout(&t)?;
    }
    Ok(())
}

#[test]
fn queue_redrives_to_the_dlq_after_five_receives() -> Result<()> {
    run("redrive")
}

#[test]
fn visibility_timeout_covers_six_timeouts_and_the_window() -> Result<()> {
    run("visibility timeout")
}

#[test]
fn dlq_keeps_messages_longer_than_the_queue() -> Result<()> {
    run("dlq retention")
}

#[test]
fn both_queues_are_encrypted() -> Result<()> {
    run("queue encryption")
}

#[test]
fn ingest_role_writes_readings_and_late_marks_only() -> Result<()> {
    run("ingest role")
}

#[test]
fn query_role_reads_only() -> Result<()> {
    run("query role")
}

#[test]
fn api_routes_are_authorized_and_throttled() -> Result<()> {
    run("api")?;
    check_api(&Template::load(&[
        ("ApiAuth", "JWT"),
        ("JwtIssuer", "https://issuer.example"),
    ])?)
}

/// The routes the template declares are the routes `openapi.yaml` documents (each a
/// GET), so a route added to the API is deployed with it, and a deployed route is
/// documented.
#[test]
fn api_routes_are_the_documented_routes() -> Result<()> {
    let path = stand_in::repo_root()?.join("openapi.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let doc: Value = yaml_serde::from_str(&text).context("openapi.yaml is not YAML")?;
    let mut documented = BTreeSet::new();
    for (template, item) in doc
        .get("paths")
        .and_then(Value::as_mapping)
        .context("openapi.yaml has no paths")?
    {
        let template = template.as_str().context("a path")?;
        for method in item.as_mapping().context("a path item")?.keys() {
            let method = method.as_str().context("a method")?.to_uppercase();
            documented.insert(format!("{method} {template}"));
        }
    }
    let declared: BTreeSet<String> = ROUTES.iter().map(|r| (*r).to_owned()).collect();
    ensure!(
        declared == documented,
        "routes of template.yaml not in openapi.yaml {:?}, documented but not deployed {:?}",
        declared.difference(&documented).collect::<Vec<_>>(),
        documented.difference(&declared).collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn alarms_watch_the_failure_modes() -> Result<()> {
    run("alarms")
}

#[test]
fn the_dashboard_graphs_only_metrics_the_functions_emit() -> Result<()> {
    run("dashboard")
}

#[test]
fn tables_are_on_demand_recoverable_and_observable() -> Result<()> {
    run("tables")
}

#[test]
fn readings_table_has_the_time_index() -> Result<()> {
    run("time index")
}

/// What the default template charges per reading: every index on the readings table
/// writes each item again, so the default has none, and a reading of up to 1 KB costs
/// one write unit.
#[test]
fn the_default_template_writes_a_reading_for_one_write_unit() -> Result<()> {
    let t = Template::load(&[])?;
    let readings = t.props("ReadingsTable")?;
    for index in ["LocalSecondaryIndexes", "GlobalSecondaryIndexes"] {
        ensure!(
            readings.get(index).is_none(),
            "the default ReadingsTable has {index}: each writes every reading again"
        );
    }
    Ok(())
}

#[test]
fn both_functions_reserve_concurrency_and_the_ingest_keeps_its_share() -> Result<()> {
    run("reserved concurrency")
}

#[test]
fn outputs_name_the_entry_points() -> Result<()> {
    run("outputs")
}

#[test]
fn the_iot_front_door_is_off_by_default() -> Result<()> {
    run("front door off by default")
}

#[test]
fn with_the_front_door_the_queue_takes_messages_from_the_rule_the_ingest_and_named_publishers()
-> Result<()> {
    run("queue senders")
}

#[test]
fn a_thing_connects_and_publishes_only_as_its_own_thing_name() -> Result<()> {
    run("thing policy")
}

#[test]
fn a_thing_publishes_through_basic_ingest_on_its_own_topic_of_the_stacks_rule() -> Result<()> {
    run("basic ingest")
}

#[test]
fn the_rule_role_sends_only_to_the_ingest_queue_and_its_dlq() -> Result<()> {
    run("rule role")
}

#[test]
fn the_ingest_takes_only_a_certificates_publishes_unless_told_any() -> Result<()> {
    run("principals")
}

#[test]
fn with_the_front_door_the_dlq_takes_messages_from_the_ingest_the_rule_and_sqs_alone() -> Result<()>
{
    run("dlq senders")
}

#[test]
fn the_documented_redrive_passes_the_queue_policy_and_nothing_more() -> Result<()> {
    run("dlq redrive")
}

#[test]
fn the_front_door_key_is_the_stacks_secret_and_the_ingests_alone() -> Result<()> {
    run("front door key")
}

#[test]
fn only_the_stacks_rule_may_assume_the_rule_role() -> Result<()> {
    run("rule trust")
}

#[test]
fn queue_publisher_arns_with_a_space_are_refused_at_deploy() -> Result<()> {
    run("publisher arns")
}

#[test]
fn only_their_event_sources_may_invoke_the_functions() -> Result<()> {
    run("invokers")
}

#[test]
fn the_sealer_runs_on_its_schedule_over_the_stacks_tables() -> Result<()> {
    run("sealer")
}

#[test]
fn sealer_role_reads_readings_and_shards_and_writes_derived_items_only() -> Result<()> {
    run("sealer role")
}

#[test]
fn the_seal_lag_alarm_is_quiet_at_steady_state_and_fires_without_runs() -> Result<()> {
    run("seal lag")
}

#[test]
fn a_layout_the_sealer_cannot_read_is_refused_at_deploy_and_alarmed_at_run() -> Result<()> {
    run("sealer layout")
}

/// Slabs are off by default, and the stack's one setting of them (`Slabs`,
/// `SlabGroups`) reaches each function that writes or reads them: the ingest writes
/// them, the sealer compacts them and the query reads them, each by the layout a new
/// table gets from them.
fn check_slabs(t: &Template) -> Result<()> {
    ensure!(
        t.params.get("Slabs").map(String::as_str) == Some("off"),
        "Slabs must default to off"
    );
    let parameter = path(&t.doc, &["Parameters", "Slabs"]).context("no parameter Slabs")?;
    ensure!(
        strings(parameter.get("AllowedValues")) == ["on", "off"],
        "Slabs takes on or off"
    );
    // Under values other than the defaults, so a constant equal to a default fails.
    let t = Template::parse(
        &yaml_serde::to_string(&t.doc)?,
        &[("Slabs", "on"), ("SlabGroups", "5")],
    )?;
    for function in ["IngestFunction", "QueryFunction", "SealerFunction"] {
        for (name, want) in [("SLABS", "on"), ("SLAB_GROUPS", "5")] {
            let got =
                path(&t.props(function)?, &["Environment", "Variables", name]).and_then(scalar);
            ensure!(
                got.as_deref() == Some(want),
                "{function}'s {name} must follow its parameter ({want}), is {got:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn slabs_are_off_by_default_and_reach_the_ingest_the_query_and_the_sealer() -> Result<()> {
    run("slabs")
}

/// Each edit of template.yaml breaks one promise: (the check that must notice, the text
/// edited, what it becomes).
static MUTATIONS: [(&str, &str, &str); 91] = [
    (
        "partial batch response",
        "FunctionResponseTypes: [ReportBatchItemFailures]",
        "FunctionResponseTypes: []",
    ),
    (
        "slabs",
        "  Slabs:\n    Type: String\n    Default: \"off\"",
        "  Slabs:\n    Type: String\n    Default: \"on\"",
    ),
    (
        "slabs",
        "          # The ingest's: whether a new layout's slabs are compacted into runs.\n          SLABS: !Ref Slabs",
        "          # The ingest's: whether a new layout's slabs are compacted into runs.\n          SLABS: \"off\"",
    ),
    (
        "redrive",
        "    Default: 5\n    MinValue: 5",
        "    Default: 10\n    MinValue: 5",
    ),
    ("visibility timeout", "Default: 185", "Default: 180"),
    (
        "dlq retention",
        "MessageRetentionPeriod: 1209600",
        "MessageRetentionPeriod: 345600",
    ),
    (
        "queue encryption",
        "    Properties:\n      SqsManagedSseEnabled: true\n      # 14 days",
        "    Properties:\n      SqsManagedSseEnabled: false\n      # 14 days",
    ),
    (
        "ingest role",
        "Sid: WriteReadings\n                Effect: Allow\n                Action: dynamodb:BatchWriteItem\n",
        "Sid: WriteReadings\n                Effect: Allow\n                Action: [dynamodb:BatchWriteItem, dynamodb:DeleteItem]\n",
    ),
    (
        "ingest role",
        "Action: dynamodb:BatchWriteItem\n                Resource: !GetAtt ReadingsTable.Arn\n              # Shard",
        "Action: dynamodb:BatchWriteItem\n                Resource: \"*\"\n              # Shard",
    ),
    (
        "query role",
        "Sid: ReadReadings\n                Effect: Allow\n                Action: [dynamodb:Query, dynamodb:GetItem]",
        "Sid: ReadReadings\n                Effect: Allow\n                Action: [dynamodb:Query, dynamodb:GetItem, dynamodb:PutItem]",
    ),
    (
        "api",
        "      RouteKey: GET /readings\n      AuthorizationType: !If [UseJwt, JWT, AWS_IAM]",
        "      RouteKey: GET /readings\n      AuthorizationType: !If [UseJwt, JWT, NONE]",
    ),
    (
        "api",
        "        ThrottlingBurstLimit: !Ref ApiThrottlingBurstLimit\n",
        "",
    ),
    ("alarms", "      MetricName: 5xx", "      MetricName: 4xx"),
    (
        "alarms",
        "Expression: FILL(errors, 0) - FILL(backoffs, 0)",
        "Expression: FILL(errors, 0)",
    ),
    (
        "alarms",
        "MetricName: BackoffInvocations",
        "MetricName: BackoffInvocation",
    ),
    (
        "tables",
        "PointInTimeRecoveryEnabled: true\n      OnDemandThroughput",
        "PointInTimeRecoveryEnabled: false\n      OnDemandThroughput",
    ),
    (
        "time index",
        "ProjectionType: ALL",
        "ProjectionType: KEYS_ONLY",
    ),
    (
        "time index",
        "QUERY_CONCURRENCY: !Ref QueryConcurrency\n          READINGS_TIME_INDEX: !If [HasTimeIndex, by-time, \"\"]",
        "QUERY_CONCURRENCY: !Ref QueryConcurrency\n          READINGS_TIME_INDEX: \"\"",
    ),
    (
        "query role",
        "Sid: ReadReadingsByTime\n                  Effect: Allow\n                  Action: dynamodb:Query\n                  Resource: !Sub \"${ReadingsTable.Arn}/index/by-time\"",
        "Sid: ReadReadingsByTime\n                  Effect: Allow\n                  Action: dynamodb:Query\n                  Resource: !Sub \"${ReadingsTable.Arn}/index/*\"",
    ),
    (
        "reserved concurrency",
        "    Default: 25\n    MinValue: -1",
        "    Default: 10\n    MinValue: -1",
    ),
    (
        "reserved concurrency",
        "        - HasQueryReservedConcurrency\n        - !Ref QueryReservedConcurrency",
        "        - HasQueryReservedConcurrency\n        - !Ref AWS::NoValue",
    ),
    (
        "front door off by default",
        "  IotFrontDoor:\n    Type: String\n    Default: disabled",
        "  IotFrontDoor:\n    Type: String\n    Default: enabled",
    ),
    (
        "queue senders",
        "                    - [!GetAtt IotRuleRole.Arn, !GetAtt IngestRole.Arn, !GetAtt DlqRedriveRole.Arn]",
        "                    - [!GetAtt IotRuleRole.Arn, !GetAtt IngestRole.Arn, !GetAtt DlqRedriveRole.Arn, \"*\"]",
    ),
    (
        "queue senders",
        "                          - !Join [\",\", !Ref QueuePublisherArns]",
        "                          - !GetAtt IngestRole.Arn",
    ),
    (
        "thing policy",
        ":client/${!iot:Connection.Thing.ThingName}",
        ":client/*",
    ),
    (
        "thing policy",
        "SELECT encode(*, 'base64') AS payload,\n",
        "SELECT *,\n",
    ),
    (
        "thing policy",
        "SELECT encode(*, 'base64') AS payload,",
        "SELECT * AS payload,",
    ),
    (
        "thing policy",
        "clientid() AS client, principal() AS principal FROM",
        "clientid() AS client FROM",
    ),
    (
        "basic ingest",
        "                - HasIotBasicIngest\n",
        "                - HasIotFrontDoor\n",
    ),
    (
        "basic ingest",
        "topic/$aws/rules/${RuleName}/devices/${!iot:Connection.Thing.ThingName}/readings\"",
        "topic/$aws/rules/*\"",
    ),
    (
        "basic ingest",
        "                  - RuleName: !Ref IotReadingsRule\n",
        "                  - RuleName: !Join [\"\", [!Ref AWS::StackName, \"_readings\"]]\n",
    ),
    (
        "basic ingest",
        "/$aws/rules/${RuleName}/devices/${!iot:Connection.Thing.ThingName}/readings",
        "/$aws/rules/${RuleName}/devices/*/readings",
    ),
    (
        "basic ingest",
        "WHEN 'devices' THEN topic(2)",
        "WHEN 'devices' THEN topic(3)",
    ),
    (
        "basic ingest",
        "CASE topic(1) WHEN 'shardline' THEN topic(3) WHEN 'devices' THEN topic(2) END AS thing",
        "topic(3) AS thing",
    ),
    (
        "basic ingest",
        "    Default: alongside\n",
        "    Default: only\n",
    ),
    (
        "basic ingest",
        "                - HasIotBrokerTopic\n",
        "                - HasIotFrontDoor\n",
    ),
    (
        "basic ingest",
        "  HasIotBasicIngest: !And [!Condition HasIotFrontDoor, !Not [!Equals [!Ref IotBasicIngest, disabled]]]\n",
        "  HasIotBasicIngest: !And [!Condition HasIotFrontDoor, !Not [!Equals [!Ref IotBasicIngest, only]]]\n",
    ),
    (
        "basic ingest",
        "      - \"$aws/rules/${RuleName}/devices/<thing name>/readings\"\n",
        "      - \"$aws/rules/${RuleName}/readings\"\n",
    ),
    (
        "invokers",
        "${AWS::AccountId}:${HttpApi}/*/GET/*\n",
        "${AWS::AccountId}:*\n",
    ),
    (
        "invokers",
        "      Description: HTTP API over the readings table",
        "      FunctionUrlConfig:\n        AuthType: NONE\n      Description: HTTP API over the readings table",
    ),
    (
        "invokers",
        "              - Sid: DeadLetter\n                Effect: Allow\n                Action: sqs:SendMessage\n",
        "              - Sid: DeadLetter\n                Effect: Allow\n                Action: [sqs:SendMessage, \"lambda:Invoke*\"]\n",
    ),
    (
        "publisher arns",
        "    AllowedPattern: \"(arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[!-~]+)?\"\n",
        "",
    ),
    (
        "publisher arns",
        "    AllowedPattern: \"(arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[!-~]+)?\"\n",
        "    AllowedPattern: \"(arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/.+)?\"\n",
    ),
    (
        "rule trust",
        "              ArnEquals:\n                aws:SourceArn: !Sub\n",
        "              ArnNotEquals:\n                aws:SourceArn: !Sub\n",
    ),
    (
        "rule trust",
        ":${AWS::AccountId}:rule/${RuleName}\"",
        ":${AWS::AccountId}:rule/${RuleName}*\"",
    ),
    (
        "rule trust",
        "      RuleName: !Join [\"\", [!Join [\"_\", !Split [\"-\", !Ref AWS::StackName]], \"_readings\"]]\n",
        "      RuleName: !Sub \"${AWS::StackName}-readings\"\n",
    ),
    (
        "rule trust",
        "                  - RuleName: !Join [\"\", [!Join [\"_\", !Split [\"-\", !Ref AWS::StackName]], \"_readings\"]]\n",
        "                  - RuleName: !Ref IotReadingsRule\n",
    ),
    (
        "dlq redrive",
        "                    - [!GetAtt IotRuleRole.Arn, !GetAtt IngestRole.Arn, !GetAtt DlqRedriveRole.Arn]",
        "                    - [!GetAtt IotRuleRole.Arn, !GetAtt IngestRole.Arn]",
    ),
    (
        "dlq redrive",
        "                Action: [sqs:SendMessage, sqs:GetQueueAttributes]\n                Resource: !GetAtt IngestQueue.Arn\n",
        "                Action: [sqs:SendMessage, sqs:GetQueueAttributes]\n                Resource: [!GetAtt IngestQueue.Arn, !GetAtt IngestDLQ.Arn]\n",
    ),
    (
        "front door key",
        "          FRONT_DOOR_SECRET_ARN: !If [HasIotFrontDoor, !Ref FrontDoorSecret, \"\"]\n",
        "",
    ),
    (
        "front door key",
        "              - Sid: CursorKey\n                Effect: Allow\n                Action: secretsmanager:GetSecretValue\n                Resource: !Ref CursorSecret\n",
        "              - Sid: CursorKey\n                Effect: Allow\n                Action: secretsmanager:GetSecretValue\n                Resource: [!Ref CursorSecret, !Ref FrontDoorSecret]\n",
    ),
    (
        "dlq senders",
        "                ArnNotEquals:\n                  aws:PrincipalArn: [!GetAtt IotRuleRole.Arn, !GetAtt IngestRole.Arn]\n",
        "",
    ),
    (
        "dlq senders",
        "                  aws:PrincipalArn: [!GetAtt IotRuleRole.Arn, !GetAtt IngestRole.Arn]\n",
        "                  aws:PrincipalArn: [!GetAtt IotRuleRole.Arn, !GetAtt IngestRole.Arn, \"*\"]\n",
    ),
    (
        "dlq senders",
        "                Bool:\n                  aws:PrincipalIsAWSService: \"false\"\n",
        "",
    ),
    (
        "dlq senders",
        "              Action: sqs:SendMessage\n              Resource: !GetAtt IngestDLQ.Arn\n",
        "              Action: sqs:SendMessage\n              Resource: !GetAtt IngestQueue.Arn\n",
    ),
    (
        "principals",
        "  IotPrincipals:\n    Type: String\n    Default: certificate\n",
        "  IotPrincipals:\n    Type: String\n    Default: any\n",
    ),
    (
        "principals",
        "    AllowedValues: [certificate, any]\n",
        "    AllowedValues: [any, certificate]\n",
    ),
    (
        "principals",
        "          IOT_PRINCIPALS: !Ref IotPrincipals\n",
        "          IOT_PRINCIPALS: any\n",
    ),
    (
        "rule role",
        "                Action: sqs:SendMessage\n                Resource: !GetAtt IngestDLQ.Arn\n\n",
        "                Action: sqs:SendMessage\n                Resource: !GetAtt ReadingsTable.Arn\n\n",
    ),
    (
        "rule role",
        "            Principal: { Service: iot.amazonaws.com }",
        "            Principal: { Service: lambda.amazonaws.com }",
    ),
    (
        "ingest role",
        "              - Sid: DeadLetter\n",
        "              - Sid: LateMarks\n                Effect: Allow\n                Action: dynamodb:PutItem\n                Resource: !GetAtt RollupTable.Arn\n              - Sid: DeadLetter\n",
    ),
    (
        "query role",
        "              - Sid: CursorKey\n",
        "              - Sid: Rollups\n                Effect: Allow\n                Action: [dynamodb:GetItem, dynamodb:PutItem]\n                Resource: !GetAtt RollupTable.Arn\n              - Sid: CursorKey\n",
    ),
    (
        "sealer role",
        "Sid: SealReadings\n                Effect: Allow\n                Action: dynamodb:Query\n",
        "Sid: SealReadings\n                Effect: Allow\n                Action: [dynamodb:Query, dynamodb:PutItem]\n",
    ),
    (
        "sealer role",
        "dynamodb:LeadingKeys: [\"r#*\"]",
        "dynamodb:LeadingKeys: [\"*\"]",
    ),
    (
        "sealer role",
        "Sid: SealShardMetadata\n                Effect: Allow\n                Action: [dynamodb:GetItem, dynamodb:BatchGetItem]",
        "Sid: SealShardMetadata\n                Effect: Allow\n                Action: [dynamodb:GetItem, dynamodb:BatchGetItem, dynamodb:UpdateItem]",
    ),
    (
        "sealer role",
        "dynamodb:PutItem, dynamodb:DeleteItem]\n                Resource: !GetAtt RollupTable.Arn",
        "dynamodb:PutItem, dynamodb:DeleteItem, dynamodb:Scan]\n                Resource: !GetAtt RollupTable.Arn",
    ),
    (
        "sealer role",
        "              # The shard directory, read as the query reads it\n",
        "              - !If\n                - HasTimeIndex\n                - Sid: SealReadingsByTime\n                  Effect: Allow\n                  Action: dynamodb:Query\n                  Resource: !Sub \"${ReadingsTable.Arn}/index/by-time\"\n                - !Ref AWS::NoValue\n              # The shard directory, read as the query reads it\n",
    ),
    (
        "sealer",
        "            Schedule: !Ref SealerSchedule",
        "            Schedule: rate(5 minutes)",
    ),
    (
        "sealer",
        "        MaximumRetryAttempts: 0",
        "        MaximumRetryAttempts: 2",
    ),
    (
        "sealer",
        "          # The ingest's: derived items expire with the readings they are made of.\n          RETENTION_DAYS: !Ref RetentionDays",
        "          # The ingest's: derived items expire with the readings they are made of.\n          RETENTION_DAYS: \"30\"",
    ),
    (
        "sealer",
        "          LATENESS_HORIZON_SECS: !Ref LatenessHorizonSecs\n          # The ingest's",
        "          LATENESS_HORIZON_SECS: \"600\"\n          # The ingest's",
    ),
    (
        "alarms",
        "MetricName: SealLagSeconds",
        "MetricName: SealLag",
    ),
    (
        "alarms",
        "          Value: !Ref SealerFunction\n",
        "          Value: !Ref QueryFunction\n",
    ),
    ("seal lag", "    Default: 7800\n", "    Default: 3600\n"),
    (
        "sealer layout",
        "      - Assert: !Equals [!Ref ShardStrategy, time-bucket]",
        "      - Assert: !Not [!Equals [!Ref ShardStrategy, unsharded]]",
    ),
    (
        "sealer layout",
        "      MetricName: UnsealableLayout",
        "      MetricName: UnsealableLayouts",
    ),
    (
        "sealer layout",
        "      Threshold: 1\n      ComparisonOperator: GreaterThanOrEqualToThreshold\n      TreatMissingData: notBreaching\n      AlarmActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]\n      OKActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]\n\n  # The sealer reports",
        "      Threshold: 3\n      ComparisonOperator: GreaterThanOrEqualToThreshold\n      TreatMissingData: notBreaching\n      AlarmActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]\n      OKActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]\n\n  # The sealer reports",
    ),
    (
        "seal lag",
        "TreatMissingData: breaching",
        "TreatMissingData: notBreaching",
    ),
    (
        "tables",
        "      BillingMode: PAY_PER_REQUEST\n",
        "      BillingMode: PROVISIONED\n",
    ),
    (
        "tables",
        "watermark carry none.\n      TimeToLiveSpecification:\n        AttributeName: ttl",
        "watermark carry none.\n      TimeToLiveSpecification:\n        AttributeName: expires",
    ),
    (
        "dashboard",
        "[\"Shardline\", \"LateMarksSealed\", \"Function\", \"sealer\"]",
        "[\"Shardline\", \"LateMarks\", \"Function\", \"sealer\"]",
    ),
    (
        "dashboard",
        "[\"Shardline\", \"SealLagSeconds\", \"Function\", \"sealer\",",
        "[\"Shardline\", \"SealLagSeconds\", \"Function\", \"ingest\",",
    ),
    (
        "sealer",
        "          LATENESS_HORIZON_SECS: !Ref LatenessHorizonSecs\n      Events:\n        Queue:",
        "          LATENESS_HORIZON_SECS: \"600\"\n      Events:\n        Queue:",
    ),
    (
        "ingest role",
        "dynamodb:LeadingKeys: [\"late#*\"]",
        "dynamodb:LeadingKeys: [\"*\"]",
    ),
    (
        "outputs",
        "    Value: !Ref RollupTable\n",
        "    Value: !Ref ShardsTable\n",
    ),
    (
        "query role",
        "Sid: ReadRollups\n                Effect: Allow\n                Action: [dynamodb:GetItem, dynamodb:Query]",
        "Sid: ReadRollups\n                Effect: Allow\n                Action: [dynamodb:GetItem, dynamodb:Query, dynamodb:PutItem]",
    ),
    (
        "query role",
        "Sid: ReadRollups\n                Effect: Allow\n                Action: [dynamodb:GetItem, dynamodb:Query]",
        "Sid: ReadRollups\n                Effect: Allow\n                Action: dynamodb:Query",
    ),
    (
        "query role",
        "# over the hours it sealed.\n          ROLLUP_TABLE: !Ref RollupTable",
        "# over the hours it sealed.\n          ROLLUP_TABLE: \"\"",
    ),
    (
        "api",
        "      RouteKey: GET /stats\n      AuthorizationType: !If [UseJwt, JWT, AWS_IAM]",
        "      RouteKey: GET /stats\n      AuthorizationType: !If [UseJwt, JWT, NONE]",
    ),
    (
        "api",
        "      RouteKey: GET /devices\n",
        "      RouteKey: GET /devices/{proxy+}\n",
    ),
    (
        "api",
        "      RouteKey: GET /series\n      AuthorizationType: !If [UseJwt, JWT, AWS_IAM]",
        "      RouteKey: GET /series\n      AuthorizationType: !If [UseJwt, JWT, NONE]",
    ),
];

/// Each edit breaks one promise; the named check must notice, and only checks that
/// fail on the edit count (the real template passes them all, see above).
#[test]
fn each_broken_promise_is_caught() -> Result<()> {
    let text = std::fs::read_to_string(template_path()?)?;
    for (name, from, to) in MUTATIONS {
        ensure!(
            text.matches(from).count() == 1,
            "mutation for {name}: {from:?} must occur exactly once in template.yaml"
        );
        let mutated = Template::parse(&text.replacen(from, to, 1), &[])?;
        let (_, check) = CHECKS
            .iter()
            .find(|(n, _)| *n == name)
            .with_context(|| format!("no check {name}"))?;
        match check(&mutated) {
            Ok(()) => bail!("check {name:?} passed on a template edited to break it ({to:?})"),
            Err(e) => eprintln!("{name}: caught: {e:#}"),
        }
    }
    Ok(())
}

/// The ingest's defaults for what the template passes are the template's: a function run
/// without the variable (locally, in a test) behaves as deployed.
#[test]
fn the_ingest_defaults_are_the_template_defaults() -> Result<()> {
    let template = Template::load(&[])?;
    assert_eq!(
        template.params.get("MaxInflight").map(String::as_str),
        Some(ingest::config::DEFAULT_MAX_INFLIGHT.to_string().as_str()),
        "MaxInflight's default and ingest::config::DEFAULT_MAX_INFLIGHT"
    );
    Ok(())
}
