// Honest errors: the server going away mid-session, and a server that wants an API key.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { openPage } from '../harness/browser.mjs';
import { startHearth } from '../harness/hearth.mjs';
import { getBrowser, idle, lastAssistantText, noErrors, send, server, shortReplies, stopServer } from '../harness/fixture.mjs';

describe('errors', () => {
  test('the server stops: the error shows, and Retry works once it is back', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext();
    const { page, errors, expectErrors } = await openPage(context, url);
    await shortReplies(page, { max: 12 });
    await page.getByTestId('composer').waitFor();
    await page.evaluate(() => navigator.serviceWorker.ready);
    const down = await stopServer();
    // The browser reports the refused connections itself; nothing else may be logged.
    expectErrors(/Failed to load resource|ERR_CONNECTION_REFUSED/);
    await send(page, 'Are you there?');
    await page.getByTestId('error-banner').waitFor();
    assert.match(await page.getByTestId('error-banner').innerText(), /Cannot reach the hearth server/);
    assert.match(await page.getByTestId('message-error').innerText(), /Cannot reach/);
    await page.locator('[data-testid=health][data-state=down]').waitFor({ timeout: 15_000 });
    await down.restart();
    await page.getByTestId('retry').click();
    await idle(page);
    await page.getByTestId('error-banner').waitFor({ state: 'detached' });
    assert.ok((await lastAssistantText(page)).length > 0);
    assert.equal(await page.getByTestId('message-error').count(), 0);
    noErrors(errors);
    await context.close();
  });

  test('an error status shows the server\'s own message', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext();
    const { page, errors, expectErrors } = await openPage(context, url);
    expectErrors(/status of 400/);
    await page.getByTestId('open-settings').click();
    await page.getByTestId('setting-max_tokens').fill('1000000');
    await page.getByTestId('setting-max_tokens').press('Tab');
    await send(page, 'Hi');
    await page.getByTestId('error-banner').waitFor();
    assert.match(await page.getByTestId('error-banner').innerText(), /^400: .*max_tokens/s);
    assert.match(await page.getByTestId('message-error').innerText(), /400/);
    assert.equal(await page.getByTestId('retry').count(), 1);
    await idle(page);
    noErrors(errors);
    await context.close();
  });

  test('a server with --api-key: the app asks for the key, then works', async () => {
    const keyed = await startHearth({ args: ['--api-key', 'sesame'] });
    try {
      // The app's files need no key.
      assert.equal((await fetch(`${keyed.url}/`)).status, 200);
      assert.equal((await fetch(`${keyed.url}/v1/models`)).status, 401);
      const context = await (await getBrowser()).newContext();
      const { page, errors, expectErrors } = await openPage(context, null);
      expectErrors(/status of 401/);
      await page.goto(keyed.url);
      await shortReplies(page, { max: 8 });
      await page.getByTestId('api-key-dialog').waitFor();
      await page.getByTestId('api-key').fill('sesame');
      await page.getByTestId('api-key-save').click();
      await page.getByTestId('api-key-dialog').waitFor({ state: 'detached' });
      await page.waitForFunction(() => document.querySelector('[data-testid=model-picker]')?.value === 'smollm2-135m');
      await send(page, 'Hi');
      await idle(page);
      assert.ok((await lastAssistantText(page)).length > 0);
      noErrors(errors);
      await context.close();
    } finally {
      await keyed.stop();
    }
  });
});
