//! Random values, and valid bodies of every route to mutate.

use super::rng::Rng;
use serde_json::{json, Map, Value};

pub const KNOWN_KEYS: &[&str] = &[
    "model",
    "messages",
    "system",
    "stop_sequences",
    "thinking",
    "output_config",
    "input",
    "instructions",
    "max_output_tokens",
    "previous_response_id",
    "store",
    "text",
    "prompt",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "xtc_probability",
    "xtc_threshold",
    "seed",
    "logit_bias",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "stream",
    "stream_options",
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "grammar",
    "json_schema",
    "parallel_tool_calls",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "skip_special_tokens",
    "logprobs",
    "top_logprobs",
    "echo",
    "suffix",
    "best_of",
    "tools",
    "tool_choice",
    "chat_template_kwargs",
    "add_generation_prompt",
    "content",
    "add_special",
    "with_pieces",
    "tokens",
    "role",
    "type",
    "text",
    "tool_calls",
    "function",
    "arguments",
    "name",
    "include_usage",
    "user",
];

pub const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "-0.0",
    "1",
    "-1",
    "2",
    "0.5",
    "1.5",
    "-2.5",
    "3",
    "16",
    "17",
    "20",
    "21",
    "100",
    "101",
    "-100",
    "-101",
    "1e308",
    "-1e308",
    "1.7976931348623157e308",
    "1e39",
    "3.5e38",
    "-1e39",
    "1e-45",
    "5e-324",
    "1e-320",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "8999999999999999",
    "9000000000000001",
    "9.0e15",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "1e19",
    "123456789012345678901234567890",
    "0.1",
    "0.999999999",
    "1.0000001",
    "2.0000000001",
];

pub const STRINGS: &[&str] = &[
    "",
    " ",
    "NaN",
    "nan",
    "Infinity",
    "-Infinity",
    "inf",
    "1e999",
    "0x10",
    "5",
    "-1",
    "true",
    "null",
    "\u{0}",
    "\u{FEFF}",
    "\u{202E}gnirts",
    "🦀🔥👩‍👩‍👧",
    "é\u{301}",
    "日本語のテキスト",
    "\n",
    "\r\n",
    "\t",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<bos>",
    "<eos>",
    "<start_of_turn>user\n",
    "<end_of_turn>",
    "{{ raise_exception('boom') }}",
    "{% for x in y %}",
    "{{",
    "}}",
    "\\u0000",
    "text",
    "image_url",
    "function",
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "none",
    "auto",
    "json_object",
    "json_schema",
    "smollm2-135m",
];

pub fn number(rng: &mut Rng) -> Value {
    match rng.below(4) {
        0 => serde_json::from_str(rng.pick::<&str>(NUMBERS)).unwrap_or(Value::Null),
        1 => json!(rng.range(-5, 40)),
        2 => json!(rng.unit() * 4.0 - 1.0),
        _ => json!(rng.next() as i64),
    }
}

pub fn random_string(rng: &mut Rng) -> String {
    if rng.pct(50) {
        return rng.pick(STRINGS).to_string();
    }
    let len = if rng.pct(5) { rng.below(5000) } else { rng.below(24) };
    let mut s = String::with_capacity(len);
    for _ in 0..len {
        let c = match rng.below(10) {
            0..=4 => (b' ' + rng.below(95) as u8) as char,
            5 => *rng.pick(&['\n', '\t', '\r', '\u{0}', '\u{7f}', '\u{85}', '\u{2028}']),
            6 => char::from_u32(0x80 + rng.below(0x780) as u32).unwrap_or('?'),
            7 => char::from_u32(0x3040 + rng.below(0x6000) as u32).unwrap_or('?'),
            8 => char::from_u32(0x1F300 + rng.below(0x300) as u32).unwrap_or('?'),
            _ => char::from_u32(rng.below(0x110000) as u32).unwrap_or('\u{FFFD}'),
        };
        s.push(c);
    }
    if rng.pct(10) {
        s.push_str(rng.pick::<&str>(STRINGS));
    }
    s
}

pub fn scalar(rng: &mut Rng) -> Value {
    match rng.below(6) {
        0 => Value::Null,
        1 => json!(rng.pct(50)),
        2 | 3 => number(rng),
        _ => json!(random_string(rng)),
    }
}

