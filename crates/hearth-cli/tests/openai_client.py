"""The official `openai` Python client against a running `hearth serve`.

Usage: openai_client.py BASE_URL MODEL_ID   (BASE_URL like http://127.0.0.1:PORT/v1)

Runs each check, records what the client saw (or the exception it raised), and prints ONE line of JSON on stdout;
crates/hearth-cli/tests/openai_client.rs asserts on it. A check that raises unexpectedly records
{"exception": "Type: message"} instead of failing the script, so the Rust side reports every problem at once.
"""

import json
import sys

import openai

from checks import run

BASE_URL, MODEL = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=BASE_URL, api_key="x", max_retries=0, timeout=300.0)
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def usage_of(u):
    return None if u is None else {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                                   "total_tokens": u.total_tokens}


def chat():
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0)
    c = r.choices[0]
    return {"id": r.id, "object": r.object, "model": r.model, "created": r.created, "n_choices": len(r.choices),
            "index": c.index, "role": c.message.role, "content": c.message.content, "finish_reason": c.finish_reason,
            "usage": usage_of(r.usage)}


def chat_stream():
    stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks, ids, objects, roles, deltas, finish, usage = 0, set(), set(), [], [], [], None
    for chunk in stream:
        chunks += 1
        ids.add(chunk.id)
        objects.add(chunk.object)
        if chunk.usage is not None:
            usage = usage_of(chunk.usage)
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            if ch.delta.content:
                deltas.append(ch.delta.content)
            if ch.finish_reason is not None:
                finish.append(ch.finish_reason)
    return {"chunks": chunks, "ids": sorted(ids), "objects": sorted(objects), "roles": roles, "deltas": len(deltas),
            "content": "".join(deltas), "finish_reasons": finish, "usage": usage}


def completion(prompt):
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0)
    c = r.choices[0]
    return {"id": r.id, "object": r.object, "model": r.model, "n_choices": len(r.choices), "index": c.index,
            "text": c.text, "finish_reason": c.finish_reason, "usage": usage_of(r.usage)}


def models_list():
    page = client.models.list()
    return {"object": page.object, "ids": [m.id for m in page.data], "objects": [m.object for m in page.data],
            "owned_by": [m.owned_by for m in page.data]}


def models_retrieve():
    m = client.models.retrieve(MODEL)
    return {"id": m.id, "object": m.object, "owned_by": m.owned_by, "created": m.created}


def raised(fn):
    """Call fn, which must raise an API error; describe the error."""
    try:
        fn()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"raised": type(e).__name__, "status_code": e.status_code, "message": body.get("message"),
                "type": body.get("type"), "param": body.get("param"), "code": body.get("code")}
    return {"raised": None}


def bad_temperature():
    return raised(lambda: client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, temperature=-1))


def unknown_model():
    return raised(lambda: client.models.retrieve("no-such-model"))


PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0}}}
PERSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
ASK = [{"role": "user", "content": "Describe a person as JSON."}]


def json_schema():
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, temperature=0,
                                       response_format=PERSON_FORMAT)
    return {"content": r.choices[0].message.content, "finish_reason": r.choices[0].finish_reason}


def json_schema_stream():
    stream = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, temperature=0,
                                            response_format=PERSON_FORMAT, stream=True)
    parts, finish = [], []
    for chunk in stream:
        for ch in chunk.choices:
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason is not None:
                finish.append(ch.finish_reason)
    return {"content": "".join(parts), "finish_reasons": finish}


def constrained(extra, messages=ASK, max_tokens=30):
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0,
                                       extra_body=extra)
    return {"content": r.choices[0].message.content, "finish_reason": r.choices[0].finish_reason}


def completion_regex():
    r = client.completions.create(model=MODEL, prompt="The year the war ended was", max_tokens=10, temperature=0,
                                  extra_body={"guided_regex": " [0-9]{4}\\."})
    return {"text": r.choices[0].text, "finish_reason": r.choices[0].finish_reason}


