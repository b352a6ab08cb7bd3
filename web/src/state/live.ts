// The reply being streamed: its text lives in signals of its own, so a token re-renders only that message.

import { computed, signal, type Signal } from '@preact/signals';
import type { Message, ToolCall } from './types';

export interface LiveReply {
  conversationId: string;
  messageId: string;
  /** The reply's stored form, filled in when the stream ends. */
  message: Message;
  content: Signal<string>;
  reasoning: Signal<string>;
  toolCalls: Signal<ToolCall[]>;
  controller: AbortController;
}

export const live = signal<LiveReply | null>(null);

/** Set from the moment a send, regenerate or edit is accepted until its reply is live (the conversation is being
 * saved meanwhile): the page is busy from the first keypress, so a second one cannot start another reply. */
export const starting = signal(false);

/** A reply is on its way: starting or streaming. */
export const working = computed(() => live.value !== null || starting.value);

/** Runs `flush` at most once per animation frame however many tokens arrive (and at once on `now`). */
export function frameBatcher(flush: () => void): { schedule(): void; now(): void } {
  let pending = 0;
  return {
    schedule() {
      if (!pending) pending = requestAnimationFrame(() => ((pending = 0), flush()));
    },
    now() {
      if (pending) cancelAnimationFrame(pending);
      pending = 0;
      flush();
    },
  };
}
