// A block's HTML, made once and kept on the block; made again when a renderer it needs (highlight.js, KaTeX) has
// arrived since.

import type { Block } from './blocks';
import { codeVersion, mayHaveCode } from './highlight';
import { mathVersion, mayHaveMath } from './math';
import { renderBlock } from './render';

/** The renderers' version that this block's HTML depends on (reading it subscribes the caller). */
export function versionOf(block: Block): number {
  const raw = block.token.raw;
  return (mayHaveMath(raw) ? mathVersion.value : 0) * 1000 + (mayHaveCode(raw) ? codeVersion.value : 0);
}

export function blockHtml(block: Block, version: number): string {
  if (block.html === undefined || block.version !== version) {
    block.html = renderBlock(block.token);
    block.version = version;
  }
  return block.html;
}

/** Whether the block's HTML is made and current. */
export function hasHtml(block: Block): boolean {
  return block.html !== undefined && block.version === versionOf(block);
}
