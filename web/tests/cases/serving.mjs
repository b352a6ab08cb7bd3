// The app as hearth serves it: compressed, cached, installable, and working with the network unplugged.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { openPage } from '../harness/browser.mjs';
import { getBrowser, noErrors, server } from '../harness/fixture.mjs';

describe('serving', () => {
  test('GET / is the app: brotli or gzip by Accept-Encoding, revalidated; hashed assets immutable', async () => {
    const { url } = await server();
    const plain = await fetch(`${url}/`, { headers: { 'accept-encoding': 'identity' } });
    assert.equal(plain.status, 200);
    assert.match(plain.headers.get('content-type'), /^text\/html/);
    assert.equal(plain.headers.get('cache-control'), 'no-cache');
    const html = await plain.text();
    assert.match(html, /<div id="app">/);
    const js = /src="(\/assets\/main-[^"]+\.js)"/.exec(html)?.[1];
    assert.ok(js, html);
    // fetch decodes the body itself; the header says what was sent.
    const br = await fetch(`${url}${js}`, { headers: { 'accept-encoding': 'gzip, br' } });
    assert.equal(br.headers.get('content-encoding'), 'br');
    assert.equal(br.headers.get('cache-control'), 'public, max-age=31536000, immutable');
    const gz = await fetch(`${url}${js}`, { headers: { 'accept-encoding': 'gzip' } });
    assert.equal(gz.headers.get('content-encoding'), 'gzip');
    assert.equal(await gz.text(), await br.text());
    const etag = plain.headers.get('etag');
    const again = await fetch(`${url}/`, { headers: { 'if-none-match': etag, 'accept-encoding': 'identity' } });
    assert.equal(again.status, 304);
    // The API's 404s stay JSON.
    const missing = await fetch(`${url}/v1/nope`, { headers: { accept: 'text/html' } });
    assert.equal(missing.status, 404);
    assert.match(missing.headers.get('content-type'), /^application\/json/);
  });

  test('installs (manifest, service worker) and opens with the network unplugged', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, url);
    const manifest = await (await fetch(`${url}/manifest.webmanifest`)).json();
    assert.equal(manifest.display, 'standalone');
    assert.ok(manifest.icons.some((i) => i.sizes === '512x512'));
    const cacheName = await page.evaluate(async () => {
      await navigator.serviceWorker.ready;
      return (await caches.keys()).find((k) => k.startsWith('hearth-'));
    });
    assert.ok(cacheName, 'no service worker cache');
    // Every file the page needs is cached once the worker is installed; then the network goes away.
    await page.waitForFunction(async (name) => (await (await caches.open(name)).keys()).length > 5, cacheName);
    await context.setOffline(true);
    await page.reload();
    await page.getByTestId('composer').waitFor();
    await page.locator('[data-testid=health][data-state=down]').waitFor();
    await context.setOffline(false);
    // Offline, the page's own calls fail as they should: those errors are expected here.
    assert.ok(errors.every((e) => /Failed to load resource|ERR_INTERNET_DISCONNECTED|Failed to fetch/.test(e)), errors.join('\n'));
    await context.close();
  });

  test('first paint is quick on loopback', async () => {
    const { url } = await server();
    const context = await (await getBrowser()).newContext();
    const { page, errors } = await openPage(context, url);
    await page.getByTestId('composer').waitFor();
    const fcp = await page.evaluate(() => performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? -1);
    console.log(`# first contentful paint (cold, no service worker): ${fcp.toFixed(0)} ms`);
    assert.ok(fcp > 0, 'no first-contentful-paint entry');
    noErrors(errors);
    await context.close();
  });
});
