// The app's icons, drawn here so the build needs no image tool: a flame on a dark rounded square, as SVG and as
// PNG (192 and 512 px, for installing the app). PNGs are encoded by hand (zlib from node), byte-for-byte stable.

import { deflateSync } from 'node:zlib';

export const svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 512 512">
<rect width="512" height="512" rx="112" fill="#1c1917"/>
<defs><linearGradient id="f" x1="0" y1="1" x2="0" y2="0"><stop offset="0" stop-color="#ea580c"/><stop offset="1" stop-color="#fbbf24"/></linearGradient></defs>
<path d="M256 88C296 168 364 220 364 318A108 108 0 0 1 148 318C148 220 216 168 256 88Z" fill="url(#f)"/>
<path d="M256 220C276 262 306 290 306 336A50 50 0 0 1 206 336C206 290 236 262 256 220Z" fill="#fde68a"/>
</svg>
`;

// A teardrop: a circle of radius r at (0.5, cy), narrowing to a tip at (0.5, tip).
function inDrop(x, y, cy, r, tip) {
  if (y >= cy) return (x - 0.5) ** 2 + (y - cy) ** 2 <= r * r;
  if (y < tip) return false;
  const w = r * Math.pow((y - tip) / (cy - tip), 0.75);
  return Math.abs(x - 0.5) <= w;
}

function inRoundedSquare(x, y, rad) {
  const dx = Math.max(rad - x, 0, x - (1 - rad));
  const dy = Math.max(rad - y, 0, y - (1 - rad));
  return dx * dx + dy * dy <= rad * rad;
}

const mix = (a, b, t) => a.map((v, i) => v + (b[i] - v) * t);

function pixel(x, y) {
  if (!inRoundedSquare(x, y, 0.22)) return [0, 0, 0, 0];
  if (inDrop(x, y, 0.656, 0.098, 0.43)) return [253, 230, 138, 255];
  if (inDrop(x, y, 0.62, 0.211, 0.17)) return [...mix([234, 88, 12], [251, 191, 36], (0.83 - y) / 0.66), 255];
  return [28, 25, 23, 255];
}

const CRC = new Int32Array(256).map((_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c;
});

function crc32(buf) {
  let c = -1;
  for (const b of buf) c = CRC[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}

function chunk(type, data) {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, 'ascii');
  data.copy(out, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}

/** A size x size RGBA PNG of the icon, 4x4 supersampled. */
export function png(size) {
  const raw = Buffer.alloc(size * (size * 4 + 1));
  const S = 4;
  for (let py = 0; py < size; py++) {
    raw[py * (size * 4 + 1)] = 0;
    for (let px = 0; px < size; px++) {
      const acc = [0, 0, 0, 0];
      for (let sy = 0; sy < S; sy++) {
        for (let sx = 0; sx < S; sx++) {
          const p = pixel((px + (sx + 0.5) / S) / size, (py + (sy + 0.5) / S) / size);
          for (let i = 0; i < 3; i++) acc[i] += p[i] * p[3];
          acc[3] += p[3];
        }
      }
      const o = py * (size * 4 + 1) + 1 + px * 4;
      const a = acc[3] / (S * S);
      for (let i = 0; i < 3; i++) raw[o + i] = acc[3] ? Math.round(acc[i] / acc[3]) : 0;
      raw[o + 3] = Math.round(a);
    }
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(size, 0);
  ihdr.writeUInt32BE(size, 4);
  ihdr.set([8, 6, 0, 0, 0], 8);
  const sig = Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]);
  return Buffer.concat([sig, chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw, { level: 9 })), chunk('IEND', Buffer.alloc(0))]);
}

// `node scripts/icons.mjs` writes them into public/ (committed; the build copies public/ as it is).
if (import.meta.url === `file://${process.argv[1]}`) {
  const { writeFileSync, mkdirSync } = await import('node:fs');
  const dir = new URL('../public/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  writeFileSync(new URL('icon.svg', dir), svg);
  writeFileSync(new URL('icon-192.png', dir), png(192));
  writeFileSync(new URL('icon-512.png', dir), png(512));
}
