// TeX math in replies: `$...$` and `\(...\)` inline, `$$...$$` and `\[...\]` as blocks. KaTeX (and its CSS and
// fonts, all served by hearth) loads the first time a reply has math; until then the TeX shows as text, and
// `mathVersion` changes when KaTeX is ready so blocks with math render again.

import type { MarkedExtension, Tokens } from 'marked';
import { escapeHtml } from './highlight';
import { lazy } from './lazy';

declare const __KATEX_CSS__: string;

function addStylesheet(): void {
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = __KATEX_CSS__;
  document.head.append(link);
}

const katex = lazy(
  () => import('katex').then((m) => m.default),
  addStylesheet,
  (k) => void k.renderToString('x^2', { throwOnError: false }),
);
export const mathVersion = katex.version;

/** Load KaTeX now (when the page is idle), not in the middle of the first reply with math. */
export function warmMath(): void {
  katex.get();
}

function render(tex: string, displayMode: boolean): string {
  const k = katex.get();
  if (!k) return `<span class="math-pending">${escapeHtml(displayMode ? `$$${tex}$$` : `$${tex}$`)}</span>`;
  return k.renderToString(tex, { displayMode, throwOnError: false, output: 'htmlAndMathml' });
}

/** Whether a block's source may hold math (so it renders again once KaTeX is loaded). */
export function mayHaveMath(raw: string): boolean {
  return raw.includes('$') || raw.includes('\\(') || raw.includes('\\[');
}

const BLOCK = /^(?:\$\$([\s\S]+?)\$\$|\\\[([\s\S]+?)\\\])[ \t]*(?:\n|$)/;
const INLINE = /^(?:\$(?![\s$])((?:\\.|[^\\\n$])+?)(?<!\s)\$(?!\d)|\\\(([\s\S]+?)\\\))/;

export const mathExtension: MarkedExtension = {
  extensions: [
    {
      name: 'blockMath',
      level: 'block',
      start: (src: string) => src.match(/\$\$|\\\[/)?.index,
      tokenizer(src: string) {
        const m = BLOCK.exec(src);
        if (m) return { type: 'blockMath', raw: m[0], text: (m[1] ?? m[2]).trim() };
        return undefined;
      },
      renderer: (t: Tokens.Generic) => `<div class="math-block">${render(t.text, true)}</div>`,
    },
    {
      name: 'inlineMath',
      level: 'inline',
      start: (src: string) => src.match(/\$|\\\(/)?.index,
      tokenizer(src: string) {
        const m = INLINE.exec(src);
        if (m) return { type: 'inlineMath', raw: m[0], text: (m[1] ?? m[2]).trim() };
        return undefined;
      },
      renderer: (t: Tokens.Generic) => render(t.text, false),
    },
  ],
};
