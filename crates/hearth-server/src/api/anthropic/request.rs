//! An Anthropic Messages request translated into the chat core's [`ChatRequest`]: `system` becomes a system message,
//! content blocks become text parts, `tool_use` blocks an assistant's `tool_calls`, `tool_result` blocks `tool`
//! messages, `thinking` blocks `reasoning_content` (the message shapes chat templates read); `tools`,
//! `tool_choice`, `stop_sequences`, `thinking`, `output_config` and the sampling fields become the request's tools
//! and parameters. Every field is checked here first, so a 400 names the Anthropic field; what the chat core checks
//! later it names by [`FIELDS`].

use crate::chat::{ChatRequest, FieldNames};
use crate::error::{ApiError, ApiResult};
use crate::wire::anthropic::MessagesRequest;
use crate::wire::chat::Conversation;
use crate::wire::common::{ResponseFormat, Stop};
use crate::wire::de::{field, kind, list_param};
use crate::wire::GenerationParams;
use serde_json::{json, Value};

/// The Messages API's names for the fields the chat core checks.
pub const FIELDS: FieldNames = FieldNames {
    max_tokens: "max_tokens",
    response_format: "output_config.format",
    messages: "messages",
    tool_schema: "input_schema",
};

/// Translate a Messages request. `count_only`: `/v1/messages/count_tokens`, where `max_tokens` is not sent.
pub fn translate(req: MessagesRequest, count_only: bool) -> ApiResult<ChatRequest> {
    let mut messages = Vec::new();
    if let Some(system) = &req.system {
        messages.push(json!({"role": "system", "content": text_parts("system", system)?}));
    }
    let list = match &req.messages {
        Some(Value::Array(l)) if !l.is_empty() => l,
        Some(Value::Array(_)) => return Err(ApiError::param("messages", "`messages` must not be empty")),
        None => return Err(ApiError::param("messages", "`messages` is required")),
        Some(v) => return Err(ApiError::param("messages", format!("`messages` must be a list, got {}", kind(v)))),
    };
    for (i, m) in list.iter().enumerate() {
        message(&format!("messages[{i}]"), m, &mut messages)?;
    }
    let max_tokens = max_tokens(req.max_tokens.as_ref(), count_only)?;
    let stop = stop_sequences(req.stop_sequences.as_ref())?;
    let mut conversation = Conversation { messages: Some(messages), ..Conversation::default() };
    let mut parallel = true;
    if let Some(tc) = &req.tool_choice {
        let (choice, one_call) = tool_choice(tc)?;
        conversation.tool_choice = Some(choice);
        parallel = !one_call;
    }
    if let Some(tools) = &req.tools {
        conversation.tools = Some(self::tools(tools)?);
        conversation.parallel_tool_calls = Some(Value::Bool(parallel));
    }
    if let Some(on) = thinking(req.thinking.as_ref())? {
        conversation.enable_thinking(on);
    }
    let params = GenerationParams {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        max_tokens,
        stop,
        stream: req.stream,
        response_format: output_format(req.output_config.as_ref())?,
        speculative: req.speculative,
        ..GenerationParams::default()
    };
    Ok(ChatRequest::new(conversation, params, FIELDS))
}

/// `max_tokens`: a positive integer, required unless `count_only`.
fn max_tokens(v: Option<&Value>, count_only: bool) -> ApiResult<Option<i64>> {
    match v {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1) => {
            Ok(n.as_u64().map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
        }
        None if count_only => Ok(None),
        None => Err(ApiError::param("max_tokens", "`max_tokens` is required")),
        Some(v) => Err(ApiError::param("max_tokens", format!("`max_tokens` must be a positive integer, got {v}"))),
    }
}

/// `stop_sequences`: non-empty strings, as stop strings (within their limits).
fn stop_sequences(v: Option<&Value>) -> ApiResult<Option<Stop>> {
    match v {
        None => Ok(None),
        Some(l @ Value::Array(items)) if items.iter().all(|s| s.as_str().is_some_and(|s| !s.is_empty())) => {
            Ok(field("stop_sequences", l.clone())?)
        }
        Some(_) => Err(ApiError::param("stop_sequences", "`stop_sequences` must be a list of non-empty strings")),
    }
}

