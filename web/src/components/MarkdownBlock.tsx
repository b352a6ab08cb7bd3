import { memo } from 'preact/compat';
import type { Block } from '../markdown/blocks';
import { blockHtml, versionOf } from '../markdown/html';

/** One top-level block, rendered once: frozen blocks keep their object (and its HTML), so `memo` skips them. */
export const MarkdownBlock = memo(function MarkdownBlock({ block }: { block: Block }) {
  return <div class="md-block" dangerouslySetInnerHTML={{ __html: blockHtml(block, versionOf(block)) }} />;
});
