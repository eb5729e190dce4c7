//! Creates the template's tables and queues on a local server, and builds SDK
//! configurations for it (the `provision` feature: this is where the AWS SDK comes in).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;
use aws_sdk_dynamodb::operation::create_table::builders::CreateTableFluentBuilder;
use aws_sdk_dynamodb::types as ddb;
use aws_sdk_sqs::types::QueueAttributeName;
use yaml_serde::{Mapping, Value};

use crate::stack::{
    Backend, DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LOCAL_REGION, Stack, Tables,
};
use crate::template::{Bindings, Resource, Template, scalar_string};

/// moto's fixed account id, used for ARNs resolved before a queue exists.
const LOCAL_ACCOUNT_ID: &str = "123456789012";

/// An SDK configuration for a local endpoint: static dummy credentials, fixed region,
/// no profile or instance metadata lookups that could reach beyond loopback.
pub async fn sdk_config(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(LOCAL_REGION))
        .endpoint_url(endpoint)
        .credentials_provider(dummy_credentials())
        .load()
        .await
}

/// The stand-in's static dummy credentials.
fn dummy_credentials() -> Credentials {
    Credentials::new(
        DUMMY_ACCESS_KEY_ID,
        DUMMY_SECRET_ACCESS_KEY,
        None,
        None,
        "shardline-stand-in",
    )
}

/// A DynamoDB client for a local `endpoint` (the credentials and region of
/// [`sdk_config`]) with the SDK's retries off, so every answer, a throttle or an
/// injected 5xx, reaches the caller: for tests and benchmarks that observe the
/// capacity-proxy. Built without loading any configuration, so it needs no runtime.
pub fn dynamodb_client_without_retries(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(LOCAL_REGION))
        .endpoint_url(endpoint)
        .credentials_provider(dummy_credentials())
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// Creates an on-demand table keyed by string attributes `pk` (partition) and `SK`
/// (sort): a table of the key shape the capacity-proxy's tests and benchmarks drive,
/// outside any template.
pub async fn create_pk_sk_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    pk: &str,
) -> Result<()> {
    let attribute = |attr: &str| {
        ddb::AttributeDefinition::builder()
            .attribute_name(attr)
            .attribute_type(ddb::ScalarAttributeType::S)
            .build()
    };
    let key = |attr: &str, kind: ddb::KeyType| {
        ddb::KeySchemaElement::builder()
            .attribute_name(attr)
            .key_type(kind)
            .build()
    };
    client
        .create_table()
        .table_name(name)
        .billing_mode(ddb::BillingMode::PayPerRequest)
        .attribute_definitions(attribute(pk)?)
        .attribute_definitions(attribute("SK")?)
        .key_schema(key(pk, ddb::KeyType::Hash)?)
        .key_schema(key("SK", ddb::KeyType::Range)?)
        .send()
        .await
        .with_context(|| format!("creating table {name}"))?;
    Ok(())
}

impl Stack {
    /// An SDK configuration for this stack's endpoint.
    pub async fn sdk_config(&self) -> SdkConfig {
        sdk_config(&self.endpoint).await
    }
}

/// Creates on moto every `AWS::DynamoDB::Table` and `AWS::SQS::Queue` of the template,
/// named `{prefix}-{LogicalId}`; existing ones are kept (queues get the template's
/// attributes again). Returns the stack by the logical ids `ReadingsTable`,
/// `ShardsTable`, `RollupTable`, `IngestQueue` and `IngestDLQ`.
pub async fn provision(endpoint: &str, template_path: &Path, prefix: &str) -> Result<Stack> {
    provision_with(endpoint, template_path, prefix, &[]).await
}

