// Incremental block splitting for streamed Markdown. A reply only grows at its end, so every top-level block but
// the last one that is not blank space is final: it is lexed and rendered once ("frozen"), and each update lexes
// only the text after the frozen blocks. A reply that is not an extension of the previous text starts over.

import type { Token } from 'marked';
import { lex } from './render';

export interface Block {
  key: number;
  token: Token;
  /** The rendered HTML, once made (and the versions of the lazy renderers it was made with). */
  html?: string;
  version?: number;
}

export class IncrementalBlocks {
  private text = '';
  private offset = 0;
  private nextKey = 0;
  private frozen: Block[] = [];
  /** How many characters were lexed in all: a measure of the work done, for tests and the benchmark. */
  lexed = 0;

  update(text: string): { frozen: Block[]; live: Block[] } {
    if (!text.startsWith(this.text)) {
      this.offset = 0;
      this.frozen = [];
    }
    this.text = text;
    const tail = text.slice(this.offset);
    this.lexed += tail.length;
    const tokens = lex(tail);
    let last = tokens.length - 1;
    while (last > 0 && tokens[last].type === 'space') last--;
    let live = tokens;
    if (last > 0) {
      const done = tokens.slice(0, last);
      const raw = done.map((t) => t.raw).join('');
      if (tail.startsWith(raw)) {
        this.frozen = this.frozen.concat(done.map((token) => ({ key: this.nextKey++, token })));
        this.offset += raw.length;
        live = tokens.slice(last);
      }
    }
    return { frozen: this.frozen, live: live.map((token, i) => ({ key: this.nextKey + i, token })) };
  }
}

const cache = new Map<string, IncrementalBlocks>();
const CACHE_SIZE = 64;

/** The splitter of one message, kept across remounts (the streamed reply becomes a stored message). */
export function blocksFor(id: string): IncrementalBlocks {
  let b = cache.get(id);
  if (b) {
    cache.delete(id);
  } else {
    b = new IncrementalBlocks();
  }
  cache.set(id, b);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value as string);
  return b;
}
