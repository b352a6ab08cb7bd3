// Talking to the real model: streaming, stop (cancelled on the server), settings in the request, regenerate, edit.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { openPage } from '../harness/browser.mjs';
import { getBrowser, idle, lastAssistantText, noErrors, send, sentCount, server, shortReplies, stats } from '../harness/fixture.mjs';

describe('chat', () => {
  test('a reply streams in, token by token, with its stats', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, url);
    const sent = await shortReplies(page, { max: 32, extra: { ignore_eos: true } });
    // Count how often the reply's text changes while it streams.
    await page.evaluate(() => {
      window.__updates = 0;
      new MutationObserver(() => window.__updates++).observe(document.body, { subtree: true, childList: true, characterData: true });
    });
    await send(page, 'What is the capital of France?');
    await page.getByTestId('stop').waitFor();
    await idle(page);
    assert.equal(await page.getByTestId('message-user').count(), 1);
    assert.equal(await page.getByTestId('message-assistant').count(), 1);
    assert.ok((await lastAssistantText(page)).length > 0);
    assert.ok((await page.evaluate(() => window.__updates)) > 5, 'the reply did not arrive in pieces');
    const statsText = await page.getByTestId('message-stats').innerText();
    assert.match(statsText, /TTFT \d+ ms/);
    assert.match(statsText, /tok\/s/);
    assert.match(statsText, /32 tokens/);
    assert.equal(sent[0].stream, true);
    assert.deepEqual(sent[0].messages, [{ role: 'user', content: 'What is the capital of France?' }]);
    noErrors(errors);
    await context.close();
  });

  test('stop ends the reply and the server cancels the request', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, url);
    await shortReplies(page, { extra: { max_tokens: 3000, ignore_eos: true } });
    const before = (await stats(url)).tokens_generated_total;
    await send(page, 'Tell me a very long story about a lighthouse.');
    await page.waitForFunction(() => {
      const m = document.querySelector('[data-testid=message-assistant] .markdown');
      return (m?.textContent ?? '').length > 40;
    });
    await page.getByTestId('stop').click();
    await idle(page, 5000);
    await page.getByText('Stopped.').waitFor();
    // The server stops generating: no row left running, far fewer than 3000 tokens made.
    const t0 = Date.now();
    let s;
    do {
      s = await stats(url);
      if (s.rows_running === 0 && s.rows_waiting === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    } while (Date.now() - t0 < 10_000);
    assert.equal(s.rows_running, 0, JSON.stringify(s));
    assert.ok(s.tokens_generated_total - before < 1500, `${s.tokens_generated_total - before} tokens generated`);
    const stopped = (await lastAssistantText(page)).length;
    assert.ok(stopped > 40);
    noErrors(errors);
    await context.close();
  });

  test('chat settings go into the request', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, url);
    const sent = await shortReplies(page);
    await page.getByTestId('open-settings').click();
    await page.getByTestId('setting-system').fill('You answer in one short sentence.');
    for (const [name, value] of [['temperature', '0.7'], ['top_p', '0.9'], ['top_k', '40'], ['min_p', '0.05'], ['max_tokens', '12'], ['seed', '42']]) {
      await page.getByTestId(`setting-${name}`).fill(value);
      await page.getByTestId(`setting-${name}`).press('Tab');
    }
    await page.getByTestId('setting-stop').fill('Paris\nEND');
    await page.getByTestId('setting-stop').press('Tab');
    await send(page, 'Name a city.');
    await idle(page);
    const body = sent.at(-1);
    assert.deepEqual(body.messages[0], { role: 'system', content: 'You answer in one short sentence.' });
    assert.equal(body.temperature, 0.7);
    assert.equal(body.top_p, 0.9);
    assert.equal(body.top_k, 40);
    assert.equal(body.min_p, 0.05);
    assert.equal(body.max_tokens, 12);
    assert.equal(body.seed, 42);
    assert.deepEqual(body.stop, ['Paris', 'END']);
    assert.equal(body.model, 'smollm2-135m');
    const statsText = await page.getByTestId('message-stats').innerText();
    assert.match(statsText, /(\d+) tokens/);
    assert.ok(Number(/(\d+) tokens/.exec(statsText)[1]) <= 12);
    noErrors(errors);
    await context.close();
  });

  test('regenerate replaces the last reply; edit resends from the edited message', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, url);
    const sent = await shortReplies(page, { max: 12 });
    await send(page, 'Say hello.');
    await sentCount(sent, 1);
    await idle(page);
    await page.getByTestId('regenerate').click();
    await sentCount(sent, 2);
    await idle(page);
    assert.equal(sent.length, 2);
    assert.deepEqual(sent[1].messages, sent[0].messages);
    assert.equal(await page.getByTestId('message-assistant').count(), 1);
    await page.getByTestId('message-user').hover();
    await page.getByTestId('edit').click();
    await page.getByTestId('edit-box').fill('Say goodbye.');
    await page.getByTestId('edit-save').click();
    await sentCount(sent, 3);
    await idle(page);
    assert.equal(sent.length, 3);
    assert.deepEqual(sent[2].messages, [{ role: 'user', content: 'Say goodbye.' }]);
    assert.equal(await page.getByTestId('message-user').count(), 1);
    assert.equal((await page.getByTestId('message-user').innerText()).trim(), 'Say goodbye.');
    assert.equal(await page.getByTestId('message-assistant').count(), 1);
    noErrors(errors);
    await context.close();
  });
});
