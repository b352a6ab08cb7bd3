// Full-text search over every conversation's title, system prompt and messages: each word of the query must
// appear somewhere in the conversation (case-insensitive); the hit shows a snippet around the first word found.

import type { Conversation } from './types';

export interface Hit {
  conversation: Conversation;
  snippet: string;
}

const texts = new WeakMap<Conversation, string>();

function textOf(c: Conversation): string {
  let t = texts.get(c);
  if (t === undefined) {
    t = [c.title, c.system, ...c.messages.map((m) => m.content)].join('\n').toLowerCase();
    texts.set(c, t);
  }
  return t;
}

function snippet(c: Conversation, word: string): string {
  for (const m of c.messages) {
    const i = m.content.toLowerCase().indexOf(word);
    if (i >= 0) {
      const start = Math.max(0, i - 30);
      const s = m.content.slice(start, i + word.length + 50).replace(/\s+/g, ' ');
      return (start > 0 ? '...' : '') + s;
    }
  }
  return '';
}

export function search(list: Conversation[], query: string): Hit[] {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) return list.map((conversation) => ({ conversation, snippet: '' }));
  return list
    .filter((c) => {
      const t = textOf(c);
      return words.every((w) => t.includes(w));
    })
    .map((conversation) => ({ conversation, snippet: snippet(conversation, words[0]) }));
}
