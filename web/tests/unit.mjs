// Unit tests of the app's logic that needs no browser: incremental Markdown blocks, the SSE reader, search,
// export/import and the /metrics parser. The TypeScript is bundled for node by esbuild first.
//   node web/tests/unit.mjs

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import * as esbuild from 'esbuild';
import { longReply } from './harness/mock.mjs';

const web = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-unit-')), 'units.mjs');
await esbuild.build({
  stdin: {
    contents: `export { IncrementalBlocks } from './src/markdown/blocks';
      export { lex } from './src/markdown/render';
      export { sseData } from './src/api/sse';
      export { search } from './src/state/search';
      export { parseImport, toJson, toMarkdown } from './src/state/exchange';
      export { parseMetrics, mean } from './src/api/prometheus';`,
    resolveDir: web,
    loader: 'ts',
  },
  bundle: true,
  platform: 'node',
  format: 'esm',
  outfile: out,
  define: { __KATEX_CSS__: '""' },
  logLevel: 'warning',
});
const u = await import(out);

test('streamed in any pieces, the blocks are those of the whole text, each lexed once it is final', () => {
  const text = longReply(1500).join('') + '\n\n1. one\n2. two\n\n- a\n\n- b\n\n> quote\n\n| a | b |\n|---|---|\n| 1 | 2 |\n';
  const whole = u.lex(text).map((t) => t.raw);
  for (const step of [1, 3, 17, 256]) {
    const b = new u.IncrementalBlocks();
    let r;
    for (let i = step; i < text.length + step; i += step) r = b.update(text.slice(0, i));
    const got = [...r.frozen, ...r.live].map((x) => x.token.raw);
    assert.equal(got.join(''), text, `step ${step}: the blocks cover the text`);
    assert.deepEqual(got.filter((x) => x.trim()), whole.filter((x) => x.trim()), `step ${step}: same blocks`);
    // Each update lexes at most the last two blocks (the live one, and one that freezes once the next begins)
    // and the new text, never the reply from the top.
    const updates = Math.ceil(text.length / step);
    const bound = updates * (2 * Math.max(...whole.map((x) => x.length)) + step);
    assert.ok(b.lexed <= bound, `step ${step}: lexed ${b.lexed} characters, more than ${bound}`);
    assert.ok(b.lexed * 10 < (updates * text.length) / 2, `step ${step}: not much less than lexing from the top`);
  }
});

test('a text that is not an extension of the last one starts over', () => {
  const b = new u.IncrementalBlocks();
  b.update('# One\n\nfirst paragraph\n\nsecond');
  const r = b.update('# Two\n\nother');
  assert.deepEqual([...r.frozen, ...r.live].map((x) => x.token.raw).join(''), '# Two\n\nother');
});

test('frozen blocks keep their objects across updates', () => {
  const b = new u.IncrementalBlocks();
  const first = b.update('# Title\n\npara one\n\npara');
  const second = b.update('# Title\n\npara one\n\npara two');
  assert.ok(first.frozen.length >= 1);
  assert.equal(second.frozen[0], first.frozen[0]);
});

async function* chunks(parts) {
  for (const p of parts) yield new TextEncoder().encode(p);
}

test('the SSE reader joins frames split anywhere, skips comments, handles CRLF and multi-byte text', async () => {
  const stream = 'data: {"a":1}\n\n: keep-alive\n\ndata: {"b":"é€"}\r\n\r\ndata: [DONE]\n\n';
  const bytes = new TextEncoder().encode(stream);
  for (const cut of [1, 2, 5, 13]) {
    const parts = [];
    for (let i = 0; i < bytes.length; i += cut) parts.push(bytes.slice(i, i + cut));
    const body = ReadableStream.from((async function* () { yield* parts; })());
    const got = [];
    for await (const d of u.sseData(body)) got.push(d);
    assert.deepEqual(got, ['{"a":1}', '{"b":"é€"}', '[DONE]'], `cut ${cut}`);
  }
  const body = ReadableStream.from(chunks(['data: {"last":true}']));
  const got = [];
  for await (const d of u.sseData(body)) got.push(d);
  assert.deepEqual(got, ['{"last":true}']);
});

const conv = (id, title, ...contents) => ({
  id, title, created: 1, updated: 1, system: '', model: '', sampling: { temperature: null, top_p: null, top_k: null,
    min_p: null, max_tokens: null, seed: null, stop: [] },
  messages: contents.map((content, i) => ({ id: `${id}-${i}`, role: i % 2 ? 'assistant' : 'user', content, created: 1 })),
});

test('search: every word somewhere in the conversation, case-insensitive, with a snippet', () => {
  const list = [conv('a', 'Zebras', 'Tell me about zebras', 'Zebras have STRIPES.'), conv('b', 'Cats', 'and dogs')];
  assert.deepEqual(u.search(list, 'zebra stripes').map((h) => h.conversation.id), ['a']);
  assert.deepEqual(u.search(list, 'cats').map((h) => h.conversation.id), ['b']);
  assert.deepEqual(u.search(list, 'zebra dogs'), []);
  assert.equal(u.search(list, '').length, 2);
  assert.match(u.search(list, 'stripes')[0].snippet, /STRIPES/);
});

test('export and import round-trip; bad files are refused with a reason', () => {
  const c = conv('a', 'Zebras', 'Hi', 'Hello **there**');
  const back = u.parseImport(u.toJson([c]));
  assert.deepEqual(back, [c]);
  assert.deepEqual(u.parseImport(JSON.stringify(c)), [c]);
  assert.match(u.toMarkdown(c), /^# Zebras\n\n## User\n\nHi\n\n## Assistant\n\nHello \*\*there\*\*/);
  assert.throws(() => u.parseImport('not json'), /not JSON/);
  assert.throws(() => u.parseImport('{"x": 1}'), /no conversations/);
  // Wrong types are dropped or defaulted, never trusted.
  const odd = u.parseImport(JSON.stringify({ messages: [{ role: 'system', content: 'x' }, { role: 'user', content: 5 }], sampling: { temperature: 'hot' } }));
  assert.equal(odd[0].messages.length, 1);
  assert.equal(odd[0].messages[0].content, '');
  assert.equal(odd[0].sampling.temperature, null);
});

test('the /metrics parser reads samples and histogram means', () => {
  const m = u.parseMetrics('# HELP x\nhearth:ttft_seconds_sum 3\nhearth:ttft_seconds_count 4\nbad line\nhearth:x{a="b"} 2\n');
  assert.equal(u.mean(m, 'hearth:ttft_seconds'), 0.75);
  assert.equal(m.get('hearth:x{a="b"}'), 2);
  assert.equal(u.mean(m, 'hearth:none'), null);
});
