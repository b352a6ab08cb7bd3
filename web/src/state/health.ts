// Whether the server is up, loading its model, or unreachable (`GET /health`, every few seconds while the page is
// visible), for the dot in the header.

import { signal } from '@preact/signals';

export type Health = 'unknown' | 'ok' | 'loading' | 'down';
export const health = signal<Health>('unknown');

const EVERY_MS = 5000;

async function check(): Promise<void> {
  try {
    const res = await fetch('/health', { cache: 'no-store' });
    const body = await res.json().catch(() => ({}));
    health.value = res.ok ? 'ok' : body?.status === 'loading' ? 'loading' : 'down';
  } catch {
    health.value = 'down';
  }
}

export function watchHealth(): void {
  void check();
  setInterval(() => {
    if (document.visibilityState === 'visible') void check();
  }, EVERY_MS);
}
