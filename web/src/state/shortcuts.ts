// Keyboard shortcuts of the whole page.

import { newChat } from './conversations';
import { live, stop } from './generate';
import { focusComposer, focusSearch, panel, sidebarOpen, togglePanel } from './ui';

function typing(t: EventTarget | null): boolean {
  return t instanceof HTMLElement && (t.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(t.tagName));
}

export function installShortcuts(): void {
  window.addEventListener('keydown', (e) => {
    const mod = e.ctrlKey || e.metaKey;
    const key = e.key.toLowerCase();
    if (e.key === 'Escape') {
      if (live.value) stop();
      else if (panel.value !== 'none') panel.value = 'none';
      else if (sidebarOpen.value) sidebarOpen.value = false;
      else return;
    } else if (mod && e.shiftKey && key === 'o') {
      newChat();
      focusComposer.value++;
    } else if (mod && !e.shiftKey && key === 'k') {
      sidebarOpen.value = true;
      focusSearch.value++;
    } else if (mod && e.shiftKey && key === 's') {
      togglePanel('settings');
    } else if (mod && key === '/') {
      togglePanel('help');
    } else if (!mod && e.key === '/' && !typing(e.target)) {
      focusComposer.value++;
    } else {
      return;
    }
    e.preventDefault();
  });
}
