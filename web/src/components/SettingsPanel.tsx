import { current, update } from '../state/conversations';
import { DEFAULT_SAMPLING, type Sampling } from '../state/types';
import { panel } from '../state/ui';
import { IconButton } from './IconButton';
import { NumberField } from './NumberField';

function setSampling(patch: Partial<Sampling>): void {
  void update((c) => ({ ...c, sampling: { ...c.sampling, ...patch } }));
}

/** This conversation's system prompt and sampling; empty fields use the server's defaults. */
export function SettingsPanel() {
  const c = current.value;
  const s = c.sampling;
  return (
    <section class="panel" aria-label="Chat settings" data-testid="settings-panel">
      <div class="panel-head">
        <h3>Chat settings</h3>
        <IconButton icon="close" label="Close" onClick={() => (panel.value = 'none')} />
      </div>
      <label class="field">
        <span>System prompt</span>
        <textarea
          rows={4}
          data-testid="setting-system"
          placeholder="You are a helpful assistant."
          value={c.system}
          onChange={(e) => {
            const system = e.currentTarget.value;
            void update((x) => ({ ...x, system }));
          }}
        />
      </label>
      <div class="field-grid">
        <NumberField label="Temperature" name="temperature" value={s.temperature} step={0.1} min={0} onChange={(v) => setSampling({ temperature: v })} />
        <NumberField label="Top-p" name="top_p" value={s.top_p} step={0.05} min={0} max={1} onChange={(v) => setSampling({ top_p: v })} />
        <NumberField label="Top-k" name="top_k" value={s.top_k} step={1} min={0} onChange={(v) => setSampling({ top_k: v })} />
        <NumberField label="Min-p" name="min_p" value={s.min_p} step={0.01} min={0} max={1} onChange={(v) => setSampling({ min_p: v })} />
        <NumberField label="Max tokens" name="max_tokens" value={s.max_tokens} step={1} min={1} onChange={(v) => setSampling({ max_tokens: v })} />
        <NumberField label="Seed" name="seed" value={s.seed} step={1} hint="random" onChange={(v) => setSampling({ seed: v })} />
      </div>
      <label class="field">
        <span>Stop strings (one a line)</span>
        <textarea
          rows={2}
          data-testid="setting-stop"
          value={s.stop.join('\n')}
          onChange={(e) => setSampling({ stop: e.currentTarget.value.split('\n').filter((x) => x.length > 0) })}
        />
      </label>
      <button type="button" class="btn" onClick={() => setSampling({ ...DEFAULT_SAMPLING, stop: [] })}>
        Reset to the server's defaults
      </button>
    </section>
  );
}
