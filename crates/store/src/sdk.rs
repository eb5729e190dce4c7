//! What a Lambda function sets up at its start, one way for the ingest and the query:
//! the AWS SDK configuration, so both read the region, credentials and endpoint the same
//! way (the function's environment, `AWS_ENDPOINT_URL` included, which `cargo lambda
//! watch` and the local stand-in use), and the logs.

use std::time::Duration;

use aws_config::environment::{
    EnvironmentVariableCredentialsProvider, EnvironmentVariableRegionProvider,
};
use aws_config::meta::region::ProvideRegion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};

/// How long a connection may take to open: the SDK loader's default.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(3_100);

/// The configuration from the function's environment, as Lambda sets it, with the SDK's
/// latest behaviour: the region (`AWS_REGION`, else `AWS_DEFAULT_REGION`), the
/// function role's credentials (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`), and the endpoint settings of [`EndpointsFromEnv`]; standard
/// retries and a connect timeout of 3.1 s, as the SDK's loader sets them (the writer
/// and the reads set their own retries, `store::dynamo`, `store::read`); the SDK's
/// defaults for the rest (the HTTP client, the sleep and time sources).
///
/// Not `aws_config::load_defaults`: a Lambda function's credentials and region are
/// always in its environment, and the default chains' other sources (profile files,
/// SSO, STS web identity, the container and instance metadata endpoints) are about
/// 1 MB of each function's binary (bench item 6). The operator CLI keeps the chains.
pub async fn lambda_config() -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(EnvironmentVariableRegionProvider::new().region().await)
        .credentials_provider(SharedCredentialsProvider::new(
            EnvironmentVariableCredentialsProvider::new(),
        ))
        .service_config(EndpointsFromEnv)
        .retry_config(RetryConfig::standard())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .build(),
        )
        .build()
}

/// A service's endpoint from the environment, as the SDK's loader reads it there: the
/// service's own `AWS_ENDPOINT_URL_<SERVICE>` (its id in capitals, spaces as `_`:
/// `AWS_ENDPOINT_URL_SQS`, `AWS_ENDPOINT_URL_DYNAMODB`), else `AWS_ENDPOINT_URL`; none
/// when `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS` is true. `cargo lambda watch` and the
/// local stand-ins point the functions at loopback this way.
#[derive(Debug, Clone, Copy)]
pub struct EndpointsFromEnv;

impl LoadServiceConfig for EndpointsFromEnv {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        service_setting(key.env(), key.service_id(), |name| std::env::var(name).ok())
    }
}

/// The setting `env` of the service `service_id` from `lookup` (see [`EndpointsFromEnv`]).
fn service_setting(
    env: &str,
    service_id: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let ignored = lookup("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
        .is_some_and(|value| value.trim().eq_ignore_ascii_case("true"));
    if ignored && env == "AWS_ENDPOINT_URL" {
        return None;
    }
    let service = service_id.to_ascii_uppercase().replace([' ', '-'], "_");
    lookup(&format!("{env}_{service}"))
        .or_else(|| lookup(env))
        .filter(|value| !value.trim().is_empty())
}

/// Logs as the Lambda runtime's default subscriber does, by a level alone: the level
/// from `AWS_LAMBDA_LOG_LEVEL` (the template's `LogLevel`), else `RUST_LOG`, else INFO;
/// JSON lines when `AWS_LAMBDA_LOG_FORMAT` is JSON (the template's `LogFormat`). No
/// per-target directives, so no `EnvFilter` and its regex engine in either binary (about
/// 190 KB of each).
pub fn init_logs() {
    use tracing_subscriber::filter::LevelFilter;
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok()
        .and_then(|text| text.trim().parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::INFO);
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let logs = tracing_subscriber::fmt()
        .with_target(false)
        .without_time()
        .with_max_level(level);
    if json {
        logs.json().init();
    } else {
        logs.init();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
        |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    /// What the SDK's loader would have set and the functions rely on: credentials,
    /// endpoints from the environment, standard retries and a connect timeout.
    #[tokio::test]
    async fn the_functions_config_keeps_the_loaders_retries_and_timeouts() {
        let config = lambda_config().await;
        assert!(config.credentials_provider().is_some());
        assert!(config.service_config().is_some());
        assert_eq!(config.retry_config(), Some(&RetryConfig::standard()));
        assert_eq!(
            config
                .timeout_config()
                .and_then(TimeoutConfig::connect_timeout),
            Some(CONNECT_TIMEOUT)
        );
    }

    #[test]
    fn a_services_own_endpoint_comes_before_the_shared_one() {
        let vars = [
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:4000"),
            ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:5000"),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", "http://127.0.0.1:6000"),
        ];
        let setting = |id| service_setting("AWS_ENDPOINT_URL", id, lookup(&vars));
        assert_eq!(setting("SQS").as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!(
            setting("Secrets Manager").as_deref(),
            Some("http://127.0.0.1:6000")
        );
        assert_eq!(
            setting("DynamoDB").as_deref(),
            Some("http://127.0.0.1:4000")
        );
    }

    #[test]
    fn no_endpoint_is_aws_own_and_configured_ones_can_be_ignored() {
        assert_eq!(
            service_setting("AWS_ENDPOINT_URL", "DynamoDB", lookup(&[])),
            None
        );
        let vars = [
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:4000"),
            ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:5000"),
            ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "TRUE"),
        ];
        assert_eq!(
            service_setting("AWS_ENDPOINT_URL", "SQS", lookup(&vars)),
            None
        );
        assert_eq!(
            service_setting("AWS_ENDPOINT_URL", "DynamoDB", lookup(&vars)),
            None
        );
        let empty = [("AWS_ENDPOINT_URL", " ")];
        assert_eq!(
            service_setting("AWS_ENDPOINT_URL", "DynamoDB", lookup(&empty)),
            None
        );
    }
}
