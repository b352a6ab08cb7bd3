// Sending, stopping, regenerating and editing: one reply streams at a time. Stop aborts the fetch; the server sees
// the connection close and cancels the request.

import { batch as together, signal } from '@preact/signals';
import { call } from '../api/client';
import { ApiError } from '../api/errors';
import { sseData } from '../api/sse';
import type { ChatChunk, ToolCallDelta } from '../api/types';
import { needKey } from './auth';
import { conversations, current, save, titleFrom } from './conversations';
import { frameBatcher, live, type LiveReply, starting, working } from './live';
import { modelFor } from './models';
import { chatRequest } from './request';
import { type Conversation, type Message, type MessageStats, newId, type ToolCall } from './types';
import { banner } from './ui';

export { live, working };

/** Most milliseconds of stream events handled in one go before the page may render. */
const SLICE_MS = 8;

function yieldToPage(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** The last reply that failed, for the banner's retry. */
export const lastFailure = signal<string | null>(null);

function mergeToolCalls(calls: ToolCall[], deltas: ToolCallDelta[]): ToolCall[] {
  const next = calls.slice();
  for (const d of deltas) {
    const prev = next[d.index] ?? { id: '', name: '', arguments: '' };
    next[d.index] = {
      id: d.id ?? prev.id,
      name: prev.name + (d.function?.name ?? ''),
      arguments: prev.arguments + (d.function?.arguments ?? ''),
    };
  }
  return next;
}

/** Stream a reply to the conversation's messages (the last one is the user's). */
async function reply(conv: Conversation): Promise<void> {
  const model = modelFor(conv.model);
  const request = chatRequest(conv, conv.messages, model);
  const msg: Message = { id: newId(), role: 'assistant', content: '', created: Date.now(), model };
  const reply: LiveReply = {
    conversationId: conv.id,
    messageId: msg.id,
    message: msg,
    content: signal(''),
    reasoning: signal(''),
    toolCalls: signal([]),
    controller: new AbortController(),
  };
  let content = '';
  let reasoning = '';
  let toolCalls: ToolCall[] = [];
  const stats: MessageStats = {};
  const batch = frameBatcher(() => {
    reply.content.value = content;
    reply.reasoning.value = reasoning;
    reply.toolCalls.value = toolCalls;
  });
  together(() => {
    live.value = reply;
    starting.value = false;
    banner.value = null;
  });
  const t0 = performance.now();
  let tFirst = 0;
  try {
    const res = await call('/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify(request),
      signal: reply.controller.signal,
    });
    if (!res.body) throw new ApiError('stream', 'The server sent no body.');
    let slice = performance.now();
    for await (const data of sseData(res.body)) {
      if (data === '[DONE]') break;
      // Events that were already buffered arrive back to back without a task boundary: give the page a chance
      // to render every few milliseconds, however fast the stream.
      if (performance.now() - slice > SLICE_MS) {
        await yieldToPage();
        slice = performance.now();
      }
      let chunk: ChatChunk;
      try {
        chunk = JSON.parse(data);
      } catch {
        continue;
      }
      if (chunk.error) throw new ApiError('stream', chunk.error.message ?? 'The server ended the reply with an error.');
      if (chunk.model) msg.model = chunk.model;
      const choice = chunk.choices?.[0];
      const d = choice?.delta;
      if (d && (d.content || d.reasoning_content || d.tool_calls)) {
        if (!tFirst) tFirst = performance.now();
        if (d.content) content += d.content;
        if (d.reasoning_content) reasoning += d.reasoning_content;
        if (d.tool_calls) toolCalls = mergeToolCalls(toolCalls, d.tool_calls);
        batch.schedule();
      }
      if (choice?.finish_reason) stats.finish_reason = choice.finish_reason;
      if (chunk.usage) {
        stats.prompt_tokens = chunk.usage.prompt_tokens;
        stats.completion_tokens = chunk.usage.completion_tokens;
        stats.cached_tokens = chunk.usage.prompt_tokens_details?.cached_tokens;
      }
    }
    lastFailure.value = null;
  } catch (e) {
    if (e instanceof DOMException && e.name === 'AbortError') {
      msg.stopped = true;
    } else {
      const message = e instanceof Error ? e.message : String(e);
      msg.error = message;
      lastFailure.value = msg.id;
      if (e instanceof ApiError && e.kind === 'auth') needKey.value = true;
      banner.value = { message, retry: () => void regenerate() };
    }
  } finally {
    batch.now();
    const tEnd = performance.now();
    if (tFirst) {
      stats.ttft_ms = Math.round(tFirst - t0);
      const n = stats.completion_tokens;
      if (n && n > 1 && tEnd > tFirst) stats.tokens_per_s = ((n - 1) * 1000) / (tEnd - tFirst);
    }
    Object.assign(msg, { content, stats });
    if (reasoning) msg.reasoning = reasoning;
    if (toolCalls.length) msg.tool_calls = toolCalls;
    // The conversation may have been renamed or re-configured meanwhile (or deleted: then the reply goes too).
    // The stored reply replaces the streamed one in the same render, so its component (and DOM) stays.
    const latest = conversations.value.find((x) => x.id === conv.id);
    let saved: Promise<void> | undefined;
    together(() => {
      if (latest) saved = save({ ...latest, messages: [...latest.messages, msg], updated: Date.now() });
      live.value = null;
    });
    await saved;
  }
}

export function busy(): boolean {
  return working.value;
}

/** Save the conversation as it will be asked, then stream its reply; busy from the first moment. */
async function start(next: Conversation): Promise<void> {
  starting.value = true;
  try {
    await save(next);
    await reply(next);
  } finally {
    starting.value = false;
  }
}

export async function send(text: string, images: string[] = []): Promise<void> {
  const t = text.trim();
  if ((!t && !images.length) || busy()) return;
  const c = current.value;
  const user: Message = { id: newId(), role: 'user', content: t, created: Date.now() };
  if (images.length) user.images = images;
  const title = c.messages.length === 0 ? titleFrom(t) : c.title;
  await start({ ...c, title, messages: [...c.messages, user], updated: Date.now() });
}

/** Replace the last reply (or answer a trailing user message that has none). */
export async function regenerate(): Promise<void> {
  if (busy()) return;
  const c = current.value;
  const msgs = c.messages.slice();
  while (msgs.length && msgs[msgs.length - 1].role === 'assistant') msgs.pop();
  if (!msgs.length) return;
  await start({ ...c, messages: msgs, updated: Date.now() });
}

/** Change a user message, drop everything after it, and ask again. */
export async function editAndResend(messageId: string, text: string): Promise<void> {
  const t = text.trim();
  if (!t || busy()) return;
  const c = current.value;
  const i = c.messages.findIndex((m) => m.id === messageId);
  if (i < 0 || c.messages[i].role !== 'user') return;
  const msgs = [...c.messages.slice(0, i), { ...c.messages[i], content: t }];
  await start({ ...c, messages: msgs, updated: Date.now() });
}

export function stop(): void {
  live.value?.controller.abort();
}