/// [`provision`] with parameter values in place of the template's defaults (`Name`,
/// `Value` pairs, as `sam deploy --parameter-overrides`); an unknown name is an error.
pub async fn provision_with(
    endpoint: &str,
    template_path: &Path,
    prefix: &str,
    parameters: &[(String, String)],
) -> Result<Stack> {
    let template = Template::load(template_path)?;
    let config = sdk_config(endpoint).await;
    let mut bindings = local_bindings(&template, prefix, parameters)?;
    let tables = create_tables(&template, &config, prefix, Backend::Moto, &mut bindings).await?;
    let queues = create_queues(&template, &config, prefix, &mut bindings).await?;
    let table = |id: &str| {
        tables
            .get(id)
            .cloned()
            .with_context(|| format!("template.yaml declares no table {id}"))
    };
    let queue = |id: &str| {
        queues
            .get(id)
            .cloned()
            .with_context(|| format!("template.yaml declares no queue {id}"))
    };
    let table_name = table("ReadingsTable")?;
    let readings_time_index =
        time_index(&aws_sdk_dynamodb::Client::new(&config), &table_name).await?;
    Ok(Stack {
        endpoint: endpoint.to_owned(),
        region: LOCAL_REGION.to_owned(),
        table_name,
        readings_time_index,
        shard_table_name: table("ShardsTable")?,
        rollup_table_name: table("RollupTable")?,
        queue_url: queue("IngestQueue")?,
        dlq_url: queue("IngestDLQ")?,
        tables,
        queues,
    })
}

/// The name of `table`'s local secondary index sorted by `ts_ms`, if it has one.
pub async fn time_index(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<Option<String>> {
    let described = client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| anyhow!(e).context(format!("DescribeTable {table}")))?;
    Ok(described
        .table
        .and_then(|t| t.local_secondary_indexes)
        .unwrap_or_default()
        .into_iter()
        .find(|lsi| {
            lsi.key_schema()
                .iter()
                .any(|k| k.attribute_name() == "ts_ms" && k.key_type() == &ddb::KeyType::Range)
        })
        .and_then(|lsi| lsi.index_name))
}

/// Creates only the DynamoDB tables of the template (e.g. on dynalite).
pub async fn provision_tables(
    endpoint: &str,
    template_path: &Path,
    prefix: &str,
    backend: Backend,
) -> Result<Tables> {
    provision_tables_with(endpoint, template_path, prefix, backend, &[]).await
}

/// [`provision_tables`] with parameter values in place of the template's defaults.
pub async fn provision_tables_with(
    endpoint: &str,
    template_path: &Path,
    prefix: &str,
    backend: Backend,
    parameters: &[(String, String)],
) -> Result<Tables> {
    let template = Template::load(template_path)?;
    let config = sdk_config(endpoint).await;
    let mut bindings = local_bindings(&template, prefix, parameters)?;
    let names = create_tables(&template, &config, prefix, backend, &mut bindings).await?;
    Ok(Tables {
        endpoint: endpoint.to_owned(),
        region: LOCAL_REGION.to_owned(),
        names,
    })
}

fn local_bindings(
    template: &Template,
    prefix: &str,
    parameters: &[(String, String)],
) -> Result<Bindings> {
    for (name, _) in parameters {
        if template.parameter_default(name).is_none() {
            bail!("template.yaml has no parameter {name} with a default to override");
        }
    }
    Ok(Bindings {
        region: LOCAL_REGION.to_owned(),
        account_id: LOCAL_ACCOUNT_ID.to_owned(),
        stack_name: prefix.to_owned(),
        parameters: parameters.iter().cloned().collect(),
        ..Bindings::default()
    })
}

fn local_name(prefix: &str, logical_id: &str) -> String {
    format!("{prefix}-{logical_id}")
}

async fn create_tables(
    template: &Template,
    config: &SdkConfig,
    prefix: &str,
    backend: Backend,
    bindings: &mut Bindings,
) -> Result<BTreeMap<String, String>> {
    let client = aws_sdk_dynamodb::Client::new(config);
    let mut names = BTreeMap::new();
    for resource in template.resources_of("AWS::DynamoDB::Table")? {
        let name = local_name(prefix, &resource.logical_id);
        let props = resolved_properties(template, resource, bindings)?;
        create_table(&client, &name, &props, backend)
            .await
            .with_context(|| format!("creating table {} ({name})", resource.logical_id))?;
        let arn = format!("arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT_ID}:table/{name}");
        bindings
            .refs
            .insert(resource.logical_id.clone(), name.clone());
        bindings
            .attributes
            .insert(format!("{}.Arn", resource.logical_id), arn);
        names.insert(resource.logical_id.clone(), name);
    }
    Ok(names)
}

