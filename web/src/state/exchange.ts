// Export (Markdown, JSON) and import (JSON) of conversations.

import { type Conversation, DEFAULT_SAMPLING, type Message, newId } from './types';

export const FORMAT = 'hearth-chat';

export function toMarkdown(c: Conversation): string {
  const out = [`# ${c.title}`, ''];
  if (c.model) out.push(`Model: ${c.model}`, '');
  if (c.system) out.push('## System', '', c.system, '');
  for (const m of c.messages) {
    out.push(m.role === 'user' ? '## User' : '## Assistant', '');
    if (m.reasoning) out.push('<details><summary>Reasoning</summary>', '', m.reasoning, '', '</details>', '');
    if (m.content) out.push(m.content, '');
    for (const t of m.tool_calls ?? []) out.push(`Tool call \`${t.name}\`:`, '', '```json', t.arguments, '```', '');
  }
  return out.join('\n');
}

export function toJson(list: Conversation[]): string {
  return JSON.stringify({ format: FORMAT, version: 1, conversations: list }, null, 2);
}

function str(v: unknown, fallback = ''): string {
  return typeof v === 'string' ? v : fallback;
}

function num(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

function message(v: unknown): Message | null {
  if (!v || typeof v !== 'object') return null;
  const m = v as Record<string, unknown>;
  if (m.role !== 'user' && m.role !== 'assistant') return null;
  const out: Message = { id: str(m.id) || newId(), role: m.role, content: str(m.content), created: num(m.created) ?? 0 };
  if (typeof m.reasoning === 'string') out.reasoning = m.reasoning;
  if (typeof m.model === 'string') out.model = m.model;
  if (Array.isArray(m.tool_calls)) {
    out.tool_calls = m.tool_calls
      .filter((t) => t && typeof t === 'object')
      .map((t: Record<string, unknown>) => ({ id: str(t.id), name: str(t.name), arguments: str(t.arguments) }));
  }
  if (m.stats && typeof m.stats === 'object') out.stats = m.stats as Message['stats'];
  return out;
}

function conversation(v: unknown): Conversation | null {
  if (!v || typeof v !== 'object') return null;
  const c = v as Record<string, unknown>;
  if (!Array.isArray(c.messages)) return null;
  const s = (c.sampling && typeof c.sampling === 'object' ? c.sampling : {}) as Record<string, unknown>;
  const now = Date.now();
  return {
    id: str(c.id) || newId(),
    title: str(c.title, 'Imported chat') || 'Imported chat',
    created: num(c.created) ?? now,
    updated: num(c.updated) ?? now,
    system: str(c.system),
    model: str(c.model),
    sampling: {
      ...DEFAULT_SAMPLING,
      temperature: num(s.temperature),
      top_p: num(s.top_p),
      top_k: num(s.top_k),
      min_p: num(s.min_p),
      max_tokens: num(s.max_tokens),
      seed: num(s.seed),
      stop: Array.isArray(s.stop) ? s.stop.filter((x): x is string => typeof x === 'string') : [],
    },
    messages: c.messages.map(message).filter((m): m is Message => m !== null),
  };
}

/** The conversations in an exported file (this app's format, a list, or one conversation); throws on others. */
export function parseImport(text: string): Conversation[] {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error('the file is not JSON');
  }
  const list = Array.isArray(v) ? v : (v as { conversations?: unknown })?.conversations ?? [v];
  if (!Array.isArray(list)) throw new Error('no conversations in the file');
  const out = list.map(conversation).filter((c): c is Conversation => c !== null);
  if (!out.length) throw new Error('no conversations in the file');
  return out;
}

export function download(name: string, type: string, text: string): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export function fileName(title: string, ext: string): string {
  const base = title.replace(/[^\w\- ]+/g, '').trim().replace(/\s+/g, '-').slice(0, 60) || 'chat';
  return `${base}.${ext}`;
}
