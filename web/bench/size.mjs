// The bundle's size: what the first load needs (the page, main JS and CSS) and what loads on demand
// (highlight.js, KaTeX and its fonts), raw and gzipped (the .gz files hearth serves; brotli is smaller still).
//   node bench/size.mjs

import fs from 'node:fs';
import path from 'node:path';

const dist = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../dist');
const assets = fs.readdirSync(path.join(dist, 'assets'));
const size = (f) => fs.statSync(path.join(dist, f)).size;
const gz = (f) => (fs.existsSync(path.join(dist, `${f}.gz`)) ? size(`${f}.gz`) : size(f));
const br = (f) => (fs.existsSync(path.join(dist, `${f}.br`)) ? size(`${f}.br`) : size(f));
const files = (re) => assets.filter((f) => re.test(f)).map((f) => `assets/${f}`);

const groups = {
  'first load (main JS + CSS)': files(/^main-.*\.(js|css)$/),
  'on demand: highlight.js': [],
  'on demand: KaTeX JS + CSS': [],
  'all JS + CSS': files(/\.(js|css)$/),
};
// The lazy chunks: the one holding highlight.js names its languages, KaTeX's names itself.
for (const f of files(/^chunk-.*\.js$/)) {
  const text = fs.readFileSync(path.join(dist, f), 'utf8');
  if (text.includes('katex')) groups['on demand: KaTeX JS + CSS'].push(f);
  else if (text.includes('registerLanguage') || text.includes('hljs')) groups['on demand: highlight.js'].push(f);
}
groups['on demand: KaTeX JS + CSS'].push(...files(/^katex-.*\.css$/));
for (const [name, list] of Object.entries(groups)) {
  const sum = (fn) => list.reduce((a, f) => a + fn(f), 0);
  console.log(JSON.stringify({ what: name, raw: sum(size), gzip: sum(gz), brotli: sum(br) }));
}
const fonts = files(/\.woff2$/);
console.log(JSON.stringify({ what: 'KaTeX fonts (woff2, on demand)', files: fonts.length, raw: fonts.reduce((a, f) => a + size(f), 0) }));
