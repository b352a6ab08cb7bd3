//! The tool grammars on SmolLM2's real vocabulary (and on a copy of it with Mistral's and Llama 3's control tokens
//! added): `auto` leaves text free until the model opens a call the way its format does, then only a valid call of
//! an offered function fits.

use hearth_engine::sampling::grammar::{Constraint, Grammars};
use hearth_engine::tokenizer::Tokenizer;
use hearth_engine::weights::resolve::{resolve, ModelLocation};
use hearth_engine::weights::{GgufFile, ModelConfig};
use hearth_server::chat::tools::{ToolChoice, Tools};
use hearth_server::chat::FieldNames;
use hearth_server::wire::chat::Conversation;
use hearth_server::wire::RequestBody;
use serde_json::json;
use std::sync::Arc;

fn smollm2_config() -> (ModelLocation, ModelConfig) {
    let loc = resolve("smollm2-135m").expect("the default model (scripts/fetch-models)");
    let ModelLocation::Gguf(path) = &loc else { panic!("expected a GGUF file") };
    let cfg = ModelConfig::from_gguf(&GgufFile::open(path).unwrap()).unwrap();
    (loc, cfg)
}

fn smollm2() -> Arc<Tokenizer> {
    let (loc, cfg) = smollm2_config();
    Arc::new(Tokenizer::load(&loc, &cfg).unwrap())
}

/// The control tokens added to SmolLM2's vocabulary (ids 49152..).
const CONTROLS: [&str; 3] = ["[TOOL_CALLS]", "[ARGS]", "<|python_tag|>"];