pub fn random_key(rng: &mut Rng) -> String {
    if rng.pct(70) {
        rng.pick(KNOWN_KEYS).to_string()
    } else {
        random_string(rng)
    }
}

pub fn random_value(rng: &mut Rng, depth: usize) -> Value {
    if depth == 0 {
        return scalar(rng);
    }
    match rng.below(8) {
        0..=3 => scalar(rng),
        4 | 5 => {
            let n = if rng.pct(5) { rng.below(300) } else { rng.below(5) };
            Value::Array((0..n).map(|_| random_value(rng, depth - 1)).collect())
        }
        _ => {
            let n = rng.below(6);
            Value::Object((0..n).map(|_| (random_key(rng), random_value(rng, depth - 1))).collect())
        }
    }
}

/// Deeply nested arrays / objects around `v`.
pub fn nest(rng: &mut Rng, v: Value) -> Value {
    let depth = *rng.pick(&[2usize, 10, 64, 126, 127, 128, 129, 200]);
    let mut v = v;
    for _ in 0..depth {
        v = if rng.pct(50) { json!([v]) } else { json!({ rng.pick(KNOWN_KEYS).to_string(): v }) };
    }
    v
}

pub fn nasty(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0..=4 => scalar(rng),
        5 => json!([]),
        6 => json!({}),
        7 => {
            let x = scalar(rng);
            Value::Array(vec![x; *rng.pick(&[1usize, 17, 65, 1000, 5000])])
        }
        8 => {
            let inner = scalar(rng);
            nest(rng, inner)
        }
        _ => random_value(rng, 3),
    }
}

pub fn token_id(rng: &mut Rng, vocab: usize) -> Value {
    match rng.below(10) {
        0 => json!(vocab),
        1 => json!(vocab - 1),
        2 => number(rng),
        3 => json!(rng.below(300)),
        _ => json!(rng.below(vocab)),
    }
}

pub fn text(rng: &mut Rng) -> String {
    if rng.pct(60) {
        rng.pick(&[
            "Hi",
            "What is 2+2?",
            "Say something.",
            "Bonjour !",
            "日本",
            "a b c",
            "Tell me a story about a fox.",
        ])
        .to_string()
    } else {
        random_string(rng)
    }
}

pub fn content(rng: &mut Rng) -> Value {
    if rng.pct(75) {
        json!(text(rng))
    } else {
        Value::Array((0..rng.range(1, 3)).map(|_| json!({"type": "text", "text": text(rng)})).collect())
    }
}

pub fn message_list(rng: &mut Rng) -> Value {
    let mut msgs = Vec::new();
    if rng.pct(40) {
        msgs.push(json!({"role": if rng.pct(80) { "system" } else { "developer" }, "content": content(rng)}));
    }
    let turns = rng.range(1, 3);
    for t in 0..turns {
        msgs.push(json!({"role": "user", "content": content(rng)}));
        if t + 1 < turns {
            if rng.pct(20) {
                msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
                ]}));
                msgs.push(json!({"role": "tool", "content": "sunny", "tool_call_id": "call_1"}));
            } else {
                msgs.push(json!({"role": "assistant", "content": content(rng)}));
            }
        }
    }
    Value::Array(msgs)
}

