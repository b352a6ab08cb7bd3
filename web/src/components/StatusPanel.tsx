import { useEffect, useState } from 'preact/hooks';
import { engineStats, metricsText } from '../api/client';
import { mean, parseMetrics, type Samples } from '../api/prometheus';
import type { EngineStats } from '../api/types';
import { panel } from '../state/ui';
import { IconButton } from './IconButton';

const POLL_MS = 2000;

function ms(seconds: number | null): string {
  return seconds === null ? '-' : `${(seconds * 1000).toFixed(0)} ms`;
}

/** What the server is doing (`/stats` and `/metrics`, refreshed every 2 s while open). */
export function StatusPanel() {
  const [stats, setStats] = useState<EngineStats | null>(null);
  const [metrics, setMetrics] = useState<Samples | null>(null);
  const [error, setError] = useState('');

  useEffect(() => {
    let alive = true;
    const poll = async () => {
      try {
        const [s, m] = await Promise.all([engineStats(), metricsText()]);
        if (!alive) return;
        setStats(s);
        setMetrics(parseMetrics(m));
        setError('');
      } catch (e) {
        if (alive) setError(e instanceof Error ? e.message : String(e));
      }
    };
    void poll();
    const t = setInterval(poll, POLL_MS);
    return () => {
      alive = false;
      clearInterval(t);
    };
  }, []);

  const kvPct = stats && stats.kv_blocks_total ? (100 * stats.kv_blocks_used) / stats.kv_blocks_total : 0;
  const pc = stats?.prompt_cache;
  const rows: [string, string][] = stats
    ? [
        ['Model', stats.model],
        ['Device', stats.device],
        ['Rows running / waiting', `${stats.rows_running} / ${stats.rows_waiting} (batch ${stats.max_batch})`],
        ['KV cache in use', `${stats.kv_blocks_used} of ${stats.kv_blocks_total} blocks (${kvPct.toFixed(1)}%)`],
        ['KV capacity', `${stats.kv_capacity_tokens} tokens`],
        ['Prompt cache hits / misses', pc ? `${pc.hits} / ${pc.misses} (${pc.hit_tokens} tokens reused)` : '-'],
        ['Tokens generated', String(stats.tokens_generated_total)],
        ['Prompt tokens computed', String(stats.prompt_tokens_processed_total)],
        ['Preemptions', String(stats.preemptions_total)],
      ]
    : [];
  if (metrics) {
    rows.push(['Mean time to first token', ms(mean(metrics, 'hearth:time_to_first_token_seconds'))]);
    rows.push(['Mean inter-token latency', ms(mean(metrics, 'hearth:inter_token_latency_seconds'))]);
    rows.push(['Mean request latency', ms(mean(metrics, 'hearth:e2e_request_latency_seconds'))]);
  }
  return (
    <section class="panel" aria-label="Server status" data-testid="status-panel">
      <div class="panel-head">
        <h3>Server status</h3>
        <IconButton icon="close" label="Close" onClick={() => (panel.value = 'none')} />
      </div>
      {error && <p class="msg-error">{error}</p>}
      {!stats && !error && <p>Loading...</p>}
      <dl class="stats-table">
        {rows.map(([k, v]) => (
          <div key={k}>
            <dt>{k}</dt>
            <dd>{v}</dd>
          </div>
        ))}
      </dl>
    </section>
  );
}
