//! Reading `template.yaml`: resources, parameters, and the CloudFormation intrinsic
//! functions the local stand-in needs to resolve property values.
//!
//! Short-form tags (`!Ref X`, `!GetAtt X.Arn`, `!Sub ...`, `!If [...]`, ...) arrive from
//! yaml_serde as tagged values; long forms (`Ref:`, `Fn::GetAtt:`) as one-key maps.
//! Both resolve through the same code.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use yaml_serde::{Mapping, Value};

/// A parsed CloudFormation/SAM template.
#[derive(Debug, Clone)]
pub struct Template {
    parameters: Mapping,
    conditions: Mapping,
    resources: BTreeMap<String, Resource>,
}

/// One entry of `Resources`, properties unresolved.
#[derive(Debug, Clone)]
pub struct Resource {
    pub logical_id: String,
    pub kind: String,
    pub condition: Option<String>,
    pub properties: Mapping,
}

/// What a reference to a resource resolves to locally.
#[derive(Debug, Clone, Default)]
pub struct Bindings {
    /// Logical id -> value of `!Ref` (table name, queue URL).
    pub refs: BTreeMap<String, String>,
    /// `Logical.Attribute` -> value of `!GetAtt` (e.g. `IngestDLQ.Arn`).
    pub attributes: BTreeMap<String, String>,
    pub region: String,
    pub account_id: String,
    pub stack_name: String,
    /// Parameter values that replace their `Default`, as `sam deploy
    /// --parameter-overrides` does.
    pub parameters: BTreeMap<String, String>,
}

impl Template {
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("parsing {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self> {
        let doc: Value = yaml_serde::from_str(text)?;
        let section = |name: &str| -> Result<Mapping> {
            match doc.get(name) {
                None | Some(Value::Null) => Ok(Mapping::new()),
                Some(Value::Mapping(m)) => Ok(m.clone()),
                Some(_) => bail!("{name} is not a mapping"),
            }
        };
        let mut resources = BTreeMap::new();
        for (id, body) in section("Resources")? {
            let id = id
                .as_str()
                .context("resource id is not a string")?
                .to_owned();
            let kind = body
                .get("Type")
                .and_then(Value::as_str)
                .with_context(|| format!("resource {id} has no Type"))?
                .to_owned();
            let condition = body
                .get("Condition")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let properties = match body.get("Properties") {
                None | Some(Value::Null) => Mapping::new(),
                Some(Value::Mapping(m)) => m.clone(),
                Some(_) => bail!("{id}.Properties is not a mapping"),
            };
            resources.insert(
                id.clone(),
                Resource {
                    logical_id: id,
                    kind,
                    condition,
                    properties,
                },
            );
        }
        Ok(Self {
            parameters: section("Parameters")?,
            conditions: section("Conditions")?,
            resources,
        })
    }

    /// Resources of one type (e.g. `AWS::DynamoDB::Table`) whose condition holds.
    pub fn resources_of(&self, kind: &str) -> Result<Vec<&Resource>> {
        let mut out = Vec::new();
        for resource in self.resources.values().filter(|r| r.kind == kind) {
            let included = match &resource.condition {
                None => true,
                Some(name) => self.condition(name, &Bindings::default())?,
            };
            if included {
                out.push(resource);
            }
        }
        Ok(out)
    }

    pub fn resource(&self, logical_id: &str) -> Option<&Resource> {
        self.resources.get(logical_id)
    }

    /// A parameter's `Default`, as a scalar string.
    pub fn parameter_default(&self, name: &str) -> Option<String> {
        self.parameters
            .get(name)
            .and_then(|p| p.get("Default"))
            .and_then(scalar_string)
    }

