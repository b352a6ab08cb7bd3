// The conversations: all of them in memory (sorted newest first), each saved to IndexedDB when it changes. A new
// chat is a draft until its first message is sent. The open conversation's id is in the URL (`#/c/<id>`).

import { computed, signal } from '@preact/signals';
import * as db from './db';
import { type Conversation, emptyConversation } from './types';
import { banner } from './ui';

export const conversations = signal<Conversation[]>([]);
export const currentId = signal<string | null>(null);
export const draft = signal<Conversation>(emptyConversation());
export const loaded = signal(false);

export const current = computed<Conversation>(
  () => conversations.value.find((c) => c.id === currentId.value) ?? draft.value,
);

function idFromHash(): string | null {
  const m = /^#\/c\/([\w-]+)$/.exec(location.hash);
  return m ? m[1] : null;
}

export async function loadAll(): Promise<void> {
  try {
    conversations.value = await db.all();
  } catch (e) {
    banner.value = { message: `This browser would not open its conversation store (IndexedDB): ${String(e)}` };
  }
  const id = idFromHash();
  currentId.value = id && conversations.value.some((c) => c.id === id) ? id : null;
  loaded.value = true;
  window.addEventListener('hashchange', () => {
    const h = idFromHash();
    if (h !== currentId.value && (h === null || conversations.value.some((c) => c.id === h))) currentId.value = h;
  });
}

function setHash(id: string | null): void {
  const hash = id ? `#/c/${id}` : '';
  if (location.hash !== hash) history.replaceState(null, '', hash || location.pathname);
}

export function select(id: string | null): void {
  currentId.value = id;
  setHash(id);
}

export function newChat(): void {
  const last = current.value;
  draft.value = { ...emptyConversation(last.model), sampling: { ...last.sampling }, system: last.system };
  select(null);
}

/** Store `c` (a new object for every change: components compare by identity). */
export async function save(c: Conversation): Promise<void> {
  const rest = conversations.value.filter((x) => x.id !== c.id);
  conversations.value = [c, ...rest].sort((a, b) => b.updated - a.updated);
  if (currentId.value === null && draft.value.id === c.id) select(c.id);
  try {
    await db.put(c);
  } catch (e) {
    banner.value = { message: `Could not save the conversation: ${String(e)}` };
  }
}

/** Change the open conversation (a draft stays a draft until it has messages). */
export async function update(fn: (c: Conversation) => Conversation): Promise<void> {
  const next = { ...fn(current.value), updated: Date.now() };
  if (next.messages.length === 0 && !conversations.value.some((c) => c.id === next.id)) {
    draft.value = next;
    return;
  }
  await save(next);
}

export async function rename(id: string, title: string): Promise<void> {
  const c = conversations.value.find((x) => x.id === id);
  const t = title.trim();
  if (c && t) await save({ ...c, title: t });
}

export async function remove(id: string): Promise<void> {
  conversations.value = conversations.value.filter((c) => c.id !== id);
  if (currentId.value === id) newChat();
  try {
    await db.remove(id);
  } catch (e) {
    banner.value = { message: `Could not delete the conversation: ${String(e)}` };
  }
}

/** A title from the first user message. */
export function titleFrom(text: string): string {
  const line = text.trim().split('\n')[0].trim();
  return line.length > 60 ? `${line.slice(0, 57)}...` : line || 'New chat';
}
