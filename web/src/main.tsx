// The web chat's entry: theme first (no flash), then the app, then the data.

import './state/theme';
import './styles/index.css';
import { render } from 'preact';
import { App } from './components/App';
import { loadAll } from './state/conversations';
import { watchHealth } from './state/health';
import { loadModels } from './state/models';
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

if ('serviceWorker' in navigator && location.protocol !== 'file:') {
  window.addEventListener('load', () => {
    navigator.serviceWorker.register('/sw.js').catch(() => undefined);
  });
}
