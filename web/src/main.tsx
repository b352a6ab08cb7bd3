// The web chat's entry: theme first (no flash), then the app, then the data.

import './state/theme';
import './styles/index.css';
import { render } from 'preact';
import { App } from './components/App';
import { loadAll } from './state/conversations';
import { watchHealth } from './state/health';
import { loadModels } from './state/models';
import { warmHighlight } from './markdown/highlight';
import { warmMath } from './markdown/math';
import { installShortcuts } from './state/shortcuts';

const root = document.getElementById('app');
if (root) {
  root.textContent = '';
  render(<App />, root);
  // The app is on screen and usable: web/bench/first-paint.mjs reads this mark.
  performance.mark('hearth:ready');
}
installShortcuts();
void loadAll();
void loadModels();
watchHealth();

// The renderers a reply may need load once the page is idle, so the first code block or formula does not stall
// a stream while hundreds of kilobytes of script are compiled.
const idle = window.requestIdleCallback ?? ((f: () => void) => setTimeout(f, 1000));
idle(() => {
  warmHighlight();
  warmMath();
});

if ('serviceWorker' in navigator && location.protocol !== 'file:') {
  window.addEventListener('load', () => {
    navigator.serviceWorker.register('/sw.js').catch(() => undefined);
  });
}
