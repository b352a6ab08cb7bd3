//! The request side of pythonic tool calls (the answer side, and the form itself: `output::tools::pythonic`): the
//! system text that asks for them where the template does not render tools, the grammar rules of a call, and an
//! earlier call written back into the prompt the way the model is asked to write it.

use super::{ToolChoice, Tools};
use hearth_engine::sampling::grammar::lark_string;
use serde_json::{json, Value};

/// The system text that describes the tools, for templates that do not render them (Gemma's own): the functions'
/// schemas, and the form to answer in.
pub fn instructions(t: &Tools) -> String {
    let list: Vec<Value> = t.callable().map(|(name, params)| json!({"name": name, "parameters": params})).collect();
    let when = match &t.choice {
        ToolChoice::Auto => "If you decide to call one or more of them",
        ToolChoice::Required => "Answer by calling one or more of these functions",
        ToolChoice::Named(_) => "Answer by calling this function",
    };
    format!(
        "You have access to these functions (their parameters as JSON schemas):\n{}\n{when}, reply with only a \
         Python list of the calls, [func_name1(param_name1=value1, param_name2=value2, ...), func_name2(...)], with \
         keyword arguments and literal values, and no other text.",
        Value::Array(list)
    )
}

/// Lark rules `call: f0 | f1 ...`, each function's call `name(key=value, ...)`: the schema's properties in its
/// order, the required ones always, the others optional, each value compact JSON of the property's schema (with
/// the parameters' `$defs` / `definitions`, for `$ref`s). Properties the schema does not list cannot be written.
pub fn call_rules<'a>(functions: impl Iterator<Item = &'a (String, Value)>) -> String {
    let mut names = Vec::new();
    let mut rules = String::new();
    for (i, (name, params)) in functions.enumerate() {
        let required = params.get("required").and_then(Value::as_array);
        let is_required = |k: &str| required.is_some_and(|r| r.iter().any(|x| x.as_str() == Some(k)));
        let properties = params.get("properties").and_then(Value::as_object).into_iter().flatten();
        let mut args = Vec::new();
        for (j, (key, schema)) in properties.enumerate() {
            rules.push_str(&format!(
                "f{i}_{j}: {} %json {}\n",
                lark_string(&format!("{key}=")),
                value_schema(schema, params)
            ));
            args.push((format!("f{i}_{j}"), is_required(key)));
        }
        let call = match args_rule(&args) {
            Some(args) => format!("{} {args} \")\"", lark_string(&format!("{name}("))),
            None => lark_string(&format!("{name}()")),
        };
        rules.push_str(&format!("f{i}: {call}\n"));
        names.push(format!("f{i}"));
    }
    format!("call: {}\n{rules}", names.join(" | "))
}

/// The arguments of a call (`args`: each argument's rule and whether it is required), `, `-separated: the
/// alternatives are which argument comes first (any up to the first required one), the rest follow in order.
fn args_rule(args: &[(String, bool)]) -> Option<String> {
    if args.is_empty() {
        return None;
    }
    let first_required = args.iter().position(|(_, required)| *required);
    let last_first = first_required.unwrap_or(args.len() - 1);
    let alts: Vec<String> = (0..=last_first)
        .map(|k| {
            let rest: String = args[k + 1..]
                .iter()
                .map(|(r, required)| if *required { format!(" \", \" {r}") } else { format!(" (\", \" {r})?") })
                .collect();
            format!("{}{rest}", args[k].0)
        })
        .collect();
    let optional = if first_required.is_some() { "" } else { "?" };
    Some(format!("({}){optional}", alts.join(" | ")))
}

/// The schema of a property's value: compact JSON, with the parameters' definitions.
fn value_schema(schema: &Value, params: &Value) -> Value {
    let mut s = schema.as_object().cloned().unwrap_or_default();
    for defs in ["$defs", "definitions"] {
        if let Some(d) = params.get(defs) {
            s.entry(defs).or_insert_with(|| d.clone());
        }
    }
    s.insert("x-guidance".into(), json!({"whitespace_flexible": false}));
    Value::Object(s)
}

/// A call as this format writes it (what the grammar makes): `name(key=value, ...)`, values as JSON.
pub fn write(name: &str, arguments: &Value) -> String {
    let args: Vec<String> = arguments.as_object().into_iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{name}({})", args.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::tools::pythonic::parse;
    use crate::output::tools::Call;

    #[test]
    fn written_calls_parse_back() {
        let a = json!({"city": "Zürich \"Nord\"\n", "days": [1, 2.5], "opts": {"x": null, "y": true}});
        let text = format!("[{}, {}]", write("get_weather", &a), write("get_time", &json!({})));
        let calls = parse(&text).expect("calls");
        assert_eq!(calls[0], Call { name: "get_weather".into(), arguments: a.to_string() });
        assert_eq!(calls[1], Call { name: "get_time".into(), arguments: "{}".into() });
    }

    #[test]
    fn argument_rules() {
        let r = |a: &[(&str, bool)]| args_rule(&a.iter().map(|(n, req)| (n.to_string(), *req)).collect::<Vec<_>>());
        type Case<'a> = (Vec<(&'a str, bool)>, Option<&'a str>);
        let cases: Vec<Case> = vec![
            (vec![], None),
            (vec![("a", true)], Some("(a)")),
            (vec![("a", false)], Some("(a)?")),
            (vec![("a", false), ("b", true), ("c", false)], Some("(a \", \" b (\", \" c)? | b (\", \" c)?)")),
            (vec![("a", false), ("b", false)], Some("(a (\", \" b)? | b)?")),
        ];
        for (args, want) in cases {
            assert_eq!(r(&args).as_deref(), want, "{args:?}");
        }
        let rules = call_rules(
            [
                (
                    "f".to_string(),
                    json!({"properties": {"x": {"$ref": "#/$defs/X"}}, "required": ["x"], "$defs": {"X": {}}}),
                ),
                ("g".to_string(), json!({"type": "object"})),
            ]
            .iter(),
        );
        assert_eq!(
            rules,
            "call: f0 | f1\nf0_0: \"x=\" %json {\"$ref\":\"#/$defs/X\",\"$defs\":{\"X\":{}},\"x-guidance\":{\"whitespace_flexible\":false}}\n\
             f0: \"f(\" (f0_0) \")\"\nf1: \"g()\"\n"
        );
    }
}
