// The chat request for a conversation: its system prompt, messages and sampling settings.

import type { ChatRequest, WireMessage } from '../api/types';
import type { Conversation, Message, Sampling } from './types';

function samplingFields(s: Sampling): Partial<ChatRequest> {
  const out: Partial<ChatRequest> = {};
  if (s.temperature !== null) out.temperature = s.temperature;
  if (s.top_p !== null) out.top_p = s.top_p;
  if (s.top_k !== null) out.top_k = s.top_k;
  if (s.min_p !== null) out.min_p = s.min_p;
  if (s.max_tokens !== null) out.max_tokens = s.max_tokens;
  if (s.seed !== null) out.seed = s.seed;
  const stop = s.stop.filter((x) => x.length > 0);
  if (stop.length) out.stop = stop;
  return out;
}

export function chatRequest(c: Conversation, history: Message[], model: string): ChatRequest {
  const messages: WireMessage[] = [];
  if (c.system.trim()) messages.push({ role: 'system', content: c.system });
  for (const m of history) {
    const images = m.role === 'user' ? (m.images ?? []) : [];
    const content: WireMessage['content'] = images.length
      ? [...images.map((url) => ({ type: 'image_url' as const, image_url: { url } })), { type: 'text' as const, text: m.content }]
      : m.content;
    messages.push({ role: m.role, content });
  }
  return {
    ...(model ? { model } : {}),
    messages,
    stream: true,
    stream_options: { include_usage: true },
    ...samplingFields(c.sampling),
  };
}
