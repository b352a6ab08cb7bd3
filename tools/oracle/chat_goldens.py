"""Chat-template goldens rendered by transformers' own chat-template machinery.

Run from the repo root:
    .venv-oracle/bin/python tools/oracle/chat_goldens.py
Writes tests/goldens/chat_templates.json.

Every case is rendered with `tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=...,
tokenize=False, **kwargs)` on a PreTrainedTokenizerFast whose chat_template is the template source and whose
bos/eos tokens are the case's bos_token/eos_token, so `rendered` is byte-exact what transformers produces.
"""
from __future__ import annotations

import copy
from datetime import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GOLDENS, MODELS_DIR, SMOLLM2_FILE, dump_json, reference  # noqa: E402

import gguf  # noqa: E402
import jinja2  # noqa: E402
from tokenizers import Tokenizer, models  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


def smollm2_gguf_template() -> tuple[str, str, str]:
    r = gguf.GGUFReader(str(MODELS_DIR / SMOLLM2_FILE))
    tmpl = r.fields["tokenizer.chat_template"].contents()
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    bos = tokens[r.fields["tokenizer.ggml.bos_token_id"].contents()]
    eos = tokens[r.fields["tokenizer.ggml.eos_token_id"].contents()]
    return tmpl, bos, eos


def make_tokenizer(template: str, bos: str | None, eos: str | None) -> PreTrainedTokenizerFast:
    vocab = {"[UNK]": 0}
    for t in (bos, eos):
        if t is not None and t not in vocab:
            vocab[t] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    kw = {}
    if bos is not None:
        kw["bos_token"] = bos
    if eos is not None:
        kw["eos_token"] = eos
    ptf = PreTrainedTokenizerFast(tokenizer_object=tok, **kw)
    ptf.chat_template = template
    return ptf


# ---------------------------------------------------------------- shared inputs
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location (°C or °F) <fast> & cheap",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and country, e.g. Zürich, CH"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            "required": ["query"],
        },
        "return": {"type": "array"},
    },
}
WEATHER_ARGS = {"location": "Zürich, CH", "unit": "celsius", "note": "<b>\"quotes\" & 'apostrophes'</b> 東京 🌧"}


def tool_call(name, args, call_id=None):
    tc = {"type": "function", "function": {"name": name, "arguments": args}}
    if call_id is not None:
        tc["id"] = call_id
    return tc


