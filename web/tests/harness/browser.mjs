// Debian's Chromium driven by playwright-core (browsers are not downloaded: $CHROMIUM, default /usr/bin/chromium).

import fs from 'node:fs';
import { chromium } from 'playwright-core';

export function chromiumPath() {
  const p = process.env.CHROMIUM ?? '/usr/bin/chromium';
  if (!fs.existsSync(p)) throw new Error(`${p} is missing: run scripts/setup-ui-test (it installs Debian's chromium)`);
  return p;
}

export async function launch() {
  return chromium.launch({ executablePath: chromiumPath(), args: ['--disable-gpu', '--no-first-run'] });
}

/**
 * A page that records every console error and uncaught exception. `expectErrors(re)` lets through console errors
 * matching `re` (the browser's own report of a refused connection while the server is down).
 */
export async function openPage(context, url) {
  const page = await context.newPage();
  const errors = [];
  let allowed = null;
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const text = m.text();
    if (allowed && allowed.test(text)) return;
    errors.push(`console: ${text}`);
  });
  page.on('pageerror', (e) => errors.push(`exception: ${e.message}`));
  if (url) await page.goto(url);
  return {
    page,
    errors,
    expectErrors(re) {
      allowed = re;
    },
  };
}
