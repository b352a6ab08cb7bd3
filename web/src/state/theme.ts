// Light, dark, or the system's choice; kept in localStorage and applied as `data-theme` on <html>.

import { effect, signal } from '@preact/signals';

export type Theme = 'auto' | 'light' | 'dark';
const KEY = 'hearth.theme';

function read(): Theme {
  try {
    const t = localStorage.getItem(KEY);
    return t === 'light' || t === 'dark' ? t : 'auto';
  } catch {
    return 'auto';
  }
}

export const theme = signal<Theme>(read());

effect(() => {
  const t = theme.value;
  document.documentElement.dataset.theme = t;
  try {
    if (t === 'auto') localStorage.removeItem(KEY);
    else localStorage.setItem(KEY, t);
  } catch {
    // Not persisted.
  }
});

export function cycleTheme(): void {
  theme.value = theme.value === 'auto' ? 'light' : theme.value === 'light' ? 'dark' : 'auto';
}