def build_cases(smol_bos: str, smol_eos: str) -> list[dict]:
    cases = []

    def add(template, messages, *, tools=None, agp=False, kwargs=None, bos=None, eos=None, error=False, note=None):
        c = {"template": template, "messages": messages, "tools": tools, "add_generation_prompt": agp,
             "kwargs": kwargs or {}, "bos_token": bos, "eos_token": eos}
        if note:
            c["note"] = note
        c["_error"] = error
        cases.append(c)

    # (a) SmolLM2's own GGUF template (ChatML with a default system prompt)
    sm = dict(bos=smol_bos, eos=smol_eos)
    add("smollm2_gguf", [{"role": "user", "content": "What is the capital of France?"}], agp=True, **sm)
    add("smollm2_gguf", [{"role": "user", "content": "Hi"}], agp=False, **sm)
    add("smollm2_gguf", [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi. What do you need?"},
        {"role": "user", "content": "  Tell me a joke about  whitespace.\n"},
    ], agp=True, **sm)
    add("smollm2_gguf", [
        {"role": "user", "content": "Ünïcödé ✓ 中文 <tag> & \"quotes\""},
        {"role": "assistant", "content": "Noted."},
    ], agp=False, **sm)

    # (b1) Qwen3-like
    q = dict(bos=None, eos="<|im_end|>")
    add("qwen3_like", [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Give me a short introduction to large language models."},
    ], agp=True, kwargs={"enable_thinking": False}, **q)
    add("qwen3_like", [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Give me a short introduction to large language models."},
    ], agp=True, kwargs={"enable_thinking": True}, **q)
    add("qwen3_like", [{"role": "user", "content": "No kwargs at all."}], agp=True, **q,
        note="enable_thinking undefined")
    add("qwen3_like", [{"role": "user", "content": "What's the weather in Zürich?"}],
        tools=[WEATHER_TOOL, SEARCH_TOOL], agp=True, kwargs={"enable_thinking": False}, **q)
    add("qwen3_like", [
        {"role": "system", "content": "Use tools when needed."},
        {"role": "user", "content": "What's the weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call("get_current_weather", WEATHER_ARGS)]},
        {"role": "tool", "content": "{\"temperature\": 21, \"condition\": \"sunny <3\"}"},
    ], tools=[WEATHER_TOOL], agp=True, kwargs={"enable_thinking": True}, **q)
    add("qwen3_like", [
        {"role": "user", "content": "Compare the weather in Paris and Tokyo."},
        {"role": "assistant", "content": "<think>\nI need two calls.\n</think>\n\nLet me check both.",
         "tool_calls": [tool_call("get_current_weather", {"location": "Paris, FR"}),
                        tool_call("get_current_weather", "{\"location\": \"Tokyo, JP\"}")]},
        {"role": "tool", "content": "Paris: 18°C"},
        {"role": "tool", "content": "Tokyo: 25°C"},
        {"role": "assistant", "content": "<think>\nBoth results are in.\n</think>\n\nParis is 18°C, Tokyo is 25°C."},
        {"role": "user", "content": "Thanks! And in Fahrenheit?"},
    ], tools=[WEATHER_TOOL], agp=True, kwargs={"enable_thinking": False}, **q,
        note="string and dict arguments; think blocks split out of history content")
    add("qwen3_like", [
        {"role": "user", "content": "Solve 2+2."},
        {"role": "assistant", "content": "\n\nThe answer is 4.", "reasoning_content": "\nSimple arithmetic.\n"},
    ], agp=False, **q, note="reasoning_content field after the last user query")
    add("qwen3_like", [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "<think>old reasoning</think>first answer"},
        {"role": "user", "content": "<tool_response>\nnot a real query\n</tool_response>"},
        {"role": "assistant", "content": "second answer"},
    ], agp=False, **q, note="user turn wrapped in <tool_response> does not count as the last query")
    add("qwen3_like", [
        {"role": "user", "content": "hi"},
        {"role": "narrator", "content": "Once upon a time"},
    ], agp=True, **q, error=True)

    # (b2) Llama 3.1-like
    ll = dict(bos="<|begin_of_text|>", eos="<|eot_id|>")
    add("llama31_like", [
        {"role": "system", "content": "  You are a pirate.  \n"},
        {"role": "user", "content": "Who are you?"},
    ], agp=True, kwargs={"date_string": "26 Jul 2024"}, **ll)
    add("llama31_like", [
        {"role": "user", "content": " Hello \n"},
        {"role": "assistant", "content": "\tHi there!  "},
        {"role": "user", "content": "Bye"},
    ], agp=False, kwargs={"date_string": "01 Jan 2025"}, **ll)
    add("llama31_like", [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Zürich please"},
        {"role": "assistant", "tool_calls": [tool_call("get_current_weather", WEATHER_ARGS)]},
        {"role": "tool", "content": "{\"temperature\": 21}"},
        {"role": "ipython", "content": {"temperature": 21, "city": "Zürich"}},
    ], tools=[WEATHER_TOOL], agp=True, kwargs={"date_string": "26 Jul 2024"}, **ll,
        note="tools in the first user message (default); tool content string is tojson'd (strings are iterable)")
    add("llama31_like", [
        {"role": "user", "content": "Search for rust jinja engines"},
    ], tools=[SEARCH_TOOL], agp=True, kwargs={"date_string": "26 Jul 2024", "tools_in_user_message": False}, **ll)
    add("llama31_like", [
        {"role": "user", "content": "Two calls"},
        {"role": "assistant", "tool_calls": [tool_call("web_search", {"query": "a"}),
                                             tool_call("web_search", {"query": "b"})]},
    ], agp=False, kwargs={"date_string": "26 Jul 2024"}, **ll, error=True)

    # (b3) Mistral-like
    mi = dict(bos="<s>", eos="</s>")
    add("mistral_like", [
        {"role": "user", "content": "  Hello!  "},
        {"role": "assistant", "content": " Hi, how can I help? "},
        {"role": "user", "content": "Tell me a joke."},
    ], **mi)
    add("mistral_like", [
        {"role": "system", "content": "You are a weather bot.\n"},
        {"role": "user", "content": "What's the weather?"},
        {"role": "assistant", "content": "Where?"},
        {"role": "user", "content": "In Zürich."},
        {"role": "assistant", "tool_calls": [tool_call("get_current_weather", WEATHER_ARGS, "abcDEF123")]},
        {"role": "tool", "tool_call_id": "abcDEF123", "content": "{\"temperature\": 21}",
         "metadata": {"unit": "celsius", "source": "méteo <api>"}},
        {"role": "assistant", "content": "It is 21°C."},
    ], tools=[WEATHER_TOOL, SEARCH_TOOL], **mi, note="tools rendered via tool.items() with a loop filter")
    add("mistral_like", [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ], **mi, error=True)
    add("mistral_like", [
        {"role": "user", "content": "Call it"},
        {"role": "assistant", "tool_calls": [tool_call("web_search", {"query": "x"}, "short")]},
    ], **mi, error=True)
    # (g) gpt-oss's published harmony template (llama.cpp's copy, models/templates/openai-gpt-oss-120b.jinja):
    # its system message carries strftime_now's date, replaced in `rendered` by the case's `today` placeholder.
    oss = dict(bos="<|startoftext|>", eos="<|return|>")
    add("openai_gpt_oss", [{"role": "user", "content": "What is 2 + 2?"}], agp=True, **oss)
    add("openai_gpt_oss", [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What's the weather in Zürich?"},
        {"role": "assistant", "thinking": "The user wants the weather; call the tool.",
         "tool_calls": [tool_call("get_current_weather", WEATHER_ARGS, "c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"temperature\": 21}"},
        {"role": "assistant", "content": "It is 21°C."},
        {"role": "user", "content": "And tomorrow?"},
    ], tools=[WEATHER_TOOL, SEARCH_TOOL], agp=True, kwargs={"reasoning_effort": "high"}, **oss)
    add("openai_gpt_oss", [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<|channel|>final<|message|>Hello"},
    ], **oss, error=True)
    return cases


TODAY = "<strftime_now %Y-%m-%d>"


def main() -> None:
    smol_tmpl, smol_bos, smol_eos = smollm2_gguf_template()
    templates = {"smollm2_gguf": smol_tmpl}
    for p in sorted(TEMPLATE_DIR.glob("*.jinja")):
        templates[p.stem] = p.read_text(encoding="utf-8")

    out_cases = []
    for c in build_cases(smol_bos, smol_eos):
        is_error = c.pop("_error")
        tok = make_tokenizer(templates[c["template"]], c["bos_token"], c["eos_token"])
        msgs = copy.deepcopy(c["messages"])
        tools = copy.deepcopy(c["tools"])
        try:
            rendered = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=c["add_generation_prompt"],
                                               tokenize=False, **c["kwargs"])
            if is_error:
                raise SystemExit(f"expected an error for case {c}")
            assert isinstance(rendered, str)
            today = datetime.now().strftime("%Y-%m-%d")
            if today in rendered:
                rendered = rendered.replace(today, TODAY)
                c["today"] = TODAY
            c["rendered"] = rendered
        except jinja2.exceptions.TemplateError as e:
            if not is_error:
                raise
            c["error_contains"] = str(e)
        assert msgs == c["messages"] and tools == c["tools"], "template rendering mutated its inputs"
        out_cases.append(c)

    out = {
        "reference": reference("transformers", "jinja2", "tokenizers", "gguf"),
        "notes": [
            "rendered = PreTrainedTokenizerFast(bos_token=case.bos_token, eos_token=case.eos_token) with "
            "chat_template = templates[case.template], .apply_chat_template(messages, tools=tools, "
            "add_generation_prompt=..., tokenize=False, **kwargs). bos_token/eos_token null = not set "
            "(undefined in the template).",
            "transformers drops message keys whose value is None, and copies reasoning_content/thinking/reasoning "
            "into both 'reasoning_content' and 'thinking' before rendering.",
            "Jinja env: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols); "
            "tojson = json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) "
            "(no HTML escaping; default separators ', ' and ': '); raise_exception raises TemplateError; "
            "strftime_now(fmt) = datetime.now().strftime(fmt): where a case renders today's date (gpt-oss's system "
            "message), `rendered` holds the case's `today` placeholder instead; the others pass date_string.",
            "error cases: error_contains is the full raise_exception message.",
            "smollm2_gguf is tokenizer.chat_template from " + SMOLLM2_FILE + "; the others are tools/oracle/templates/*.jinja.",
        ],
        "templates": templates,
        "cases": out_cases,
    }
    dump_json(out, GOLDENS / "chat_templates.json")
    n_err = sum(1 for c in out_cases if "error_contains" in c)
    print(f"{len(out_cases)} cases ({n_err} error cases)")


if __name__ == "__main__":
    main()
