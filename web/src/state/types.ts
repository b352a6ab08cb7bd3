// What the app keeps: conversations with their messages, prompt and sampling settings.

export interface Sampling {
  temperature: number | null;
  top_p: number | null;
  top_k: number | null;
  min_p: number | null;
  max_tokens: number | null;
  seed: number | null;
  /** Stop strings, one a line in the settings form. */
  stop: string[];
}

/** null: the server's default. */
export const DEFAULT_SAMPLING: Sampling = {
  temperature: null,
  top_p: null,
  top_k: null,
  min_p: null,
  max_tokens: null,
  seed: null,
  stop: [],
};

export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface MessageStats {
  /** Milliseconds from sending to the first token. */
  ttft_ms?: number;
  /** Completion tokens per second after the first token. */
  tokens_per_s?: number;
  prompt_tokens?: number;
  completion_tokens?: number;
  cached_tokens?: number;
  finish_reason?: string;
}

export interface Message {
  id: string;
  role: 'user' | 'assistant';
  content: string;
  reasoning?: string;
  tool_calls?: ToolCall[];
  /** Images of a user message, as data: URLs (sent before its text). */
  images?: string[];
  stats?: MessageStats;
  /** The model that wrote an assistant message. */
  model?: string;
  /** Why a reply ended early (an error or a stop by the user). */
  error?: string;
  stopped?: boolean;
  created: number;
}

export interface Conversation {
  id: string;
  title: string;
  created: number;
  updated: number;
  system: string;
  sampling: Sampling;
  model: string;
  messages: Message[];
}

export function newId(): string {
  return crypto.randomUUID();
}

export function emptyConversation(model = ''): Conversation {
  const now = Date.now();
  return {
    id: newId(),
    title: 'New chat',
    created: now,
    updated: now,
    system: '',
    sampling: { ...DEFAULT_SAMPLING, stop: [] },
    model,
    messages: [],
  };
}
