//! Chat messages: validate the message list (OpenAI's message shape, which chat templates read), normalize it for
//! Hugging Face chat templates, render, tokenize.
//!
//! Normalization: text-part arrays become one string (parts joined by "\n", as vLLM does); `developer` becomes
//! `system` (templates do not know it); a tool call's `arguments` JSON string becomes an object, which is what
//! HF templates expect. Every other field of a message is passed through.

use super::tools::{pythonic, Tools};
use crate::error::{ApiError, ApiResult};
use crate::model::Ready;
use crate::output::tools::Format;
use crate::wire::chat::Conversation;
use crate::wire::de::kind;
use hearth_engine::tokenizer::chat_template::RenderOptions;
use serde_json::{Map, Value};

const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool"];

/// Validate and normalize `messages` (for a model without images).
pub fn normalize(c: &Conversation) -> ApiResult<Value> {
    normalize_with(c, false)
}

/// [`normalize`]; with `images` (a vision-language model) a content list holding images stays a list for the
/// template, its text parts as they are and each image as `{"type": "image"}` (what Hugging Face templates
/// write their image placeholders for).
pub fn normalize_with(c: &Conversation, images: bool) -> ApiResult<Value> {
    let msgs = c.messages.as_ref().ok_or_else(|| ApiError::param("messages", "`messages` is required"))?;
    if msgs.is_empty() {
        return Err(ApiError::param("messages", "`messages` must hold at least one message"));
    }
    msgs.iter().enumerate().map(|(i, m)| message(i, m, images)).collect::<ApiResult<Vec<_>>>().map(Value::Array)
}

/// Bytes of message text (content strings and text parts, without their surrounding whitespace, which a template
/// may trim): what the prompt holds at the least.
pub fn text_bytes(c: &Conversation) -> usize {
    let text = |v: &Value| v.as_str().map_or(0, |s| s.trim().len());
    let content = |m: &Value| match m.get("content") {
        Some(Value::Array(parts)) => parts.iter().map(|p| p.get("text").map_or(0, text)).sum(),
        Some(v) => text(v),
        None => 0,
    };
    c.messages.as_deref().unwrap_or_default().iter().map(content).sum()
}

fn message(i: usize, m: &Value, images: bool) -> ApiResult<Value> {
    let at = format!("messages[{i}]");
    let Some(obj) = m.as_object() else {
        return Err(ApiError::param(&at, format!("`{at}` must be an object, got {}", kind(m))));
    };
    let mut out = obj.clone();
    let role = match obj.get("role") {
        Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.as_str(),
        Some(Value::String(r)) => {
            return Err(ApiError::param(
                &format!("{at}.role"),
                format!("`{at}.role` must be one of {}, got {r:?}", ROLES.join(", ")),
            ))
        }
        Some(v) => {
            return Err(ApiError::param(
                &format!("{at}.role"),
                format!("`{at}.role` must be a string, got {}", kind(v)),
            ))
        }
        None => return Err(ApiError::param(&format!("{at}.role"), format!("`{at}.role` is required"))),
    };
    if role == "developer" {
        out.insert("role".into(), "system".into());
    }
    let has_tool_calls = obj.get("tool_calls").is_some_and(|t| !t.is_null());
    let content = match obj.get("content") {
        None | Some(Value::Null) if role == "assistant" && has_tool_calls => Value::Null,
        None | Some(Value::Null) => {
            return Err(ApiError::param(
                &format!("{at}.content"),
                format!("`{at}.content` is required for a {role} message"),
            ))
        }
        Some(Value::String(s)) => Value::String(s.clone()),
        Some(Value::Array(parts)) if images && parts.iter().any(is_image) => image_parts(&at, parts)?,
        Some(Value::Array(parts)) => Value::String(join_parts(&at, parts)?),
        Some(v) => {
            return Err(ApiError::param(
                &format!("{at}.content"),
                format!("`{at}.content` must be a string or a list of text parts, got {}", kind(v)),
            ))
        }
    };
    out.insert("content".into(), content);
    if let Some(calls) = obj.get("tool_calls").filter(|t| !t.is_null()) {
        out.insert("tool_calls".into(), tool_calls(&at, calls)?);
    }
    Ok(Value::Object(out))
}

fn is_image(part: &Value) -> bool {
    part.get("type").and_then(Value::as_str) == Some("image_url")
}

/// A content list with images, for a template that renders them: text parts and `{"type": "image"}`.
fn image_parts(at: &str, parts: &[Value]) -> ApiResult<Value> {
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        out.push(match is_image(part) {
            true => serde_json::json!({"type": "image"}),
            false => serde_json::json!({"type": "text", "text": text_of(at, j, part)?}),
        });
    }
    Ok(Value::Array(out))
}

