// The service worker: the app installs and opens offline. Every file of the build is cached at install (the list
// and the cache's name are written into this file by build.mjs); pages and assets come from the cache, the API
// always goes to the network.

export type {};
declare const self: ServiceWorkerGlobalScope;
declare const __PRECACHE__: string[];
declare const __CACHE__: string;

self.addEventListener('install', (e) => {
  e.waitUntil(
    caches
      .open(__CACHE__)
      .then((c) => c.addAll(__PRECACHE__))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener('activate', (e) => {
  e.waitUntil(
    caches
      .keys()
      .then((keys) => Promise.all(keys.filter((k) => k !== __CACHE__).map((k) => caches.delete(k))))
      .then(() => self.clients.claim()),
  );
});

// The server negotiates brotli/gzip and answers `Vary: Accept-Encoding`; the page's requests and the worker's
// precache fetches need not send the same Accept-Encoding (Chromium's differ), and the decoded body is the same.
const MATCH: CacheQueryOptions = { ignoreVary: true };

self.addEventListener('fetch', (e) => {
  const req = e.request;
  const url = new URL(req.url);
  if (req.method !== 'GET' || url.origin !== location.origin) return;
  if (req.mode === 'navigate') {
    // The page: fresh from the server when it answers (a new build), else the cached one.
    e.respondWith(fetch(req).catch(() => caches.match('/', MATCH).then((r) => r ?? Response.error())));
    return;
  }
  if (url.pathname.startsWith('/assets/') || __PRECACHE__.includes(url.pathname)) {
    e.respondWith(caches.match(req, MATCH).then((r) => r ?? fetch(req)));
  }
});
