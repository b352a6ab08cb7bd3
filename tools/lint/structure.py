#!/usr/bin/env python3
"""Structural checks of the workspace's Rust sources (run by scripts/test):

1. no import circle among the modules of a crate (test code excluded): a module is one source file; an edge A -> B
   means A names an item of B through `crate::`, `super::` or `self::` paths; a module's own submodules count as
   part of it (a parent declaring, re-exporting or using its children is no edge, a child using its parent is);
2. no file of a crate's `src/` over 600 lines;
3. no function in a crate's `src/` over 100 lines (signature to closing brace).

  tools/lint/structure.py            check, print each violation, exit 1 if any
  tools/lint/structure.py --graph    also print each crate's module edges
"""

import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MAX_FILE_LINES = 600
MAX_FN_LINES = 100


def strip_code(text):
    """Blank out comments, string and char literals (keeping newlines), so braces and paths are code only."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 40]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i)):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime or label
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(code, open_idx):
    depth = 0
    for j in range(open_idx, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def remove_test_blocks(code):
    """Blank `#[cfg(test)]` items (inline test modules and test-only functions)."""
    out = code
    for m in reversed(list(re.finditer(r"#\[cfg\(test\)\]", code))):
        rest = code[m.end():]
        semi = rest.find(";")
        brace = rest.find("{")
        if brace < 0 or (0 <= semi < brace):
            end = m.end() + semi + 1
        else:
            end = matching_brace(code, m.end() + brace) + 1
        out = out[:m.start()] + re.sub(r"[^\n]", " ", out[m.start():end]) + out[end:]
    return out


def crate_modules(src):
    """Map module path (tuple) -> file, and the set of test-only files."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            if parts and parts[0] == "bin":
                continue
            mods[tuple(parts)] = os.path.join(dirpath, f)
    tests = set()
    for path, f in mods.items():
        code = strip_code(open(f, encoding="utf-8").read())
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+(\w+)\s*;", code):
            tests.add(path + (m.group(1),))
        for m in re.finditer(r'#\[path\s*=\s*""\s*\]', code):
            pass
    # a test module's children are test code too
    tests = {p for p in mods if any(p[:len(t)] == t for t in tests)}
    return mods, tests


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    m = re.search(r"\{", tree)
    if not m:
        return [tree]
    prefix = tree[:m.start()]
    inner = tree[m.start() + 1:tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    res = []
    for p in parts:
        if p:
            res.extend(prefix + q for q in expand_use(p))
    return res


def resolve(path_str, here, mods):
    segs = [s for s in re.split(r"::", path_str) if s]
    segs = [re.sub(r"\bas\b.*", "", s) for s in segs]
    if not segs:
        return None
    base = list(here)
    if segs[0] == "crate":
        base, segs = [], segs[1:]
    elif segs[0] in ("super", "self"):
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    else:  # a child module named directly
        if tuple(base + [segs[0]]) not in mods:
            return None
    target = tuple(base)
    for s in segs:
        if tuple(list(target) + [s]) in mods:
            target = tuple(list(target) + [s])
        else:
            break
    return target


def module_edges(mods, tests):
    edges = {}
    for path, f in mods.items():
        if path in tests:
            continue
        code = remove_test_blocks(strip_code(open(f, encoding="utf-8").read()))
        targets = set()
        for m in re.finditer(r"\buse\s+([^;]+);", code):
            for p in expand_use(m.group(1)):
                t = resolve(p, path, mods)
                if t is not None:
                    targets.add(t)
        for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", code):
            t = resolve(m.group(1), path, mods)
            if t is not None:
                targets.add(t)
        # a module's own submodules are part of it: declaring, re-exporting or using them is not an import
        targets = {t for t in targets if t[:len(path)] != path}
        edges[path] = {t for t in targets if t not in tests}
    return edges


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def long_functions(code):
    for m in re.finditer(r"\bfn\s+(\w+)[^;{]*\{", code):
        end = matching_brace(code, m.end() - 1)
        lines = code.count("\n", m.start(), end) + 1
        if lines > MAX_FN_LINES:
            yield m.group(1), code.count("\n", 0, m.start()) + 1, lines


def name(path):
    return "::".join(path) or "crate"


def main():
    graph = "--graph" in sys.argv
    problems = []
    crates_dir = os.path.join(ROOT, "crates")
    for crate in sorted(os.listdir(crates_dir)):
        src = os.path.join(crates_dir, crate, "src")
        if not os.path.isdir(src):
            continue
        mods, tests = crate_modules(src)
        edges = module_edges(mods, tests)
        if graph:
            for a in sorted(edges):
                print(f"{crate}: {name(a)} -> {', '.join(name(b) for b in sorted(edges[a]))}")
        for comp in cycles(edges):
            problems.append(f"{crate}: import circle of {len(comp)} modules: {', '.join(name(c) for c in comp)}")
    for dirpath, _, files in os.walk(crates_dir):
        if os.sep + "src" not in dirpath[len(crates_dir):]:
            continue
        for f in files:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, ROOT)
            text = open(p, encoding="utf-8").read()
            n = text.count("\n")
            if n > MAX_FILE_LINES:
                problems.append(f"{rel}: {n} lines (at most {MAX_FILE_LINES})")
            for fn, line, length in long_functions(strip_code(text)):
                problems.append(f"{rel}:{line}: fn {fn} is {length} lines (at most {MAX_FN_LINES})")
    for p in problems:
        print(p)
    if problems:
        print(f"structure: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("structure: no import circle, no file over 600 lines, no function over 100 lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
