// A phone-sized screen, themes and keyboard shortcuts.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { openPage } from '../harness/browser.mjs';
import { getBrowser, idle, noErrors, send, server, shortReplies } from '../harness/fixture.mjs';

const overflow = () => document.documentElement.scrollWidth - document.documentElement.clientWidth;

describe('layout', () => {
  test('on a phone: no horizontal overflow, the list is a drawer', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    const { page, errors } = await openPage(context, url);
    await shortReplies(page, { max: 48, extra: { ignore_eos: true } });
    await send(page, `Explain this: ${'averyveryverylongwordwithoutanybreaks'.repeat(4)} and \`${'x'.repeat(120)}\``);
    await idle(page);
    assert.equal(await page.evaluate(overflow), 0);
    const list = page.getByTestId('conversation-list');
    assert.equal(await list.isVisible(), true, 'the list is in the DOM');
    const box = await page.locator('.sidebar').boundingBox();
    assert.ok(box.x + box.width <= 0, 'the drawer starts closed');
    await page.getByTestId('menu').click();
    await page.waitForFunction(() => document.querySelector('.sidebar').getBoundingClientRect().x >= 0);
    await list.getByTestId('conversation').first().locator('.conv-open').click();
    await page.waitForFunction(() => document.querySelector('.sidebar').getBoundingClientRect().right <= 0);
    await page.getByTestId('open-settings').click();
    assert.equal(await page.evaluate(overflow), 0);
    const composer = await page.getByTestId('composer').boundingBox();
    assert.ok(composer.x >= 0 && composer.x + composer.width <= 390);
    noErrors(errors);
    await context.close();
  });

  test('theme: auto follows the system, light and dark stick across reloads', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext({ colorScheme: 'dark' });
    const { page, errors } = await openPage(context, url);
    const bg = () => getComputedStyle(document.body).backgroundColor;
    await page.getByTestId('composer').waitFor();
    const autoDark = await page.evaluate(bg);
    await page.getByTestId('theme').click();
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'light');
    const light = await page.evaluate(bg);
    assert.notEqual(light, autoDark);
    await page.getByTestId('theme').click();
    await page.reload();
    await page.getByTestId('composer').waitFor();
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
    assert.equal(await page.evaluate(bg), autoDark);
    noErrors(errors);
    await context.close();
  });

  test('keyboard: Enter sends, Escape stops, Ctrl+Shift+O starts a new chat', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, url);
    await shortReplies(page, { extra: { max_tokens: 2000, ignore_eos: true } });
    await page.getByTestId('composer').fill('Count to a thousand.');
    await page.keyboard.press('Enter');
    await page.getByTestId('stop').waitFor();
    await page.waitForFunction(() => (document.querySelector('[data-testid=message-assistant] .markdown')?.textContent ?? '').length > 5);
    await page.keyboard.press('Escape');
    await idle(page, 5000);
    await page.getByText('Stopped.').waitFor();
    await page.keyboard.press('Control+Shift+O');
    assert.equal(await page.getByTestId('message-user').count(), 0);
    // the composer takes the focus in an effect, run after the next paint
    await page.waitForFunction(() => document.activeElement?.getAttribute('data-testid') === 'composer');
    noErrors(errors);
    await context.close();
  });
});
