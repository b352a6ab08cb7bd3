// A stand-in for hearth that serves the built app (web/dist) and an OpenAI-style streaming endpoint whose replies
// the test scripts: exact Markdown, reasoning and tool calls that a small model would not write on demand, and a
// 2,000-token reply streamed as fast as the socket takes it (or at a set rate) for the rendering benchmark.

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml',
  '.png': 'image/png', '.woff2': 'font/woff2', '.webmanifest': 'application/manifest+json', '.txt': 'text/plain' };

function chunk(delta, extra = {}) {
  return { id: 'chatcmpl-mock', object: 'chat.completion.chunk', model: 'mock-model',
    choices: [{ index: 0, delta, finish_reason: null }], ...extra };
}

const tick = () => new Promise((r) => setImmediate(r));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * `reply` is set by the test before each request: { content: [pieces], reasoning: [pieces], toolCalls: [...],
 * ratePerSecond: 0 (as fast as possible) or tokens per second }.
 */
export async function startMock(dist) {
  const state = { reply: { content: ['Hello!'] }, requests: [], models: [{ id: 'mock-model', object: 'model' }] };
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    if (req.method === 'POST' && url.pathname === '/v1/chat/completions') {
      let body = '';
      for await (const b of req) body += b;
      state.requests.push(JSON.parse(body));
      const r = state.reply;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.flushHeaders();
      const gap = r.ratePerSecond ? 1000 / r.ratePerSecond : 0;
      const send = async (obj) => {
        res.write(`data: ${JSON.stringify(obj)}\n\n`);
        if (gap) await sleep(gap);
        else await tick();
      };
      await send(chunk({ role: 'assistant', content: '' }));
      for (const p of r.reasoning ?? []) await send(chunk({ reasoning_content: p }));
      for (const p of r.content ?? []) await send(chunk({ content: p }));
      (r.toolCalls ?? []).forEach((t, index) => {
        res.write(`data: ${JSON.stringify(chunk({ tool_calls: [{ index, id: `call_${index}`, type: 'function',
          function: { name: t.name, arguments: t.arguments } }] }))}\n\n`);
      });
      const n = (r.content?.length ?? 0) + (r.reasoning?.length ?? 0);
      res.write(`data: ${JSON.stringify({ ...chunk({}), choices: [{ index: 0, delta: {}, finish_reason: r.toolCalls ? 'tool_calls' : 'stop' }] })}\n\n`);
      res.write(`data: ${JSON.stringify({ ...chunk({}), choices: [], usage: { prompt_tokens: 12, completion_tokens: n, total_tokens: n + 12 } })}\n\n`);
      res.end('data: [DONE]\n\n');
      return;
    }
    const json = (v) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(v));
    };
    if (url.pathname === '/health') return json({ status: 'ok' });
    if (url.pathname === '/v1/models') return json({ object: 'list', data: state.models });
    const file = path.join(dist, url.pathname === '/' ? 'index.html' : path.normalize(url.pathname));
    if (file.startsWith(dist) && fs.existsSync(file) && fs.statSync(file).isFile()) {
      res.writeHead(200, { 'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream' });
      res.end(fs.readFileSync(file));
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"not found"}}');
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const port = server.address().port;
  return { url: `http://127.0.0.1:${port}`, state, close: () => new Promise((r) => server.close(r)) };
}

/** A long Markdown reply cut into `n` token-sized pieces: headings, paragraphs, lists, code and math, repeating. */
export function longReply(n) {
  const section = (i) => [
    `## Section ${i}\n\n`,
    'The quick brown fox jumps over the lazy dog while the model keeps writing. '.repeat(3) + `Inline math $x_${i}^2 + y^2$ too.\n\n`,
    '- first point with `inline code`\n- second point with **bold** text\n- third point, a [link](https://example.com)\n\n',
    '```python\n' + `def step_${i}(x):\n    total = 0\n    for k in range(x):\n        total += k * ${i}\n    return total\n` + '```\n\n',
  ].join('');
  const pieces = [];
  for (let i = 1; pieces.length < n; i++) {
    for (const w of section(i).match(/\s*\S+|\s+/g)) {
      if (pieces.length < n) pieces.push(w);
    }
  }
  return pieces;
}
