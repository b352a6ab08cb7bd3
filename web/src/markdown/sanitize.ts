// Every piece of HTML made from a reply goes through DOMPurify. Links open in a new tab without a referrer; images
// from other origins are not loaded (the app works offline and a reply must not call out): they become links.

import DOMPurify from 'dompurify';
import { escapeHtml } from './highlight';

function hook(node: Element): void {
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
  if (node.tagName === 'IMG') {
    const src = node.getAttribute('src') ?? '';
    let local = src.startsWith('data:image/');
    try {
      local ||= new URL(src, location.href).origin === location.origin;
    } catch {
      local = false;
    }
    if (!local) {
      const a = document.createElement('a');
      a.href = src;
      a.textContent = node.getAttribute('alt') || src;
      a.setAttribute('target', '_blank');
      a.setAttribute('rel', 'noopener noreferrer');
      node.replaceWith(a);
    }
  }
}

if (DOMPurify.isSupported) {
  DOMPurify.addHook('afterSanitizeAttributes', hook);
  // Set once: a config passed to each call would be parsed again every time (a cost per frame while streaming).
  DOMPurify.setConfig({ ADD_ATTR: ['target'] });
}

/** Safe HTML; where DOMPurify cannot run (no DOM), the markup is shown as text, never passed through. */
export function sanitize(html: string): string {
  if (!DOMPurify.isSupported) return escapeHtml(html);
  return DOMPurify.sanitize(html) as string;
}
