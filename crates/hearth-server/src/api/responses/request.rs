//! A Responses API request translated into the Chat Completions request it means: `instructions` become the system
//! message, `input` items (messages, `function_call`, `function_call_output`, `reasoning`) become chat messages
//! after the stored conversation of `previous_response_id`, and `tools`, `tool_choice`, `text.format`,
//! `reasoning`, `max_output_tokens` and the sampling fields take their Chat Completions names. Every field is checked
//! here first, so a 400 names the Responses field.

use crate::error::{ApiError, ApiResult};
use crate::wire::de::{kind, list_param};
use serde_json::{json, Map, Value};

/// A request, translated.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    /// The Chat Completions body.
    pub chat: Value,
    /// The conversation without the instructions (the previous response's, then this input), as chat messages.
    pub conversation: Vec<Value>,
    pub stream: bool,
    pub store: bool,
}

/// Translate `body`, continuing `previous` (the stored conversation of `previous_response_id`) when given.
pub fn translate(body: &Map<String, Value>, previous: Vec<Value>) -> ApiResult<Translated> {
    for (k, what) in
        [("conversation", "conversations"), ("background", "background responses"), ("prompt", "prompt templates")]
    {
        if body.get(k).is_some_and(|v| !v.is_null() && v != &Value::Bool(false)) {
            return Err(ApiError::param(
                k,
                format!("`{k}`: hearth does not serve {what}; send `input` (and `previous_response_id`)"),
            ));
        }
    }
    let mut conversation = previous;
    match body.get("input") {
        Some(Value::String(s)) => conversation.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) if !items.is_empty() => items_to_messages(items, &mut conversation)?,
        Some(Value::Array(_)) => return Err(ApiError::param("input", "`input` must not be empty")),
        None | Some(Value::Null) => return Err(ApiError::param("input", "`input` is required")),
        Some(v) => {
            return Err(ApiError::param(
                "input",
                format!("`input` must be a string or a list of items, got {}", kind(v)),
            ))
        }
    }
    let mut messages = Vec::with_capacity(conversation.len() + 1);
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(v) => {
            return Err(ApiError::param("instructions", format!("`instructions` must be a string, got {}", kind(v))))
        }
    }
    messages.extend(conversation.iter().cloned());
    let mut chat = Map::new();
    chat.insert("messages".into(), Value::Array(messages));
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("max_output_tokens", "max_tokens"),
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("top_logprobs", "top_logprobs"),
    ] {
        if let Some(v) = body.get(from).filter(|v| !v.is_null()) {
            chat.insert(to.into(), v.clone());
        }
    }
    if let Some(tools) = body.get("tools").filter(|v| !v.is_null()) {
        chat.insert("tools".into(), self::tools(tools)?);
    }
    if let Some(tc) = body.get("tool_choice").filter(|v| !v.is_null()) {
        chat.insert("tool_choice".into(), tool_choice(tc)?);
    }
    if let Some(format) = body.get("text").filter(|v| !v.is_null()).map(text_format).transpose()?.flatten() {
        chat.insert("response_format".into(), format);
    }
    if let Some(r) = body.get("reasoning").filter(|v| !v.is_null()) {
        let effort = r.get("effort").filter(|e| !e.is_null());
        let on = match effort.map(|e| e.as_str()) {
            None => None,
            Some(Some("none" | "minimal")) => Some(false),
            Some(Some("low" | "medium" | "high")) => Some(true),
            Some(_) => {
                return Err(ApiError::param(
                    "reasoning.effort",
                    "`reasoning.effort` must be `none`, `minimal`, `low`, `medium` or `high`",
                ))
            }
        };
        if let Some(on) = on {
            chat.insert("chat_template_kwargs".into(), json!({"enable_thinking": on}));
        }
    }
    let flag = |k: &str, default: bool| match body.get(k) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::param(k, format!("`{k}` must be a boolean, got {}", kind(v)))),
    };
    let stream = flag("stream", false)?;
    let store = flag("store", true)?;
    chat.insert("stream".into(), Value::Bool(stream));
    for k in ["metadata"] {
        match body.get(k) {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(v) => return Err(ApiError::param(k, format!("`{k}` must be an object, got {}", kind(v)))),
        }
    }
    Ok(Translated { chat: Value::Object(chat), conversation, stream, store })
}

