//! DynamoDB JSON helpers: item size, key values, and the partition key of a Query.
//!
//! Item size is DynamoDB's rule from the `item-size` crate, the same the batch writer
//! plans its write units with; this only maps DynamoDB JSON onto it.

use item_size as rule;
use serde_json::{Map, Value};

/// Size in bytes of an item (a map of attribute name to DynamoDB JSON value).
pub fn item_size(item: &Map<String, Value>) -> usize {
    rule::item_size(item.iter().map(|(k, v)| (k.as_str(), value_size(v))))
}

/// Size in bytes of one DynamoDB JSON attribute value (`{"S": "..."}` etc.).
pub fn value_size(value: &Value) -> usize {
    let Some(obj) = value.as_object() else {
        return 0;
    };
    let Some((ty, v)) = obj.iter().next() else {
        return 0;
    };
    match ty.as_str() {
        "S" => v.as_str().map_or(0, rule::string_size),
        "N" => v.as_str().map_or(0, rule::number_size),
        "B" => v
            .as_str()
            .map_or(0, |b| rule::binary_size(rule::base64_decoded_len(b))),
        "BOOL" | "NULL" => rule::SCALAR_SIZE,
        "SS" => rule::set_size(elements(v).map(rule::string_size)),
        "NS" => rule::set_size(elements(v).map(rule::number_size)),
        "BS" => rule::set_size(elements(v).map(|b| rule::binary_size(rule::base64_decoded_len(b)))),
        "L" => rule::list_size(v.as_array().into_iter().flatten().map(value_size)),
        "M" => rule::map_size(
            v.as_object()
                .into_iter()
                .flatten()
                .map(|(k, e)| (k.as_str(), value_size(e))),
        ),
        _ => 0,
    }
}

/// The string elements of a set.
fn elements(set: &Value) -> impl Iterator<Item = &str> {
    set.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// A scalar key value rendered as text (`S` and `N` as is, `B` as its base64 text).
pub fn key_string(value: &Value) -> Option<String> {
    let obj = value.as_object()?;
    let (ty, v) = obj.iter().next()?;
    match ty.as_str() {
        "S" | "N" | "B" => v.as_str().map(str::to_owned),
        _ => None,
    }
}

/// The partition key value a Query addresses, for a table whose partition key attribute is
/// `pk_attr`: read from `KeyConditionExpression` (an equality on the key, the name possibly
/// given through `ExpressionAttributeNames`, the value through `ExpressionAttributeValues`)
/// or from the legacy `KeyConditions` parameter. `None` when it cannot be determined (for
/// instance a Query on an index whose key is another attribute).
pub fn query_partition_key(request: &Value, pk_attr: &str) -> Option<String> {
    if let Some(expr) = request
        .get("KeyConditionExpression")
        .and_then(Value::as_str)
    {
        let names = request.get("ExpressionAttributeNames");
        let values = request.get("ExpressionAttributeValues")?;
        let resolve = |tok: &str| -> String {
            let tok = tok.trim().trim_matches(|c| c == '(' || c == ')').trim();
            if tok.starts_with('#') {
                names
                    .and_then(|n| n.get(tok))
                    .and_then(Value::as_str)
                    .unwrap_or(tok)
                    .to_owned()
            } else {
                tok.to_owned()
            }
        };
        for clause in split_and(expr) {
            let Some((left, right)) = clause.split_once('=') else {
                continue;
            };
            // Skip <=, >=, <> which also contain '='.
            if left.ends_with(['<', '>', '!']) || right.starts_with('=') {
                continue;
            }
            let (l, r) = (resolve(left), resolve(right));
            let placeholder = if l == pk_attr && r.starts_with(':') {
                r
            } else if r == pk_attr && l.starts_with(':') {
                l
            } else {
                continue;
            };
            return values.get(&placeholder).and_then(key_string);
        }
        return None;
    }
    let cond = request.get("KeyConditions")?.get(pk_attr)?;
    if cond.get("ComparisonOperator").and_then(Value::as_str) != Some("EQ") {
        return None;
    }
    cond.get("AttributeValueList")?
        .as_array()?
        .first()
        .and_then(key_string)
}

fn split_and(expr: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let lower = expr.to_ascii_lowercase();
    let mut start = 0;
    let mut search = 0;
    while let Some(i) = lower[search..].find(" and ") {
        let at = search + i;
        parts.push(&expr[start..at]);
        start = at + 5;
        search = start;
    }
    parts.push(&expr[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn size(v: Value) -> usize {
        item_size(v.as_object().expect("test item is an object"))
    }

    #[test]
    fn item_size_counts_names_and_values() {
        assert_eq!(size(json!({"PK": {"S": "abc"}})), 5);
        // 4 significant digits: 2 bytes, plus 1.
        assert_eq!(size(json!({"n": {"N": "123.5"}})), 1 + 3);
        assert_eq!(size(json!({"b": {"B": "AAEC"}})), 4); // 3 bytes
        assert_eq!(size(json!({"b": {"B": "AAE="}})), 3); // 2 bytes
        assert_eq!(size(json!({"b": {"B": "AA=="}})), 2); // 1 byte
        assert_eq!(size(json!({"ok": {"BOOL": true}, "z": {"NULL": true}})), 5);
        assert_eq!(size(json!({"s": {"SS": ["ab", "cde"]}})), 6);
        // List: 3 + (1 + 1) + (1 + 2) = 8; Map: 3 + (1 + 1 + 1) = 6.
        assert_eq!(size(json!({"l": {"L": [{"S": "a"}, {"N": "10"}]}})), 9);
        assert_eq!(size(json!({"m": {"M": {"k": {"S": "v"}}}})), 7);
        // Multi-byte UTF-8 counts bytes, not chars.
        assert_eq!(size(json!({"é": {"S": "€"}})), 5);
    }

    #[test]
    fn key_values_render_as_text() {
        assert_eq!(key_string(&json!({"S": "x"})).as_deref(), Some("x"));
        assert_eq!(key_string(&json!({"N": "42"})).as_deref(), Some("42"));
        assert_eq!(key_string(&json!({"BOOL": true})), None);
    }

    #[test]
    fn query_key_from_expressions() {
        let q = json!({
            "KeyConditionExpression": "#p = :pk AND begins_with(#s, :pre)",
            "ExpressionAttributeNames": {"#p": "PK", "#s": "SK"},
            "ExpressionAttributeValues": {":pk": {"S": "dev#1"}, ":pre": {"S": "a"}}
        });
        assert_eq!(query_partition_key(&q, "PK").as_deref(), Some("dev#1"));
        let q = json!({
            "KeyConditionExpression": "SK BETWEEN :a AND :b and (:v = PK)",
            "ExpressionAttributeValues": {":v": {"S": "k"}, ":a": {"S": "1"}, ":b": {"S": "2"}}
        });
        assert_eq!(query_partition_key(&q, "PK").as_deref(), Some("k"));
        let q = json!({
            "KeyConditionExpression": "SK >= :a",
            "ExpressionAttributeValues": {":a": {"S": "1"}}
        });
        assert_eq!(query_partition_key(&q, "SK"), None);
        let q = json!({"KeyConditions": {"PK": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "z"}]}}});
        assert_eq!(query_partition_key(&q, "PK").as_deref(), Some("z"));
        assert_eq!(query_partition_key(&q, "other"), None);
    }
}
