// Code highlighting. highlight.js loads the first time a reply has a code block; until then the code shows plain.

import { lazy } from './lazy';

const hljs = lazy(() => import('./languages').then((m) => m.default));
export const codeVersion = hljs.version;

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