/// The text of a message's content: a string, or parts of `input_text` / `output_text`.
fn content_text(at: &str, v: &Value) -> ApiResult<Value> {
    match v {
        Value::String(s) => Ok(Value::String(s.clone())),
        Value::Array(parts) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                let pat = format!("{at}[{j}]");
                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("input_text" | "output_text" | "text"), Some(t)) => {
                        out.push(json!({"type": "text", "text": t}))
                    }
                    (Some(ty @ ("input_image" | "input_file" | "input_audio")), _) => {
                        return Err(ApiError::param(
                            &pat,
                            format!("`{pat}` is `{ty}`: hearth does not take that input yet; send text"),
                        ))
                    }
                    (Some("refusal"), _) => {}
                    _ => {
                        return Err(ApiError::param(
                            &pat,
                            format!("`{pat}` must be an `input_text` or `output_text` part"),
                        ))
                    }
                }
            }
            Ok(Value::Array(out))
        }
        v => Err(ApiError::param(at, format!("`{at}` must be a string or a list of content parts, got {}", kind(v)))),
    }
}

/// Input items as chat messages: consecutive `function_call`s (and the assistant text before them) are one assistant
/// message with `tool_calls`; a `reasoning` item's text goes with the next assistant message.
fn items_to_messages(items: &[Value], out: &mut Vec<Value>) -> ApiResult<()> {
    let mut thought = String::new();
    // Calls join an assistant message of this input only, not the previous response's.
    let first = out.len();
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let Some(obj) = item.as_object() else {
            return Err(ApiError::param(&at, format!("`{at}` must be an object, got {}", kind(item))));
        };
        let need = |k: &str| {
            obj.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::param(&format!("{at}.{k}"), format!("`{at}.{k}` must be a string")))
        };
        match obj.get("type").and_then(Value::as_str) {
            None | Some("message") => {
                let role = match obj.get("role").and_then(Value::as_str) {
                    Some(r @ ("user" | "assistant" | "system" | "developer")) => r,
                    _ => {
                        return Err(ApiError::param(
                            &format!("{at}.role"),
                            format!("`{at}.role` must be `user`, `assistant`, `system` or `developer`"),
                        ))
                    }
                };
                let content = content_text(&format!("{at}.content"), obj.get("content").unwrap_or(&Value::Null))?;
                let mut m = json!({"role": role, "content": content});
                if role == "assistant" && !thought.is_empty() {
                    m["reasoning_content"] = Value::String(std::mem::take(&mut thought));
                }
                out.push(m);
            }
            Some("function_call") => {
                let call = json!({"id": need("call_id")?, "type": "function",
                    "function": {"name": need("name")?, "arguments": need("arguments")?}});
                let n = out.len();
                match out.last_mut().filter(|m| n > first && m["role"] == "assistant") {
                    Some(m) if m.get("tool_calls").is_some() || !m["content"].is_null() => {
                        let calls = m.as_object_mut().and_then(|o| {
                            o.entry("tool_calls").or_insert_with(|| json!([])).as_array_mut()
                        });
                        if let Some(calls) = calls {
                            calls.push(call);
                        }
                    }
                    _ => {
                        let mut m = json!({"role": "assistant", "content": null, "tool_calls": [call]});
                        if !thought.is_empty() {
                            m["reasoning_content"] = Value::String(std::mem::take(&mut thought));
                        }
                        out.push(m);
                    }
                }
            }
            Some("function_call_output") => {
                let output = match obj.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => match content_text(&format!("{at}.output"), v)? {
                        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
                        other => other.as_str().unwrap_or_default().to_string(),
                    },
                    _ => return Err(ApiError::param(&format!("{at}.output"), format!("`{at}.output` must be a string"))),
                };
                out.push(json!({"role": "tool", "tool_call_id": need("call_id")?, "content": output}));
            }
            Some("reasoning") => {
                let texts = obj.get("content").and_then(Value::as_array).into_iter().flatten().chain(
                    obj.get("summary").and_then(Value::as_array).into_iter().flatten(),
                );
                for t in texts.filter_map(|p| p.get("text").and_then(Value::as_str)) {
                    thought.push_str(t);
                }
            }
            Some(ty) => {
                return Err(ApiError::param(
                    &format!("{at}.type"),
                    format!("`{at}` is a `{ty}` item; hearth takes `message`, `function_call`, `function_call_output` and `reasoning` items"),
                ))
            }
        }
    }
    Ok(())
}

