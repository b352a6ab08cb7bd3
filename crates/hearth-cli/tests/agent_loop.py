"""A coding agent's tool loop against a running `hearth serve`, through the official clients.

Usage: agent_loop.py BASE_URL MODEL_ID   (BASE_URL like http://127.0.0.1:PORT, no /v1)

Each loop gives the model a tiny Python project whose one test fails, three tools (read_file, write_file,
run_tests) with `tool_choice: auto` and greedy decoding, and runs the calls it makes until it answers in text or
MAX_STEPS pass: once with the `openai` client on Chat Completions, once on the Responses API, and once with the
`anthropic` client on Messages. Prints ONE line of JSON: for every loop, each step (the calls made, whether each
names a declared tool with arguments that fit its schema, or the final text), whether the tests passed at the end,
and any exception. crates/hearth-cli/tests/agents_e2e.rs asserts on it.
"""

import json
import os
import subprocess
import sys
import tempfile

import anthropic
import openai

BASE_URL, MODEL = sys.argv[1].rstrip("/"), sys.argv[2]
MAX_STEPS = 8
MAX_TOKENS = 400

SYSTEM = ("You are a coding agent working in a small Python project. Use the tools to read files, edit them and "
          "run the tests. When the tests pass, reply with a one-sentence report.")
TASK = "The test in test_calc.py fails. Find the bug in calc.py, fix it, run the tests, and report what you changed."
FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    "test_calc.py": "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                    "def test_mul():\n    assert mul(2, 3) == 6\n",
}
TOOLS = [
    {"name": "read_file", "description": "Read a file of the project and return its text.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "e.g. calc.py"}},
                    "required": ["path"]}},
    {"name": "write_file", "description": "Replace the whole text of a file of the project.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"]}},
    {"name": "run_tests", "description": "Run the project's tests and return their output.",
     "parameters": {"type": "object", "properties": {}}},
]
DECLARED = {t["name"]: t for t in TOOLS}


class Project:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="hearth-agent-")
        for name, text in FILES.items():
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)

    def path(self, p):
        full = os.path.realpath(os.path.join(self.dir, str(p)))
        if not full.startswith(os.path.realpath(self.dir) + os.sep):
            raise ValueError(f"{p} is outside the project")
        return full

    def run_tests(self):
        code = ("import sys, traceback, test_calc\nok = True\nfor n in sorted(dir(test_calc)):\n"
                "    if n.startswith('test_'):\n        try:\n            getattr(test_calc, n)(); print(n, 'passed')\n"
                "        except Exception:\n            ok = False; print(n, 'FAILED'); traceback.print_exc(limit=1)\n"
                "sys.exit(0 if ok else 1)\n")
        r = subprocess.run([sys.executable, "-c", code], cwd=self.dir, capture_output=True, text=True, timeout=60)
        return r.returncode == 0, (r.stdout + r.stderr)[-1500:]

    def call(self, name, args):
        try:
            if name == "read_file":
                with open(self.path(args["path"])) as f:
                    return f.read()
            if name == "write_file":
                with open(self.path(args["path"]), "w") as f:
                    f.write(args["content"])
                return "written"
            if name == "run_tests":
                return self.run_tests()[1]
            return f"error: no tool named {name}"
        except Exception as e:  # the model sees the error, as an agent would show it
            return f"error: {type(e).__name__}: {e}"


def fits(name, args):
    """The call names a declared tool and its arguments are an object with the required keys, all strings."""
    tool = DECLARED.get(name)
    if tool is None or not isinstance(args, dict):
        return False
    props = tool["parameters"]["properties"]
    return all(k in args for k in tool["parameters"].get("required", [])) and \
        all(k in props and isinstance(v, str) for k, v in args.items())


def step_record(calls, text):
    return {"calls": [{"name": n, "arguments": a, "fits": fits(n, a)} for n, a in calls], "text": text}


def chat_loop(project):
    client = openai.OpenAI(base_url=BASE_URL + "/v1", api_key="x", max_retries=0, timeout=600.0)
    tools = [{"type": "function", "function": t} for t in TOOLS]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    steps = []
    for _ in range(MAX_STEPS):
        r = client.chat.completions.create(model=MODEL, messages=messages, tools=tools, tool_choice="auto",
                                           temperature=0, max_tokens=MAX_TOKENS)
        m = r.choices[0].message
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in (m.tool_calls or [])]
        steps.append({**step_record(calls, m.content), "finish_reason": r.choices[0].finish_reason})
        if not calls:
            break
        messages.append({"role": "assistant", "content": m.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in m.tool_calls]})
        for c, (name, args) in zip(m.tool_calls, calls):
            messages.append({"role": "tool", "tool_call_id": c.id, "content": project.call(name, args)})
    return steps


def responses_loop(project):
    client = openai.OpenAI(base_url=BASE_URL + "/v1", api_key="x", max_retries=0, timeout=600.0)
    tools = [{"type": "function", **t} for t in TOOLS]
    items = [{"role": "user", "content": TASK}]
    steps = []
    for _ in range(MAX_STEPS):
        r = client.responses.create(model=MODEL, instructions=SYSTEM, input=items, tools=tools, tool_choice="auto",
                                    temperature=0, max_output_tokens=MAX_TOKENS)
        calls = [o for o in r.output if o.type == "function_call"]
        parsed = [(c.name, json.loads(c.arguments)) for c in calls]
        steps.append({**step_record(parsed, r.output_text or None), "status": r.status})
        if not calls:
            break
        for c, (name, args) in zip(calls, parsed):
            items.append({"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments})
            items.append({"type": "function_call_output", "call_id": c.call_id, "output": project.call(name, args)})
    return steps


def messages_loop(project):
    client = anthropic.Anthropic(base_url=BASE_URL, api_key="x", max_retries=0, timeout=600.0)
    tools = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in TOOLS]
    messages = [{"role": "user", "content": TASK}]
    steps = []
    for _ in range(MAX_STEPS):
        r = client.messages.create(model=MODEL, system=SYSTEM, messages=messages, tools=tools,
                                   tool_choice={"type": "auto"}, max_tokens=MAX_TOKENS,
                                   extra_body={"temperature": 0})  # this client version takes no temperature
        uses = [b for b in r.content if b.type == "tool_use"]
        text = "".join(b.text for b in r.content if b.type == "text") or None
        steps.append({**step_record([(u.name, u.input) for u in uses], text), "stop_reason": r.stop_reason})
        if not uses:
            break
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": project.call(u.name, u.input)} for u in uses]})
    return steps


def run(loop):
    project = Project()
    try:
        steps = loop(project)
        return {"steps": steps, "tests_pass": project.run_tests()[0]}
    except Exception as e:
        return {"exception": f"{type(e).__name__}: {e}"}


print(json.dumps({"chat": run(chat_loop), "responses": run(responses_loop), "messages": run(messages_loop)}))
