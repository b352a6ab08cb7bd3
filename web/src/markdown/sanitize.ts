// Every piece of HTML made from a reply goes through DOMPurify. Links open in a new tab without a referrer; images
// from other origins are not loaded (the app works offline and a reply must not call out): they become links.

import DOMPurify from 'dompurify';

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
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
});

// Set once: a config passed to each call would be parsed again every time (a cost per frame while streaming).
DOMPurify.setConfig({ ADD_ATTR: ['target'] });

export function sanitize(html: string): string {
  return DOMPurify.sanitize(html) as string;
}