/// Function tools (`{"type": "function", "name", "description", "parameters"}`) as Chat Completions tools.
fn tools(v: &Value) -> ApiResult<Value> {
    let list = list_param("tools", v)?;
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        match t.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(ty) => {
                return Err(ApiError::param(
                    &at,
                    format!("`{at}` is a `{ty}` tool, which hearth does not run; send function tools"),
                ))
            }
            None => return Err(ApiError::param(&at, format!("`{at}` needs `\"type\": \"function\"`"))),
        }
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            return Err(ApiError::param(&format!("{at}.name"), format!("`{at}.name` must be a string")));
        };
        let mut f = json!({"name": name, "parameters": t.get("parameters").cloned().unwrap_or(Value::Null)});
        if let Some(d) = t.get("description").and_then(Value::as_str) {
            f["description"] = Value::String(d.to_string());
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice`: `auto`, `none`, `required` or `{"type": "function", "name"}`.
fn tool_choice(v: &Value) -> ApiResult<Value> {
    match v {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => Ok(v.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            match o.get("name").and_then(Value::as_str) {
                Some(name) => Ok(json!({"type": "function", "function": {"name": name}})),
                None => Err(ApiError::param("tool_choice", "`tool_choice` of type `function` needs a `name`")),
            }
        }
        _ => Err(ApiError::param(
            "tool_choice",
            "`tool_choice` must be `auto`, `none`, `required` or {\"type\": \"function\", \"name\": ...}",
        )),
    }
}

/// `text.format` as `response_format` (None: plain text).
fn text_format(text: &Value) -> ApiResult<Option<Value>> {
    let Some(format) = text.get("format").filter(|f| !f.is_null()) else { return Ok(None) };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut schema = json!({"name": format.get("name").cloned().unwrap_or(json!("response")),
                "schema": format.get("schema").cloned().unwrap_or(Value::Null)});
            if let Some(strict) = format.get("strict") {
                schema["strict"] = strict.clone();
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        _ => Err(ApiError::param(
            "text.format",
            "`text.format` must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"name\", \"schema\"}",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(v: Value, previous: Vec<Value>) -> ApiResult<Translated> {
        translate(v.as_object().expect("object"), previous)
    }

    #[test]
    fn items_become_chat_messages_after_the_previous_conversation() {
        let previous = vec![json!({"role": "user", "content": "hi"}), json!({"role": "assistant", "content": "hello"})];
        let t = tr(
            json!({"instructions": "be brief", "max_output_tokens": 9, "store": false,
                "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
                "reasoning": {"effort": "none"},
                "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
                "tool_choice": {"type": "function", "name": "f"},
                "input": [
                    {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
                    {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                    {"type": "function_call", "call_id": "call_2", "name": "f", "arguments": "{\"a\":1}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "42"},
                    {"role": "user", "content": [{"type": "input_text", "text": "and?"}]}
                ]}),
            previous,
        )
        .unwrap();
        let m = &t.chat["messages"];
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[2]["content"], "hello");
        assert_eq!(m[3]["tool_calls"].as_array().map(Vec::len), Some(2));
        assert_eq!(m[3]["reasoning_content"], "hmm");
        assert_eq!(m[4], json!({"role": "tool", "tool_call_id": "call_1", "content": "42"}));
        assert_eq!(m[5]["content"], json!([{"type": "text", "text": "and?"}]));
        assert_eq!(t.conversation.len(), 5, "the instructions are not part of the conversation");
        assert_eq!(t.chat["max_tokens"], 9);
        assert_eq!(t.chat["response_format"]["json_schema"]["name"], "x");
        assert_eq!(t.chat["chat_template_kwargs"], json!({"enable_thinking": false}));
        assert_eq!(t.chat["tool_choice"], json!({"type": "function", "function": {"name": "f"}}));
        assert!(!t.store && !t.stream);
    }

    #[test]
    fn errors_name_the_responses_field() {
        let param = |v: Value| tr(v, Vec::new()).unwrap_err().param.unwrap_or_default();
        assert_eq!(param(json!({})), "input");
        assert_eq!(param(json!({"input": []})), "input");
        assert_eq!(param(json!({"input": 3})), "input");
        assert_eq!(param(json!({"input": [{"role": "robot", "content": "x"}]})), "input[0].role");
        assert_eq!(
            param(json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})),
            "input[0].content[0]"
        );
        assert_eq!(param(json!({"input": [{"type": "function_call", "name": "f"}]})), "input[0].call_id");
        assert_eq!(param(json!({"input": [{"type": "web_search_call"}]})), "input[0].type");
        assert_eq!(param(json!({"input": "x", "tools": [{"type": "web_search"}]})), "tools[0]");
        assert_eq!(param(json!({"input": "x", "tool_choice": "sometimes"})), "tool_choice");
        assert_eq!(param(json!({"input": "x", "text": {"format": {"type": "xml"}}})), "text.format");
        assert_eq!(param(json!({"input": "x", "reasoning": {"effort": "max"}})), "reasoning.effort");
        assert_eq!(param(json!({"input": "x", "store": "yes"})), "store");
    }
}