/// SmolLM2's tokenizer.json with `controls` added as special tokens after its vocabulary.
fn with_controls(name: &str, controls: &[&str]) -> Arc<Tokenizer> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gpu/smollm2-tokenizer");
    let mut raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("tokenizer.json")).unwrap()).unwrap();
    let added = raw["added_tokens"].as_array_mut().unwrap();
    for (i, c) in controls.iter().enumerate() {
        added.push(json!({"id": 49152 + i, "content": c, "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": false, "special": true}));
    }
    let dir = std::env::temp_dir().join(format!("hearth-tool-grammar-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), raw.to_string()).unwrap();
    std::fs::copy(src.join("tokenizer_config.json"), dir.join("tokenizer_config.json")).unwrap();
    let tok = Tokenizer::load(&ModelLocation::HfDir(dir.clone()), &smollm2_config().1).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Arc::new(tok)
}

/// A `get_weather(city)` tool offered under `choice`, to a template of `format`.
fn weather(template: &str, choice: &str) -> Tools {
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": choice, "tools": [{
        "type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}}]});
    let conv = Conversation::from_body(&body).unwrap();
    Tools::resolve(&conv, template, &FieldNames::CHAT).unwrap().expect("tools")
}

/// Whether the constraint allows the first token of `text`'s tokenization.
fn allows_start(c: &mut Constraint, tok: &Tokenizer, text: &str) -> bool {
    c.allows(tok.encode(text, false).unwrap()[0]).unwrap()
}

/// Commit `text`'s tokens (SmolLM2's own tokenization of it) one by one.
fn write(c: &mut Constraint, tok: &Tokenizer, text: &str) {
    for id in tok.encode(text, false).unwrap() {
        assert!(c.allows(id).unwrap(), "{text:?}: token {id} ({:?}) refused", tok.decode(&[id], false));
        c.commit(id).unwrap();
    }
}

#[test]
fn hermes_auto_guides_only_the_calls() {
    let tok = smollm2();
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let tools = weather("{{ '<tool_call>' }}", "auto");
    assert_eq!(tools.choice, ToolChoice::Auto);
    let spec = tools.constraint(&tok).expect("Hermes auto is guided");
    let mut c = g.compile(&spec).unwrap();
    let first = |t: &str| tok.encode(t, false).unwrap()[0];
    // Free text, anything.
    write(&mut c, &tok, "Let me check the weather for you! ");
    assert!(c.allows(first("Hello")).unwrap());
    // Inside a call only the function's JSON fits.
    write(&mut c, &tok, "<tool_call>\n");
    assert!(!c.allows(first("Hello")).unwrap(), "free text inside a call");
    assert!(c.allows(first("{")).unwrap());
    write(&mut c, &tok, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>");
    // Free again after the call.
    assert!(c.allows(first(" Done")).unwrap());
}

/// Mistral's `[TOOL_CALLS]` as a control token: text is free, the token opens the calls, and after it only the
/// list of valid calls fits, then the end.
#[test]
fn mistral_auto_opens_calls_at_its_control_token() {
    let tok = with_controls("mistral", &CONTROLS[..1]);
    let marker = tok.control_id("[TOOL_CALLS]").expect("the added control token");
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let spec = weather("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]", "auto").constraint(&tok).expect("guided");
    // Free text; the marker is not text, so it opens nothing once text has begun.
    let mut c = g.compile(&spec).unwrap();
    write(&mut c, &tok, "It is sunny in Paris, {\"name\": 1}");
    assert!(!c.allows(marker).unwrap(), "calls after text");
    assert!(c.allows(tok.eos_ids()[0]).unwrap());
    // The control token opens a call: only the list fits, then the end.
    let mut c = g.compile(&spec).unwrap();
    assert!(c.allows(marker).unwrap());
    c.commit(marker).unwrap();
    assert!(!allows_start(&mut c, &tok, "Hello"), "free text after the marker");
    write(&mut c, &tok, " [{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}]");
    assert!(!allows_start(&mut c, &tok, " Done"), "text after the calls");
    assert!(c.allows(tok.eos_ids()[0]).unwrap());
    // Required: the marker is optional, the list is not.
    let spec = weather("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]", "required").constraint(&tok).unwrap();
    let mut c = g.compile(&spec).unwrap();
    assert!(c.allows(marker).unwrap() && allows_start(&mut c, &tok, "["));
    assert!(!allows_start(&mut c, &tok, "Hello"));
}

/// A vocabulary with `[ARGS]` too gets the newer form, `[TOOL_CALLS]name[ARGS]{..}` per call.
#[test]
fn mistral_newer_form_where_args_is_a_control_token() {
    let tok = with_controls("mistral-args", &CONTROLS[..2]);
    let (marker, args) = (tok.control_id("[TOOL_CALLS]").unwrap(), tok.control_id("[ARGS]").unwrap());
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    for choice in ["auto", "required"] {
        let spec = weather("{{ '[TOOL_CALLS]' + name + '[ARGS]' }}", choice).constraint(&tok).unwrap();
        let mut c = g.compile(&spec).unwrap();
        assert_eq!(allows_start(&mut c, &tok, "Hello"), choice == "auto", "{choice}");
        c.commit(marker).unwrap();
        assert!(!allows_start(&mut c, &tok, "["), "{choice}: the list form after the marker");
        write(&mut c, &tok, "get_weather");
        assert!(c.allows(args).unwrap() && !allows_start(&mut c, &tok, "{"), "{choice}: [ARGS] before the arguments");
        c.commit(args).unwrap();
        write(&mut c, &tok, "{\"city\":\"Paris\"}");
        assert!(c.allows(marker).unwrap(), "{choice}: another call");
        assert!(c.allows(tok.eos_ids()[0]).unwrap(), "{choice}");
    }
}

/// Where `[TOOL_CALLS]` is text, the calls open where the text writes it (the lazy rule).
#[test]
fn mistral_auto_with_a_text_marker() {
    let tok = smollm2();
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let spec = weather("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]", "auto").constraint(&tok).unwrap();
    let mut c = g.compile(&spec).unwrap();
    write(&mut c, &tok, "Let me see. [TOOL_CALLS]");
    assert!(!allows_start(&mut c, &tok, "Hello"));
    write(&mut c, &tok, " [{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}]");
    assert!(c.allows(tok.eos_ids()[0]).unwrap());
    let mut c = g.compile(&spec).unwrap();
    write(&mut c, &tok, "No tools needed.");
    assert!(c.allows(tok.eos_ids()[0]).unwrap());
}

/// The whole-answer formats: an answer that opens with `{` (Llama 3, generic) or `[` (pythonic) is calls, any other
/// answer is free; Llama 3's `<|python_tag|>` opens calls too.
#[test]
fn whole_answer_formats_open_calls_at_their_first_character() {
    let tok = with_controls("llama3", &CONTROLS[2..]);
    let tag = tok.control_id("<|python_tag|>").unwrap();
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let cases = [
        ("{{ '<|python_tag|>' }}", "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Paris\"}}"),
        (
            "<|im_start|>{{ content }}",
            "{\"tool_calls\": [{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}]}",
        ),
        ("Respond in the format [func_name1(params_name1=params_value1)]", "[get_weather(city=\"Paris\")]"),
    ];
    for (template, call) in cases {
        let tools = weather(template, "auto");
        let spec = tools.constraint(&tok).expect("guided");
        let mut c = g.compile(&spec).unwrap();
        write(&mut c, &tok, "Sure: {\"a\": [1]} and [x]");
        assert!(c.allows(tok.eos_ids()[0]).unwrap(), "{template}: free text");
        let mut c = g.compile(&spec).unwrap();
        write(&mut c, &tok, &call[..1]);
        assert!(!allows_start(&mut c, &tok, "hello"), "{template}: free text inside a call");
        write(&mut c, &tok, &call[1..]);
        assert!(c.allows(tok.eos_ids()[0]).unwrap(), "{template}");
        assert!(!c.allows(tag).unwrap(), "{template}");
        let mut c = g.compile(&spec).unwrap();
        assert_eq!(c.allows(tag).unwrap(), tools.format == hearth_server::output::tools::Format::Llama3, "{template}");
    }
    // After Llama 3's tag only a call fits.
    let spec = weather("{{ '<|python_tag|>' }}", "auto").constraint(&tok).unwrap();
    let mut c = g.compile(&spec).unwrap();
    c.commit(tag).unwrap();
    assert!(!allows_start(&mut c, &tok, "Hello") && allows_start(&mut c, &tok, "{"));
}

/// Whether `text` (its tokens, one by one) fits where the constraint stands (which is left as it was).
fn fits(c: &Constraint, tok: &Tokenizer, text: &str) -> bool {
    let mut c = c.clone();
    tok.encode(text, false).unwrap().into_iter().all(|id| c.allows(id).unwrap() && c.commit(id).is_ok())
}

/// Whether the constraint allows the end of the answer now.
fn may_end(c: &mut Constraint, tok: &Tokenizer) -> bool {
    c.allows(tok.eos_ids()[0]).unwrap()
}

/// `auto` with a Hermes template: the forms models write outside it open a call too — a bare or fenced call object
/// (pretty-printed too) at the answer's start, `<function=NAME>` or a tag before a call object anywhere — and from
/// the function's name on only that function's call fits; JSON that names no offered function stays free.
#[test]
fn hermes_auto_opens_calls_at_the_loose_forms_too() {
    let tok = smollm2();
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let spec = weather("{{ '<tool_call>' }}", "auto").constraint(&tok).expect("guided");
    let fresh = || g.compile(&spec).unwrap();
    // A bare call: after the name, only its arguments; after the call, only the end.
    let mut c = fresh();
    write(&mut c, &tok, "{\"name\": \"get_weather\"");
    assert!(!allows_start(&mut c, &tok, " Hello") && !allows_start(&mut c, &tok, "}"));
    write(&mut c, &tok, ", \"arguments\": {");
    assert!(fits(&c, &tok, "\"city\"") && !fits(&c, &tok, "\"town\""), "a property the schema does not have");
    write(&mut c, &tok, "\"city\": \"Paris\"}}");
    assert!(may_end(&mut c, &tok) && !allows_start(&mut c, &tok, " Done"));
    // Fenced and pretty-printed, as Qwen2.5-Coder writes it.
    let mut c = fresh();
    write(&mut c, &tok, "```json\n{\n  \"name\": \"get_weather\"");
    assert!(!allows_start(&mut c, &tok, "Hello"));
    write(&mut c, &tok, ",\n  \"arguments\": {\n    \"city\": \"Paris\"\n  }\n}\n");
    assert!(!may_end(&mut c, &tok), "the fence closes first");
    write(&mut c, &tok, "```");
    assert!(may_end(&mut c, &tok));
    // A list in a fence.
    let mut c = fresh();
    let call = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    write(&mut c, &tok, &format!("```\n[{call}, {call}]\n```\n"));
    assert!(may_end(&mut c, &tok));
    // JSON that is no call of an offered function, a fence of other JSON, and fences after text stay free.
    for free in [
        "{\"name\": \"Alice\", \"age\": 3} is a person.",
        "{\"name\": \"reverse_string\", \"arguments\": {\"s\": 1}}",
        "```json\n{\"a\": 1}\n```\nMore text.",
        "Sure:\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"zip\": 1}}\n``` and more",
        "A <function=other>{}</function> <tools>x</tools>",
    ] {
        let mut c = fresh();
        write(&mut c, &tok, free);
        assert!(may_end(&mut c, &tok), "{free:?}");
    }
    // Tags open a call anywhere in text; text is free again after them.
    for (open, close) in [
        ("<function=get_weather>", "{\"city\": \"Paris\"}</function>"),
        ("<function name=\"get_weather\">", "\n{\"city\": \"Paris\"}\n</function>"),
        ("<tools>\n{\"name\": \"get_weather\"", ", \"arguments\": {\"city\": \"Paris\"}}\n</tools>"),
        ("<function_call>{\"name\": \"get_weather\"", ", \"arguments\": {\"city\": \"Paris\"}}</function_call>"),
        ("<tool>{\"name\": \"get_weather\"", ", \"arguments\": {\"city\": \"Paris\"}}</tool>"),
        ("<response>\n{\"name\": \"get_weather\"", ", \"arguments\": {\"city\": \"Paris\"}}\n</response>"),
        ("<json>{\"name\": \"get_weather\"", ", \"arguments\": {\"city\": \"Paris\"}}</json>"),
        ("<xml>{\"name\": \"get_weather\"", ", \"arguments\": {\"city\": \"Paris\"}}</xml>"),
        ("<function=get_weather>", "\n<parameter=city>\nParis\n</parameter>\n</function>"),
    ] {
        let mut c = fresh();
        write(&mut c, &tok, &format!("Let me check. {open}"));
        assert!(!allows_start(&mut c, &tok, "Hello"), "{open}");
        write(&mut c, &tok, close);
        write(&mut c, &tok, " Done.");
        assert!(may_end(&mut c, &tok), "{open}");
    }
}

/// Qwen3-Coder's XML form, `<function=NAME>` and `<parameter=KEY>value</parameter>`, in Hermes' `<tool_call>` and
/// after text under `auto`: only the schema's keys, in its order, the required ones always; a string's value is
/// free text up to its closing tag, an integer's is an integer.
#[test]
fn xml_form_calls() {
    let tok = smollm2();
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
        "days": {"type": "integer"}}}}}]});
    let conv = Conversation::from_body(&body).unwrap();
    let days = |choice: &str| {
        let mut t = Tools::resolve(&conv, "{{ '<tool_call>' }}", &FieldNames::CHAT).unwrap().unwrap();
        t.choice = if choice == "auto" { ToolChoice::Auto } else { ToolChoice::Required };
        g.compile(&t.constraint(&tok).unwrap()).unwrap()
    };
    let mut c = days("auto");
    write(&mut c, &tok, "Checking. <tool_call>\n<function=get_weather>\n<parameter=");
    assert!(fits(&c, &tok, "city>") && fits(&c, &tok, "days>") && !fits(&c, &tok, "town>"));
    write(&mut c, &tok, "city>\nSan {Francisco} <b>\"x\"</b>\n</parameter>\n<parameter=days>\n");
    assert!(!fits(&c, &tok, "soon") && fits(&c, &tok, "3\n</parameter>"), "an integer");
    write(&mut c, &tok, "3\n</parameter>\n</function>\n</tool_call>");
    assert!(may_end(&mut c, &tok));
    // `required` takes JSON only (the XML form's text values know no `maxLength`).
    let c = days("required");
    assert!(!fits(&c, &tok, "<tool_call>\n<function=get_weather>"));
    // A required parameter cannot be left out (get_weather's `city`), and the schema's order holds.
    let c = g.compile(&weather("{{ '<tool_call>' }}", "auto").constraint(&tok).unwrap()).unwrap();
    assert!(!fits(&c, &tok, "<tool_call>\n<function=get_weather>\n</function>"));
    assert!(fits(&c, &tok, "<tool_call>\n<function=get_weather>\n<parameter=city>\nLima\n</parameter>\n</function>"));
    let c = days("auto");
    assert!(!fits(&c, &tok, "<function=get_weather><parameter=days>2</parameter><parameter=city>"));
    // A JSON object after `<function=NAME>` is still a call; a wrong type in it is not.
    let c = days("auto");
    assert!(fits(&c, &tok, "<function=get_weather>{\"days\": 2}</function> ok"));
    assert!(!fits(&c, &tok, "<function=get_weather>{\"days\": \"2\""));
}

