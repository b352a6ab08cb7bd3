import { banner } from '../state/ui';
import { IconButton } from './IconButton';

/** What went wrong (server down, an error status), with Retry when trying again makes sense. */
export function Banner() {
  const b = banner.value;
  if (!b) return null;
  return (
    <div class="banner" role="alert" data-testid="error-banner">
      <span class="banner-text">{b.message}</span>
      {b.retry && (
        <button type="button" class="btn" data-testid="retry" onClick={() => b.retry?.()}>
          Retry
        </button>
      )}
      <IconButton icon="close" label="Dismiss" onClick={() => (banner.value = null)} />
    </div>
  );
}
