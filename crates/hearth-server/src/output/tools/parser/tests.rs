use super::*;

/// The functions the tests' requests declare.
const NAMES: [&str; 6] = ["get_weather", "get_time", "weather", "time", "f", "g"];

/// `get_weather`'s parameters are typed (`location` a string, `days` an integer); the others' are not.
fn parser(format: Format) -> CallParser {
    let weather = serde_json::json!({"type": "object", "properties": {"location": {"type": "string"},
        "days": {"type": "integer"}}});
    let declared =
        NAMES.iter().map(|&n| if n == "get_weather" { Declared::new(n, &weather) } else { Declared::untyped(n) });
    CallParser::new(format, declared.collect())
}

/// Feed `text` split at every byte boundary pair (char boundaries) and in one piece: the same pieces come out,
/// merged. `cut`: the length limit ended it.
fn parse_ended(format: Format, text: &str, cut: bool) -> (String, Vec<Call>) {
    crate::output::text::same_at_every_split(text, |pieces| {
        let mut p = parser(format);
        let mut got: Vec<Piece> = pieces.iter().flat_map(|t| p.feed(t)).collect();
        got.extend(p.finish(cut));
        merge(got)
    })
}

fn parse_all(format: Format, text: &str) -> (String, Vec<Call>) {
    parse_ended(format, text, false)
}

fn call(name: &str, args: &str) -> Call {
    Call { name: name.into(), arguments: args.into() }
}

#[test]
fn hermes_calls_text_and_splits() {
    let out = "Let me check.<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n\
               <tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>";
    let (text, calls) = parse_all(Format::Hermes, out);
    assert_eq!(text, "Let me check.");
    // Hermes arguments are the model's JSON text as written (streamed as it is decoded).
    assert_eq!(calls, vec![call("weather", "{\"city\": \"Paris\"}"), call("time", "{}")]);
    // No call: all text, including something that starts like the marker.
    assert_eq!(parse_all(Format::Hermes, "a <tool b> é <tool_"), ("a <tool b> é <tool_".into(), vec![]));
    // An unterminated call that parses is a call (a model that stops after the JSON).
    let (t, c) = parse_all(Format::Hermes, "<tool_call>{\"name\": \"f\", \"parameters\": {\"x\": 1}}");
    assert_eq!((t.as_str(), c), ("", vec![call("f", "{\"x\": 1}")]));
    // Cut off inside its arguments: what was written is the call (as a streaming client saw it).
    let (_, c) = parse_all(Format::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": [1, ");
    assert_eq!(c, vec![call("f", "{\"x\": [1, ")]);
    // Braces and quotes inside strings do not end the arguments.
    let (t, c) =
        parse_all(Format::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"}\\\"{\"}}</tool_call>ok");
    assert_eq!((t.as_str(), c), ("ok", vec![call("f", "{\"s\": \"}\\\"{\"}")]));
    // Another key order: parsed when the call is complete.
    let (_, c) = parse_all(Format::Hermes, "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>");
    assert_eq!(c, vec![call("f", "{\"x\":1}")]);
    // A body that is not a call stays text.
    assert_eq!(
        parse_all(Format::Hermes, "<tool_call>oops</tool_call>"),
        ("<tool_call>oops</tool_call>".into(), vec![])
    );
    // Arguments given as a JSON string.
    let (_, c) =
        parse_all(Format::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": [1]}\"}</tool_call>");
    assert_eq!(c, vec![call("f", "{\"a\": [1]}")]);
}