/// The loose openers in the other formats: fences at the start in all, a bare object in pythonic's (whose own calls
/// open with `[`), tags in Mistral's text.
#[test]
fn other_formats_take_the_loose_openers() {
    let tok = smollm2();
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let fence = "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```";
    for template in [
        "{{ '<|python_tag|>' }}",
        "<|im_start|>{{ content }}",
        "Respond in the format [func_name1(params_name1=params_value1)]",
        "[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]",
    ] {
        let spec = weather(template, "auto").constraint(&tok).expect("guided");
        let mut c = g.compile(&spec).unwrap();
        write(&mut c, &tok, &fence[..fence.find("\",").unwrap() + 1]);
        assert!(!allows_start(&mut c, &tok, "Hello"), "{template}");
        write(&mut c, &tok, &fence[fence.find("\",").unwrap() + 1..]);
        assert!(may_end(&mut c, &tok), "{template}");
    }
    let pythonic = weather("Respond in the format [func_name1(params_name1=params_value1)]", "auto");
    let mut c = g.compile(&pythonic.constraint(&tok).unwrap()).unwrap();
    write(&mut c, &tok, "{\"name\": \"get_weather\"");
    assert!(!allows_start(&mut c, &tok, "Hello"));
    let mistral = weather("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]", "auto");
    let mut c = g.compile(&mistral.constraint(&tok).unwrap()).unwrap();
    write(&mut c, &tok, "Sure. <function=get_weather>");
    assert!(!allows_start(&mut c, &tok, "Hello"));
    write(&mut c, &tok, "{\"city\": \"Paris\"}</function> [TOOL_CALLS]");
    assert!(!allows_start(&mut c, &tok, "Hello"), "Mistral's own calls after a tagged one");
}

