"""Shared helpers for the hearth reference-oracle scripts (run from the repo root)."""
from __future__ import annotations

import importlib.metadata as md
import json
import math
import os
import shlex
import shutil
import sys
from pathlib import Path

# Never touch the Hugging Face hub: everything is loaded from local files.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[2]
GOLDENS = REPO_ROOT / "tests" / "goldens"
FIXTURES = REPO_ROOT / "tests" / "fixtures"
MODELS_DIR = Path(os.environ.get("HEARTH_MODELS", str(Path.home() / ".cache" / "hearth" / "models")))

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
QWEN05B_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN15B_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def command_line() -> str:
    """The command line that is running now, with the interpreter relative to the repo root."""
    exe = Path(sys.executable)
    try:
        exe_s = str(exe.relative_to(REPO_ROOT)) if not exe.is_absolute() else str(
            Path(os.path.abspath(sys.executable)).relative_to(REPO_ROOT))
    except ValueError:
        exe_s = sys.executable
    script = sys.argv[0]
    try:
        script = str(Path(os.path.abspath(script)).relative_to(REPO_ROOT))
    except ValueError:
        pass
    return shlex.join([exe_s, script, *sys.argv[1:]])


def reference(*pkgs: str) -> dict:
    ref = {}
    for p in pkgs:
        key = p.replace("-", "_")
        ref[key] = version(p)
    ref["python"] = sys.version.split()[0]
    ref["command"] = command_line()
    return ref


def r6(x: float) -> float:
    """Round to 6 significant digits (as a JSON-friendly float)."""
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"non-finite value {x}")
    return float(f"{x:.6g}")


def dump_json(obj, path: Path) -> None:
    """Compact-ish JSON: one line per top-level list element, no indentation inside arrays."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = _dump(obj, 0)
    path.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(REPO_ROOT)} ({path.stat().st_size} bytes)")


def _dump(obj, depth: int) -> str:
    # Dicts and lists of dicts are broken over lines down to depth 3; everything else is compact.
    compact = lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":"))
    pad = "  " * (depth + 1)
    end = "  " * depth
    if depth < 3 and isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {_dump(v, depth + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if depth < 3 and isinstance(obj, list) and obj and all(isinstance(e, dict) for e in obj):
        items = [f"{pad}{_dump(e, depth + 1)}" for e in obj]
        return "[\n" + ",\n".join(items) + "\n" + end + "]"
    return compact(obj)


def copy_tokenizer_with(src: Path, out: Path, added: dict[int, str], chat_template: str,
                        extra_config: dict | None = None) -> None:
    """The tokenizer files of `src` copied to `out` with `added` special tokens at their ids (unused by its
    vocabulary), `chat_template`, and `extra_config` merged into tokenizer_config.json."""
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copy(src / f, out / f)
    tok = json.loads((out / "tokenizer.json").read_text())
    assert not set(tok["model"]["vocab"].values()) & set(added), "the added token ids are taken"
    for i, content in sorted(added.items()):
        tok["added_tokens"].append({"id": i, "content": content, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False) + "\n")
    tcfg = json.loads((out / "tokenizer_config.json").read_text())
    for i, content in sorted(added.items()):
        tcfg["added_tokens_decoder"][str(i)] = {"content": content, "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": True}
    tcfg["chat_template"] = chat_template
    tcfg.update(extra_config or {})
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
