// Conversations in IndexedDB (one record each, keyed by id): the browser keeps them across reloads and offline.

import type { Conversation } from './types';

const DB_NAME = 'hearth-chat';
const STORE = 'conversations';

let opening: Promise<IDBDatabase> | null = null;

function open(): Promise<IDBDatabase> {
  opening ??= new Promise((resolve, reject) => {
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => {
      const store = req.result.createObjectStore(STORE, { keyPath: 'id' });
      store.createIndex('updated', 'updated');
    };
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  return opening;
}

function done<T>(req: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function store(mode: IDBTransactionMode): Promise<IDBObjectStore> {
  return (await open()).transaction(STORE, mode).objectStore(STORE);
}

export async function all(): Promise<Conversation[]> {
  const list = await done((await store('readonly')).getAll());
  return (list as Conversation[]).sort((a, b) => b.updated - a.updated);
}

export async function put(c: Conversation): Promise<void> {
  // Signals may hold proxies or shared arrays: store a plain copy.
  await done((await store('readwrite')).put(JSON.parse(JSON.stringify(c))));
}

export async function remove(id: string): Promise<void> {
  await done((await store('readwrite')).delete(id));
}
