import { memo } from 'preact/compat';
import type { Block } from '../markdown/blocks';
import { codeVersion, mayHaveCode } from '../markdown/highlight';
import { mathVersion, mayHaveMath } from '../markdown/math';
import { renderBlock } from '../markdown/render';

/** One top-level block, rendered once: frozen blocks keep their object (and its HTML), so `memo` skips them. */
export const MarkdownBlock = memo(function MarkdownBlock({ block }: { block: Block }) {
  // Blocks with math or code render again when KaTeX or highlight.js arrives.
  const raw = block.token.raw;
  const v = (mayHaveMath(raw) ? mathVersion.value : 0) * 1000 + (mayHaveCode(raw) ? codeVersion.value : 0);
  if (block.html === undefined || block.version !== v) {
    block.html = renderBlock(block.token);
    block.version = v;
  }
  return <div class="md-block" dangerouslySetInnerHTML={{ __html: block.html }} />;
});
