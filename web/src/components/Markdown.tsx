import { memo } from 'preact/compat';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { type Block, blocksFor, IncrementalBlocks } from '../markdown/blocks';
import { blockHtml, hasHtml, versionOf } from '../markdown/html';
import { MarkdownBlock } from './MarkdownBlock';

/** Most milliseconds a streaming reply spends making new blocks' HTML in one frame; the rest waits a frame. */
const FRAME_BUDGET_MS = 6;

/** The finished blocks: the same array until one more is shown, so a token that only grows the tail skips them. */
const FrozenBlocks = memo(function FrozenBlocks({ blocks }: { blocks: Block[] }) {
  return (
    <>
      {blocks.map((b) => (
        <MarkdownBlock key={b.key} block={b} />
      ))}
    </>
  );
});

/** How many of `frozen` have their HTML made, making more until the frame's budget is spent. */
function readyCount(frozen: Block[], from: number): number {
  const t0 = performance.now();
  let n = from;
  while (n < frozen.length && (hasHtml(frozen[n]) || performance.now() - t0 < FRAME_BUDGET_MS)) {
    blockHtml(frozen[n], versionOf(frozen[n]));
    n++;
  }
  return n;
}

/**
 * A reply as Markdown. While it streams, only the blocks after the last finished one are lexed and rendered, and a
 * burst of text is shown over as many frames as its rendering needs (the page never stalls on it).
 * `id` (a message id) keeps the finished blocks when the streamed reply turns into a stored message.
 */
export function Markdown({ text, id, streaming = false }: { text: string; id?: string; streaming?: boolean }) {
  const own = useRef<IncrementalBlocks | null>(null);
  const blocks = id ? blocksFor(id) : (own.current ??= new IncrementalBlocks());
  const { frozen, live } = useMemo(() => blocks.update(text), [text, blocks]);
  const shown = useRef<{ from: Block[]; list: Block[] }>({ from: [], list: [] });
  const [, nextFrame] = useState(0);

  let visible = frozen;
  // A reply that was streamed keeps catching up frame by frame after its stream ended; a stored reply opened later
  // shows at once.
  if (streaming || shown.current.list.length > 0) {
    const n = readyCount(frozen, Math.min(shown.current.list.length, frozen.length));
    if (shown.current.from !== frozen || shown.current.list.length !== n) {
      shown.current = { from: frozen, list: n === frozen.length ? frozen : frozen.slice(0, n) };
    }
    visible = shown.current.list;
  }
  const behind = visible.length < frozen.length;
  useEffect(() => {
    if (!behind) return;
    const f = requestAnimationFrame(() => nextFrame((x) => x + 1));
    return () => cancelAnimationFrame(f);
  });

  return (
    <div class="markdown" aria-busy={behind ? 'true' : undefined}>
      <FrozenBlocks blocks={visible} />
      {!behind &&
        live.map((b) => (
          <MarkdownBlock key={b.key} block={b} />
        ))}
    </div>
  );
}
