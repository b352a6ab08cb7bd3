// The few series of `/metrics` (Prometheus text format) the status view shows.

export type Samples = Map<string, number>;

/** `name{labels} value` lines, keyed by `name{labels}` as written; comments and malformed lines are skipped. */
export function parseMetrics(text: string): Samples {
  const out: Samples = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    if (i <= 0) continue;
    const v = Number(line.slice(i + 1));
    if (Number.isFinite(v)) out.set(line.slice(0, i).trim(), v);
  }
  return out;
}

/** A histogram's mean (`_sum` / `_count`), or null before its first observation. */
export function mean(s: Samples, name: string): number | null {
  const n = s.get(`${name}_count`) ?? 0;
  return n > 0 ? (s.get(`${name}_sum`) ?? 0) / n : null;
}