/// `required` and a named function are enforced in the format's own form only; with `parallel_tool_calls: false` a
/// loose run holds one call.
#[test]
fn loose_openers_are_for_auto_only_and_one_call_without_parallel() {
    let tok = smollm2();
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let mut c = g.compile(&weather("{{ '<tool_call>' }}", "required").constraint(&tok).unwrap()).unwrap();
    assert!(!allows_start(&mut c, &tok, "```") && !allows_start(&mut c, &tok, "{"));
    let mut one = weather("{{ '<tool_call>' }}", "auto");
    one.parallel = false;
    let c = g.compile(&one.constraint(&tok).unwrap()).unwrap();
    let call = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    assert!(fits(&c, &tok, &format!("```json\n[{call}]\n```")));
    assert!(!fits(&c, &tok, &format!("```json\n[{call}, {call}]")));
}

/// Any function name a request may give compiles in every format's `auto` grammar (names are quoted into the
/// openers), and a call of an odd name opens as any other.
#[test]
fn odd_function_names_compile() {
    let tok = smollm2();
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let names = ["a\"b", "back\\slash", "x>y</function>", "new\nline", "é😀", ".*[", "{{ t }}", " "];
    let tools: Vec<_> = names.iter().map(|n| json!({"type": "function", "function": {"name": n}})).collect();
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto", "tools": tools});
    let conv = Conversation::from_body(&body).unwrap();
    for template in ["{{ '<tool_call>' }}", "[TOOL_CALLS]", "{{ '<|python_tag|>' }}", "<|im_start|>", "<start_of_turn>"]
    {
        let t = Tools::resolve(&conv, template, &FieldNames::CHAT).unwrap().unwrap();
        let c = g.compile(&t.constraint(&tok).unwrap()).unwrap_or_else(|e| panic!("{template}: {e}"));
        assert!(fits(&c, &tok, "```json\n{\"name\": \"a\\\"b\", \"arguments\": {}}\n```"), "{template}");
    }
}

