// What the test cases share: one hearth server, one browser, and helpers that act as a person would.

import assert from 'node:assert/strict';
import { after } from 'node:test';
import { launch } from './browser.mjs';
import { startHearth } from './hearth.mjs';

let hearth = null;
let browser = null;

/** The shared server (started on first use). */
export async function server() {
  hearth ??= await startHearth();
  return hearth;
}

/** Kill the shared server; `restart` brings it back on the same port. */
export async function stopServer() {
  const h = await server();
  await h.stop();
  return {
    async restart() {
      hearth = await startHearth({ port: h.port });
      return hearth;
    },
  };
}

export async function getBrowser() {
  browser ??= await launch();
  return browser;
}

after(async () => {
  await browser?.close();
  await hearth?.stop();
});

/**
 * Replies stay short (the model is small and the machine has two cores): a request without `max_tokens` gets
 * `max`. Every request body the app sent, as it sent it, lands in `sent`.
 */
export async function shortReplies(page, { max = 24, extra = {} } = {}) {
  const sent = [];
  await page.route('**/v1/chat/completions', (route) => {
    const body = JSON.parse(route.request().postData() ?? '{}');
    sent.push(structuredClone(body));
    body.max_tokens ??= max;
    Object.assign(body, extra);
    return route.continue({ postData: JSON.stringify(body) });
  });
  return sent;
}

export async function send(page, text) {
  await page.getByTestId('composer').fill(text);
  await page.getByTestId('composer').press('Enter');
}

/** Wait until the page has sent `n` chat requests in all (as `shortReplies` records them). */
export async function sentCount(sent, n, timeout = 30_000) {
  const t0 = Date.now();
  while (sent.length < n) {
    if (Date.now() - t0 > timeout) throw new Error(`the page sent ${sent.length} chat requests, expected ${n}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Wait until no reply is streaming (the send button is back) and every reply is fully on the page. */
export async function idle(page, timeout = 120_000) {
  await page.getByTestId('send').waitFor({ timeout });
  await page.waitForFunction(() => !document.querySelector('.markdown[aria-busy=true]'), null, { timeout });
}

export async function lastAssistantText(page) {
  return (await page.getByTestId('message-assistant').last().locator('.markdown').textContent()).trim();
}

export async function stats(url) {
  const res = await fetch(`${url}/stats`);
  assert.equal(res.status, 200);
  return res.json();
}

export function noErrors(errors) {
  assert.deepEqual(errors, [], 'the page logged errors');
}
