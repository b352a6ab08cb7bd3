//! Chat templates with Hugging Face compatibility, on minijinja.
//!
//! transformers renders with Jinja2 (`trim_blocks`, `lstrip_blocks`, loop controls), Python string/dict methods,
//! a `tojson` that is Python's `json.dumps(..., ensure_ascii=False)` (no HTML escaping), `raise_exception`,
//! `strftime_now`, and Python's spelling of `None`/`True`/`False` when printed. This module reproduces each.

use crate::{Error, Result};
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, ErrorKind, State};

pub struct ChatTemplate {
    env: Environment<'static>,
    /// The template's source (tool-call formats are recognized from it).
    pub source: String,
    bos_token: String,
    eos_token: String,
}

/// Extra inputs to a render.
#[derive(Default)]
pub struct RenderOptions<'a> {
    pub tools: Option<&'a serde_json::Value>,
    pub add_generation_prompt: bool,
    /// `enable_thinking`, `documents`, ... passed as template variables.
    pub extra: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// Remove transformers' `{% generation %}` / `{% endgeneration %}` markers (assistant-mask tracking only).
fn strip_generation_tags(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("{%") {
        let Some(end) = rest[start..].find("%}") else { break };
        let inner = rest[start + 2..start + end].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        out.push_str(&rest[..start]);
        if inner != "generation" && inner != "endgeneration" {
            out.push_str(&rest[start..start + end + 2]);
        }
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out
}

fn python_float(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "NaN".into()
        } else if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let a = x.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        // Python: 1e-05, 1.5e+16
        let s = format!("{x:e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match e.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', e),
        };
        return format!("{m}e{sign}{digits:0>2}");
    }
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python `json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys)`.
fn py_json(
    v: &Value,
    indent: Option<usize>,
    sort_keys: bool,
    depth: usize,
    out: &mut String,
) -> std::result::Result<(), minijinja::Error> {
    let nl = |out: &mut String, d: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * d));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                out.push_str(&python_float(f64::try_from(v.clone())?));
            }
        }
        ValueKind::String => json_string(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                nl(out, depth + 1);
                py_json(it, indent, sort_keys, depth + 1, out)?;
            }
            nl(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                nl(out, depth + 1);
                json_string(&k.as_str().map(str::to_string).unwrap_or_else(|| k.to_string()), out);
                out.push_str(": ");
                py_json(&v.get_item(k)?, indent, sort_keys, depth + 1, out)?;
            }
            nl(out, depth);
            out.push('}');
        }
        _ => json_string(&v.to_string(), out),
    }
    Ok(())
}

fn tojson(v: Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    py_json(&v, indent, sort_keys.unwrap_or(false), 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

fn strftime_now(fmt: String) -> String {
    chrono::Local::now().format(&fmt).to_string()
}

/// Print values the way Jinja2 on Python does: None, True, False.
fn python_formatter(
    out: &mut minijinja::Output,
    state: &State,
    v: &Value,
) -> std::result::Result<(), minijinja::Error> {
    match v.kind() {
        ValueKind::None => out.write_str("None").map_err(minijinja::Error::from),
        ValueKind::Bool => out.write_str(if v.is_true() { "True" } else { "False" }).map_err(minijinja::Error::from),
        _ => minijinja::escape_formatter(out, state, v),
    }
}

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned("chat", strip_generation_tags(source))
            .map_err(|e| Error::Template(format!("does not compile: {e:#}")))?;
        Ok(Self { env, source: source.to_string(), bos_token: bos_token.to_string(), eos_token: eos_token.to_string() })
    }

    /// Load a template file given with `--chat-template`.
    pub fn from_file(path: &std::path::Path, bos_token: &str, eos_token: &str) -> Result<Self> {
        let src = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading chat template {}", path.display()), e))?;
        Self::new(&src, bos_token, eos_token)
    }

    /// Render a conversation (a JSON array of messages) to the prompt text.
    pub fn render(&self, messages: &serde_json::Value, opts: &RenderOptions) -> Result<String> {
        if !messages.is_array() {
            return Err(Error::Template("messages must be a list".into()));
        }
        let mut ctx = serde_json::Map::new();
        ctx.insert("bos_token".into(), self.bos_token.clone().into());
        ctx.insert("eos_token".into(), self.eos_token.clone().into());
        if let Some(extra) = opts.extra {
            for (k, v) in extra {
                ctx.insert(k.clone(), v.clone());
            }
        }
        ctx.insert("messages".into(), messages.clone());
        ctx.insert("tools".into(), opts.tools.cloned().unwrap_or(serde_json::Value::Null));
        ctx.insert("add_generation_prompt".into(), opts.add_generation_prompt.into());
        let tmpl = self.env.get_template("chat").map_err(|e| Error::Template(e.to_string()))?;
        // minijinja 2.24 can panic on some inputs (it indexes past the end when a template reverses an empty list
        // or string, `x[::-1]`): that is a template error for this conversation, not a crash.
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tmpl.render(Value::from_serialize(&ctx))))
            .map_err(|_| Error::Template("the template engine failed on these messages".into()))?;
        out.map_err(|e| {
            // raise_exception messages come through as the error's detail: surface them verbatim.
            let detail = e.detail().map(str::to_string).unwrap_or_else(|| format!("{e:#}"));
            Error::Template(detail)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(src: &str, msgs: serde_json::Value) -> Result<String> {
        ChatTemplate::new(src, "<s>", "</s>")?.render(&msgs, &RenderOptions::default())
    }

    #[test]
    fn python_tojson_does_not_html_escape_and_keeps_key_order() {
        let out =
            render("{{ messages[0] | tojson }}", json!([{"z": "<a&b>", "a": [1, 2.5, null, true], "é": "ü"}])).unwrap();
        assert_eq!(out, r#"{"z": "<a&b>", "a": [1, 2.5, null, true], "é": "ü"}"#);
        let out = render("{{ messages[0] | tojson(indent=2) }}", json!([{"a": [1]}])).unwrap();
        assert_eq!(out, "{\n  \"a\": [\n    1\n  ]\n}");
    }

    #[test]
    fn python_methods_and_printing() {
        let out = render(
            "{{ messages[0].content.strip().upper() }}|{{ messages[0].content.split('x')[1] }}|{{ none }}|{{ true }}",
            json!([{"role": "user", "content": "  axb  "}]),
        )
        .unwrap();
        assert_eq!(out, "AXB|b  |None|True");
    }

    #[test]
    fn raise_exception_surfaces_the_message() {
        let e = render("{{ raise_exception('roles must alternate') }}", json!([])).unwrap_err();
        assert!(e.to_string().contains("roles must alternate"), "{e}");
    }

    #[test]
    fn reversing_an_empty_list_does_not_panic() {
        // minijinja 2.24 can panic reversing an empty slice; render must return (a panic fails this test).
        for src in ["{% for m in messages[1:][::-1] %}{{ m }}{% endfor %}", "{{ ''[::-1] }}", "{{ messages[::-1] }}"] {
            let _ = render(src, json!([{"role": "system", "content": "x"}]));
            let _ = render(src, json!([]));
        }
    }

    #[test]
    fn generation_tags_are_ignored() {
        let out = render("a{% generation %}b{%- endgeneration %}c", json!([])).unwrap();
        assert_eq!(out, "abc");
    }

    #[test]
    fn python_float_repr() {
        assert_eq!(python_float(1.0), "1.0");
        assert_eq!(python_float(0.1), "0.1");
        assert_eq!(python_float(1e-5), "1e-05");
        assert_eq!(python_float(-2.5e20), "-2.5e+20");
    }
}
