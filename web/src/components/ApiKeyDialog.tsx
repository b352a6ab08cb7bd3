import { useState } from 'preact/hooks';
import { apiKey, needKey, setApiKey } from '../state/auth';
import { loadModels } from '../state/models';
import { banner } from '../state/ui';

/** Asked for when the server answers 401 (`hearth serve --api-key`); the key stays in this browser. */
export function ApiKeyDialog() {
  const [key, setKey] = useState(apiKey.value);
  if (!needKey.value) return null;
  return (
    <div class="overlay" role="dialog" aria-modal="true" aria-label="API key">
      <form
        class="dialog"
        data-testid="api-key-dialog"
        onSubmit={(e) => {
          e.preventDefault();
          setApiKey(key);
          banner.value = null;
          void loadModels();
        }}
      >
        <h3>This server needs an API key</h3>
        <p>It was started with <code>--api-key</code>. The key is kept in this browser only.</p>
        <input
          type="password"
          autocomplete="off"
          aria-label="API key"
          data-testid="api-key"
          value={key}
          ref={(el) => el?.focus()}
          onInput={(e) => setKey(e.currentTarget.value)}
        />
        <div class="dialog-actions">
          <button type="button" class="btn" onClick={() => (needKey.value = false)}>
            Cancel
          </button>
          <button type="submit" class="btn primary" data-testid="api-key-save">
            Save
          </button>
        </div>
      </form>
    </div>
  );
}
