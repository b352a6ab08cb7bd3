// Markdown to sanitized HTML, one top-level block at a time (GitHub-flavoured, with math and highlighted code).

import { Marked, type Token, type Tokens } from 'marked';
import { escapeHtml, highlight } from './highlight';
import { mathExtension } from './math';
import { sanitize } from './sanitize';

const md = new Marked({ gfm: true, async: false });
md.use(mathExtension);
md.use({
  renderer: {
    code({ text, lang }: Tokens.Code) {
      const language = (lang ?? '').trim().split(/\s+/)[0].toLowerCase();
      return (
        `<div class="code-block"><div class="code-head"><span>${escapeHtml(language || 'text')}</span>` +
        `<button type="button" class="copy-code">Copy</button></div>` +
        `<pre><code class="hljs">${highlight(text, language)}</code></pre></div>`
      );
    },
  },
});

export function lex(src: string): Token[] {
  return md.lexer(src);
}

export function renderBlock(token: Token): string {
  return sanitize(md.parser([token]) as string);
}