/// Valid sampling / limit parameters (a random subset).
pub fn gen_params(rng: &mut Rng, m: &mut Map<String, Value>, vocab: usize, chat: bool) {
    let max_key = if chat && rng.pct(50) { "max_completion_tokens" } else { "max_tokens" };
    if rng.pct(85) {
        m.insert(max_key.into(), json!(rng.range(1, 8)));
    }
    let opts: Vec<(&str, Value)> = vec![
        ("temperature", json!(rng.unit() * 2.0)),
        ("top_p", json!(0.05 + rng.unit() * 0.95)),
        ("top_k", json!(rng.range(-1, 50))),
        ("min_p", json!(rng.unit() * 0.5)),
        ("seed", json!(rng.range(0, 1000))),
        ("n", json!(rng.range(1, 3))),
        ("stream", json!(rng.pct(50))),
        ("stream_options", json!({"include_usage": rng.pct(50)})),
        ("stop", if rng.pct(50) { json!("\n") } else { json!([".", "!", text(rng)]) }),
        ("stop_token_ids", json!([rng.below(vocab)])),
        ("logit_bias", json!({ rng.below(vocab).to_string(): rng.range(-100, 100) })),
        ("presence_penalty", json!(rng.unit() * 4.0 - 2.0)),
        ("frequency_penalty", json!(rng.unit() * 4.0 - 2.0)),
        ("repetition_penalty", json!(0.5 + rng.unit())),
        ("xtc_probability", json!(rng.unit())),
        ("xtc_threshold", json!(rng.unit())),
        ("response_format", json!({"type": "text"})),
        ("ignore_eos", json!(rng.pct(50))),
        ("skip_special_tokens", json!(rng.pct(50))),
        ("user", json!("u")),
    ];
    for (k, v) in opts {
        if rng.pct(15) {
            m.insert(k.into(), v);
        }
    }
    // At most one output constraint (mutation may add another, or break it: a 400 either way, never a crash).
    if rng.pct(12) {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5},
                             "b": {"type": "integer"}}, "required": ["a"], "additionalProperties": false});
        let (k, v) = match rng.below(9) {
            0 => ("response_format", json!({"type": "json_object"})),
            1 => ("response_format", json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})),
            2 => ("structured_outputs", json!({"regex": "[a-z]{1,6}( [0-9]+)?"})),
            3 => ("structured_outputs", json!({"choice": ["yes", "no", text(rng)]})),
            4 => ("guided_grammar", json!("start: \"a\" NUM\nNUM: /[0-9]+/")),
            5 => ("grammar", json!("root ::= (\"x\" | [0-9]){1,4} \".\"")),
            6 => ("guided_regex", json!(text(rng))),
            7 => ("json_schema", json!({"type": "array", "items": {"type": "boolean"}, "maxItems": 3})),
            _ => ("guided_json", json!({"type": random_string(rng)})),
        };
        m.insert(k.into(), v);
    }
}