fn join_parts(at: &str, parts: &[Value]) -> ApiResult<String> {
    let texts = parts.iter().enumerate().map(|(j, p)| text_of(at, j, p)).collect::<ApiResult<Vec<_>>>()?;
    Ok(texts.join("\n"))
}

/// The text of part `j` of `at`'s content, or an error naming it.
fn text_of<'a>(at: &str, j: usize, part: &'a Value) -> ApiResult<&'a str> {
    let here = format!("{at}.content[{j}]");
    let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
    match (kind, part.get("text")) {
        ("text", Some(Value::String(t))) => Ok(t.as_str()),
        ("text", _) => Err(ApiError::param(&here, format!("`{here}` is a text part without a `text` string"))),
        ("", _) => Err(ApiError::param(&here, format!("`{here}` must be an object with a `type`"))),
        ("image_url", _) => {
            Err(ApiError::param(&here, format!("`{here}`: this model does not take images; send text"))
                .with_code("model_takes_no_images"))
        }
        (other, _) => Err(ApiError::param(
            &here,
            format!("`{here}`: `{other}` content is not supported by this model; only `text` parts are"),
        )),
    }
}

fn tool_calls(at: &str, calls: &Value) -> ApiResult<Value> {
    let here = format!("{at}.tool_calls");
    let Some(list) = calls.as_array() else {
        return Err(ApiError::param(&here, format!("`{here}` must be a list, got {}", kind(calls))));
    };
    let mut out = list.clone();
    for call in &mut out {
        if let Some(args) = call.get_mut("function").and_then(|f| f.get_mut("arguments")) {
            if let Some(parsed) =
                args.as_str().and_then(|s| serde_json::from_str::<Value>(s).ok()).filter(Value::is_object)
            {
                *args = parsed;
            }
        }
    }
    Ok(Value::Array(out))
}

/// For a template that does not render tools (the generic format, and the pythonic one of Gemma's templates): the
/// tools described in the system message, and earlier calls written the way the model is asked to write them.
fn add_described_tools(messages: &mut Value, t: &Tools) {
    let Some(list) = messages.as_array_mut() else { return };
    for m in list.iter_mut() {
        let calls = m.get("tool_calls").and_then(Value::as_array).cloned();
        if let (Some(calls), Some(obj)) = (calls, m.as_object_mut()) {
            if obj.get("content").is_none_or(Value::is_null) {
                let calls = calls.iter().filter_map(|c| c.get("function"));
                let text = if t.format == Format::Pythonic {
                    let empty = Value::Object(Map::new());
                    let written: Vec<String> = calls
                        .map(|f| {
                            let name = f.get("name").and_then(Value::as_str).unwrap_or("");
                            pythonic::write(name, f.get("arguments").unwrap_or(&empty))
                        })
                        .collect();
                    format!("[{}]", written.join(", "))
                } else {
                    let calls: Vec<Value> = calls
                        .map(|f| serde_json::json!({"name": f.get("name"), "arguments": f.get("arguments")}))
                        .collect();
                    serde_json::json!({"tool_calls": calls}).to_string()
                };
                obj.insert("content".into(), text.into());
            }
        }
    }
    let Some(text) = t.instructions() else { return };
    match list.first_mut().filter(|m| m["role"] == "system" && m["content"].is_string()) {
        Some(sys) => {
            let merged = format!("{}\n\n{text}", sys["content"].as_str().unwrap_or(""));
            sys["content"] = merged.into();
        }
        None => list.insert(0, serde_json::json!({"role": "system", "content": text})),
    }
}

/// The model's chat template's source ("" without one).
pub fn source(ready: &Ready) -> &str {
    ready.tokenizer.chat_template.as_ref().map(|t| t.source.as_str()).unwrap_or("")
}

