//! A Responses API request translated into the chat core's [`ChatRequest`]: `instructions` become the system
//! message, `input` items (messages, `function_call`, `function_call_output`, `reasoning`) become chat messages
//! after the stored conversation of `previous_response_id`, and `tools`, `tool_choice`, `text.format`,
//! `reasoning`, `max_output_tokens` and the sampling fields become the request's tools and parameters. Every field
//! is checked here first, so a 400 names the Responses field; what the chat core checks later it names by
//! [`FIELDS`].

use crate::chat::{ChatRequest, FieldNames};
use crate::error::{ApiError, ApiResult};
use crate::wire::chat::Conversation;
use crate::wire::common::ResponseFormat;
use crate::wire::de::{field, kind, list_param, want};
use crate::wire::responses::ResponsesRequest;
use crate::wire::GenerationParams;
use serde_json::{json, Value};

/// The Responses API's names for the fields the chat core checks.
pub const FIELDS: FieldNames = FieldNames {
    max_tokens: "max_output_tokens",
    response_format: "text.format",
    messages: "input",
    tool_schema: "parameters",
};

/// A request, translated.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    pub chat: ChatRequest,
    /// The conversation without the instructions (the previous response's, then this input), as chat messages.
    pub conversation: Vec<Value>,
    pub store: bool,
}

/// Translate `req`, continuing `previous` (the stored conversation of `previous_response_id`) when given.
pub fn translate(req: &ResponsesRequest, previous: Vec<Value>) -> ApiResult<Translated> {
    for (k, v, what) in [
        ("conversation", &req.conversation, "conversations"),
        ("background", &req.background, "background responses"),
        ("prompt", &req.prompt, "prompt templates"),
    ] {
        if v.as_ref().is_some_and(|v| v != &Value::Bool(false)) {
            return Err(ApiError::param(
                k,
                format!("`{k}`: hearth does not serve {what}; send `input` (and `previous_response_id`)"),
            ));
        }
    }
    let mut conversation = previous;
    match &req.input {
        Some(Value::String(s)) => conversation.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) if !items.is_empty() => items_to_messages(items, &mut conversation)?,
        Some(Value::Array(_)) => return Err(ApiError::param("input", "`input` must not be empty")),
        None => return Err(ApiError::param("input", "`input` is required")),
        Some(v) => {
            return Err(ApiError::param(
                "input",
                format!("`input` must be a string or a list of items, got {}", kind(v)),
            ))
        }
    }
    let mut messages = Vec::with_capacity(conversation.len() + 1);
    match &req.instructions {
        None => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(v) => {
            return Err(ApiError::param("instructions", format!("`instructions` must be a string, got {}", kind(v))))
        }
    }
    messages.extend(conversation.iter().cloned());
    let mut chat = Conversation {
        messages: Some(messages),
        tools: req.tools.as_ref().map(tools).transpose()?,
        tool_choice: req.tool_choice.as_ref().map(tool_choice).transpose()?,
        parallel_tool_calls: req.parallel_tool_calls.clone(),
        ..Conversation::default()
    };
    let response_format = req.text.as_ref().map(text_format).transpose()?.flatten();
    if let Some(on) = req.reasoning.as_ref().map(thinking).transpose()?.flatten() {
        chat.enable_thinking(on);
    }
    let number = |k: &str, v: &Option<Value>| v.clone().map_or(Ok(None), |v| field::<f64>(k, v));
    let params = GenerationParams {
        temperature: number("temperature", &req.temperature)?,
        top_p: number("top_p", &req.top_p)?,
        max_tokens: req.max_output_tokens.clone().map_or(Ok(None), |v| field::<i64>(FIELDS.max_tokens, v))?,
        stream: Some(req.stream.unwrap_or(false)),
        response_format,
        speculative: req.speculative,
        ..GenerationParams::default()
    };
    let chat = ChatRequest { top_logprobs: req.top_logprobs, ..ChatRequest::new(chat, params, FIELDS) };
    Ok(Translated { chat, conversation, store: req.store.unwrap_or(true) })
}