/// `thinking` as `enable_thinking` (None: not set). `budget_tokens` is checked; the thought is bounded by
/// `max_tokens` only (the engine has no thinking budget). `display` is accepted; the thought is always returned.
fn thinking(v: Option<&Value>) -> ApiResult<Option<bool>> {
    let Some(t) = v else { return Ok(None) };
    match t.get("type").and_then(Value::as_str) {
        Some("enabled") => {
            if t.get("budget_tokens").and_then(Value::as_u64).is_none_or(|b| b < 1) {
                return Err(ApiError::param(
                    "thinking.budget_tokens",
                    "`thinking.budget_tokens` must be a positive integer",
                ));
            }
            Ok(Some(true))
        }
        Some("adaptive" | "between_tools") => Ok(Some(true)),
        Some("disabled") => Ok(Some(false)),
        _ => Err(ApiError::param(
            "thinking",
            "`thinking.type` must be `enabled` (with `budget_tokens`), `adaptive`, `between_tools` or `disabled`",
        )),
    }
}

/// Structured output: `output_config.format` is a JSON schema the answer follows (`effort` is accepted).
fn output_format(config: Option<&Value>) -> ApiResult<Option<ResponseFormat>> {
    let schema = match config.and_then(|c| c.get("format")).filter(|f| !f.is_null()) {
        None => return Ok(None),
        Some(f) if f.get("type").and_then(Value::as_str) == Some("json_schema") => f.get("schema"),
        Some(_) => None,
    };
    match schema {
        Some(s @ Value::Object(_)) => Ok(Some(ResponseFormat::JsonSchema(Some(s.clone())))),
        _ => Err(ApiError::param(
            "output_config.format",
            "`output_config.format` must be {\"type\": \"json_schema\", \"schema\": {...}}",
        )),
    }
}

/// A string, or a list of text blocks, as a string or a list of text parts.
fn text_parts(at: &str, v: &Value) -> ApiResult<Value> {
    match v {
        Value::String(s) => Ok(Value::String(s.clone())),
        Value::Array(blocks) => {
            let mut parts = Vec::with_capacity(blocks.len());
            for (j, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => parts.push(json!({"type": "text", "text": t})),
                    (Some(other), _) => return Err(unsupported(&format!("{at}[{j}]"), other)),
                    (None, _) => {
                        return Err(ApiError::param(
                            &format!("{at}[{j}]"),
                            format!("`{at}[{j}]` must be a content block with a `type`"),
                        ))
                    }
                }
            }
            Ok(Value::Array(parts))
        }
        v => Err(ApiError::param(at, format!("`{at}` must be a string or a list of text blocks, got {}", kind(v)))),
    }
}

/// An `image` block as a chat `image_url` part (its place kept for errors): a `base64` source as a `data:` URL,
/// a `url` source as itself.
fn image_block(at: &str, b: &Value) -> ApiResult<Value> {
    let src = b.get("source").filter(|s| s.is_object()).ok_or_else(|| {
        ApiError::param(
            &format!("{at}.source"),
            format!("`{at}.source` must be an object (a `base64` or `url` source)"),
        )
    })?;
    let s = |k: &str| src.get(k).and_then(Value::as_str);
    let url = match s("type") {
        Some("base64") => match (s("media_type"), s("data")) {
            (Some(mt), Some(data)) => format!("data:{mt};base64,{data}"),
            _ => {
                return Err(ApiError::param(
                    &format!("{at}.source"),
                    format!("`{at}.source` of type `base64` needs `media_type` and `data` strings"),
                ))
            }
        },
        Some("url") => s("url")
            .ok_or_else(|| ApiError::param(&format!("{at}.source.url"), format!("`{at}.source.url` must be a string")))?
            .to_string(),
        other => {
            return Err(ApiError::param(
                &format!("{at}.source.type"),
                format!(
                    "`{at}.source.type` must be `base64` or `url`, got {}",
                    other.map_or("nothing".into(), |t| format!("`{t}`"))
                ),
            ))
        }
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}, "_at": at}))
}

/// A 400 for a content block this server does not take.
fn unsupported(at: &str, ty: &str) -> ApiError {
    let why = match ty {
        "image" => format!("`{at}`: an `image` block belongs in a user message"),
        "document" => format!("`{at}` is a `document` block: hearth does not take documents; send text"),
        _ => format!("`{at}` has type `{ty}`, which is not a content block hearth takes here"),
    };
    ApiError::param(at, why)
}