#[test]
fn hermes_arguments_stream_as_they_are_decoded() {
    let mut p = parser(Format::Hermes);
    let mut got = p.feed("Sure.<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"Hel");
    assert_eq!(
        got,
        vec![Piece::Text("Sure.".into()), Piece::CallStart("write".into()), Piece::CallArgs("{\"text\": \"Hel".into())]
    );
    got = p.feed("lo\"}}\n</tool_call>\nDone.");
    assert_eq!(got, vec![Piece::CallArgs("lo\"}".into()), Piece::Text("Done.".into())]);
    assert_eq!(p.calls(), 1);
}

#[test]
fn whole_answer_json_formats() {
    let generic = " {\"tool_calls\": [{\"name\": \"weather\", \"arguments\": {\"city\": \"Lima {x}\"}}, {\"name\": \"t\", \"arguments\": {}}]}";
    let llama = "{\"name\": \"f\", \"parameters\": {\"x\": \"{;}\"}}; {\"name\": \"g\", \"parameters\": {}}";
    let cases: Vec<(Format, &str, &str, Vec<Call>)> = vec![
        (Format::Generic, generic, "", vec![call("weather", "{\"city\":\"Lima {x}\"}"), call("t", "{}")]),
        (Format::Llama3, llama, "", vec![call("f", "{\"x\":\"{;}\"}"), call("g", "{}")]),
        // Text, and JSON that is not a call list, stay text.
        (Format::Generic, "Hello {there}", "Hello {there}", vec![]),
        (Format::Generic, "{\"a\": 1}", "{\"a\": 1}", vec![]),
        (Format::Generic, "{\"tool_calls\": [{\"na", "{\"tool_calls\": [{\"na", vec![]),
        (Format::Generic, "  ", "  ", vec![]),
        (Format::Llama3, "Sure, {x}", "Sure, {x}", vec![]),
        (Format::Llama3, "{\"a\": 1}", "{\"a\": 1}", vec![]),
    ];
    for (format, input, text, calls) in cases {
        assert_eq!(parse_all(format, input), (text.to_string(), calls), "{format:?} {input:?}");
    }
}

#[test]
fn mistral_answers() {
    let weather = || call("weather", "{\"city\":\"Paris\"}");
    let two = || vec![weather(), call("time", "{}")];
    let list = "[TOOL_CALLS] [{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"time\", \"arguments\": {}}]";
    let cases: Vec<(&str, &str, Vec<Call>)> = vec![
        (list, "", two()),
        (&list["[TOOL_CALLS]".len()..], "", two()),
        ("[TOOL_CALLS]weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]time[ARGS]{}", "", two()),
        // The markers left out of the text.
        ("weather{\"city\": \"Paris\"}time{}", "", two()),
        // Calls after text, from the marker on.
        (
            "Let me check. [TOOL_CALLS][{\"name\": \"time\", \"arguments\": {}}]",
            "Let me check. ",
            vec![call("time", "{}")],
        ),
        // Text, and what is not a call list, stay text as written.
        ("Hello there [1] é [TOOL_", "Hello there [1] é [TOOL_", vec![]),
        ("[1, 2] are numbers", "[1, 2] are numbers", vec![]),
        ("[TOOL_CALLS] [{\"name\": \"weather\", \"argu", "[TOOL_CALLS] [{\"name\": \"weather\", \"argu", vec![]),
        ("Sure: [TOOL_CALLS]oops", "Sure: [TOOL_CALLS]oops", vec![]),
        ("weather", "weather", vec![]),
        ("  ", "  ", vec![]),
    ];
    for (input, text, calls) in cases {
        assert_eq!(parse_all(Format::Mistral, input), (text.to_string(), calls), "{input:?}");
    }
}

#[test]
fn pythonic_answers() {
    let weather = || call("get_weather", "{\"city\":\"Paris\",\"days\":3}");
    let cases: Vec<(&str, &str, Vec<Call>)> = vec![
        ("[get_weather(city=\"Paris\", days=3), get_time()]", "", vec![weather(), call("get_time", "{}")]),
        (" ```tool_code\n[get_weather(city='Paris', days=3)]\n```", "", vec![weather()]),
        ("```tool_code\nget_weather(city=\"Paris\", days=3)\n```", "", vec![weather()]),
        ("<|python_start|>[get_weather(city=\"Paris\", days=3,)]<|python_end|>", "", vec![weather()]),
        (
            "[f(a=True, b=None, c=[1, 2.5, 'x'], d={'k': \"v\"}, e=false, s=\"\\u00e9\\n\")]",
            "",
            vec![call(
                "f",
                "{\"a\":true,\"b\":null,\"c\":[1,2.5,\"x\"],\"d\":{\"k\":\"v\"},\"e\":false,\"s\":\"é\\n\"}",
            )],
        ),
        // Text, and what is not a list of calls, stay text as written.
        ("The weather is nice. [f()]", "The weather is nice. [f()]", vec![]),
        ("<b>é</b>", "<b>é</b>", vec![]),
        ("[1, 2, 3]", "[1, 2, 3]", vec![]),
        ("[f(1, 2)]", "[f(1, 2)]", vec![]),
        ("[f(a=x)]", "[f(a=x)]", vec![]),
        ("[f(a=1]", "[f(a=1]", vec![]),
        ("[f(a=1)] and more", "[f(a=1)] and more", vec![]),
        ("```python\nprint(f(a=1))\n```", "```python\nprint(f(a=1))\n```", vec![]),
        ("  ", "  ", vec![]),
    ];
    for (input, text, calls) in cases {
        assert_eq!(parse_all(Format::Pythonic, input), (text.to_string(), calls), "{input:?}");
    }
}

#[test]
fn marker_prefixes() {
    assert_eq!(partial_marker_len("abc <tool", "<tool_call>"), 5);
    assert_eq!(partial_marker_len("abc", "<tool_call>"), 0);
    assert_eq!(partial_marker_len("é<", "<tool_call>"), 1);
    assert!(json_complete("{\"a\": \"}\"}") && !json_complete("{\"a\": \"}\"") && !json_complete("  "));
}

const FORMATS: [Format; 5] = [Format::Hermes, Format::Mistral, Format::Llama3, Format::Pythonic, Format::Generic];

fn paris() -> Call {
    call("get_weather", "{\"location\":\"Paris\"}")
}

fn tokyo_time() -> Call {
    call("get_time", "{\"location\":\"Tokyo\"}")
}

/// A call as models write it outside their template's format is a call in every format: bare, fenced (pretty
/// printed, as Qwen2.5-Coder writes it), in lists, one run after text.
#[test]
fn loose_runs_in_every_format() {
    let obj = "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}";
    let time = "{\"name\": \"get_time\", \"parameters\": {\"location\": \"Tokyo\"}}";
    let pretty =
        "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"location\": \"Paris\"\n  }\n}\n```";
    let list = format!("[{obj}, {time}]");
    let cases: Vec<(String, &str, Vec<Call>)> = vec![
        (obj.to_string(), "", vec![paris()]),
        (format!("\n  {obj}\n"), "", vec![paris()]),
        (pretty.to_string(), "", vec![paris()]),
        (format!("```\n{list}\n```\n"), "", vec![paris(), tokyo_time()]),
        (format!("```JSON\n{obj}\n{time}\n```"), "", vec![paris(), tokyo_time()]),
        (format!("{obj}\n{time}"), "", vec![paris(), tokyo_time()]),
        (format!("```json\n{obj}\n```\n```json\n{time}\n```"), "", vec![paris(), tokyo_time()]),
        // Arguments as a JSON string; a fence the answer ends before closing.
        ("{\"name\": \"get_weather\", \"arguments\": \"{\\\"location\\\": \\\"Paris\\\"}\"}".into(), "", vec![paris()]),
        (format!("```json\n{obj}\n"), "", vec![paris()]),
        // A fence may follow text: the text is content.
        (format!("I'll check the weather.\n{pretty}"), "I'll check the weather.\n", vec![paris()]),
        (format!("```xml\n<response>\n{obj}\n</response>\n```"), "", vec![paris()]),
    ];
    for format in FORMATS {
        for (input, text, calls) in &cases {
            assert_eq!(parse_all(format, input), (text.to_string(), calls.clone()), "{format:?} {input:?}");
        }
    }
}

/// What is not a call of a declared function, as a whole unit, stays text as written.
#[test]
fn loose_forms_that_are_text() {
    let fence = |body: &str| format!("```json\n{body}\n```");
    let cases: Vec<String> = vec![
        fence("{\"name\": \"reverse_string\", \"arguments\": {\"s\": \"abc\"}}"),
        fence("{\"name\": \"get_weather\", \"arguments\": {\"location\": }}"),
        fence("[{\"name\": \"get_weather\", \"arguments\": {}}, {\"name\": \"rm_rf\", \"arguments\": {}}]"),
        fence("{\"name\": \"get_weather\", \"arguments\": {}, \"description\": \"extra key\"}"),
        fence("{\"name\": \"get_weather\"}"),
        fence("{\"name\": \"get_weather\", \"arguments\": [1]}"),
        fence("{\"a\": 1}"),
        fence("[]"),
        "```\n```".into(),
        "```python\nprint({\"name\": \"get_weather\", \"arguments\": {}})\n```".into(),
        // Calls followed by text: the run does not end the answer.
        format!("{}\nThis asks for the weather.", fence("{\"name\": \"get_weather\", \"arguments\": {}}")),
        // Bare JSON after text, or inside it.
        "The call is {\"name\": \"get_weather\", \"arguments\": {}} as JSON.".into(),
        "Sure:\n{\"name\": \"get_weather\", \"arguments\": {}}".into(),
        "{{\"name\": \"get_weather\", \"arguments\": {\"location\": \"New York\"}}}".into(),
        "<function=rm_rf>{}</function>".into(),
        "<function=get_weather>[1]</function>".into(),
        "<json>{\"a\": 1}</json> and <tool> and <function name=\"x\"> é".into(),
        "<tools>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>".into(),
        "Use `ls` or ``x`` here: ``` and ```".into(),
    ];
    for format in [Format::Hermes, Format::Mistral, Format::Pythonic, Format::Generic] {
        for input in &cases {
            assert_eq!(parse_all(format, input), (input.clone(), vec![]), "{format:?} {input:?}");
        }
    }
}

/// Tags that hold calls, anywhere in the text: text before, between and after them stays.
#[test]
fn tagged_calls_anywhere() {
    let obj = "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}";
    let time = "{\"name\": \"get_time\", \"arguments\": {\"location\": \"Tokyo\"}}";
    let cases: Vec<(String, &str, Vec<Call>)> = vec![
        (format!("Sure. <tools>\n{obj}\n</tools>\nDone."), "Sure. Done.", vec![paris()]),
        (format!("<function_call>[{obj}, {time}]</function_call>"), "", vec![paris(), tokyo_time()]),
        ("<function=get_weather>{\"location\": \"Paris\"}</function>".into(), "", vec![paris()]),
        ("A <function name=\"get_weather\">\n{\"location\": \"Paris\"}\n</function> b".into(), "A  b", vec![paris()]),
        (format!("<json>{obj}</json><JSON>{time}</JSON>"), "", vec![paris(), tokyo_time()]),
        (format!("<tool>\n{obj}"), "", vec![paris()]),
        (format!("<tools><function_call>{obj}</function_call></tools>"), "", vec![paris()]),
    ];
    for format in FORMATS {
        for (input, text, calls) in &cases {
            assert_eq!(parse_all(format, input), (text.to_string(), calls.clone()), "{format:?} {input:?}");
        }
    }
    // `<tool_call>` outside Hermes is a loose tag: declared functions only.
    let undeclared = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>";
    assert_eq!(parse_all(Format::Mistral, undeclared), (undeclared.into(), vec![]));
    assert_eq!(
        parse_all(Format::Pythonic, &format!("<tool_call>\n{obj}\n</tool_call>")),
        (String::new(), vec![paris()])
    );
}

/// Qwen3-Coder's XML form, `<function=NAME>` with `<parameter=KEY>value</parameter>` per argument, in its
/// `<tool_call>` or bare, in every format: a string parameter's value is its text, others are JSON where they parse.
#[test]
fn xml_parameter_calls() {
    let xml = |name: &str, params: &[(&str, &str)]| {
        let p: String = params.iter().map(|(k, v)| format!("<parameter={k}>\n{v}\n</parameter>\n")).collect();
        format!("<function={name}>\n{p}</function>")
    };
    let in_paris = xml("get_weather", &[("location", "Paris")]);
    let code = "fn main() {\n    println!(\"</x> {{\");\n}";
    let cases: Vec<(String, &str, Vec<Call>)> = vec![
        (format!("<tool_call>\n{in_paris}\n</tool_call>"), "", vec![paris()]),
        (format!("Let me check.\n{in_paris}\nDone."), "Let me check.\nDone.", vec![paris()]),
        (
            format!(
                "<tool_call>\n{in_paris}\n</tool_call>\n<tool_call>\n{}\n</tool_call>",
                xml("get_time", &[("location", "Tokyo")])
            ),
            "",
            vec![paris(), tokyo_time()],
        ),
        (
            xml("get_weather", &[("location", "42"), ("days", "3"), ("units", "{\"c\": true}")]),
            "",
            vec![call("get_weather", "{\"location\":\"42\",\"days\":3,\"units\":{\"c\":true}}")],
        ),
        (xml("get_time", &[("q", code)]), "", vec![call("get_time", &serde_json::json!({"q": code}).to_string())]),
        ("<function=get_time></function>".into(), "", vec![call("get_time", "{}")]),
        ("<function=get_time><parameter=location>Tokyo</parameter>".into(), "", vec![tokyo_time()]),
    ];
    for format in FORMATS {
        for (input, text, calls) in &cases {
            assert_eq!(parse_all(format, input), (text.to_string(), calls.clone()), "{format:?} {input:?}");
        }
    }
    for text in [
        "<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>",
        "<function=get_time><parameter=location>Tokyo</function>",
        "<function=get_time><parameter=>x</parameter></function>",
        "<function=get_time><parameter=location>Tokyo</parameter> and text</function>",
    ] {
        for format in FORMATS {
            assert_eq!(parse_all(format, text), (text.into(), vec![]), "{format:?} {text:?}");
        }
    }
    // A cut after the first of two calls keeps it.
    let cut = format!("<tool_call>\n{in_paris}\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=loc");
    assert_eq!(parse_ended(Format::Hermes, &cut, true).1, vec![paris()]);
}

/// The length limit cuts a list of calls: those that completed are calls; the same answer ended otherwise is
/// malformed, text.
#[test]
fn a_cut_keeps_the_calls_that_completed() {
    let obj = "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}";
    let hermes = vec![
        format!("```json\n[{obj}, {{\"name\": \"get_ti"),
        format!("[{obj}, {{\"name\": \"get_time\", \"arguments\": {{\"loc"),
        format!("{obj}\n{{\"name\""),
        format!("Let me see. <tools>[{obj}, {{\"na"),
    ];
    for input in &hermes {
        assert_eq!(parse_ended(Format::Hermes, input, true).1, vec![paris()], "{input:?}");
        assert_eq!(parse_ended(Format::Hermes, input, false), (input.clone(), vec![]), "{input:?}");
    }
    let native = [
        (Format::Mistral, format!("[TOOL_CALLS] [{obj}, {{\"name\": \"get_time\", \"argu")),
        (Format::Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}; {\"na".to_string()),
        (Format::Generic, format!("{{\"tool_calls\": [{obj}, {{\"name\": \"get")),
        (Format::Pythonic, "[get_weather(location=\"Paris\"), get_time(location=\"To".to_string()),
    ];
    for (format, input) in &native {
        assert_eq!(parse_ended(*format, input, true), (String::new(), vec![paris()]), "{format:?} {input:?}");
    }
    // Nothing completed: text.
    let early = "```json\n[{\"name\": \"get_weather\", \"argu";
    assert_eq!(parse_ended(Format::Hermes, early, true), (early.into(), vec![]));
}

/// Prose streams at once; what opens like a call is held back only until it cannot be one.
#[test]
fn text_is_held_back_only_while_it_may_be_a_call() {
    let texts = |pieces: Vec<Piece>| -> Vec<String> {
        pieces.into_iter().filter_map(|p| if let Piece::Text(t) = p { Some(t) } else { None }).collect()
    };
    let mut p = parser(Format::Hermes);
    assert_eq!(texts(p.feed("Hello, ")), ["Hello, "]);
    assert_eq!(texts(p.feed("see `ls` and ```")), ["see `ls` and "]);
    assert_eq!(texts(p.feed("bash\n")).concat(), "```bash\n");
    let mut p = parser(Format::Hermes);
    assert!(p.feed("{").is_empty() && p.feed("\"na").is_empty() && p.feed("me\": \"get_").is_empty());
    assert_eq!(texts(p.feed("x\"")).concat(), "{\"name\": \"get_x\"");
    let mut p = parser(Format::Hermes);
    assert_eq!(texts(p.feed("{\"result\": 4}")).concat(), "{\"result\": 4}");
    let mut p = parser(Format::Hermes);
    assert!(p.feed("```json\n{\"name\": \"get_weather\", \"arguments\": {}}\n```").is_empty());
    assert_eq!(texts(p.feed("\nThat")).concat(), "```json\n{\"name\": \"get_weather\", \"arguments\": {}}\n```\nThat");
    let mut p = parser(Format::Hermes);
    assert!(p.feed("<function=get_wea").is_empty());
    assert_eq!(texts(p.feed("k")).concat(), "<function=get_weak");
}

/// A call whose arguments are long, streamed in small pieces, is a call (and is not scanned whole at every piece).
#[test]
fn long_held_calls_stream_in_linear_time() {
    let content = "x = {'a': [1, 2]}\\n".repeat(20_000);
    for (open, close) in [("```json\n", "\n```"), ("<tools>", "</tools>")] {
        let text = format!("{open}{{\"name\": \"f\", \"arguments\": {{\"content\": \"{content}\"}}}}{close}");
        let mut p = parser(Format::Hermes);
        let mut got: Vec<Piece> =
            text.as_bytes().chunks(8).flat_map(|c| p.feed(std::str::from_utf8(c).unwrap_or(""))).collect();
        got.extend(p.finish(false));
        let (text, calls) = merge(got);
        assert_eq!((text.len(), calls.len()), (0, 1), "{open}");
        assert!(calls[0].arguments.len() > 300_000, "{open}");
    }
}
