// The API key, when the server wants one (`hearth serve --api-key`): kept in this browser's localStorage.

import { signal } from '@preact/signals';

const KEY = 'hearth.apiKey';

function read(): string {
  try {
    return localStorage.getItem(KEY) ?? '';
  } catch {
    return '';
  }
}

export const apiKey = signal(read());

/** The server answered 401: the app asks for the key. */
export const needKey = signal(false);

export function setApiKey(key: string): void {
  apiKey.value = key.trim();
  try {
    if (apiKey.value) localStorage.setItem(KEY, apiKey.value);
    else localStorage.removeItem(KEY);
  } catch {
    // Private mode: the key lasts for this page only.
  }
  needKey.value = false;
}
