// Code highlighting. highlight.js loads the first time a reply has a code block; until then the code shows plain.

import { lazy } from './lazy';

// The first use of a language compiles its grammar: do it for the commonest ones as the module arrives.
const hljs = lazy(
  () => import('./languages').then((m) => m.default),
  undefined,
  (h) => ['python', 'javascript', 'typescript', 'rust', 'bash', 'json'].forEach((language) => h.highlight('x', { language })),
);
export const codeVersion = hljs.version;

/** Load highlight.js now (when the page is idle), not in the middle of the first reply with code. */
export function warmHighlight(): void {
  hljs.get();
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

/** The highlighted HTML of `code`, or the escaped text (an unknown language, or highlight.js not loaded yet). */
export function highlight(code: string, lang: string): string {
  const h = hljs.get();
  if (h && lang && h.getLanguage(lang)) return h.highlight(code, { language: lang, ignoreIllegals: true }).value;
  return escapeHtml(code);
}

/** Whether a block's source may hold a code block (so it renders again once highlight.js is loaded). */
export function mayHaveCode(raw: string): boolean {
  return raw.includes('```') || raw.includes('~~~');
}