/// `reasoning.effort` as `enable_thinking` (None: not set).
fn thinking(r: &Value) -> ApiResult<Option<bool>> {
    match r.get("effort").filter(|e| !e.is_null()).map(Value::as_str) {
        None => Ok(None),
        Some(Some("none" | "minimal")) => Ok(Some(false)),
        Some(Some("low" | "medium" | "high")) => Ok(Some(true)),
        Some(_) => Err(ApiError::param(
            "reasoning.effort",
            "`reasoning.effort` must be `none`, `minimal`, `low`, `medium` or `high`",
        )),
    }
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
                    (Some("input_image"), _) => out.push(input_image(&pat, p)?),
                    (Some(ty @ ("input_file" | "input_audio")), _) => {
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

/// An `input_image` part as a chat `image_url` part (its place kept for errors).
fn input_image(at: &str, p: &Value) -> ApiResult<Value> {
    match (p.get("image_url").and_then(Value::as_str), p.get("file_id").filter(|f| !f.is_null())) {
        (Some(url), _) => {
            let detail = p.get("detail").cloned().unwrap_or(Value::Null);
            Ok(json!({"type": "image_url", "image_url": {"url": url, "detail": detail}, "_at": at}))
        }
        (None, Some(_)) => Err(ApiError::param(
            &format!("{at}.file_id"),
            format!("`{at}.file_id`: hearth has no file store; send the image as `image_url` (a URL or a data: URL)"),
        )),
        (None, None) => Err(ApiError::param(&format!("{at}.image_url"), format!("`{at}.image_url` must be a string"))),
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

/// Function tools (`{"type": "function", "name", "description", "parameters"}`) as the function tools chat templates
/// read.
fn tools(v: &Value) -> ApiResult<Vec<Value>> {
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
    Ok(out)
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

/// `text.format` as the output constraint (None: plain text).
fn text_format(text: &Value) -> ApiResult<Option<ResponseFormat>> {
    let Some(format) = text.get("format").filter(|f| !f.is_null()) else { return Ok(None) };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        // The schema is checked as Chat Completions' `response_format.json_schema.schema` is.
        Some("json_schema") => match format.get("schema") {
            None | Some(Value::Null) => Ok(Some(ResponseFormat::JsonSchema(None))),
            Some(s @ (Value::Object(_) | Value::Bool(_))) => Ok(Some(ResponseFormat::JsonSchema(Some(s.clone())))),
            Some(s) => {
                Err(ApiError::param("text.format.schema", format!("`text.format.schema` {}", want("an object", s))))
            }
        },
        _ => Err(ApiError::param(
            "text.format",
            "`text.format` must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"name\", \"schema\"}",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RequestBody;

    fn tr(v: Value, previous: Vec<Value>) -> ApiResult<Translated> {
        translate(&ResponsesRequest::from_body(&v)?, previous)
    }

    #[test]
    fn input_images_become_image_parts() {
        let t = tr(
            json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "this?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "low"}]}]}),
            Vec::new(),
        )
        .unwrap();
        let m = t.chat.conversation.messages.clone().unwrap_or_default();
        let p = &m[0]["content"][1];
        assert_eq!(
            (p["type"].as_str(), p["image_url"]["url"].as_str()),
            (Some("image_url"), Some("data:image/png;base64,iVBO"))
        );
        assert_eq!((p["image_url"]["detail"].as_str(), p["_at"].as_str()), (Some("low"), Some("input[0].content[1]")));
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
        let m = t.chat.conversation.messages.clone().unwrap_or_default();
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[2]["content"], "hello");
        assert_eq!(m[3]["tool_calls"].as_array().map(Vec::len), Some(2));
        assert_eq!(m[3]["reasoning_content"], "hmm");
        assert_eq!(m[4], json!({"role": "tool", "tool_call_id": "call_1", "content": "42"}));
        assert_eq!(m[5]["content"], json!([{"type": "text", "text": "and?"}]));
        assert_eq!(t.conversation.len(), 5, "the instructions are not part of the conversation");
        let p = &t.chat.params;
        assert_eq!(p.max_tokens, Some(9));
        assert_eq!(p.response_format, Some(ResponseFormat::JsonSchema(Some(json!({"type": "object"})))));
        let kwargs = t.chat.conversation.chat_template_kwargs.clone().map(Value::Object);
        assert_eq!(kwargs, Some(json!({"enable_thinking": false})));
        let choice = t.chat.conversation.tool_choice.clone();
        assert_eq!(choice, Some(json!({"type": "function", "function": {"name": "f"}})));
        assert!(!t.store && p.stream == Some(false));
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
            "input[0].content[0].image_url"
        );
        assert_eq!(
            param(json!({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]})),
            "input[0].content[0].file_id"
        );
        assert_eq!(param(json!({"input": [{"type": "function_call", "name": "f"}]})), "input[0].call_id");
        assert_eq!(param(json!({"input": [{"type": "web_search_call"}]})), "input[0].type");
        assert_eq!(param(json!({"input": "x", "tools": [{"type": "web_search"}]})), "tools[0]");
        assert_eq!(param(json!({"input": "x", "tool_choice": "sometimes"})), "tool_choice");
        assert_eq!(param(json!({"input": "x", "text": {"format": {"type": "xml"}}})), "text.format");
        assert_eq!(param(json!({"input": "x", "reasoning": {"effort": "max"}})), "reasoning.effort");
        assert_eq!(param(json!({"input": "x", "store": "yes"})), "store");
        assert_eq!(param(json!({"input": "x", "max_output_tokens": "9"})), "max_output_tokens");
        assert_eq!(
            param(json!({"input": "x", "text": {"format": {"type": "json_schema", "schema": 5}}})),
            "text.format.schema"
        );
    }
}
