// The web chat's end-to-end tests: Debian's Chromium (playwright-core) against a real `hearth serve` on SmolLM2
// ($HEARTH_BIN), plus rendering checks against a scripted stand-in server. scripts/test runs them through
// crates/hearth-cli/tests/web_ui.rs; by hand: HEARTH_BIN=target/release/hearth node web/tests/e2e.mjs

import './cases/serving.mjs';
import './cases/chat.mjs';
import './cases/conversations.mjs';
import './cases/errors.mjs';
import './cases/layout.mjs';
import './cases/rendering.mjs';
import './cases/images.mjs';

// Nothing here may hang a test run.
setTimeout(() => {
  console.error('web/tests/e2e.mjs: gave up after 10 minutes');
  process.exit(1);
}, 600_000).unref();
