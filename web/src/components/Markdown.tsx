import { memo } from 'preact/compat';
import { useMemo, useRef } from 'preact/hooks';
import { type Block, blocksFor, IncrementalBlocks } from '../markdown/blocks';
import { MarkdownBlock } from './MarkdownBlock';

/** The finished blocks: the same array until a block freezes, so a token that only grows the tail skips them all. */
const FrozenBlocks = memo(function FrozenBlocks({ blocks }: { blocks: Block[] }) {
  return (
    <>
      {blocks.map((b) => (
        <MarkdownBlock key={b.key} block={b} />
      ))}
    </>
  );
});

/**
 * A reply as Markdown. While it streams, only the blocks after the last finished one are lexed and rendered.
 * `id` (a message id) keeps the finished blocks when the streamed reply turns into a stored message.
 */
export function Markdown({ text, id }: { text: string; id?: string }) {
  const own = useRef<IncrementalBlocks | null>(null);
  const blocks = id ? blocksFor(id) : (own.current ??= new IncrementalBlocks());
  const { frozen, live } = useMemo(() => blocks.update(text), [text, blocks]);
  return (
    <div class="markdown">
      <FrozenBlocks blocks={frozen} />
      {live.map((b) => (
        <MarkdownBlock key={b.key} block={b} />
      ))}
    </div>
  );
}
