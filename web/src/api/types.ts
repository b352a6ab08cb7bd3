// The parts of hearth's OpenAI-compatible wire format the app reads and writes (docs/server-api.md).

/** A part of a user message that holds images. */
export type WirePart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

export interface WireMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | WirePart[] | null;
}

export interface ChatRequest {
  model?: string;
  messages: WireMessage[];
  stream: true;
  stream_options: { include_usage: true };
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  max_tokens?: number;
  seed?: number;
  stop?: string[];
}

export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: string;
  function?: { name?: string; arguments?: string };
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number };
}

export interface ChatChunk {
  id?: string;
  model?: string;
  choices?: {
    index: number;
    delta?: { role?: string; content?: string | null; reasoning_content?: string | null; tool_calls?: ToolCallDelta[] };
    finish_reason?: string | null;
  }[];
  usage?: Usage | null;
  error?: { message?: string; type?: string; code?: string | null };
}

export interface ModelInfo {
  id: string;
  max_model_len?: number;
  /** `["text"]`, or `["text", "image"]` for a model that takes images. */
  input_modalities?: string[];
}

export interface EngineStats {
  model: string;
  device: string;
  max_batch: number;
  kv_capacity_tokens: number;
  rows_running: number;
  rows_waiting: number;
  kv_blocks_used: number;
  kv_blocks_total: number;
  kv_block_size: number;
  tokens_generated_total: number;
  prompt_tokens_processed_total: number;
  preemptions_total: number;
  prompt_cache: { enabled: boolean; hits: number; misses: number; hit_tokens: number; blocks: number };
}
