"""The official `anthropic` Python client against a running `hearth serve --api-key test-key`.

Usage: anthropic_client.py BASE_URL MODEL_ID   (BASE_URL like http://127.0.0.1:PORT, without /v1)

Runs each check, records what the client saw (or the exception it raised), and prints ONE line of JSON on stdout;
crates/hearth-cli/tests/anthropic_client.rs asserts on it. A check that raises unexpectedly records
{"exception": "Type: message"} instead of failing the script, so the Rust side reports every problem at once.
"""

import json
import sys

import anthropic

from checks import run

BASE_URL, MODEL = sys.argv[1], sys.argv[2]
KEY = "test-key"
client = anthropic.Anthropic(base_url=BASE_URL, api_key=KEY, max_retries=0, timeout=300.0)
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
# This SDK has no sampling arguments (newer Claude models take none); older clients send them and hearth takes them.
GREEDY = {"temperature": 0}
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def blocks_of(content):
    out = []
    for b in content:
        if b.type == "text":
            out.append({"type": "text", "text": b.text})
        elif b.type == "tool_use":
            out.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
        elif b.type == "thinking":
            out.append({"type": "thinking", "thinking": b.thinking})
        else:
            out.append({"type": b.type})
    return out


def message_of(m):
    return {"id": m.id, "type": m.type, "role": m.role, "model": m.model, "content": blocks_of(m.content),
            "stop_reason": m.stop_reason, "stop_sequence": m.stop_sequence,
            "usage": {"input_tokens": m.usage.input_tokens, "output_tokens": m.usage.output_tokens}}


def create():
    m = client.messages.create(model=MODEL, max_tokens=16, messages=MESSAGES, extra_body=GREEDY,
                               system="You are a geography teacher.", metadata={"user_id": "u1"})
    return message_of(m)


def raw_stream(**kw):
    """The event types in order, and the text and tool input JSON they carried."""
    events, text, partial = [], "", ""
    with client.messages.create(stream=True, **kw) as stream:
        for ev in stream:
            events.append(ev.type)
            if ev.type == "content_block_delta":
                if ev.delta.type == "text_delta":
                    text += ev.delta.text
                elif ev.delta.type == "input_json_delta":
                    partial += ev.delta.partial_json
            if ev.type == "message_delta":
                stop = ev.delta.stop_reason
                out_tokens = ev.usage.output_tokens
    return {"events": events, "text": text, "partial_json": partial, "stop_reason": stop, "output_tokens": out_tokens}


def stream():
    r = raw_stream(model=MODEL, max_tokens=16, messages=MESSAGES, extra_body=GREEDY,
                   system="You are a geography teacher.")
    # The SDK's stream helper assembles the same events into a message.
    with client.messages.stream(model=MODEL, max_tokens=16, messages=MESSAGES, extra_body=GREEDY,
                                system="You are a geography teacher.") as s:
        final = s.get_final_message()
    r["final"] = message_of(final)
    return r


def stop_sequence():
    m = client.messages.create(model=MODEL, max_tokens=32, extra_body=GREEDY,
                               messages=[{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
                               stop_sequences=["5"])
    return message_of(m)


def tool_round_trip():
    # One call: a 135M model with parallel calls allowed may repeat the call until max_tokens.
    first = client.messages.create(model=MODEL, max_tokens=64, extra_body=GREEDY, tools=[WEATHER],
                                   tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                   messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    calls = [b for b in first.content if b.type == "tool_use"]
    history = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c.id, "content": "Sunny, 22 C"}
                                     for c in calls]},
    ]
    second = client.messages.create(model=MODEL, max_tokens=24, extra_body=GREEDY, tools=[WEATHER], messages=history)
    return {"first": message_of(first), "second": message_of(second)}


def tool_stream():
    r = raw_stream(model=MODEL, max_tokens=64, extra_body=GREEDY, tools=[WEATHER],
                   tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                   messages=[{"role": "user", "content": "What is the weather in Rome?"}])
    with client.messages.stream(model=MODEL, max_tokens=64, extra_body=GREEDY, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                                messages=[{"role": "user", "content": "What is the weather in Rome?"}]) as s:
        r["final"] = message_of(s.get_final_message())
    return r


def structured():
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    m = client.messages.create(model=MODEL, max_tokens=48, messages=MESSAGES, extra_body=GREEDY,
                               output_config={"format": {"type": "json_schema", "schema": schema}})
    return message_of(m)


def count_tokens():
    plain = client.messages.count_tokens(model=MODEL, messages=MESSAGES)
    with_tools = client.messages.count_tokens(model=MODEL, messages=MESSAGES, tools=[WEATHER])
    return {"plain": plain.input_tokens, "with_tools": with_tools.input_tokens}


def error(fn):
    try:
        fn()
        return {"raised": None}
    except anthropic.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"raised": type(e).__name__, "status": e.status_code, "body": body}


def errors():
    bad_key = anthropic.Anthropic(base_url=BASE_URL, api_key="wrong", max_retries=0)
    return {
        "empty_messages": error(lambda: client.messages.create(model=MODEL, max_tokens=8, messages=[])),
        "image": error(lambda: client.messages.create(model=MODEL, max_tokens=8, messages=[
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": "iVBORw0KGgo="}}]}])),
        "bad_temperature": error(lambda: client.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES,
                                                                extra_body={"temperature": -1})),
        "bad_key": error(lambda: bad_key.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)),
    }


results = {"anthropic_version": anthropic.__version__}
for name, fn in [("create", create), ("stream", stream), ("stop_sequence", stop_sequence),
                 ("tool_round_trip", tool_round_trip), ("tool_stream", tool_stream),
                 ("structured", structured), ("count_tokens", count_tokens), ("errors", errors)]:
    results[name] = run(fn)
print(json.dumps(results))