async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    props: &Mapping,
    backend: Backend,
) -> Result<()> {
    if !table_exists(client, name).await? {
        create_table_request(client, name, props, backend)?
            .send()
            .await
            .map_err(|e| anyhow!(e).context("CreateTable"))?;
    }
    wait_active(client, name).await?;
    if backend == Backend::Moto {
        if let Some(ttl) = props.get("TimeToLiveSpecification") {
            update_time_to_live(client, name, ttl).await?;
        }
        if let Some(pitr) = props.get("PointInTimeRecoverySpecification") {
            update_point_in_time_recovery(client, name, pitr).await?;
        }
    }
    Ok(())
}

async fn table_exists(client: &aws_sdk_dynamodb::Client, name: &str) -> Result<bool> {
    match client.describe_table().table_name(name).send().await {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Ok(false)
        }
        Err(e) => Err(anyhow!(e).context("DescribeTable")),
    }
}

/// The `CreateTable` call for a table of properties `props` (its SSE settings on moto
/// only).
fn create_table_request(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    props: &Mapping,
    backend: Backend,
) -> Result<CreateTableFluentBuilder> {
    let mut create = client
        .create_table()
        .table_name(name)
        .set_key_schema(Some(key_schema(get(props, "KeySchema")?)?))
        .set_attribute_definitions(Some(attribute_definitions(get(
            props,
            "AttributeDefinitions",
        )?)?));
    let billing = opt_str(props, "BillingMode")?.unwrap_or_else(|| "PROVISIONED".to_owned());
    create = create.billing_mode(ddb::BillingMode::from(billing.as_str()));
    if let Some(pt) = props.get("ProvisionedThroughput") {
        create = create.provisioned_throughput(throughput(pt)?);
    }
    if let Some(list) = props.get("GlobalSecondaryIndexes") {
        for gsi in seq(list, "GlobalSecondaryIndexes")? {
            create = create.global_secondary_indexes(global_secondary_index(gsi)?);
        }
    }
    if let Some(list) = props.get("LocalSecondaryIndexes") {
        for lsi in seq(list, "LocalSecondaryIndexes")? {
            create = create.local_secondary_indexes(local_secondary_index(lsi)?);
        }
    }
    if let Some(stream) = props.get("StreamSpecification") {
        let view = req_str(stream, "StreamViewType")?;
        create = create.stream_specification(
            ddb::StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(ddb::StreamViewType::from(view.as_str()))
                .build()?,
        );
    }
    if backend == Backend::Moto
        && let Some(sse) = props.get("SSESpecification")
    {
        create = create.sse_specification(sse_specification(sse)?);
    }
    Ok(create)
}

fn global_secondary_index(gsi: &Value) -> Result<ddb::GlobalSecondaryIndex> {
    let mut index = ddb::GlobalSecondaryIndex::builder()
        .index_name(req_str(gsi, "IndexName")?)
        .set_key_schema(Some(key_schema(get(map(gsi)?, "KeySchema")?)?))
        .projection(projection(get(map(gsi)?, "Projection")?)?);
    if let Some(pt) = gsi.get("ProvisionedThroughput") {
        index = index.provisioned_throughput(throughput(pt)?);
    }
    Ok(index.build()?)
}

fn local_secondary_index(lsi: &Value) -> Result<ddb::LocalSecondaryIndex> {
    Ok(ddb::LocalSecondaryIndex::builder()
        .index_name(req_str(lsi, "IndexName")?)
        .set_key_schema(Some(key_schema(get(map(lsi)?, "KeySchema")?)?))
        .projection(projection(get(map(lsi)?, "Projection")?)?)
        .build()?)
}

fn sse_specification(sse: &Value) -> Result<ddb::SseSpecification> {
    let mut spec = ddb::SseSpecification::builder().enabled(req_bool(sse, "SSEEnabled")?);
    if let Some(kind) = opt_str(map(sse)?, "SSEType")? {
        spec = spec.sse_type(ddb::SseType::from(kind.as_str()));
    }
    if let Some(key) = opt_str(map(sse)?, "KMSMasterKeyId")? {
        spec = spec.kms_master_key_id(key);
    }
    Ok(spec.build())
}