/// One message as chat messages (a user message's `tool_result` blocks are `tool` messages before its text).
fn message(at: &str, m: &Value, out: &mut Vec<Value>) -> ApiResult<()> {
    let Some(obj) = m.as_object() else {
        return Err(ApiError::param(at, format!("`{at}` must be an object, got {}", kind(m))));
    };
    let role = match obj.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant")) => r,
        _ => return Err(ApiError::param(&format!("{at}.role"), format!("`{at}.role` must be `user` or `assistant`"))),
    };
    let content_at = format!("{at}.content");
    let blocks = match obj.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(b)) => b,
        None | Some(Value::Null) => {
            return Err(ApiError::param(&content_at, format!("`{content_at}` is required")));
        }
        Some(v) => {
            return Err(ApiError::param(
                &content_at,
                format!("`{content_at}` must be a string or a list of content blocks, got {}", kind(v)),
            ))
        }
    };
    let mut text = Vec::new();
    let mut calls = Vec::new();
    let mut thought = String::new();
    for (j, b) in blocks.iter().enumerate() {
        let bat = format!("{content_at}[{j}]");
        let field = |k: &str| b.get(k).filter(|v| !v.is_null());
        let need_str = |k: &str| {
            field(k)
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::param(&format!("{bat}.{k}"), format!("`{bat}.{k}` must be a string")))
        };
        match (b.get("type").and_then(Value::as_str), role) {
            (Some("text"), _) => text.push(json!({"type": "text", "text": need_str("text")?})),
            (Some("image"), "user") => text.push(image_block(&bat, b)?),
            (Some("tool_use"), "assistant") => {
                let input = match field("input") {
                    None => json!({}),
                    Some(i @ Value::Object(_)) => i.clone(),
                    Some(_) => {
                        return Err(ApiError::param(
                            &format!("{bat}.input"),
                            format!("`{bat}.input` must be an object"),
                        ))
                    }
                };
                calls.push(json!({"id": need_str("id")?, "type": "function",
                    "function": {"name": need_str("name")?, "arguments": input.to_string()}}));
            }
            (Some("tool_result"), "user") => {
                let id = need_str("tool_use_id")?;
                let mut content = match field("content") {
                    None => String::new(),
                    Some(c) => joined(&text_parts(&format!("{bat}.content"), c)?),
                };
                if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                    content = format!("Error: {content}");
                }
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            (Some("thinking"), "assistant") => thought.push_str(need_str("thinking")?),
            (Some("redacted_thinking"), "assistant") => {}
            (Some(ty @ ("tool_use" | "tool_result" | "thinking")), _) => {
                return Err(ApiError::param(&bat, format!("`{bat}`: a `{ty}` block cannot be in a {role} message")));
            }
            (Some(other), _) => return Err(unsupported(&bat, other)),
            (None, _) => return Err(ApiError::param(&bat, format!("`{bat}` must be a content block with a `type`"))),
        }
    }
    if role == "assistant" {
        let mut msg =
            json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::Array(text) }});
        if !calls.is_empty() {
            msg["tool_calls"] = Value::Array(calls);
        }
        if !thought.is_empty() {
            msg["reasoning_content"] = Value::String(thought);
        }
        if msg["content"].is_null() && msg.get("tool_calls").is_none() {
            msg["content"] = Value::String(String::new());
        }
        out.push(msg);
    } else if !text.is_empty() {
        out.push(json!({"role": "user", "content": text}));
    }
    Ok(())
}

