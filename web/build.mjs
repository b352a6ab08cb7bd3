// Builds the web chat into web/dist/ (committed; crates/hearth-server embeds it in the binary).
//   node build.mjs            build into dist/
//   node build.mjs --check    type-check, build into a temporary folder and fail if dist/ differs (stale)
// Output: index.html, sw.js, manifest.webmanifest, the icons from public/, licenses.txt, and assets/ with
// content-hashed names (JS, CSS, KaTeX's CSS and woff2 fonts). Text files over 1 KiB get .gz and .br siblings.

import * as esbuild from 'esbuild';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';

const here = path.dirname(new URL(import.meta.url).pathname);
const check = process.argv.includes('--check');
const out = check ? fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-web-')) : path.join(here, 'dist');
const dist = path.join(here, 'dist');

/** The runtime dependencies whose code ships in the bundle (their licenses go to licenses.txt). */
const SHIPPED = ['preact', '@preact/signals', '@preact/signals-core', 'marked', 'dompurify', 'highlight.js', 'katex'];
const COMPRESS = /\.(js|css|html|svg|webmanifest|json|txt)$/;

const common = {
  bundle: true,
  minify: true,
  target: ['chrome123', 'firefox120', 'safari17.5'],
  legalComments: 'none',
  logLevel: 'warning',
  absWorkingDir: here,
};

// KaTeX's stylesheet names woff2, woff and ttf fonts; every browser that runs the app takes woff2.
const woff2Only = {
  name: 'woff2-only',
  setup(build) {
    build.onLoad({ filter: /katex\.css$/ }, (args) => ({
      contents: fs
        .readFileSync(args.path, 'utf8')
        .replace(/,\s*url\([^)]*\.woff\)\s*format\("woff"\)/g, '')
        .replace(/,\s*url\([^)]*\.ttf\)\s*format\("truetype"\)/g, ''),
      loader: 'css',
    }));
  },
};

function outputsOf(result) {
  return Object.keys(result.metafile.outputs).map((p) => '/' + path.relative(out, path.join(here, p)));
}

async function build() {
  fs.rmSync(out, { recursive: true, force: true });
  fs.mkdirSync(path.join(out, 'assets'), { recursive: true });

  // 1. KaTeX's CSS and fonts: loaded by the app only when a reply has math.
  const katex = await esbuild.build({
    ...common,
    entryPoints: { katex: 'node_modules/katex/dist/katex.css' },
    outdir: path.join(out, 'assets'),
    entryNames: '[name]-[hash]',
    assetNames: '[name]-[hash]',
    loader: { '.woff2': 'file' },
    plugins: [woff2Only],
    metafile: true,
  });
  const katexCss = outputsOf(katex).find((p) => p.endsWith('.css'));

  // 2. The app: one entry, with KaTeX split into a chunk of its own.
  const app = await esbuild.build({
    ...common,
    entryPoints: { main: 'src/main.tsx' },
    outdir: path.join(out, 'assets'),
    entryNames: '[name]-[hash]',
    chunkNames: 'chunk-[hash]',
    format: 'esm',
    splitting: true,
    jsx: 'automatic',
    jsxImportSource: 'preact',
    define: { __KATEX_CSS__: JSON.stringify(katexCss) },
    metafile: true,
  });
  const appFiles = outputsOf(app);
  const mainJs = appFiles.find((p) => /\/main-[^/]+\.js$/.test(p));
  const mainCss = appFiles.find((p) => /\/main-[^/]+\.css$/.test(p));

  // 3. Static files: the page, the manifest, icons, licenses.
  for (const f of fs.readdirSync(path.join(here, 'public'))) {
    fs.copyFileSync(path.join(here, 'public', f), path.join(out, f));
  }
  fs.writeFileSync(path.join(out, 'index.html'), indexHtml(mainJs, mainCss));
  fs.writeFileSync(path.join(out, 'manifest.webmanifest'), manifest());
  fs.writeFileSync(path.join(out, 'licenses.txt'), licenses());

  // 4. The service worker: precaches every file above; its cache is named after their content.
  const files = listFiles(out).filter((p) => p !== '/sw.js');
  const hash = createHash('sha256');
  for (const f of files) hash.update(f).update(fs.readFileSync(path.join(out, f)));
  await esbuild.build({
    ...common,
    entryPoints: ['src/sw.ts'],
    outfile: path.join(out, 'sw.js'),
    format: 'iife',
    define: {
      __PRECACHE__: JSON.stringify(['/', ...files.filter((f) => f !== '/index.html')]),
      __CACHE__: JSON.stringify(`hearth-${hash.digest('hex').slice(0, 12)}`),
    },
  });

  // 5. Precompressed copies for the server to pick by Accept-Encoding.
  for (const f of listFiles(out)) {
    if (!COMPRESS.test(f)) continue;
    const body = fs.readFileSync(path.join(out, f));
    if (body.length < 1024) continue;
    fs.writeFileSync(path.join(out, f + '.gz'), zlib.gzipSync(body, { level: 9 }));
    const br = zlib.brotliCompressSync(body, {
      params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 11, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: body.length },
    });
    fs.writeFileSync(path.join(out, f + '.br'), br);
  }
}