/// Sets the table's TTL as `ttl` declares it, where it differs from the current one.
async fn update_time_to_live(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    ttl: &Value,
) -> Result<()> {
    let enabled = req_bool(ttl, "Enabled")?;
    let attribute = req_str(ttl, "AttributeName")?;
    let current = client
        .describe_time_to_live()
        .table_name(name)
        .send()
        .await
        .map_err(|e| anyhow!(e).context("DescribeTimeToLive"))?;
    let desc = current.time_to_live_description();
    let on = matches!(
        desc.and_then(|d| d.time_to_live_status()),
        Some(ddb::TimeToLiveStatus::Enabled | ddb::TimeToLiveStatus::Enabling)
    );
    let same_attr = desc.and_then(|d| d.attribute_name()) == Some(attribute.as_str());
    // Real DynamoDB refuses a no-op TTL update, so only change what differs.
    if on != enabled || (enabled && !same_attr) {
        client
            .update_time_to_live()
            .table_name(name)
            .time_to_live_specification(
                ddb::TimeToLiveSpecification::builder()
                    .attribute_name(attribute)
                    .enabled(enabled)
                    .build()?,
            )
            .send()
            .await
            .map_err(|e| anyhow!(e).context("UpdateTimeToLive"))?;
    }
    Ok(())
}

async fn update_point_in_time_recovery(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    pitr: &Value,
) -> Result<()> {
    let enabled = req_bool(pitr, "PointInTimeRecoveryEnabled")?;
    client
        .update_continuous_backups()
        .table_name(name)
        .point_in_time_recovery_specification(
            ddb::PointInTimeRecoverySpecification::builder()
                .point_in_time_recovery_enabled(enabled)
                .build()?,
        )
        .send()
        .await
        .map_err(|e| anyhow!(e).context("UpdateContinuousBackups"))?;
    Ok(())
}