def bad_schema():
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}
    return raised(lambda: client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4,
                                                         response_format=fmt))


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "description": "The time now",
                                      "parameters": {"type": "object", "properties": {},
                                                     "additionalProperties": False}}},
]
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def calls_of(message_calls):
    return [{"id": c.id, "type": c.type, "name": c.function.name, "arguments": c.function.arguments}
            for c in (message_calls or [])]


def tools_required():
    # One call: greedy SmolLM2 may repeat parallel calls until the length limit (valid calls, cut at the end), and
    # this case checks the parse into `tool_calls` (the parser's unit tests cover several calls).
    r = client.chat.completions.create(model=MODEL, messages=WEATHER, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=80, temperature=0)
    m = r.choices[0].message
    return {"content": m.content, "finish_reason": r.choices[0].finish_reason, "calls": calls_of(m.tool_calls)}


def tools_named_stream():
    stream = client.chat.completions.create(model=MODEL, messages=WEATHER, tools=TOOLS, max_tokens=80, temperature=0,
                                            tool_choice={"type": "function", "function": {"name": "get_time"}},
                                            parallel_tool_calls=False, stream=True)
    calls, content, finish = {}, [], []
    for chunk in stream:
        for ch in chunk.choices:
            # As clients do: the first delta of a call has its id, type and name, later ones more arguments.
            for c in ch.delta.tool_calls or []:
                e = calls.setdefault(c.index, {"index": c.index, "id": None, "type": None, "name": None,
                                               "arguments": "", "deltas": 0})
                e["deltas"] += 1
                e["id"] = e["id"] or c.id
                e["type"] = e["type"] or c.type
                if c.function is not None:
                    e["name"] = e["name"] or c.function.name
                    e["arguments"] += c.function.arguments or ""
            if ch.delta.content:
                content.append(ch.delta.content)
            if ch.finish_reason is not None:
                finish.append(ch.finish_reason)
    return {"calls": list(calls.values()), "content": "".join(content), "finish_reasons": finish}


def tools_round_trip():
    history = WEATHER + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
    ]
    r = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=16, temperature=0)
    return {"content": r.choices[0].message.content, "finish_reason": r.choices[0].finish_reason,
            "calls": calls_of(r.choices[0].message.tool_calls)}


def bad_tool_choice():
    return raised(lambda: client.chat.completions.create(
        model=MODEL, messages=WEATHER, tools=TOOLS, max_tokens=4,
        tool_choice={"type": "function", "function": {"name": "nope"}}))


results = {
    "openai_version": openai.__version__,
    "chat": run(chat),
    "chat_stream": run(chat_stream),
    "completion_text": run(completion, "The capital of France is"),
    # "The capital of France is" in SmolLM2's vocabulary.
    "completion_tokens": run(completion, [504, 3575, 282, 4649, 314]),
    "models_list": run(models_list),
    "models_retrieve": run(models_retrieve),
    "bad_temperature": run(bad_temperature),
    "unknown_model": run(unknown_model),
    "json_schema": run(json_schema),
    "json_schema_stream": run(json_schema_stream),
    "json_object": run(constrained, {"response_format": {"type": "json_object"}}, ASK, 40),
    "regex": run(constrained, {"structured_outputs": {"regex": "(yes|no)\\. [A-Z][a-z ]{2,30}\\."}},
                 [{"role": "user", "content": "Is water wet?"}]),
    "choice": run(constrained, {"guided_choice": ["Paris", "London", "Berlin"]},
                  [{"role": "user", "content": "What is the capital of France?"}], 8),
    "lark": run(constrained, {"structured_outputs": {"grammar": 'start: "It is " NUM " degrees."\nNUM: /[0-9]{1,2}/'}},
                [{"role": "user", "content": "How warm is it?"}], 20),
    "gbnf": run(constrained, {"grammar": 'root ::= "Answer: " ("A" | "B" | "C")'},
                [{"role": "user", "content": "Pick A, B or C."}], 8),
    "completion_regex": run(completion_regex),
    "bad_schema": run(bad_schema),
    "tools_required": run(tools_required),
    "tools_named_stream": run(tools_named_stream),
    "tools_round_trip": run(tools_round_trip),
    "bad_tool_choice": run(bad_tool_choice),
}
print(json.dumps(results))
