//! Example values that satisfy a JSON schema: the arguments of the fake model's tool calls.
//!
//! Every `required` property gets a value of its type: strings `"chaos"` (padded to
//! `minLength`), numbers and integers their `minimum` or 1, booleans `true`, arrays one example
//! item (or `minItems` of them), objects their required properties, recursively. `const`,
//! `enum` (its first value) and `default` win over the type; `anyOf`/`oneOf`/`allOf` take their
//! first branch; local `$ref`s (`#/$defs/…`, `#/definitions/…`) are followed.

use serde_json::{Map, Value, json};

/// How deep references and nesting are followed before giving `null`.
const MAX_DEPTH: usize = 16;

/// An example value of `schema`.
pub fn example(schema: &Value) -> Value {
    value(schema, schema, 0)
}

fn value(schema: &Value, root: &Value, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let Some(object) = schema.as_object() else {
        // `true` or a non-object schema: anything goes; an empty object is a value.
        return json!({});
    };
    if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
        let target = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer));
        return target.map_or(Value::Null, |t| value(t, root, depth + 1));
    }
    if let Some(constant) = object.get("const") {
        return constant.clone();
    }
    if let Some(first) = object
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(default) = object.get("default") {
        return default.clone();
    }
    for combinator in ["anyOf", "oneOf", "allOf"] {
        if let Some(first) = object
            .get(combinator)
            .and_then(Value::as_array)
            .and_then(|branches| {
                branches
                    .iter()
                    .find(|b| b.get("type").and_then(Value::as_str) != Some("null"))
            })
        {
            return value(first, root, depth + 1);
        }
    }
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| *k != "null")
            .unwrap_or("null"),
        _ if object.contains_key("properties") => "object",
        _ if object.contains_key("items") => "array",
        _ => "object",
    };
    let number = |name: &str| object.get(name).and_then(Value::as_f64);
    match kind {
        "string" => {
            let min = object.get("minLength").and_then(Value::as_u64).unwrap_or(0);
            let mut text = String::from("chaos");
            while (text.len() as u64) < min {
                text.push('s');
            }
            Value::String(text)
        }
        "integer" => {
            let min = number("minimum").or(number("exclusiveMinimum").map(|m| m + 1.0));
            json!(min.map_or(1, |m| m.ceil() as i64))
        }
        "number" => json!(number("minimum").unwrap_or(1.0)),
        "boolean" => json!(true),
        "null" => Value::Null,
        "array" => {
            let count = object
                .get("minItems")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .max(1);
            let item = object
                .get("items")
                .map_or(json!("chaos"), |items| value(items, root, depth + 1));
            Value::Array((0..count).map(|_| item.clone()).collect())
        }
        _ => {
            let properties = object.get("properties").and_then(Value::as_object);
            let mut out = Map::new();
            for name in object
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let property = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                let example = if property.is_null() {
                    json!("chaos")
                } else {
                    value(property, root, depth + 1)
                };
                out.insert(name.to_owned(), example);
            }
            Value::Object(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_required_property_gets_a_value_of_its_type() {
        let schema = json!({
            "type": "object",
            "required": ["path", "count", "ratio", "all", "tags", "mode", "options", "either", "nested"],
            "properties": {
                "path": {"type": "string", "minLength": 8},
                "count": {"type": "integer", "minimum": 3},
                "ratio": {"type": "number"},
                "all": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "options": {"type": ["object", "null"], "required": ["depth"], "properties": {"depth": {"type": "integer"}}},
                "either": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
                "nested": {"$ref": "#/$defs/point"},
                "optional": {"type": "string"}
            },
            "$defs": {"point": {"type": "object", "required": ["x"], "properties": {"x": {"type": "number", "minimum": 2.5}}}}
        });
        assert_eq!(
            example(&schema),
            json!({"path": "chaossss", "count": 3, "ratio": 1.0, "all": true, "tags": ["chaos"],
                   "mode": "fast", "options": {"depth": 1}, "either": true, "nested": {"x": 2.5}})
        );
    }

    #[test]
    fn a_schema_that_refers_to_itself_ends() {
        let schema =
            json!({"type": "object", "required": ["next"], "properties": {"next": {"$ref": "#"}}});
        let mut v = &example(&schema);
        let mut depth = 0;
        while let Some(next) = v.get("next") {
            v = next;
            depth += 1;
        }
        assert!(depth <= MAX_DEPTH + 1);
    }
}
