// Conversations kept in the browser: found again after a reload, listed, searched, renamed, exported, imported,
// deleted.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { openPage } from '../harness/browser.mjs';
import { getBrowser, idle, lastAssistantText, noErrors, send, server, shortReplies } from '../harness/fixture.mjs';

async function readDownload(page, click) {
  const [download] = await Promise.all([page.waitForEvent('download'), click()]);
  return fs.readFileSync(await download.path(), 'utf8');
}

describe('conversations', () => {
  test('reload, new chat, search, rename, export, import, delete', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext({ acceptDownloads: true });
    const { page, errors } = await openPage(context, url);
    await shortReplies(page, { max: 12 });
    page.on('dialog', (d) => d.accept());
    const list = page.getByTestId('conversation-list');

    await send(page, 'Tell me about zebras.');
    await idle(page);
    const reply = await lastAssistantText(page);

    // Reload: the conversation is still there, with its messages.
    await page.reload();
    await list.getByText('Tell me about zebras.').waitFor();
    await list.getByText('Tell me about zebras.').click();
    assert.equal((await page.getByTestId('message-user').innerText()).trim(), 'Tell me about zebras.');
    assert.equal(await lastAssistantText(page), reply);

    // New chat: an empty conversation; it joins the list once it has a message.
    await page.getByTestId('new-chat').click();
    assert.equal(await page.getByTestId('message-user').count(), 0);
    assert.equal(await list.getByTestId('conversation').count(), 1);
    await send(page, 'What do giraffes eat?');
    await idle(page);
    assert.equal(await list.getByTestId('conversation').count(), 2);

    // Search (Ctrl+K focuses it) looks through every message. The new conversation's id (given with its first
    // message) focuses the composer: let that happen before Ctrl+K, or it can take the focus back.
    await page.waitForFunction(() => document.activeElement?.getAttribute('data-testid') === 'composer');
    // (The search box takes the focus in an effect, which Preact runs after the next paint: wait for it.)
    await page.keyboard.press('Control+k');
    await page.waitForFunction(() => document.activeElement?.getAttribute('data-testid') === 'search');
    await page.keyboard.type('zebras');
    await page.waitForFunction(() => document.querySelectorAll('[data-testid=conversation]').length === 1);
    assert.match(await list.innerText(), /zebras/);
    await page.getByTestId('search').fill('giraffes');
    await page.waitForFunction(() => document.querySelectorAll('[data-testid=conversation]').length === 1);
    assert.match(await list.innerText(), /giraffes/);
    await page.getByTestId('search').fill('no-such-word-anywhere');
    await page.getByText('No chat matches.').waitFor();
    await page.getByTestId('search').fill('');

    // Rename.
    const zebra = list.getByTestId('conversation').filter({ hasText: 'zebras' });
    await zebra.hover();
    await zebra.getByTestId('rename').click();
    await page.getByTestId('rename-input').fill('Stripes');
    await page.getByTestId('rename-input').press('Enter');
    await list.getByText('Stripes').waitFor();

    // Export as Markdown and JSON.
    const stripes = list.getByTestId('conversation').filter({ hasText: 'Stripes' });
    await stripes.hover();
    const md = await readDownload(page, () => stripes.getByTestId('export-md').click());
    assert.match(md, /^# Stripes/);
    assert.match(md, /## User\n\nTell me about zebras\./);
    await stripes.hover();
    const json = JSON.parse(await readDownload(page, () => stripes.getByTestId('export-json').click()));
    assert.equal(json.format, 'hearth-chat');
    assert.equal(json.conversations[0].title, 'Stripes');
    assert.equal(json.conversations[0].messages.length, 2);
    assert.ok(md.includes(json.conversations[0].messages[1].content), 'the reply is in the Markdown export');

    // Delete, then import the export back.
    await stripes.hover();
    await stripes.getByTestId('delete').click();
    await page.waitForFunction(() => document.querySelectorAll('[data-testid=conversation]').length === 1);
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-ui-')), 'stripes.json');
    fs.writeFileSync(file, JSON.stringify(json));
    await page.getByTestId('import-file').setInputFiles(file);
    await list.getByText('Stripes').waitFor();
    await page.reload();
    await list.getByText('Stripes').waitFor();
    assert.equal(await list.getByTestId('conversation').count(), 2);
    noErrors(errors);
    await context.close();
  });
});