    /// Resolves every intrinsic function inside `value` to a plain value.
    pub fn resolve(&self, value: &Value, b: &Bindings) -> Result<Value> {
        match value {
            Value::Tagged(tagged) => {
                let tag = tagged.tag.to_string();
                let name = tag.trim_start_matches('!');
                let function = if name == "Ref" || name == "Condition" {
                    name.to_owned()
                } else {
                    format!("Fn::{name}")
                };
                self.call(&function, &tagged.value, b)
            }
            Value::Mapping(map) => {
                if map.len() == 1
                    && let Some((Value::String(key), arg)) = map.iter().next()
                    && (key == "Ref" || key == "Condition" || key.starts_with("Fn::"))
                {
                    return self.call(key, arg, b);
                }
                let mut out = Mapping::new();
                for (k, v) in map {
                    let resolved = self.resolve(v, b)?;
                    // `!Ref AWS::NoValue` (usually from an `!If` branch) removes the property.
                    if !is_no_value(&resolved) {
                        out.insert(k.clone(), resolved);
                    }
                }
                Ok(Value::Mapping(out))
            }
            Value::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                for v in items {
                    let resolved = self.resolve(v, b)?;
                    if !is_no_value(&resolved) {
                        out.push(resolved);
                    }
                }
                Ok(Value::Sequence(out))
            }
            other => Ok(other.clone()),
        }
    }

    fn call(&self, function: &str, arg: &Value, b: &Bindings) -> Result<Value> {
        match function {
            "Ref" => {
                let name = arg.as_str().context("!Ref takes a name")?;
                if name == NO_VALUE {
                    return Ok(no_value());
                }
                self.reference(name, b).map(Value::String)
            }
            "Condition" => {
                let name = arg.as_str().context("Condition takes a name")?;
                self.condition(name, b).map(Value::Bool)
            }
            "Fn::GetAtt" => {
                let key = match arg {
                    Value::String(s) => s.clone(),
                    Value::Sequence(parts) => parts
                        .iter()
                        .map(|p| {
                            self.resolve(p, b)
                                .map(|v| scalar_string(&v).unwrap_or_default())
                        })
                        .collect::<Result<Vec<_>>>()?
                        .join("."),
                    _ => bail!("!GetAtt takes Logical.Attribute"),
                };
                b.attributes
                    .get(&key)
                    .cloned()
                    .map(Value::String)
                    .with_context(|| format!("!GetAtt {key}: not known locally (created yet?)"))
            }
            "Fn::Sub" => {
                let (text, vars) = match arg {
                    Value::String(s) => (s.clone(), Mapping::new()),
                    Value::Sequence(parts) if parts.len() == 2 => (
                        parts[0].as_str().context("!Sub text")?.to_owned(),
                        match self.resolve(&parts[1], b)? {
                            Value::Mapping(m) => m,
                            _ => bail!("!Sub variables must be a mapping"),
                        },
                    ),
                    _ => bail!("!Sub takes a string or [string, variables]"),
                };
                self.substitute(&text, &vars, b).map(Value::String)
            }
            "Fn::If" => {
                let parts = arg
                    .as_sequence()
                    .filter(|p| p.len() == 3)
                    .context("!If takes [condition, then, else]")?;
                let name = parts[0].as_str().context("!If condition name")?;
                let branch = if self.condition(name, b)? {
                    &parts[1]
                } else {
                    &parts[2]
                };
                self.resolve(branch, b)
            }
            "Fn::Join" => {
                let parts = arg
                    .as_sequence()
                    .filter(|p| p.len() == 2)
                    .context("!Join takes [sep, list]")?;
                let sep = parts[0].as_str().context("!Join separator")?;
                let list = self.resolve(&parts[1], b)?;
                let items = list.as_sequence().context("!Join list")?;
                let strings: Vec<String> = items
                    .iter()
                    .map(|v| scalar_string(v).context("!Join item is not a scalar"))
                    .collect::<Result<_>>()?;
                Ok(Value::String(strings.join(sep)))
            }
            "Fn::Select" => {
                let parts = arg
                    .as_sequence()
                    .filter(|p| p.len() == 2)
                    .context("!Select takes [index, list]")?;
                let index: usize = scalar_string(&self.resolve(&parts[0], b)?)
                    .context("!Select index")?
                    .parse()
                    .context("!Select index")?;
                let list = self.resolve(&parts[1], b)?;
                list.as_sequence()
                    .and_then(|l| l.get(index))
                    .cloned()
                    .context("!Select index out of range")
            }
            "Fn::Equals" | "Fn::And" | "Fn::Or" | "Fn::Not" => {
                self.boolean(function, arg, b).map(Value::Bool)
            }
            other => bail!("{other} is not supported by the local stand-in"),
        }
    }

    fn reference(&self, name: &str, b: &Bindings) -> Result<String> {
        match name {
            "AWS::Region" => return Ok(b.region.clone()),
            "AWS::AccountId" => return Ok(b.account_id.clone()),
            "AWS::StackName" => return Ok(b.stack_name.clone()),
            "AWS::Partition" => return Ok("aws".into()),
            "AWS::URLSuffix" => return Ok("amazonaws.com".into()),
            "AWS::NoValue" => bail!("AWS::NoValue is only valid as a whole property"),
            _ => {}
        }
        if self.parameters.contains_key(name) {
            if let Some(value) = b.parameters.get(name) {
                return Ok(value.clone());
            }
            return self
                .parameter_default(name)
                .with_context(|| format!("parameter {name} has no Default"));
        }
        b.refs
            .get(name)
            .cloned()
            .ok_or_else(|| anyhow!("!Ref {name}: no such parameter, or resource not created yet"))
    }

    /// Evaluates a named entry of `Conditions`.
    pub fn condition(&self, name: &str, b: &Bindings) -> Result<bool> {
        let body = self
            .conditions
            .get(name)
            .with_context(|| format!("no condition {name}"))?;
        match self.resolve(body, b)? {
            Value::Bool(v) => Ok(v),
            other => bail!("condition {name} is not boolean: {other:?}"),
        }
    }

    fn boolean(&self, function: &str, arg: &Value, b: &Bindings) -> Result<bool> {
        let items: Vec<Value> = arg
            .as_sequence()
            .with_context(|| format!("{function} takes a list"))?
            .iter()
            .map(|v| self.resolve(v, b))
            .collect::<Result<_>>()?;
        let as_bool = |v: &Value| {
            v.as_bool()
                .with_context(|| format!("{function}: {v:?} is not boolean"))
        };
        Ok(match function {
            "Fn::Equals" => {
                if items.len() != 2 {
                    bail!("!Equals takes two values");
                }
                scalar_string(&items[0]) == scalar_string(&items[1])
            }
            "Fn::Not" => !as_bool(items.first().context("!Not takes one condition")?)?,
            "Fn::And" => items
                .iter()
                .map(as_bool)
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .all(|x| x),
            _ => items
                .iter()
                .map(as_bool)
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .any(|x| x),
        })
    }

    fn substitute(&self, text: &str, vars: &Mapping, b: &Bindings) -> Result<String> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            // `${!Literal}` is an escaped, literal `${Literal}`.
            if let Some(literal) = after.strip_prefix('!') {
                let end = literal.find('}').context("unclosed ${! in !Sub")?;
                out.push_str("${");
                out.push_str(&literal[..=end]);
                rest = &literal[end + 1..];
                continue;
            }
            let end = after.find('}').context("unclosed ${ in !Sub")?;
            let name = &after[..end];
            let value = if let Some(v) = vars.get(name) {
                scalar_string(v).with_context(|| format!("!Sub variable {name} is not a scalar"))?
            } else if let Some((id, attr)) = name.split_once('.')
                && !name.starts_with("AWS::")
            {
                b.attributes
                    .get(&format!("{id}.{attr}"))
                    .cloned()
                    .with_context(|| format!("!Sub ${{{name}}}: not known locally"))?
            } else {
                self.reference(name, b)?
            };
            out.push_str(&value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

const NO_VALUE: &str = "AWS::NoValue";

/// The marker `!Ref AWS::NoValue` resolves to; the enclosing mapping or list drops it,
/// and as a scalar it is no string, so any other use of it is an error.
fn no_value() -> Value {
    Value::Tagged(Box::new(yaml_serde::value::TaggedValue {
        tag: yaml_serde::value::Tag::new(NO_VALUE),
        value: Value::Null,
    }))
}

fn is_no_value(value: &Value) -> bool {
    matches!(value, Value::Tagged(t) if t.tag == NO_VALUE)
}

/// A scalar YAML value as CloudFormation would stringify it.
pub fn scalar_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(v) => Some(v.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
Parameters:
  Env: { Type: String, Default: prod }
  Timeout: { Type: Number, Default: 30 }
Conditions:
  IsProd: !Equals [!Ref Env, prod]
  IsDev: !Not [!Condition IsProd]
  Both: { "Fn::And": [{ Condition: IsProd }, !Not [{ Condition: IsDev }]] }
Resources:
  Q:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: !Ref Timeout
      Name: !Sub "${AWS::StackName}-${Env}-q-${!Literal}"
      Dlq: !GetAtt D.Arn
      Long: { "Fn::GetAtt": [D, Arn] }
      Pick: !If [IsDev, dev-value, !Join ["-", [a, !Ref Env, 3]]]
      Third: !Select [1, [x, y, z]]
      Both: !If [Both, yes, no]
      Gone: !If [IsDev, 1, !Ref AWS::NoValue]
      List: [a, !If [IsDev, b, !Ref AWS::NoValue], c]
  DevOnly:
    Type: AWS::SQS::Queue
    Condition: IsDev
  D:
    Type: AWS::SQS::Queue
"#;

    fn bindings() -> Bindings {
        Bindings {
            attributes: [("D.Arn".to_owned(), "arn:aws:sqs:us-east-1:1:d".to_owned())].into(),
            stack_name: "st".into(),
            region: "us-east-1".into(),
            account_id: "123456789012".into(),
            ..Bindings::default()
        }
    }

    fn resolved(key: &str) -> Value {
        let t = Template::parse(TEXT).unwrap();
        let q = t.resource("Q").unwrap();
        t.resolve(&q.properties[key], &bindings()).unwrap()
    }

    #[test]
    fn a_parameter_override_replaces_the_default_in_references_and_conditions() {
        let t = Template::parse(TEXT).unwrap();
        let mut b = bindings();
        b.parameters.insert("Env".into(), "dev".into());
        assert!(t.condition("IsDev", &b).unwrap());
        let q = t.resource("Q").unwrap();
        assert_eq!(
            t.resolve(&q.properties["Pick"], &b).unwrap(),
            Value::String("dev-value".into())
        );
        assert!(!t.condition("IsDev", &bindings()).unwrap(), "the default");
    }

    #[test]
    fn resolves_short_and_long_forms() {
        assert_eq!(resolved("VisibilityTimeout"), Value::String("30".into()));
        assert_eq!(
            resolved("Name"),
            Value::String("st-prod-q-${Literal}".into())
        );
        assert_eq!(
            resolved("Dlq"),
            Value::String("arn:aws:sqs:us-east-1:1:d".into())
        );
        assert_eq!(resolved("Long"), resolved("Dlq"));
        assert_eq!(resolved("Pick"), Value::String("a-prod-3".into()));
        assert_eq!(resolved("Third"), Value::String("y".into()));
        assert_eq!(resolved("Both"), Value::String("yes".into()));
    }

    #[test]
    fn no_value_removes_the_property_or_list_item() {
        let t = Template::parse(TEXT).unwrap();
        let q = t.resource("Q").unwrap();
        let props = t
            .resolve(&Value::Mapping(q.properties.clone()), &bindings())
            .unwrap();
        assert!(props.get("Gone").is_none());
        assert!(props.get("VisibilityTimeout").is_some());
        assert_eq!(
            resolved("List"),
            yaml_serde::from_str::<Value>("[a, c]").unwrap()
        );
        let v: Value = yaml_serde::from_str("!Sub '${AWS::NoValue}'").unwrap();
        assert!(t.resolve(&v, &bindings()).is_err());
    }

    #[test]
    fn skips_resources_whose_condition_is_false() {
        let t = Template::parse(TEXT).unwrap();
        let ids: Vec<_> = t
            .resources_of("AWS::SQS::Queue")
            .unwrap()
            .iter()
            .map(|r| r.logical_id.clone())
            .collect();
        assert_eq!(ids, ["D", "Q"]);
    }

    #[test]
    fn unknown_references_and_functions_are_errors() {
        let t = Template::parse("Resources: {}").unwrap();
        let v: Value = yaml_serde::from_str("!Ref Missing").unwrap();
        assert!(t.resolve(&v, &bindings()).is_err());
        let v: Value = yaml_serde::from_str("!ImportValue Other").unwrap();
        assert!(t.resolve(&v, &bindings()).is_err());
    }

    #[test]
    fn project_template_keeps_the_visibility_timeout_bound() {
        // >= 6 x the function timeout + the batching window (see template.yaml).
        let root = crate::repo_root().unwrap();
        let t = Template::load(&root.join("template.yaml")).unwrap();
        let n = |p: &str| t.parameter_default(p).unwrap().parse::<u64>().unwrap();
        let queue = t.resource("IngestQueue").unwrap();
        let vt = t
            .resolve(&queue.properties["VisibilityTimeout"], &Bindings::default())
            .unwrap();
        let vt: u64 = scalar_string(&vt).unwrap().parse().unwrap();
        assert!(vt >= 6 * n("IngestTimeout") + n("BatchingWindow"), "{vt}");
    }
}
