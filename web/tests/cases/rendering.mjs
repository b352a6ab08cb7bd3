// Rendering, against a scripted stand-in server (harness/mock.mjs): Markdown with highlighted code and math,
// sanitized HTML, reasoning, tool calls, and a 2,000-token reply streamed at full speed.

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { openPage } from '../harness/browser.mjs';
import { getBrowser, idle, noErrors, send } from '../harness/fixture.mjs';
import { longReply, startMock } from '../harness/mock.mjs';

const dist = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../dist');

describe('rendering', () => {
  let mock;
  before(async () => {
    mock = await startMock(dist);
  });
  after(() => mock.close());

  test('Markdown: highlighted code, math, tables; unsafe HTML removed; reasoning and tool calls', async () => {
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, mock.url);
    const md = [
      '# Title\n\nSome **bold** text and math $e^{i\\pi} + 1 = 0$.\n\n',
      '$$\n\\int_0^1 x^2\\,dx = \\frac{1}{3}\n$$\n\n',
      '```rust\nfn main() {\n    let x = 1;\n}\n```\n\n',
      '| a | b |\n|---|---|\n| 1 | 2 |\n\n',
      '<img src="https://example.com/track.png" onerror="window.__pwned=1"> <script>window.__pwned=2</script>',
      '[link](javascript:window.__pwned=3)\n',
    ];
    mock.state.reply = {
      reasoning: ['The user ', 'wants ', 'a demo.'],
      content: md.flatMap((b) => b.match(/\s*\S+|\s+/g)),
      toolCalls: [{ name: 'get_weather', arguments: '{"city": "Paris"}' }],
    };
    await send(page, 'Show me everything.');
    await idle(page);
    const msg = page.getByTestId('message-assistant');
    // Blocks appear over a few frames, code and math once their renderers have loaded: wait for each.
    await msg.getByText('link', { exact: true }).waitFor();
    await msg.locator('.hljs-keyword').first().waitFor();
    await msg.locator('.katex-display').first().waitFor();
    assert.equal(await msg.locator('.katex-display').count(), 1);
    assert.equal(await msg.locator('table td').count(), 2);
    assert.equal(await msg.locator('h1').innerText(), 'Title');
    assert.equal(await msg.locator('script').count(), 0);
    assert.equal(await msg.locator('[onerror]').count(), 0);
    assert.equal(await msg.locator('img').count(), 0, 'remote images are not loaded');
    assert.equal(await msg.locator('a[href^="javascript:"]').count(), 0);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    const reasoning = page.getByTestId('reasoning');
    assert.equal(await reasoning.getAttribute('open'), null, 'reasoning is folded once the answer is there');
    assert.match(await reasoning.innerText(), /Reasoning/);
    await reasoning.locator('summary').click();
    await reasoning.getByText('The user wants a demo.').waitFor();
    const card = page.getByTestId('tool-call');
    assert.match(await card.innerText(), /get_weather/);
    assert.match(await card.innerText(), /"city": "Paris"/);
    // The sanitizer parses the hostile HTML with DOMParser; Chromium 156 reports its CSP check of the parsed
    // `onerror` attribute (script-src-attr, source: that parseFromString call) although nothing runs there
    // (`__pwned` stays undefined above). That one report is expected; any other error fails the test.
    noErrors(errors.filter((e) => !/Executing inline event handler violates the following Content Security Policy/.test(e)));
    await context.close();
  });

  test('a 2,000-token reply streamed at full speed renders completely', async () => {
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, mock.url);
    const pieces = longReply(2000);
    mock.state.reply = { content: pieces };
    await page.getByTestId('composer').waitFor();
    const t0 = Date.now();
    await send(page, 'Write a lot.');
    await idle(page, 60_000);
    const ms = Date.now() - t0;
    const sections = pieces.join('').match(/## Section \d+/g);
    const text = await page.getByTestId('message-assistant').locator('.markdown').textContent();
    // The reply's last plain word is among the last things on the page.
    const lastWord = pieces.map((p) => p.trim()).filter((p) => /^[A-Za-z]+$/.test(p)).at(-1);
    assert.ok(text.slice(-300).includes(lastWord), `"${lastWord}" is not at the end of: ${text.slice(-300)}`);
    assert.equal(await page.getByTestId('message-assistant').locator('h2').count(), sections.length);
    assert.match(await page.getByTestId('message-stats').innerText(), /2000 tokens/);
    console.log(`# 2,000 tokens streamed and rendered in ${ms} ms (details: npm --prefix web run bench)`);
    noErrors(errors);
    await context.close();
  });
});
