"""The official `openai` Python client's Responses and Embeddings APIs against a running `hearth serve` with an
embedding model.

Usage: responses_client.py BASE_URL MODEL_ID   (BASE_URL like http://127.0.0.1:PORT/v1)

Runs each check, records what the client saw (or the exception it raised), and prints ONE line of JSON on stdout;
crates/hearth-cli/tests/responses_client.rs asserts on it. A check that raises unexpectedly records
{"exception": "Type: message"} instead of failing the script, so the Rust side reports every problem at once.
"""

import json
import sys

import openai

from checks import run

BASE_URL, MODEL = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=BASE_URL, api_key="x", max_retries=0, timeout=300.0)
WEATHER = {"type": "function", "name": "get_weather", "description": "The current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}}


def items_of(output):
    out = []
    for it in output:
        if it.type == "message":
            out.append({"type": "message", "id": it.id, "role": it.role, "status": it.status,
                        "text": "".join(c.text for c in it.content if c.type == "output_text")})
        elif it.type == "function_call":
            out.append({"type": "function_call", "id": it.id, "call_id": it.call_id, "name": it.name,
                        "arguments": it.arguments, "status": it.status})
        else:
            out.append({"type": it.type})
    return out


def response_of(r):
    u = r.usage
    return {"id": r.id, "object": r.object, "status": r.status, "model": r.model, "output": items_of(r.output),
            "output_text": r.output_text, "previous_response_id": r.previous_response_id,
            "instructions": r.instructions, "max_output_tokens": r.max_output_tokens,
            "usage": None if u is None else {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                                             "total_tokens": u.total_tokens}}


def create():
    r = client.responses.create(model=MODEL, input="What is the capital of France?", instructions="Answer briefly.",
                                max_output_tokens=16, temperature=0)
    return response_of(r)


def events_of(stream):
    """Event types and sequence numbers in order, the text and arguments deltas, and the final response."""
    types, seqs, text, args, final = [], [], "", "", None
    for ev in stream:
        types.append(ev.type)
        seqs.append(ev.sequence_number)
        if ev.type == "response.output_text.delta":
            text += ev.delta
        elif ev.type == "response.function_call_arguments.delta":
            args += ev.delta
        elif ev.type in ("response.completed", "response.incomplete"):
            final = response_of(ev.response)
    return {"types": types, "seqs": seqs, "text": text, "arguments": args, "final": final}


def stream():
    s = client.responses.create(model=MODEL, input="What is the capital of France?", instructions="Answer briefly.",
                                max_output_tokens=16, temperature=0, stream=True)
    return events_of(s)


def function_call():
    first = client.responses.create(model=MODEL, input="What is the weather in Paris?", tools=[WEATHER],
                                    tool_choice="required", parallel_tool_calls=False, max_output_tokens=64,
                                    temperature=0)
    calls = [it for it in first.output if it.type == "function_call"]
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[WEATHER], max_output_tokens=24, temperature=0,
        input=[{"type": "function_call_output", "call_id": c.call_id, "output": "Sunny, 22 C"} for c in calls])
    return {"first": response_of(first), "second": response_of(second)}


def function_call_stream():
    s = client.responses.create(model=MODEL, input="What is the weather in Rome?", tools=[WEATHER],
                                tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=False,
                                max_output_tokens=64, temperature=0, stream=True)
    return events_of(s)


def structured():
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    r = client.responses.create(model=MODEL, input="What is the capital of France?", max_output_tokens=48,
                                temperature=0,
                                text={"format": {"type": "json_schema", "name": "capital", "schema": schema}})
    return response_of(r)


def status_of(fn):
    try:
        fn()
        return {"raised": None}
    except openai.APIStatusError as e:
        return {"raised": type(e).__name__, "status": e.status_code}


def conversation():
    first = client.responses.create(model=MODEL, input="My name is Ada. Say OK.", max_output_tokens=8, temperature=0)
    second = client.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id,
                                     max_output_tokens=8, temperature=0)
    got = client.responses.retrieve(first.id)
    unstored = client.responses.create(model=MODEL, input="Hi", max_output_tokens=4, temperature=0, store=False)
    client.responses.delete(first.id)
    return {
        "first": response_of(first), "second": response_of(second), "retrieved": response_of(got),
        "after_delete": status_of(lambda: client.responses.retrieve(first.id)),
        "continue_deleted": status_of(lambda: client.responses.create(
            model=MODEL, input="x", previous_response_id=first.id, max_output_tokens=4)),
        "unstored": status_of(lambda: client.responses.retrieve(unstored.id)),
        "bad_tool": status_of(lambda: client.responses.create(model=MODEL, input="x",
                                                              tools=[{"type": "web_search"}])),
    }


def embeddings():
    # The client asks for base64 and decodes it itself unless told `float`.
    b64 = client.embeddings.create(model="all-minilm-l6-v2", input=["Hello world", "The capital of France"])
    flt = client.embeddings.create(model="all-minilm-l6-v2", input="Hello world", encoding_format="float")
    return {"n": len(b64.data), "dims": [len(d.embedding) for d in b64.data],
            "first": b64.data[0].embedding, "float": flt.data[0].embedding,
            "prompt_tokens": b64.usage.prompt_tokens, "model": b64.model}


results = {"openai_version": openai.__version__}
for name, fn in [("create", create), ("stream", stream), ("function_call", function_call),
                 ("function_call_stream", function_call_stream), ("structured", structured),
                 ("conversation", conversation), ("embeddings", embeddings)]:
    results[name] = run(fn)
print(json.dumps(results))
