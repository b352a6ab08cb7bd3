// View state: which panels are open, the search query, the error banner.

import { signal } from '@preact/signals';

export type Panel = 'none' | 'settings' | 'status' | 'help';

export const panel = signal<Panel>('none');
/** The conversation list on a narrow screen (always shown on a wide one). */
export const sidebarOpen = signal(false);
export const searchQuery = signal('');

export interface Banner {
  message: string;
  retry?: () => void;
}
export const banner = signal<Banner | null>(null);

/** Bumped to ask the composer, or the search box, to take the focus. */
export const focusComposer = signal(0);
export const focusSearch = signal(0);

export function togglePanel(p: Panel): void {
  panel.value = panel.value === p ? 'none' : p;
}
