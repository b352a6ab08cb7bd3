// The screenshots in docs/ and the README: the web chat on a real `hearth serve` ($HEARTH_BIN, SmolLM2), on a
// desktop (light theme, the status panel open) and a phone (dark theme).
//   HEARTH_BIN=target/release/hearth node web/scripts/screenshots.mjs

import path from 'node:path';
import { launch } from '../tests/harness/browser.mjs';
import { startHearth } from '../tests/harness/hearth.mjs';

const docs = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../docs/images');

async function chat(page, prompts) {
  for (const p of prompts) {
    await page.getByTestId('composer').fill(p);
    await page.getByTestId('composer').press('Enter');
    await page.getByTestId('stop').waitFor();
    await page.getByTestId('send').waitFor({ timeout: 120_000 });
    await page.waitForFunction(() => !document.querySelector('.markdown[aria-busy=true]'));
  }
}

const hearth = await startHearth();
const browser = await launch();
const prompts = ['Write a Python function that checks whether a number is prime.', 'What is a prime number, in one sentence?'];

const desktop = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: 'light' });
let page = await desktop.newPage();
await page.goto(hearth.url);
await page.route('**/v1/chat/completions', (route) => {
  const body = { ...JSON.parse(route.request().postData() ?? '{}'), max_tokens: 200 };
  return route.continue({ postData: JSON.stringify(body) });
});
await chat(page, ['Give me three tips for a good night of sleep.']);
await page.getByTestId('new-chat').click();
await chat(page, prompts);
await page.getByTestId('open-status').click();
await page.getByTestId('status-panel').getByText('Tokens generated').waitFor();
await page.mouse.move(640, 790);
await page.screenshot({ path: path.join(docs, 'web-chat-desktop.png') });
await desktop.close();

const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true, colorScheme: 'dark' });
page = await phone.newPage();
await page.goto(hearth.url);
await page.route('**/v1/chat/completions', (route) => {
  const body = { ...JSON.parse(route.request().postData() ?? '{}'), max_tokens: 200 };
  return route.continue({ postData: JSON.stringify(body) });
});
await chat(page, prompts.slice(0, 1));
await page.screenshot({ path: path.join(docs, 'web-chat-phone.png') });
await phone.close();

await browser.close();
await hearth.stop();
console.log(`wrote ${docs}/web-chat-desktop.png and web-chat-phone.png`);
