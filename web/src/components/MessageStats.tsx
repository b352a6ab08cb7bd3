import type { MessageStats as Stats } from '../state/types';

/** Time to first token, decode speed and token counts of a reply. */
export function MessageStats({ stats }: { stats: Stats }) {
  const parts: string[] = [];
  if (stats.ttft_ms !== undefined) parts.push(`TTFT ${stats.ttft_ms} ms`);
  if (stats.tokens_per_s !== undefined) parts.push(`${stats.tokens_per_s.toFixed(1)} tok/s`);
  if (stats.completion_tokens !== undefined) parts.push(`${stats.completion_tokens} tokens`);
  if (stats.prompt_tokens !== undefined) {
    const cached = stats.cached_tokens ? ` (${stats.cached_tokens} cached)` : '';
    parts.push(`prompt ${stats.prompt_tokens}${cached}`);
  }
  if (stats.finish_reason === 'length') parts.push('cut off at max tokens');
  if (!parts.length) return null;
  return (
    <div class="msg-stats" data-testid="message-stats">
      {parts.join(' · ')}
    </div>
  );
}
