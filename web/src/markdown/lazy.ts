// A module loaded the first time it is needed (its own chunk of the bundle). `version` changes when it arrives, so
// what was rendered without it can render again.

import { signal, type Signal } from '@preact/signals';

export interface Lazy<T> {
  /** The module, or null while it loads (the first call starts loading it). */
  get(): T | null;
  version: Signal<number>;
}

/** `onStart` runs when loading starts; `warm` gets the module first (to compile what its first use would). */
export function lazy<T>(load: () => Promise<T>, onStart?: () => void, warm?: (m: T) => void): Lazy<T> {
  let value: T | null = null;
  let loading = false;
  const version = signal(0);
  return {
    version,
    get() {
      if (value === null && !loading) {
        loading = true;
        onStart?.();
        load()
          .then((v) => {
            warm?.(v);
            value = v;
            version.value++;
          })
          .catch(() => {
            loading = false;
          });
      }
      return value;
    },
  };
}