pub fn chat_body(rng: &mut Rng, vocab: usize) -> Value {
    let mut m = Map::new();
    m.insert("model".into(), json!("smollm2-135m"));
    m.insert("messages".into(), message_list(rng));
    gen_params(rng, &mut m, vocab, true);
    if rng.pct(15) {
        m.insert("logprobs".into(), json!(true));
        if rng.pct(70) {
            m.insert("top_logprobs".into(), json!(rng.range(0, 5)));
        }
    }
    if rng.pct(10) {
        m.insert(
            "tools".into(),
            json!([{"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]),
        );
        m.insert("tool_choice".into(), json!(*rng.pick(&["auto", "none", "required"])));
        if rng.pct(30) {
            m.insert("parallel_tool_calls".into(), json!(rng.pct(50)));
        }
    }
    if rng.pct(5) {
        m.insert("chat_template_kwargs".into(), json!({"enable_thinking": false}));
    }
    if rng.pct(5) {
        m.insert("add_generation_prompt".into(), json!(rng.pct(50)));
    }
    Value::Object(m)
}

pub fn ids(rng: &mut Rng, vocab: usize) -> Value {
    Value::Array((0..rng.range(1, 6)).map(|_| json!(rng.below(vocab))).collect())
}

pub fn completion_body(rng: &mut Rng, vocab: usize) -> Value {
    let mut m = Map::new();
    m.insert("model".into(), json!("smollm2-135m"));
    let prompt = match rng.below(4) {
        0 => json!(text(rng)),
        1 => json!([text(rng), text(rng)]),
        2 => ids(rng, vocab),
        _ => json!([ids(rng, vocab), ids(rng, vocab)]),
    };
    m.insert("prompt".into(), prompt);
    gen_params(rng, &mut m, vocab, false);
    if rng.pct(15) {
        m.insert("logprobs".into(), json!(rng.range(0, 5)));
    } else if rng.pct(10) {
        m.insert("echo".into(), json!(true));
    }
    if rng.pct(5) {
        m.insert("suffix".into(), json!(""));
    }
    if rng.pct(5) {
        let n = m.get("n").cloned().unwrap_or(json!(1));
        m.insert("best_of".into(), n);
    }
    Value::Object(m)
}

pub fn tokenize_body(rng: &mut Rng) -> Value {
    let mut m = Map::new();
    m.insert("content".into(), json!(text(rng)));
    if rng.pct(50) {
        m.insert("add_special".into(), json!(rng.pct(50)));
    }
    if rng.pct(50) {
        m.insert("with_pieces".into(), json!(rng.pct(50)));
    }
    Value::Object(m)
}

pub fn detokenize_body(rng: &mut Rng, vocab: usize) -> Value {
    json!({"tokens": ids(rng, vocab)})
}

pub fn template_body(rng: &mut Rng) -> Value {
    let mut m = Map::new();
    m.insert("messages".into(), message_list(rng));
    if rng.pct(20) {
        m.insert("add_generation_prompt".into(), json!(rng.pct(50)));
    }
    Value::Object(m)
}

/// A valid Anthropic Messages body (a random subset of its fields).
pub fn anthropic_body(rng: &mut Rng) -> Value {
    let mut m = Map::new();
    m.insert("model".into(), json!("claude"));
    m.insert("max_tokens".into(), json!(rng.range(1, 8)));
    let mut msgs = vec![json!({"role": "user", "content": content(rng)})];
    if rng.pct(25) {
        msgs.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": text(rng)},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]}));
        msgs.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": text(rng)},
            {"type": "text", "text": text(rng)}]}));
    }
    m.insert("messages".into(), Value::Array(msgs));
    let opts: Vec<(&str, Value)> = vec![
        ("system", if rng.pct(50) { json!(text(rng)) } else { json!([{"type": "text", "text": text(rng)}]) }),
        ("stop_sequences", json!([".", text(rng)])),
        ("temperature", json!(rng.unit())),
        ("top_k", json!(rng.range(1, 50))),
        ("stream", json!(rng.pct(50))),
        ("metadata", json!({"user_id": "u"})),
        (
            "thinking",
            json!(*rng.pick(&[
                json!({"type": "disabled"}),
                json!({"type": "enabled", "budget_tokens": 1024}),
                json!({"type": "adaptive"})
            ])),
        ),
        (
            "output_config",
            json!({"format": {"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}),
        ),
    ];
    for (k, v) in opts {
        if rng.pct(20) {
            m.insert(k.into(), v);
        }
    }
    if rng.pct(15) {
        m.insert(
            "tools".into(),
            json!([{"name": "get_weather", "description": "weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]),
        );
        let choice = rng
            .pick(&[
                json!({"type": "auto"}),
                json!({"type": "any"}),
                json!({"type": "none"}),
                json!({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}),
            ])
            .clone();
        m.insert("tool_choice".into(), choice);
    }
    Value::Object(m)
}

/// A valid Responses body (a random subset of its fields).
pub fn responses_body(rng: &mut Rng) -> Value {
    let mut m = Map::new();
    m.insert("model".into(), json!("gpt"));
    let input = if rng.pct(50) {
        json!(text(rng))
    } else {
        let mut items = vec![json!({"role": "user", "content": [{"type": "input_text", "text": text(rng)}]})];
        if rng.pct(30) {
            items.push(json!({"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}));
            items.push(json!({"type": "function_call_output", "call_id": "call_1", "output": text(rng)}));
        }
        Value::Array(items)
    };
    m.insert("input".into(), input);
    let opts: Vec<(&str, Value)> = vec![
        ("instructions", json!(text(rng))),
        ("max_output_tokens", json!(rng.range(1, 8))),
        ("temperature", json!(rng.unit())),
        ("stream", json!(rng.pct(50))),
        ("store", json!(rng.pct(50))),
        ("metadata", json!({"k": "v"})),
        ("reasoning", json!({"effort": *rng.pick(&["none", "low", "high"])})),
        ("text", json!({"format": {"type": "json_object"}})),
        ("previous_response_id", json!("resp_unknown")),
    ];
    for (k, v) in opts {
        if rng.pct(20) {
            m.insert(k.into(), v);
        }
    }
    if !m.contains_key("max_output_tokens") {
        m.insert("max_output_tokens".into(), json!(rng.range(1, 8)));
    }
    if rng.pct(15) {
        m.insert(
            "tools".into(),
            json!([{"type": "function", "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]),
        );
        m.insert("tool_choice".into(), json!(*rng.pick(&["auto", "none", "required"])));
    }
    Value::Object(m)
}
