// First paint of the web chat from a real `hearth serve` ($HEARTH_BIN) on loopback: first contentful paint and the
// moment the app is rendered and usable (the `hearth:ready` mark), cold (a fresh browser profile: nothing cached, no
// service worker) and warm (a reload with the service worker and HTTP cache in place). Medians of N loads. For
// reference, the first paint of a one-line page from a node server: what any page costs on this machine.
//   HEARTH_BIN=target/release/hearth node bench/first-paint.mjs [N]

import http from 'node:http';
import { launch } from '../tests/harness/browser.mjs';
import { startHearth } from '../tests/harness/hearth.mjs';

const N = Number(process.argv[2] ?? 15);
const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function timings(page) {
  await page.waitForFunction(() => performance.getEntriesByName('hearth:ready').length > 0);
  return page.evaluate(() => ({
    fcp: performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? NaN,
    ready: performance.getEntriesByName('hearth:ready')[0].startTime,
  }));
}

const hearth = await startHearth();
const browser = await launch();
const cold = [];
const warm = [];
for (let i = 0; i < N; i++) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(hearth.url);
  cold.push(await timings(page));
  await page.evaluate(() => navigator.serviceWorker.ready);
  await page.reload();
  warm.push(await timings(page));
  await context.close();
}
const row = (name, xs) => ({
  load: name,
  fcp_ms: Math.round(median(xs.map((x) => x.fcp))),
  ready_ms: Math.round(median(xs.map((x) => x.ready))),
  n: xs.length,
});
console.log(JSON.stringify(row('cold', cold)));
console.log(JSON.stringify(row('warm', warm)));
await hearth.stop();

const tiny = http.createServer((_, res) => {
  res.writeHead(200, { 'content-type': 'text/html' });
  res.end('<!doctype html><meta charset="utf-8"><title>t</title><h1>hello</h1>');
});
await new Promise((r) => tiny.listen(0, '127.0.0.1', r));
const ref = [];
for (let i = 0; i < N; i++) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`http://127.0.0.1:${tiny.address().port}/`);
  await page.waitForFunction(() => performance.getEntriesByName('first-contentful-paint').length > 0);
  ref.push(await page.evaluate(() => performance.getEntriesByName('first-contentful-paint')[0].startTime));
  await context.close();
}
console.log(JSON.stringify({ load: 'reference: a one-line page', fcp_ms: Math.round(median(ref)), n: N }));
tiny.close();
await browser.close();