/// Property schemas that are not schema objects (a list, `true`) build a grammar without a panic: the XML form
/// takes text for them; whether the whole compiles is the schema compiler's to say (an error, not a crash).
#[test]
fn property_schemas_that_are_not_objects_do_not_panic() {
    let tok = smollm2();
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto", "tools": [{"type":
        "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"seed": ["(", []],
        "any": true, "n": {"type": "integer"}}}}}]});
    let conv = Conversation::from_body(&body).unwrap();
    for choice in [ToolChoice::Auto, ToolChoice::Required] {
        let mut t = Tools::resolve(&conv, "{{ '<tool_call>' }}", &FieldNames::CHAT).unwrap().unwrap();
        t.choice = choice.clone();
        let spec = t.constraint(&tok).expect("a grammar");
        let _ = g.compile(&spec);
    }
}

/// Harmony (gpt-oss) under `required` and a named function: an optional thought, then one call in harmony's header
/// form or the template's, and the answer ends; a final answer, free text, another function or arguments off the schema do not
/// fit. With the markers as control tokens (gpt-oss's vocabulary) and spelled as text. `auto` stays free.
#[test]
fn harmony_required_enforces_one_call_after_an_optional_thought() {
    const TEMPLATE: &str = "<|start|>{{ m }}<|channel|>final<|message|>";
    const MARKERS: [&str; 7] =
        ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|call|>", "<|return|>"];
    let call =
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>";
    for (label, tok) in [("control tokens", with_controls("harmony", &MARKERS)), ("text markers", smollm2())] {
        let g = Grammars::new(tok.clone(), tok.vocab_size());
        assert!(weather(TEMPLATE, "auto").constraint(&tok).is_none(), "{label}: auto is free");
        for choice in ["required", "get_weather"] {
            let tools = if choice == "required" { weather(TEMPLATE, choice) } else { named_weather(TEMPLATE) };
            let spec = tools.constraint(&tok).expect("enforced");
            let c = g.compile(&spec).unwrap();
            // A thought, then the call; or the call alone; in harmony's form or the template's. Each ends the answer.
            let template_form =
                " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Oslo\"}<|call|>";
            for answer in [
                format!("<|channel|>analysis<|message|>The user wants Paris.<|end|><|start|>assistant{call}"),
                call.to_string(),
                format!("<|channel|>analysis<|message|>Oslo.<|end|><|start|>assistant{template_form}"),
            ] {
                let mut c = c.clone();
                write(&mut c, &tok, &answer);
                assert!(may_end(&mut c, &tok), "{label} {choice}: the call ends the answer");
            }
            assert!(!fits(&c, &tok, "<|channel|>final<|message|>Hello"), "{label} {choice}: a final answer");
            assert!(!fits(&c, &tok, "Hello"), "{label} {choice}: free text");
            let other = "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}";
            assert!(!fits(&c, &tok, other), "{label} {choice}: a function not offered");
            let off = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"town\":";
            assert!(!fits(&c, &tok, off), "{label} {choice}: arguments off the schema");
        }
    }
}

/// [`weather`] with `tool_choice` naming the function.
fn named_weather(template: &str) -> Tools {
    let body = json!({"messages": [{"role": "user", "content": "hi"}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "tools": [{
        "type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}}]});
    let conv = Conversation::from_body(&body).unwrap();
    let t = Tools::resolve(&conv, template, &FieldNames::CHAT).unwrap().expect("tools");
    assert_eq!(t.choice, ToolChoice::Named("get_weather".into()));
    t
}
