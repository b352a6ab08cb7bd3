// Rendering a 2,000-token reply: main-thread time per token (from a Chrome trace) and long frames (from a
// requestAnimationFrame loop in the page). Against the scripted stand-in server streaming as fast as the socket
// takes it or paced at a given rate, or against a real `hearth serve` ($HEARTH_BIN, SmolLM2, `max_tokens: 2000`
// with `ignore_eos`). Prints one JSON line per run.
//   node bench/stream.mjs [rate ...]      rates in tokens/s; 0 = as fast as possible (default: 0 1000)
//   HEARTH_BIN=target/release/hearth node bench/stream.mjs --hearth
//   node bench/stream.mjs --floor         the browser's own cost: the app's empty page changing one text node
//                                          every frame for 5 s (what any streaming page pays per frame here)

import path from 'node:path';
import { launch } from '../tests/harness/browser.mjs';
import { startHearth } from '../tests/harness/hearth.mjs';
import { longReply, startMock } from '../tests/harness/mock.mjs';
import { mainThreadBusy } from './trace.mjs';

const dist = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../dist');
const TOKENS = 2000;

export async function measureStream(browser, url, send) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  await page.goto(url);
  await page.getByTestId('composer').waitFor();
  await page.waitForTimeout(300);
  await page.evaluate(() => {
    window.__frames = [];
    const loop = (t) => {
      window.__frames.push(t);
      requestAnimationFrame(loop);
    };
    requestAnimationFrame(loop);
  });
  await browser.startTracing(page, { categories: ['devtools.timeline', 'disabled-by-default-devtools.timeline'] });
  const t0 = await page.evaluate(() => performance.now());
  await send(page);
  await page.getByTestId('stop').waitFor();
  await page.getByTestId('send').waitFor({ timeout: 300_000 });
  await page.waitForFunction(() => !document.querySelector('.markdown[aria-busy=true]'), null, { timeout: 60_000 });
  const t1 = await page.evaluate(() => performance.now());
  const trace = JSON.parse((await browser.stopTracing()).toString());
  const frames = await page.evaluate(([a, b]) => window.__frames.filter((t) => t >= a && t <= b), [t0, t1]);
  const gaps = frames.slice(1).map((t, i) => t - frames[i]);
  const tokens = Number(/(\d+) tokens/.exec(await page.getByTestId('message-stats').innerText())?.[1] ?? 0);
  const busy = mainThreadBusy(trace);
  await context.close();
  return {
    tokens,
    wall_ms: Math.round(t1 - t0),
    main_thread_cpu_ms: Math.round(busy.total),
    main_thread_cpu_us_per_token: Math.round((busy.total * 1000) / tokens),
    main_thread_wall_ms: Math.round(busy.wall),
    longest_task_ms: Math.round(busy.longest),
    tasks_over_50ms: busy.over50,
    longest_task_cpu_ms: Math.round(busy.longestCpu),
    tasks_over_50ms_cpu: busy.over50Cpu,
    frames: frames.length,
    frames_over_33ms: gaps.filter((g) => g > 33.4).length,
    frames_over_50ms: gaps.filter((g) => g > 50).length,
    longest_frame_ms: Math.round(Math.max(0, ...gaps)),
  };
}

async function sendPrompt(page) {
  await page.getByTestId('composer').fill('Write a lot.');
  await page.getByTestId('composer').press('Enter');
}

async function againstHearth() {
  const hearth = await startHearth();
  const browser = await launch();
  const r = await measureStream(browser, hearth.url, async (page) => {
    await page.route('**/v1/chat/completions', (route) => {
      const body = { ...JSON.parse(route.request().postData() ?? '{}'), max_tokens: TOKENS, ignore_eos: true };
      return route.continue({ postData: JSON.stringify(body) });
    });
    await sendPrompt(page);
  });
  console.log(JSON.stringify({ source: 'hearth smollm2-135m', rate: Math.round((r.tokens * 1000) / r.wall_ms), ...r }));
  await browser.close();
  await hearth.stop();
}

async function floor() {
  const mock = await startMock(dist);
  const browser = await launch();
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  await page.goto(mock.url);
  await page.getByTestId('composer').waitFor();
  await browser.startTracing(page, { categories: ['devtools.timeline', 'disabled-by-default-devtools.timeline'] });
  const frames = await page.evaluate(
    () =>
      new Promise((done) => {
        const el = document.querySelector('.empty p');
        const t0 = performance.now();
        let n = 0;
        const loop = () => {
          el.textContent = `frame ${n++}`;
          if (performance.now() - t0 < 5000) requestAnimationFrame(loop);
          else done(n);
        };
        requestAnimationFrame(loop);
      }),
  );
  const busy = mainThreadBusy(JSON.parse((await browser.stopTracing()).toString()));
  console.log(JSON.stringify({ source: 'floor: one text node per frame', frames, main_thread_cpu_ms: Math.round(busy.total),
    main_thread_cpu_us_per_frame: Math.round((busy.total * 1000) / frames) }));
  await browser.close();
  await mock.close();
}

if (import.meta.url === `file://${process.argv[1]}` && process.argv.includes('--hearth')) {
  await againstHearth();
} else if (import.meta.url === `file://${process.argv[1]}` && process.argv.includes('--floor')) {
  await floor();
} else if (import.meta.url === `file://${process.argv[1]}`) {
  const rates = process.argv.slice(2).map(Number);
  const mock = await startMock(dist);
  const browser = await launch();
  for (const rate of rates.length ? rates : [0, 1000]) {
    mock.state.reply = { content: longReply(TOKENS), ratePerSecond: rate };
    const r = await measureStream(browser, mock.url, sendPrompt);
    console.log(JSON.stringify({ source: 'mock', rate: rate || 'max', ...r }));
  }
  await browser.close();
  await mock.close();
}
