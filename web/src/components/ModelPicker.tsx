import { current, update } from '../state/conversations';
import { modelFor, models } from '../state/models';

/** The served models (`/v1/models`); the choice is kept per conversation. */
export function ModelPicker() {
  const list = models.value;
  const chosen = modelFor(current.value.model);
  return (
    <select
      class="model-picker"
      aria-label="Model"
      data-testid="model-picker"
      value={chosen}
      disabled={list.length < 2}
      onChange={(e) => {
        const model = e.currentTarget.value;
        void update((c) => ({ ...c, model }));
      }}
    >
      {list.length === 0 && <option value="">no model</option>}
      {list.map((m) => (
        <option key={m.id} value={m.id}>
          {m.id}
        </option>
      ))}
    </select>
  );
}