async fn wait_active(client: &aws_sdk_dynamodb::Client, name: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(|e| anyhow!(e).context("DescribeTable"))?;
        let status = out.table().and_then(|t| t.table_status()).cloned();
        if status == Some(ddb::TableStatus::Active) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("table {name} not ACTIVE after 30 s (status {status:?})");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create_queues(
    template: &Template,
    config: &SdkConfig,
    prefix: &str,
    bindings: &mut Bindings,
) -> Result<BTreeMap<String, String>> {
    let client = aws_sdk_sqs::Client::new(config);
    let mut pending: Vec<&Resource> = template.resources_of("AWS::SQS::Queue")?;
    let mut urls = BTreeMap::new();
    // A queue whose properties refer to another queue (RedrivePolicy -> DLQ ARN) waits
    // for that queue; each pass must create at least one queue.
    while !pending.is_empty() {
        let created_before = urls.len();
        let mut waiting = Vec::new();
        let mut last_error = None;
        for resource in pending {
            let props = match resolved_properties(template, resource, bindings) {
                Ok(props) => props,
                Err(e) => {
                    last_error = Some(e);
                    waiting.push(resource);
                    continue;
                }
            };
            let is_fifo = props.get("FifoQueue").and_then(scalar_string).as_deref() == Some("true");
            let mut name = local_name(prefix, &resource.logical_id);
            if is_fifo {
                name.push_str(".fifo");
            }
            let url = create_queue(&client, &name, &props)
                .await
                .with_context(|| format!("creating queue {} ({name})", resource.logical_id))?;
            let arn = client
                .get_queue_attributes()
                .queue_url(&url)
                .attribute_names(QueueAttributeName::QueueArn)
                .send()
                .await
                .map_err(|e| anyhow!(e).context("GetQueueAttributes"))?
                .attributes()
                .and_then(|a| a.get(&QueueAttributeName::QueueArn))
                .cloned()
                .with_context(|| format!("queue {name} has no ARN"))?;
            let id = &resource.logical_id;
            bindings.refs.insert(id.clone(), url.clone());
            bindings.attributes.insert(format!("{id}.Arn"), arn);
            bindings
                .attributes
                .insert(format!("{id}.QueueName"), name.clone());
            bindings
                .attributes
                .insert(format!("{id}.QueueUrl"), url.clone());
            urls.insert(id.clone(), url);
        }
        if created_before == urls.len()
            && let Some(e) = last_error
        {
            return Err(e.context("queue properties refer to something that cannot be created"));
        }
        pending = waiting;
    }
    Ok(urls)
}

async fn create_queue(client: &aws_sdk_sqs::Client, name: &str, props: &Mapping) -> Result<String> {
    let mut attributes = queue_attributes(props)?;
    match client.get_queue_url().queue_name(name).send().await {
        Ok(found) => {
            let url = found
                .queue_url()
                .context("GetQueueUrl returned no URL")?
                .to_owned();
            // FifoQueue cannot be changed after creation.
            attributes.remove(&QueueAttributeName::FifoQueue);
            if !attributes.is_empty() {
                client
                    .set_queue_attributes()
                    .queue_url(&url)
                    .set_attributes(Some(attributes))
                    .send()
                    .await
                    .map_err(|e| anyhow!(e).context("SetQueueAttributes"))?;
            }
            Ok(url)
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_queue_does_not_exist()) =>
        {
            let out = client
                .create_queue()
                .queue_name(name)
                .set_attributes(Some(attributes))
                .send()
                .await
                .map_err(|e| anyhow!(e).context("CreateQueue"))?;
            Ok(out
                .queue_url()
                .context("CreateQueue returned no URL")?
                .to_owned())
        }
        Err(e) => Err(anyhow!(e).context("GetQueueUrl")),
    }
}

fn queue_attributes(
    props: &Mapping,
) -> Result<std::collections::HashMap<QueueAttributeName, String>> {
    let mut out = std::collections::HashMap::new();
    for (key, value) in props {
        let key = key.as_str().context("queue property name")?;
        let attribute = match key {
            "VisibilityTimeout" => QueueAttributeName::VisibilityTimeout,
            "MessageRetentionPeriod" => QueueAttributeName::MessageRetentionPeriod,
            "DelaySeconds" => QueueAttributeName::DelaySeconds,
            "MaximumMessageSize" => QueueAttributeName::MaximumMessageSize,
            "ReceiveMessageWaitTimeSeconds" => QueueAttributeName::ReceiveMessageWaitTimeSeconds,
            "SqsManagedSseEnabled" => QueueAttributeName::SqsManagedSseEnabled,
            "KmsMasterKeyId" => QueueAttributeName::KmsMasterKeyId,
            "KmsDataKeyReusePeriodSeconds" => QueueAttributeName::KmsDataKeyReusePeriodSeconds,
            "FifoQueue" => QueueAttributeName::FifoQueue,
            "ContentBasedDeduplication" => QueueAttributeName::ContentBasedDeduplication,
            "DeduplicationScope" => QueueAttributeName::DeduplicationScope,
            "FifoThroughputLimit" => QueueAttributeName::FifoThroughputLimit,
            "RedrivePolicy" => {
                out.insert(QueueAttributeName::RedrivePolicy, redrive_json(value)?);
                continue;
            }
            "RedriveAllowPolicy" => {
                out.insert(QueueAttributeName::RedriveAllowPolicy, json_of(value)?);
                continue;
            }
            // QueueName is replaced by the local name; tags do not matter locally.
            "QueueName" | "Tags" => continue,
            other => bail!("queue property {other} is not supported by the local stand-in"),
        };
        let text = scalar_string(value)
            .with_context(|| format!("queue property {key} is not a scalar"))?;
        out.insert(attribute, text);
    }
    Ok(out)
}

/// RedrivePolicy as SQS wants it: JSON with a numeric `maxReceiveCount` (a `!Ref`
/// to a Number parameter resolves to a string).
fn redrive_json(value: &Value) -> Result<String> {
    let policy = map(value).context("RedrivePolicy must be a mapping")?;
    let target = req_str(value, "deadLetterTargetArn")?;
    let count: u64 = scalar_string(get(policy, "maxReceiveCount")?)
        .context("maxReceiveCount is not a scalar")?
        .parse()
        .context("maxReceiveCount is not a whole number")?;
    Ok(serde_json::json!({ "deadLetterTargetArn": target, "maxReceiveCount": count }).to_string())
}

fn json_of(value: &Value) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => Ok(serde_json::to_string(other)?),
    }
}

