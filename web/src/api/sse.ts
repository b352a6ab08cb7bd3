// Server-sent events over a fetch body: yields each `data:` payload (hearth sends one JSON object per event and
// `[DONE]` at the end; comments such as `: keep-alive` are skipped).

export async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = frameEnd(buf)) >= 0) {
        const frame = buf.slice(0, end);
        buf = buf.slice(end).replace(/^(\r?\n){2}/, '');
        const data = dataOf(frame);
        if (data !== null) yield data;
      }
    }
    const data = dataOf(buf);
    if (data !== null) yield data;
  } finally {
    reader.releaseLock();
  }
}

function frameEnd(buf: string): number {
  const a = buf.indexOf('\n\n');
  const b = buf.indexOf('\r\n\r\n');
  if (a < 0) return b;
  if (b < 0) return a;
  return Math.min(a, b);
}

function dataOf(frame: string): string | null {
  const lines = frame.split(/\r?\n/).filter((l) => l.startsWith('data:'));
  if (!lines.length) return null;
  return lines.map((l) => l.slice(5).replace(/^ /, '')).join('\n');
}