function indexHtml(js, css) {
  const csp = [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self'",
    "connect-src 'self'",
    "worker-src 'self'",
    "manifest-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
  ].join('; ');
  return `<!doctype html>
<html lang="en" data-theme="auto">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1, viewport-fit=cover">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="referrer" content="no-referrer">
<meta name="color-scheme" content="light dark">
<meta name="theme-color" content="#1c1917">
<title>hearth</title>
<link rel="icon" href="/icon.svg" type="image/svg+xml">
<link rel="apple-touch-icon" href="/icon-192.png">
<link rel="manifest" href="/manifest.webmanifest">
<link rel="stylesheet" href="${css}">
<script type="module" src="${js}"></script>
</head>
<body>
<div id="app"><div class="app"><aside class="sidebar"></aside><main class="main"><div class="messages"><div class="messages-inner"><div class="empty"><h1>hearth</h1><p>Loading the chat...</p><noscript>The hearth web chat needs JavaScript. The API is at /v1.</noscript></div></div></div></main></div></div>
</body>
</html>
`;
}

function manifest() {
  return (
    JSON.stringify(
      {
        name: 'hearth',
        short_name: 'hearth',
        description: 'Chat with a model running on this machine',
        start_url: '/',
        scope: '/',
        display: 'standalone',
        background_color: '#1c1917',
        theme_color: '#1c1917',
        icons: [
          { src: '/icon.svg', sizes: 'any', type: 'image/svg+xml' },
          { src: '/icon-192.png', sizes: '192x192', type: 'image/png' },
          { src: '/icon-512.png', sizes: '512x512', type: 'image/png', purpose: 'any maskable' },
        ],
      },
      null,
      2,
    ) + '\n'
  );
}

function licenses() {
  const parts = ['Third-party code in the hearth web chat bundle.\n'];
  for (const name of SHIPPED) {
    const dir = path.join(here, 'node_modules', name);
    if (!fs.existsSync(dir)) continue;
    const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
    const file = fs.readdirSync(dir).find((f) => /^licen[sc]e/i.test(f));
    const text = file ? fs.readFileSync(path.join(dir, file), 'utf8').trim() : `License: ${pkg.license}`;
    parts.push(`${'='.repeat(78)}\n${name} ${pkg.version} (${pkg.license})\n${'='.repeat(78)}\n${text}\n`);
  }
  return parts.join('\n');
}

function listFiles(root, dir = root, acc = []) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) listFiles(root, p, acc);
    else acc.push('/' + path.relative(root, p).split(path.sep).join('/'));
  }
  return acc.sort();
}

/** Differences between a fresh build and dist/: raw files must be identical; .gz and .br must decode to them. */
function compare() {
  const problems = [];
  const fresh = listFiles(out);
  const have = fs.existsSync(dist) ? listFiles(dist) : [];
  for (const f of fresh.filter((f) => !have.includes(f))) problems.push(`missing from web/dist: ${f}`);
  for (const f of have.filter((f) => !fresh.includes(f))) problems.push(`not made by the build: web/dist${f}`);
  for (const f of fresh.filter((f) => have.includes(f))) {
    const committed = fs.readFileSync(path.join(dist, f));
    if (f.endsWith('.gz') || f.endsWith('.br')) {
      const raw = fs.readFileSync(path.join(out, f.slice(0, -3)));
      let decoded;
      try {
        decoded = f.endsWith('.gz') ? zlib.gunzipSync(committed) : zlib.brotliDecompressSync(committed);
      } catch {
        decoded = null;
      }
      if (!decoded || !decoded.equals(raw)) problems.push(`web/dist${f} does not decode to the fresh build's file`);
    } else if (!committed.equals(fs.readFileSync(path.join(out, f)))) {
      problems.push(`web/dist${f} differs from a fresh build`);
    }
  }
  return problems;
}

if (check) {
  const tsc = path.join(here, 'node_modules/.bin/tsc');
  execFileSync(tsc, ['--noEmit', '-p', here], { stdio: 'inherit' });
  execFileSync(tsc, ['--noEmit', '-p', path.join(here, 'tsconfig.sw.json')], { stdio: 'inherit' });
}
await build();
if (check) {
  const problems = compare();
  fs.rmSync(out, { recursive: true, force: true });
  if (problems.length) {
    console.error(problems.join('\n'));
    console.error('web/dist is stale: run `npm --prefix web run build` and commit web/dist');
    process.exit(1);
  }
  console.log('web/dist is up to date');
} else {
  const sizes = listFiles(out).map((f) => [f, fs.statSync(path.join(out, f)).size]);
  const total = (re) => sizes.filter(([f]) => re.test(f)).reduce((a, [, s]) => a + s, 0);
  console.log(`built web/dist: ${sizes.length} files; JS+CSS ${total(/\.(js|css)$/)} B, gzipped ${total(/\.(js|css)\.gz$/)} B`);
}