/// Render the request's conversation with the model's chat template (`tools`: what `Tools::resolve` made of
/// the request's tools).
pub fn render(ready: &Ready, c: &Conversation, with: Option<&Tools>) -> ApiResult<String> {
    let mut messages = normalize_with(c, ready.images.vision.is_some())?;
    // The template sees the tools when the request offers them (`Tools::resolve` checked them).
    let tools = with.and(c.tools.as_ref()).map(|l| Value::Array(l.clone()));
    if let Some(t) = with.filter(|t| t.instructions().is_some()) {
        add_described_tools(&mut messages, t);
    }
    // The server's `--reasoning` default, unless the request says otherwise.
    let mut kwargs = c.chat_template_kwargs.clone().unwrap_or_default();
    if let Some(on) = ready.reasoning {
        kwargs.entry("enable_thinking").or_insert(Value::Bool(on));
    }
    let extra: Option<&Map<String, Value>> = (!kwargs.is_empty()).then_some(&kwargs);
    let add_generation_prompt = c.add_generation_prompt.unwrap_or(true);
    let tmpl = ready.tokenizer.chat_template.as_ref().ok_or_else(|| {
        ApiError::bad_request(
            "this model has no chat template: use /v1/completions with a plain prompt, or restart the server with --chat-template FILE",
        )
        .with_code("no_chat_template")
    })?;
    let opts = RenderOptions { tools: tools.as_ref(), add_generation_prompt, extra };
    let rendered = tmpl.render(&messages, &opts);
    rendered.map_err(|e| {
        ApiError::bad_request(format!("the chat template could not render these messages: {e}"))
            .with_code("template_error")
    })
}

/// Render and tokenize (BOS only if the template did not write it): the prompt's text and ids.
pub fn prompt_ids(
    ready: &Ready,
    c: &Conversation,
    with: Option<&Tools>,
    images: Option<&hearth_engine::vision::VisionSpec>,
) -> ApiResult<(String, Vec<u32>)> {
    let mut text = render(ready, c, with)?;
    if let Some(spec) = images {
        text = super::images::expand_text(spec, &ready.tokenizer, &text);
    }
    let ids = ready
        .tokenizer
        .encode_chat(&text)
        .map_err(|e| ApiError::internal(format!("tokenizing the prompt failed: {e}")))?;
    Ok((text, ids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RequestBody;
    use serde_json::json;

    fn norm(v: Value) -> ApiResult<Value> {
        normalize(&Conversation::from_body(&json!({ "messages": v }))?)
    }

    #[test]
    fn normalizes_parts_roles_and_tool_arguments() {
        let out = norm(json!([
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": "x"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"q\": 1}"}}]},
            {"role": "tool", "content": "42", "tool_call_id": "1"},
        ]))
        .unwrap();
        assert_eq!(out[0]["role"], "system");
        assert_eq!(out[1]["content"], "a\nb");
        assert_eq!(out[1]["name"], "x");
        assert_eq!(out[2]["tool_calls"][0]["function"]["arguments"]["q"], 1);
        assert_eq!(out[3]["tool_call_id"], "1");
    }

    #[test]
    fn rejects_bad_messages_naming_the_place() {
        let param = |v: Value| norm(v).unwrap_err().param.unwrap_or_default();
        assert_eq!(param(json!([])), "messages");
        assert_eq!(param(json!("hi")), "messages");
        assert_eq!(param(json!([{"role": "wizard", "content": "x"}])), "messages[0].role");
        assert_eq!(param(json!([{"content": "x"}])), "messages[0].role");
        assert_eq!(param(json!([{"role": "user"}])), "messages[0].content");
        assert_eq!(param(json!([{"role": "user", "content": 5}])), "messages[0].content");
        assert_eq!(
            param(json!([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])),
            "messages[0].content[0]"
        );
        assert_eq!(param(json!([{"role": "user", "content": "ok"}, 3])), "messages[1]");
        let e = norm(json!({})).unwrap_err();
        assert_eq!(e.message, "`messages` must be an array, got an object");
    }

    #[test]
    fn messages_are_exact() {
        let msg = |v: Value| norm(v).unwrap_err().message;
        assert_eq!(msg(json!([])), "`messages` must hold at least one message");
        assert_eq!(msg(json!([3])), "`messages[0]` must be an object, got a number");
        assert_eq!(
            msg(json!([{"role": "wizard", "content": "x"}])),
            "`messages[0].role` must be one of system, developer, user, assistant, tool, got \"wizard\""
        );
        assert_eq!(msg(json!([{"role": 1, "content": "x"}])), "`messages[0].role` must be a string, got a number");
        assert_eq!(
            msg(json!([{"role": "user", "content": null}])),
            "`messages[0].content` is required for a user message"
        );
        assert_eq!(
            msg(json!([{"role": "user", "content": [{"type": "image_url"}]}])),
            "`messages[0].content[0]`: this model does not take images; send text"
        );
        assert_eq!(
            msg(json!([{"role": "user", "content": [{"type": "input_audio"}]}])),
            "`messages[0].content[0]`: `input_audio` content is not supported by this model; only `text` parts are"
        );
        assert_eq!(
            msg(json!([{"role": "user", "content": [{"type": "text"}]}])),
            "`messages[0].content[0]` is a text part without a `text` string"
        );
    }
}
