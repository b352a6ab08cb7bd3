import { health } from '../state/health';

const words = { unknown: 'checking the server', ok: 'server ready', loading: 'model loading', down: 'server unreachable' };

export function HealthDot() {
  const h = health.value;
  return <span class={`health-dot ${h}`} role="status" title={words[h]} aria-label={words[h]} data-testid="health" data-state={h} />;
}
