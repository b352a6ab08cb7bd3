// Images in the web chat, against the scripted stand-in server (harness/mock.mjs): with a model that takes images
// (`input_modalities` in /v1/models) images come in by the picker and by a drop, show above the text, can be
// removed, are sent as `image_url` parts before the text and stay in the conversation; a text model offers no
// attach button.

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { openPage } from '../harness/browser.mjs';
import { getBrowser, idle, noErrors } from '../harness/fixture.mjs';
import { startMock } from '../harness/mock.mjs';

const dist = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../dist');
// A 1x1 PNG.
const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
  'base64',
);

describe('images', () => {
  let mock;
  before(async () => {
    mock = await startMock(dist);
  });
  after(() => mock.close());

  test('a vision model: picked and dropped images are sent as image_url parts and stay in the conversation', async () => {
    mock.state.models = [{ id: 'mock-vl', object: 'model', input_modalities: ['text', 'image'] }];
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, mock.url);
    await page.getByTestId('attach').waitFor();
    await page.getByTestId('image-input').setInputFiles([
      { name: 'a.png', mimeType: 'image/png', buffer: PNG },
      { name: 'b.png', mimeType: 'image/png', buffer: PNG },
    ]);
    const thumbs = page.getByTestId('attachments').locator('img');
    await thumbs.nth(1).waitFor();
    await page.getByRole('button', { name: 'Remove image 2' }).click();
    assert.equal(await thumbs.count(), 1, 'a removed image is gone');
    // A drop adds one more.
    await page.evaluate((b64) => {
      const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      const dt = new DataTransfer();
      dt.items.add(new File([bytes], 'c.png', { type: 'image/png' }));
      const form = document.querySelector('form.composer');
      form.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
      form.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    }, PNG.toString('base64'));
    await thumbs.nth(1).waitFor();
    mock.state.reply = { content: ['A ', 'dot.'] };
    await page.getByTestId('composer').fill('What is this?');
    await page.getByTestId('composer').press('Enter');
    await idle(page);
    const body = mock.state.requests.at(-1);
    const content = body.messages.at(-1).content;
    assert.equal(body.model, 'mock-vl');
    assert.deepEqual(
      content.map((p) => p.type),
      ['image_url', 'image_url', 'text'],
    );
    assert.ok(content[0].image_url.url.startsWith('data:image/png;base64,'), content[0].image_url.url.slice(0, 40));
    assert.equal(content[2].text, 'What is this?');
    assert.equal(await page.getByTestId('message-user').last().locator('img').count(), 2, 'the message shows its images');
    assert.equal(await page.getByTestId('attachments').count(), 0, 'the composer is clear after sending');
    noErrors(errors);
    await context.close();
  });

  test('a text model offers no attach button', async () => {
    mock.state.models = [{ id: 'mock-model', object: 'model', input_modalities: ['text'] }];
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, mock.url);
    await page.getByTestId('composer').waitFor();
    await page.waitForTimeout(200);
    assert.equal(await page.getByTestId('attach').count(), 0);
    noErrors(errors);
    await context.close();
  });
});