fn resolved_properties(template: &Template, resource: &Resource, b: &Bindings) -> Result<Mapping> {
    match template.resolve(&Value::Mapping(resource.properties.clone()), b)? {
        Value::Mapping(m) => Ok(m),
        _ => bail!(
            "{}.Properties did not resolve to a mapping",
            resource.logical_id
        ),
    }
}

fn get<'a>(props: &'a Mapping, key: &str) -> Result<&'a Value> {
    props
        .get(key)
        .with_context(|| format!("missing property {key}"))
}

fn map(value: &Value) -> Result<&Mapping> {
    value.as_mapping().context("expected a mapping")
}

fn seq<'a>(value: &'a Value, what: &str) -> Result<&'a Vec<Value>> {
    value
        .as_sequence()
        .with_context(|| format!("{what} must be a list"))
}

fn opt_str(props: &Mapping, key: &str) -> Result<Option<String>> {
    props
        .get(key)
        .map(|v| scalar_string(v).with_context(|| format!("{key} is not a scalar")))
        .transpose()
}

fn req_str(value: &Value, key: &str) -> Result<String> {
    opt_str(map(value)?, key)?.with_context(|| format!("missing {key}"))
}

fn req_bool(value: &Value, key: &str) -> Result<bool> {
    match req_str(value, key)?.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => bail!("{key} is not a boolean: {other}"),
    }
}

fn key_schema(value: &Value) -> Result<Vec<ddb::KeySchemaElement>> {
    seq(value, "KeySchema")?
        .iter()
        .map(|k| {
            Ok(ddb::KeySchemaElement::builder()
                .attribute_name(req_str(k, "AttributeName")?)
                .key_type(ddb::KeyType::from(req_str(k, "KeyType")?.as_str()))
                .build()?)
        })
        .collect()
}

fn attribute_definitions(value: &Value) -> Result<Vec<ddb::AttributeDefinition>> {
    seq(value, "AttributeDefinitions")?
        .iter()
        .map(|a| {
            Ok(ddb::AttributeDefinition::builder()
                .attribute_name(req_str(a, "AttributeName")?)
                .attribute_type(ddb::ScalarAttributeType::from(
                    req_str(a, "AttributeType")?.as_str(),
                ))
                .build()?)
        })
        .collect()
}

fn throughput(value: &Value) -> Result<ddb::ProvisionedThroughput> {
    let units = |key: &str| -> Result<i64> {
        req_str(value, key)?
            .parse()
            .with_context(|| format!("{key} is not a number"))
    };
    Ok(ddb::ProvisionedThroughput::builder()
        .read_capacity_units(units("ReadCapacityUnits")?)
        .write_capacity_units(units("WriteCapacityUnits")?)
        .build()?)
}

fn projection(value: &Value) -> Result<ddb::Projection> {
    let mut p = ddb::Projection::builder();
    if let Some(kind) = opt_str(map(value)?, "ProjectionType")? {
        p = p.projection_type(ddb::ProjectionType::from(kind.as_str()));
    }
    if let Some(attrs) = map(value)?.get("NonKeyAttributes") {
        for a in seq(attrs, "NonKeyAttributes")? {
            p = p.non_key_attributes(scalar_string(a).context("NonKeyAttributes item")?);
        }
    }
    Ok(p.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redrive_count_becomes_a_number() {
        let v: Value =
            yaml_serde::from_str("{deadLetterTargetArn: 'arn:x', maxReceiveCount: '5'}").unwrap();
        let json: serde_json::Value = serde_json::from_str(&redrive_json(&v).unwrap()).unwrap();
        assert_eq!(json["maxReceiveCount"], 5);
        assert_eq!(json["deadLetterTargetArn"], "arn:x");
    }

    #[test]
    fn unsupported_queue_properties_are_refused() {
        let props: Mapping = yaml_serde::from_str("{Bogus: 1}").unwrap();
        assert!(queue_attributes(&props).is_err());
    }
}