/// Text parts (or a string) joined as one string.
fn joined(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// `tools` as function tools (the shape chat templates read).
fn tools(v: &Value) -> ApiResult<Vec<Value>> {
    let list = list_param("tools", v)?;
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        if let Some(ty) = t.get("type").and_then(Value::as_str).filter(|t| *t != "custom") {
            return Err(ApiError::param(
                &at,
                format!("`{at}` is Anthropic's server tool `{ty}`, which hearth does not run; send custom tools (`name`, `input_schema`)"),
            ));
        }
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            return Err(ApiError::param(&format!("{at}.name"), format!("`{at}.name` must be a string")));
        };
        let schema = match t.get("input_schema") {
            Some(s @ Value::Object(_)) => s.clone(),
            _ => {
                return Err(ApiError::param(
                    &format!("{at}.input_schema"),
                    format!("`{at}.input_schema` must be a JSON schema object"),
                ))
            }
        };
        let mut f = json!({"name": name, "parameters": schema});
        if let Some(d) = t.get("description").and_then(Value::as_str) {
            f["description"] = Value::String(d.to_string());
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(out)
}

/// `tool_choice` as Chat Completions' and whether it allows one call only (`disable_parallel_tool_use`).
fn tool_choice(v: &Value) -> ApiResult<(Value, bool)> {
    let one = v.get("disable_parallel_tool_use").and_then(Value::as_bool).unwrap_or(false);
    let choice = match (v.get("type").and_then(Value::as_str), v.get("name").and_then(Value::as_str)) {
        (Some("auto"), _) => json!("auto"),
        (Some("any"), _) => json!("required"),
        (Some("none"), _) => json!("none"),
        (Some("tool"), Some(name)) => json!({"type": "function", "function": {"name": name}}),
        _ => return Err(ApiError::param(
            "tool_choice",
            "`tool_choice` must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}",
        )),
    };
    Ok((choice, one))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RequestBody;

    fn tr(v: Value) -> ApiResult<ChatRequest> {
        translate(MessagesRequest::from_body(&v)?, false)
    }

    #[test]
    fn image_blocks_become_image_parts() {
        let t = tr(json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
            {"type": "text", "text": "what is it?"},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}}]}]}))
        .unwrap();
        let m = t.conversation.messages.clone().unwrap_or_default();
        let parts = m[0]["content"].as_array().cloned().unwrap_or_default();
        assert_eq!(parts[0]["image_url"]["url"], "data:image/png;base64,iVBO");
        assert_eq!(parts[0]["_at"], "messages[0].content[0]");
        assert_eq!(parts[1]["text"], "what is it?");
        assert_eq!(parts[2]["image_url"]["url"], "https://example.com/a.jpg");
    }

    #[test]
    fn a_tool_round_trip_becomes_chat_messages() {
        let t = tr(json!({
            "model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "be brief"}],
            "stop_sequences": ["END"], "temperature": 0.2, "top_k": 5, "metadata": {"user_id": "u"},
            "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": ""},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "text", "text": "thanks"}]}
            ]
        }))
        .unwrap();
        let (c, p) = (&t.conversation, &t.params);
        let m = c.messages.clone().unwrap_or_default();
        assert_eq!(m[0], json!({"role": "system", "content": [{"type": "text", "text": "be brief"}]}));
        assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
        assert_eq!(m[2]["reasoning_content"], "hmm");
        assert_eq!(m[3], json!({"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}));
        assert_eq!(m[4]["role"], "user");
        assert_eq!(p.stop, Some(Stop(vec!["END".into()])));
        assert_eq!(c.tool_choice, Some(json!("required")));
        assert_eq!(c.parallel_tool_calls, Some(json!(false)));
        assert_eq!(c.tools.as_ref().map(|t| t[0]["function"]["parameters"].clone()), Some(json!({"type": "object"})));
        assert_eq!((p.top_k, p.max_tokens, p.temperature), (Some(5), Some(64), Some(0.2)));
    }

    #[test]
    fn errors_name_the_anthropic_field() {
        let param = |v: Value| tr(v).unwrap_err().param.unwrap_or_default();
        let m = json!([{"role": "user", "content": "hi"}]);
        assert_eq!(param(json!({"messages": m})), "max_tokens");
        assert_eq!(param(json!({"messages": m, "max_tokens": 0})), "max_tokens");
        assert_eq!(param(json!({"max_tokens": 5})), "messages");
        assert_eq!(param(json!({"messages": m, "max_tokens": 5, "stop_sequences": "x"})), "stop_sequences");
        assert_eq!(param(json!({"messages": m, "max_tokens": 5, "tool_choice": {"type": "tool"}})), "tool_choice");
        assert_eq!(
            param(json!({"messages": m, "max_tokens": 5, "thinking": {"type": "enabled"}})),
            "thinking.budget_tokens"
        );
        assert_eq!(
            param(
                json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}], "max_tokens": 5})
            ),
            "messages[0].content[0].source.type"
        );
        assert_eq!(
            param(
                json!({"messages": [{"role": "assistant", "content": [{"type": "image", "source": {"type": "url", "url": "https://x"}}]}], "max_tokens": 5})
            ),
            "messages[0].content[0]"
        );
        assert_eq!(
            param(
                json!({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f"}]}], "max_tokens": 5})
            ),
            "messages[0].content[0]"
        );
        assert_eq!(
            param(json!({"messages": [{"role": "system", "content": "x"}], "max_tokens": 5})),
            "messages[0].role"
        );
        assert_eq!(
            param(
                json!({"messages": m, "max_tokens": 5, "tools": [{"type": "web_search_20250305", "name": "web_search"}]})
            ),
            "tools[0]"
        );
        let many = tr(json!({"messages": m, "max_tokens": 5, "stop_sequences": vec!["a"; 17]})).unwrap_err();
        assert_eq!(many.param.as_deref(), Some("stop_sequences"));
        assert_eq!(many.message, "`stop_sequences` may hold at most 16 strings, got 17");
        let count = MessagesRequest::from_body(&json!({"messages": m})).map_err(ApiError::from);
        assert!(count.and_then(|r| translate(r, true)).is_ok(), "count_tokens needs no max_tokens");
    }
}
